package kernel

import (
	"os/exec"
	"regexp"
	"strings"
	"testing"

	"bpfwall/internal/testenv"
	"bpfwall/ir"
	"bpfwall/parser/nft"
	"bpfwall/rules"
)

// kernelRuleset is loaded with nft -f and read back over netlink.
const kernelRuleset = `table inet filter {
	chain input {
		type filter hook input priority 0; policy drop;
		iifname "lo" accept
		ip saddr 10.0.0.0/8 tcp dport 22 accept
		ip6 saddr 2001:db8::/32 udp dport { 53, 123 } accept
		tcp dport 8000-8080 counter accept
		ip protocol icmp accept
		tcp flags & (syn|ack) == syn drop
		meta l4proto udp jump udpin
	}
	chain udpin {
		udp sport 53 return
		ip daddr 192.0.2.1 drop
	}
}
`

// kernelRulesetStatements has the statements, sets, maps and
// concatenations the reader writes back.
const kernelRulesetStatements = `table inet filter {
	set allowed {
		type ipv4_addr
		flags interval
		elements = { 10.0.0.0/8, 192.168.1.1 }
	}
	set svc {
		type ipv4_addr . inet_service
		elements = { 10.1.1.1 . 22, 10.1.1.2 . 80 }
	}
	set nets6 {
		type ipv6_addr
		flags interval
		elements = { 2001:db8::/48, 2001:db8:1::1 }
	}
	map portv {
		type inet_service : verdict
		elements = { 8080 : accept, 8081 : drop }
	}
	chain input {
		type filter hook input priority 0; policy drop;
		iif "lo" accept
		oif != "lo" iifname { "eth0", "veth*" } counter
		ct state established,related accept
		ct state invalid drop
		ct state != { new, untracked } counter
		ct state { new, established } tcp dport 22 counter
		ct status dnat accept
		ct status ! snat,dnat tcp dport 23 drop
		ct status & dnat == dnat counter
		meta skuid 0 tcp dport 24 accept
		meta skgid != 5 tcp dport 26 drop
		meta skuid { 0, 33 } tcp dport 28 accept
		meta skuid >= 100 tcp dport 29 counter
		meta skgid != 10-20 tcp dport 30 drop
		ip saddr @allowed tcp dport 22 accept
		ip6 saddr @nets6 tcp dport 22 accept
		ip saddr . tcp dport @svc accept
		ip saddr . tcp dport { 10.2.2.2 . 443, 10.3.0.0/16 . 8000-8080 } accept
		iifname . ip6 daddr { "eth1" . 2001:db8::1, "eth2" . 2001:db8::2 } drop
		tcp dport vmap @portv
		udp dport vmap { 53 : accept, 123 : jump udpin }
		ip saddr . udp dport vmap { 10.9.9.9 . 53 : drop, 10.9.9.9 . 54 : accept }
		ip protocol tcp limit rate 10/second burst 5 packets accept
		ip protocol udp limit rate over 100/minute burst 10 packets drop
		log prefix "in: " level info flags tcp sequence,options accept
		log flags all
		log
		tcp dport 25 reject with tcp reset
		reject with icmp type host-prohibited
		reject with icmpv6 type admin-prohibited
		reject with icmpx type admin-prohibited
		reject
	}
	chain udpin {
		udp sport 53 return
		ip daddr 192.0.2.1 drop
	}
	chain pre {
		type filter hook prerouting priority -150; policy accept;
		meta l4proto tcp tproxy ip to 127.0.0.1:8080 accept
		meta l4proto tcp tproxy ip6 to [::1]:8080 accept
		meta l4proto udp tproxy ip to :53
	}
}
`

func TestReadKernel(t *testing.T) {
	testenv.RequireRoot(t)
	testenv.RequireTool(t, "nft")
	for _, tc := range []struct{ name, src string }{{"matches", kernelRuleset}, {"statements", kernelRulesetStatements}} {
		for _, fam := range []rules.Family{rules.IPv4, rules.IPv6} {
			t.Run(tc.name+"/"+fam.String(), func(t *testing.T) { testReadKernel(t, tc.src, fam) })
		}
	}
}

// testReadKernel loads src with nft -f in a fresh namespace, reads it back
// with Read and compares the model with the one Parse makes of src:
// printed as nft text, and the INPUT hook lowered.
func testReadKernel(t *testing.T, src string, fam rules.Family) {
	var got *rules.Ruleset
	var err error
	testenv.InFreshNetns(t, func() {
		cmd := exec.Command("nft", "-f", "-")
		cmd.Stdin = strings.NewReader(src)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("nft -f: %v\n%s", err, out)
			return
		}
		got, err = Read(nft.Options{Family: fam})
	})
	if t.Failed() {
		return
	}
	if err != nil {
		t.Fatalf("Read: %v", err)
	}
	// The kernel's text lays the rules out on the lines the source has.
	want, err := nft.Parse("kernel", []byte(src), nft.Options{Family: fam})
	if err != nil {
		t.Fatalf("parse: %v", err)
	}
	gt, err := nft.Print(got)
	if err != nil {
		t.Fatalf("print the kernel's: %v", err)
	}
	wt, err := nft.Print(want)
	if err != nil {
		t.Fatalf("print the text's: %v", err)
	}
	if string(gt) != string(wt) {
		t.Errorf("the kernel's rule set prints as\n%s\nthe text's as\n%s", gt, wt)
	}
	gp, err := ir.Lower(got, ir.LowerOptions{Table: "filter", Chain: "INPUT"})
	if err != nil {
		t.Fatalf("lower the kernel's: %v", err)
	}
	wp, err := ir.Lower(want, ir.LowerOptions{Table: "filter", Chain: "INPUT"})
	if err != nil {
		t.Fatalf("lower the text's: %v", err)
	}
	// The kernel's text declares sets on one line each: rule lines may
	// differ from the source's.
	kline := regexp.MustCompile(`kernel:[0-9]+`)
	if g, w := kline.ReplaceAllString(gp.String(), "kernel:N"), kline.ReplaceAllString(wp.String(), "kernel:N"); g != w {
		t.Errorf("the kernel's rule set lowers to\n%s\nthe text's to\n%s", g, w)
	}
}

// TestReadKernelRefuses: an expression the reader cannot write back is an
// error naming the kernel's rule, never a rule read without it
// (google/nftables drops the expressions it does not know).
func TestReadKernelRefuses(t *testing.T) {
	testenv.RequireRoot(t)
	testenv.RequireTool(t, "nft")
	for _, tc := range []struct{ rule, want string }{
		{"socket transparent 1 accept", "kernel:ip f/c/handle 2: expression socket is not supported"},
		{"meta mark set ip saddr map { 10.0.0.1 : 1 }", "data map"},
		{"meta nftrace set 1", "meta set is not supported"},
	} {
		var err error
		testenv.InFreshNetns(t, func() {
			cmd := exec.Command("nft", "-f", "-")
			cmd.Stdin = strings.NewReader("table ip f {\n chain c {\n  type filter hook prerouting priority 0;\n  " + tc.rule + "\n }\n}\n")
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Errorf("nft -f: %v\n%s", err, out)
				return
			}
			_, err = Read(nft.Options{})
		})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: Read: %v, want %q", tc.rule, err, tc.want)
		}
	}
}
