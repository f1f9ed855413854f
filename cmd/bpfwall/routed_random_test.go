package main

import (
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"

	"bpfwall/internal/testenv"
)

// randomRouted writes a random rule set for family fam (0 IPv4, 1 IPv6)
// over every chain bpfwall runs at netfilter hooks, with a nat table
// (delegated: a DNAT, sometimes a MASQUERADE), user chains, interfaces,
// MAC addresses, ports, conntrack states, REJECTs and DROP policies.
func randomRouted(rng *rand.Rand, fam int) string { return randomRoutedFor(rng, fam, false) }

// randomRoutedFor is randomRouted; with accel, the rule sets an
// accelerator judges: nothing runs before filter INPUT and FORWARD (no
// rules in raw and mangle PREROUTING, mangle INPUT and FORWARD, no DNAT
// in nat PREROUTING), and the filter chains drop more.
func randomRoutedFor(rng *rand.Rand, fam int, accel bool) string {
	pick := func(xs ...string) string { return xs[rng.IntN(len(xs))] }
	ports := []string{"22", "80", "443", "8080", "23"}
	addrs := []string{routedAddrs["client"][fam], routedAddrs["server"][fam], routedAddrs["rc"][fam], routedAddrs["rs"][fam]}
	icmp := "icmp"
	if fam == 1 {
		icmp = "ipv6-icmp"
	}
	rule := func(table, chain string, targets []string) string {
		var b strings.Builder
		b.WriteString("-A " + chain)
		in, out := chain == "PREROUTING" || chain == "INPUT" || chain == "FORWARD", chain == "OUTPUT" || chain == "POSTROUTING" || chain == "FORWARD"
		if in && rng.IntN(3) == 0 {
			b.WriteString(" " + pick("-i rc0", "-i rs0", "-i rs+", "! -i rc0", "-i lo"))
		}
		if out && rng.IntN(3) == 0 {
			b.WriteString(" " + pick("-o rc0", "-o rs0", "-o r+", "! -o rs0"))
		}
		if rng.IntN(4) == 0 {
			b.WriteString(" " + pick("-s", "-d", "! -s", "! -d") + " " + pick(addrs...))
		}
		if in && chain != "user" && rng.IntN(6) == 0 {
			// xt_mac's hooks; the router's own connections come over lo,
			// which has no MAC header.
			b.WriteString(" -m mac " + pick("", "! ") + "--mac-source " + pick(routedMACs["client"], routedMACs["server"], "02:71:00:00:00:99"))
		}
		b.WriteString(" -p tcp")
		if rng.IntN(4) != 0 {
			b.WriteString(" " + pick("--dport", "--sport", "! --dport") + " " + pick(ports...))
		}
		// In raw, before conntrack, every packet is INVALID; in mangle
		// and filter, after it, the state conntrack gave, with SNAT and
		// DNAT once nat's hooks have set them.
		if table == "filter" && rng.IntN(3) == 0 || table != "filter" && rng.IntN(6) == 0 {
			b.WriteString(" -m conntrack " + pick("", "", "", "! ") + "--ctstate " +
				pick("NEW", "ESTABLISHED,RELATED", "ESTABLISHED", "INVALID,NEW", "INVALID", "DNAT", "SNAT", "ESTABLISHED,DNAT", "NEW,SNAT", "RELATED,ESTABLISHED,DNAT"))
		}
		if accel && table == "filter" && rng.IntN(6) == 0 {
			// Matches an accelerator cannot test as the chain does. (A
			// limit in user, which INPUT and FORWARD share, would
			// delegate both to the kernel.)
			extra := []string{"-m mark ! --mark 0x1", "-m mark --mark 0x1"}
			if chain != "user" {
				extra = append(extra, "-m limit --limit 10000/s --limit-burst 10000")
			}
			b.WriteString(" " + pick(extra...))
		}
		b.WriteString(" -j " + pick(targets...))
		return b.String()
	}
	var b strings.Builder
	chains := map[string][]string{
		"raw":    {"PREROUTING", "OUTPUT"},
		"mangle": {"PREROUTING", "INPUT", "FORWARD", "OUTPUT", "POSTROUTING"},
	}
	for _, table := range []string{"raw", "mangle"} {
		b.WriteString("*" + table + "\n")
		for _, c := range chains[table] {
			b.WriteString(":" + c + " ACCEPT [0:0]\n")
		}
		for _, c := range chains[table] {
			if accel && (c == "PREROUTING" || c == "INPUT" || c == "FORWARD") {
				continue
			}
			for range rng.IntN(2) {
				b.WriteString(rule(table, c, []string{"DROP", "ACCEPT", "ACCEPT"}) + "\n")
			}
		}
		b.WriteString("COMMIT\n")
	}
	server := routedAddrs["server"][0]
	if fam == 1 {
		server = "[" + routedAddrs["server"][1] + "]"
	}
	// Forwarded (8081, 8082) and local (8083) connections to rc, DNATed
	// to the server.
	b.WriteString("*nat\n:PREROUTING ACCEPT [0:0]\n:INPUT ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n:POSTROUTING ACCEPT [0:0]\n")
	if !accel {
		fmt.Fprintf(&b, "-A PREROUTING -d %[1]s -p tcp --dport 8081 -j DNAT --to-destination %[2]s:80\n"+
			"-A PREROUTING -d %[1]s -p tcp --dport 8082 -j DNAT --to-destination %[2]s:443\n", routedAddrs["rc"][fam], server)
	}
	fmt.Fprintf(&b, "-A OUTPUT -d %[1]s -p tcp --dport 8083 -j DNAT --to-destination %[2]s:80\n", routedAddrs["rc"][fam], server)
	if rng.IntN(2) == 0 {
		b.WriteString("-A POSTROUTING -o rs0 -p tcp " + pick("--dport 80", "--dport 443", "! --dport 22") + " -j MASQUERADE\n")
	}
	b.WriteString("COMMIT\n")
	b.WriteString("*filter\n")
	for _, c := range []string{"INPUT", "FORWARD", "OUTPUT"} {
		policy := pick("ACCEPT", "ACCEPT", "DROP")
		if accel && c != "OUTPUT" {
			policy = pick("ACCEPT", "DROP", "DROP")
		}
		b.WriteString(":" + c + " " + policy + " [0:0]\n")
	}
	b.WriteString(":user - [0:0]\n")
	for _, c := range []string{"INPUT", "FORWARD", "OUTPUT"} {
		// Neighbour discovery and ICMP errors, so that DROP policies
		// leave the topology working.
		b.WriteString("-A " + c + " -p " + icmp + " -j ACCEPT\n")
		if rng.IntN(2) == 0 {
			// As most rule sets begin.
			b.WriteString("-A " + c + " -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT\n")
		}
		for range rng.IntN(5) {
			targets := []string{"ACCEPT", "DROP", "REJECT", "REJECT --reject-with tcp-reset", "user", "ACCEPT"}
			if accel {
				targets = append(targets, "DROP", "DROP", "LOG")
			}
			b.WriteString(rule("filter", c, targets) + "\n")
		}
	}
	for range 1 + rng.IntN(3) {
		b.WriteString(rule("filter", "user", []string{"ACCEPT", "DROP", "RETURN", "REJECT"}) + "\n")
	}
	b.WriteString("COMMIT\n")
	return b.String()
}

