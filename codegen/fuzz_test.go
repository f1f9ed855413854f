package codegen_test

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"

	"bpfwall/codegen"
	"bpfwall/internal/testenv"
	"bpfwall/ir"
	"bpfwall/parser/iptables"
	"bpfwall/rules"
)

// FuzzKernelMatchesEval compiles a random rule set for a random hook,
// loads it, and runs random and damaged frames through the kernel and
// ir.Eval: verdicts, decisions and counters must agree.
func FuzzKernelMatchesEval(f *testing.F) {
	for _, seed := range []uint64{1, 2, 3, 42, 1000, 0xdeadbeef} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, seed uint64) {
		testenv.RequireRoot(t)
		hook := []codegen.Hook{codegen.HookXDP, codegen.HookTCIngress, codegen.HookTCEgress}[seed%3]
		chain := "INPUT"
		if hook == codegen.HookTCEgress {
			chain = "OUTPUT"
		}
		src, fam := randomRules(seed, chain)
		rs, err := iptables.Parse("fuzz", []byte(src), iptables.Options{Family: fam, ForceFamily: true})
		if err != nil {
			t.Fatalf("the generator wrote a rule set the parser refuses: %v\n%s", err, src)
		}
		p, err := ir.Lower(rs, ir.LowerOptions{Chain: chain})
		if err != nil {
			t.Fatalf("the generator wrote a rule set Lower refuses: %v\n%s", err, src)
		}
		// One namespace for the whole fuzzing process.
		fuzzNetnsOnce.Do(func() { fuzzNetns, fuzzNetnsErr = startNetns() })
		if fuzzNetnsErr != nil {
			t.Fatal(fuzzNetnsErr)
		}
		// -O0, -O1, and -O1 with every run of terminal rules classified.
		for _, v := range []struct {
			level    codegen.Level
			classify bool
		}{{codegen.O0, false}, {codegen.O1, false}, {codegen.O1, true}} {
			prog, err := codegen.Compile(p, codegen.Options{Trace: true, Hook: hook, Level: v.level, ForceLookups: v.classify})
			if err != nil {
				t.Fatalf("compile for %s at %v: %v\n%s", hook, v.level, err, src)
			}
			checkProgram(t, prog, fuzzNetns, seed, 300)
			if t.Failed() {
				t.Fatalf("%v (classify always: %v), rule set:\n%s", v.level, v.classify, src)
			}
		}
	})
}

var (
	fuzzNetnsOnce sync.Once
	fuzzNetns     *netns
	fuzzNetnsErr  error
)

// randomRules returns an iptables-save rule set of supported matches and
// targets: the entry chain (INPUT or OUTPUT) and up to three user chains,
// each jumping only to chains after it.
func randomRules(seed uint64, entry string) (string, rules.Family) {
	rng := rand.New(rand.NewPCG(seed, seed>>7|1))
	fam := rules.IPv4
	if rng.IntN(3) == 0 {
		fam = rules.IPv6
	}
	pickS := func(xs ...string) string { return xs[rng.IntN(len(xs))] }
	neg := func() string {
		if rng.IntN(4) == 0 {
			return "! "
		}
		return ""
	}
	nets := []string{"10.0.0.0/8", "10.0.0.1/32", "192.168.1.0/24", "0.0.0.0/0", "172.16.0.0/255.240.0.255"}
	ranges := []string{"10.0.0.0-10.0.0.255", "192.168.1.1-192.168.2.1"}
	icmp := "icmp"
	if fam == rules.IPv6 {
		nets = []string{"2001:db8::/32", "2001:db8::1/128", "fe80::/10", "::/0", "::ffff:0:0/96"}
		ranges = []string{"2001:db8::-2001:db8::ffff", "fe80::1-fe80::1:0"}
		icmp = "ipv6-icmp"
	}
	chains := 1 + rng.IntN(4)
	var b strings.Builder
	b.WriteString("*filter\n")
	for _, c := range []string{"INPUT", "FORWARD", "OUTPUT"} {
		policy := "ACCEPT"
		if c == entry {
			policy = pickS("ACCEPT", "DROP")
		}
		fmt.Fprintf(&b, ":%s %s [0:0]\n", c, policy)
	}
	// The interface the entry chain knows.
	iface := "-i "
	if entry == "OUTPUT" {
		iface = "-o "
	}
	for c := 1; c < chains; c++ {
		fmt.Fprintf(&b, ":C%d - [0:0]\n", c)
	}
	for c := range chains {
		name := entry
		if c > 0 {
			name = fmt.Sprintf("C%d", c)
		}
		for range rng.IntN(12) {
			var r []string
			if rng.IntN(3) == 0 {
				r = append(r, neg()+"-s "+pickS(nets...))
			}
			if rng.IntN(4) == 0 {
				r = append(r, neg()+"-d "+pickS(nets...))
			}
			if rng.IntN(5) == 0 {
				r = append(r, neg()+iface+pickS("lo", "eth+", "eth0", "+"))
			}
			if fam == rules.IPv4 && rng.IntN(10) == 0 {
				r = append(r, neg()+"-f")
			}
			switch rng.IntN(6) {
			case 0:
				r = append(r, "-p tcp -m tcp", neg()+"--dport "+pickS("22", "80:443", "1024:65535"))
				if rng.IntN(2) == 0 {
					r = append(r, neg()+pickS("--syn", "--tcp-flags SYN,ACK ACK", "--tcp-option 2", "--tcp-option 8"))
				}
			case 1:
				r = append(r, "-p udp -m udp", neg()+"--sport "+pickS("53", "67:68", "123"))
			case 2:
				r = append(r, "-p "+pickS("tcp", "udp", "sctp"), "-m multiport", neg()+pickS("--dports", "--sports", "--ports")+" "+pickS("22,80", "1:100,443", "53"))
			case 3:
				r = append(r, "-p "+icmp)
				if fam == rules.IPv4 {
					r = append(r, "-m icmp", neg()+"--icmp-type "+pickS("8", "3/4", "any"))
				} else {
					r = append(r, "-m icmp6", neg()+"--icmpv6-type "+pickS("128", "1/3"))
				}
			case 4:
				r = append(r, neg()+"-p "+pickS("tcp", "udp", "47"))
			}
			switch rng.IntN(8) {
			case 0:
				r = append(r, "-m iprange", neg()+"--src-range "+pickS(ranges...))
			case 1:
				// IPv4 INPUT and OUTPUT see reassembled datagrams, whose
				// length a fragment cannot tell: Lower refuses it there.
				if entry == "OUTPUT" || fam == rules.IPv4 && entry == "INPUT" {
					r = append(r, "-m iprange", neg()+"--dst-range "+pickS(ranges...))
				} else {
					r = append(r, "-m length", neg()+"--length "+pickS("0:100", "60", "1000:65535"))
				}
			case 2:
				if fam == rules.IPv4 {
					r = append(r, "-m ttl "+pickS("--ttl-eq 64", "--ttl-lt 10", "--ttl-gt 200", "! --ttl-eq 1"))
				} else {
					r = append(r, "-m hl "+pickS("--hl-eq 64", "--hl-lt 10", "--hl-gt 200"))
				}
			case 3:
				if entry != "OUTPUT" { // xt_mac is not valid in OUTPUT
					r = append(r, "-m mac", neg()+"--mac-source 02:00:00:00:00:02")
				}
			case 4:
				// A bucket that empties within a few packets and refills
				// while the fuzzer runs.
				r = append(r, "-m limit "+pickS("--limit 1000/sec --limit-burst 3", "--limit 20/sec --limit-burst 1", "--limit 5/min"))
			case 5:
				// Two recent tables, one of sources, one of /24 (/64)
				// destinations; --rttl is refused in OUTPUT.
				ops := []string{"--set", "--rcheck --seconds 1", "--update --hitcount 3", "--rcheck --seconds 1 --reap", "--remove", "--update --seconds 2 --hitcount 2"}
				if entry != "OUTPUT" {
					ops = append(ops, "--rcheck --rttl", "--update --hitcount 2 --rttl")
				}
				table := "--name a"
				if rng.IntN(2) == 0 {
					table = "--name b --rdest --mask 255.255.255.0"
					if fam == rules.IPv6 {
						table = "--name b --rdest --mask ffff:ffff:ffff:ffff::"
					}
				}
				r = append(r, "-m recent "+neg()+pickS(ops...)+" "+table)
			}
			targets := []string{"-j ACCEPT", "-j DROP", "-j RETURN", "", `-j LOG --log-prefix "fz " --log-tcp-options`}
			for to := c + 1; to < chains; to++ {
				targets = append(targets, fmt.Sprintf("-j C%d", to), fmt.Sprintf("-g C%d", to))
			}
			if t := pickS(targets...); t != "" {
				r = append(r, t)
			}
			fmt.Fprintf(&b, "-A %s %s\n", name, strings.Join(r, " "))
		}
	}
	b.WriteString("COMMIT\n")
	return b.String(), fam
}