// emptyRules resets every table iptables-legacy-restore wrote.
const emptyRules = "*raw\n:PREROUTING ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\nCOMMIT\n" +
	"*mangle\n:PREROUTING ACCEPT [0:0]\n:INPUT ACCEPT [0:0]\n:FORWARD ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n:POSTROUTING ACCEPT [0:0]\nCOMMIT\n" +
	"*nat\n:PREROUTING ACCEPT [0:0]\n:INPUT ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n:POSTROUTING ACCEPT [0:0]\nCOMMIT\n" +
	"*filter\n:INPUT ACCEPT [0:0]\n:FORWARD ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\nCOMMIT\n"

// bothWays measures the router with the rule sets text (IPv4, IPv6) of
// seed restored by bpfwall, from files in dir, with args, and then loaded
// by iptables-legacy and ip6tables-legacy instead. Each run begins
// without the conntrack entries of the runs before; the router's tables
// are left empty. Before bpfwall's filters go, after is called; measure
// is told whether bpfwall's run is measured.
func bothWays[T any](r *routed, bin, dir string, seed int, text [2]string, args []string, after func(), measure func(byBpfwall bool) T) (bpfwall, iptables T) {
	r.t.Helper()
	files := [2]string{fmt.Sprintf("%s/%d.v4", dir, seed), fmt.Sprintf("%s/%d.v6", dir, seed)}
	for fam := range 2 {
		if err := os.WriteFile(files[fam], []byte(text[fam]), 0o600); err != nil {
			r.t.Fatal(err)
		}
	}
	r.run("", append([]string{bin, "restore", "-q", files[0]}, args...)...)
	r.run("", append([]string{bin, "restore", "-q", "-6", files[1]}, args...)...)
	r.flushConntrack()
	bpfwall = measure(true)
	if after != nil {
		after()
	}
	r.run("", bin, "unload")
	r.run(text[0], "iptables-legacy-restore")
	r.run(text[1], "ip6tables-legacy-restore")
	r.flushConntrack()
	iptables = measure(false)
	r.run(emptyRules, "iptables-legacy-restore")
	r.run(emptyRules, "ip6tables-legacy-restore")
	return bpfwall, iptables
}

// outcomesParallel runs the probes of family fam at once.
func (r *routed) outcomesParallel(fam int, probes []probe) []string {
	ns := map[string]string{"client": r.client, "router": r.router, "server": r.server}
	out := make([]string, len(probes))
	var wg sync.WaitGroup
	for i, p := range probes {
		wg.Go(func() {
			out[i] = fmt.Sprintf("%s -> %s:%d %s", p.from, routedAddrs[p.to][fam], p.port, r.connect(ns[p.from], routedAddrs[p.to][fam], p.port))
		})
	}
	wg.Wait()
	return out
}

// outcomesRetried runs the probes of family fam at once, then those that
// timed out once more, at once: a SYN or an answer lost under load (once
// in a few hundred probes, an ICMPv6 error of ip6tables' REJECT) is not a
// verdict, and a rule that drops times out again. Both runs of a
// differential test retry alike.
func (r *routed) outcomesRetried(fam int, probes []probe) []string {
	out := r.outcomesParallel(fam, probes)
	var again []probe
	var at []int
	for i, o := range out {
		if strings.HasSuffix(o, " timeout") {
			again, at = append(again, probes[i]), append(at, i)
		}
	}
	for j, o := range r.outcomesParallel(fam, again) {
		out[at[j]] = o
	}
	return out
}

// noICMPLimits lifts the ICMP rate limits of the namespaces: per
// destination, and the global bucket, which ICMPv6 errors draw from too
// (its burst of 50 is spent by a run of parallel probes that REJECT).
func noICMPLimits(t *testing.T, namespaces ...string) {
	t.Helper()
	for _, ns := range namespaces {
		for _, k := range []string{"net.ipv4.icmp_ratelimit=0", "net.ipv6.icmp.ratelimit=0", "net.ipv4.icmp_msgs_per_sec=100000", "net.ipv4.icmp_msgs_burst=100000"} {
			if out, err := exec.Command("ip", "netns", "exec", ns, "sysctl", "-qw", k).CombinedOutput(); err != nil {
				t.Fatalf("sysctl %s: %v\n%s", k, err, out)
			}
		}
	}
}

// TestRoutedRandom is the differential test of restore without -i in a
// routed topology: random rule sets over every chain of raw, mangle and
// filter with a nat table, both families loaded at once, and TCP
// connections to, through and from the router, whose outcomes (open,
// refused, dropped) must be those under iptables-legacy and
// ip6tables-legacy with the same rules. BPFWALL_ROUTED_SEEDS sets the
// number of rule sets (make difftest runs more).
func TestRoutedRandom(t *testing.T) {
	testenv.RequireTool(t, "iptables-legacy-restore", "ip6tables-legacy-restore", "iptables-restore")
	n := envInt(t, "BPFWALL_ROUTED_SEEDS", 10)
	bin := buildBpfwall(t)
	r := newRouted(t)
	// The kernel's REJECT answers in both runs: without its ICMP rate
	// limits, the first run does not use up the second's.
	noICMPLimits(t, r.router)
	r.listen(r.server, 22, 80, 443, 8080, 23)
	r.listen(r.router, 22, 80, 443, 8080, 23)
	r.listen(r.client, 22, 80, 8080)
	probes := append([]probe{{"client", "rc", 8081}, {"client", "rc", 8082}, {"router", "rc", 8083}}, routedProbes...)
	dir := t.TempDir()
	mismatches, probed := 0, 0
	kinds := map[string]int{}
	for seed := range n {
		rng := rand.New(rand.NewPCG(uint64(seed), 16))
		text := [2]string{randomRouted(rng, 0), randomRouted(rng, 1)}
		got, wantAll := bothWays(r, bin, dir, seed, text, nil, nil, func(bool) (out [2][]string) {
			for fam := range 2 {
				out[fam] = r.outcomesRetried(fam, probes)
			}
			return out
		})
		for fam := range 2 {
			want := wantAll[fam]
			for i := range want {
				probed++
				kinds[want[i][strings.LastIndexByte(want[i], ' ')+1:]]++
				if got[fam][i] != want[i] {
					mismatches++
					if mismatches <= 10 {
						t.Errorf("seed %d: bpfwall: %s; iptables: %s; rules:\n%s", seed, got[fam][i], want[i], text[fam])
					}
				}
			}
		}
	}
	t.Logf("%d rule sets per family, %d probes, %d mismatches; the kernel's outcomes %v", n, probed, mismatches, kinds)
	if kinds["open"] == 0 || kinds["timeout"] == 0 || kinds["refused"] == 0 {
		t.Errorf("the kernel's outcomes %v do not test the rules", kinds)
	}
}
