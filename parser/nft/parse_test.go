package nft

import (
	"net/netip"
	"slices"
	"strings"
	"testing"

	"bpfwall/ir"
	"bpfwall/model"
	"bpfwall/rules"
)

func lower(t *testing.T, src string, fam rules.Family, chain string) *ir.Program {
	t.Helper()
	rs, err := Parse("t.nft", []byte(src), Options{Family: fam})
	if err != nil {
		t.Fatalf("parse: %v", err)
	}
	table := "filter"
	if chain == "INGRESS" {
		table = "netdev"
	}
	p, err := ir.Lower(rs, ir.LowerOptions{Table: table, Chain: chain})
	if err != nil {
		t.Fatalf("lower: %v", err)
	}
	if err := ir.Verify(p); err != nil {
		t.Fatalf("verify: %v", err)
	}
	return p
}

func udp6(sport, dport uint16) *model.Packet {
	return &model.Packet{Family: rules.IPv6, Src: netip.MustParseAddr("::1"), Dst: netip.MustParseAddr("::2"),
		Proto: 17, SrcPort: sport, DstPort: dport, L4Len: 8, TTL: 64, Length: 48}
}

func tcp4(dport uint16, l4len int) *model.Packet {
	return &model.Packet{Family: rules.IPv4, Src: netip.MustParseAddr("10.0.0.1"), Dst: netip.MustParseAddr("10.0.0.2"),
		Proto: 6, SrcPort: 1234, DstPort: dport, TCPFlags: rules.TCPSyn, L4Len: l4len, TTL: 64, Length: 60}
}

func TestEval(t *testing.T) {
	for _, tc := range []struct {
		name  string
		src   string
		fam   rules.Family
		chain string
		pkt   *model.Packet
		want  ir.Verdict
	}{
		{
			name: "tcp dport",
			src:  "table inet f { chain in { type filter hook input priority 0; policy drop; tcp dport 22 accept; } }",
			pkt:  tcp4(22, 20), want: ir.VerdictAccept,
		},
		{
			// nft_payload_eval breaks; the policy decides, nothing is hotdropped.
			name: "truncated transport header does not match",
			src:  "table inet f { chain in { type filter hook input priority 0; policy accept; tcp flags syn drop; } }",
			pkt:  tcp4(22, 10), want: ir.VerdictAccept,
		},
		{
			// nft_payload_fast_eval reads the fragment's data as ports
			// (the kernel does; see internal/difftest's TestFragmentsNFT).
			// In forward: input sees reassembled IPv4 datagrams.
			name:  "non-first fragment matches ports by its data",
			src:   "table ip f { chain fw { type filter hook forward priority 0; policy accept; tcp dport != 80 drop; } }",
			chain: "FORWARD",
			pkt: func() *model.Packet {
				p := tcp4(22, 20)
				p.FragOffset = 8
				return p
			}(),
			want: ir.VerdictDrop,
		},
		{
			// nft loads every key of the concatenation: a UDP packet is
			// never "not in" a set of address . tcp port (found by
			// internal/difftest's TestReadKernelNFT).
			name: "negated concatenation needs its keys loaded",
			src:  "table inet f { chain in { type filter hook input priority 0; policy accept; ip6 saddr . tcp dport != { ::9 . 22 } drop; } }",
			fam:  rules.IPv6, pkt: udp6(53, 53), want: ir.VerdictAccept,
		},
		{
			// (flags & ack) != fin|ack holds for every TCP packet, and
			// only those (found by internal/difftest, nft seed 67).
			name: "tcp flags != a value outside the mask still needs tcp",
			src:  "table inet f { chain in { type filter hook input priority 0; policy accept; tcp flags & (ack) != fin|ack drop; } }",
			fam:  rules.IPv6, pkt: udp6(53, 53), want: ir.VerdictAccept,
		},
		{
			// The kernel compares (flags & syn,ecn,cwr) with syn,urg, which
			// no packet equals (found by internal/difftest, seed 6).
			name: "tcp flags value outside its mask never matches",
			src:  "table ip f { chain in { type filter hook input priority 0; policy accept; tcp flags syn,urg / syn,ecn,cwr drop; } }",
			pkt:  tcp4(22, 20), want: ir.VerdictAccept,
		},
		{
			name: "tcp flags value inside its mask",
			src:  "table ip f { chain in { type filter hook input priority 0; policy accept; tcp flags syn / syn,ack drop; } }",
			pkt:  tcp4(22, 20), want: ir.VerdictDrop,
		},
		{
			name: "non-first fragment too short for the load",
			src:  "table ip f { chain in { type filter hook input priority 0; policy accept; tcp dport != 80 drop; } }",
			pkt: func() *model.Packet {
				p := tcp4(22, 3)
				p.FragOffset = 8
				return p
			}(),
			want: ir.VerdictAccept,
		},
		{
			// Accept in the first base chain goes on to the second.
			name: "accept continues to the next base chain",
			src: `table ip a { chain in { type filter hook input priority 10; policy accept; ip saddr 10.0.0.1 drop; } }
table ip b { chain in { type filter hook input priority -10; policy accept; tcp dport 22 accept; } }`,
			pkt: tcp4(22, 20), want: ir.VerdictDrop,
		},
		{
			name: "policy drop of the first base chain ends it",
			src: `table ip a { chain in { type filter hook input priority 0; policy drop; } }
table ip b { chain in { type filter hook input priority 5; policy accept; tcp dport 22 accept; } }`,
			pkt: tcp4(22, 20), want: ir.VerdictDrop,
		},
		{
			name: "return of a goto chain is the base chain's policy",
			src: `table ip a {
	chain in { type filter hook input priority 0; policy accept; goto g; }
	chain g { return; }
}
table ip b { chain in { type filter hook input priority 5; policy drop; ip saddr 10.0.0.1 accept; } }`,
			pkt: tcp4(22, 20), want: ir.VerdictAccept,
		},
		{
			name: "inet rule for the other family never matches",
			src:  "table inet f { chain in { type filter hook input priority 0; policy accept; ip6 saddr ::1 drop; meta nfproto ipv6 drop; } }",
			pkt:  tcp4(22, 20), want: ir.VerdictAccept,
		},
		{
			name: "vmap",
			src: `table inet f { chain in { type filter hook input priority 0; policy accept;
	tcp dport vmap { 22 : drop, 80 : accept } } }`,
			pkt: tcp4(22, 20), want: ir.VerdictDrop,
		},
		{
			// nft reads "a|b" without parentheses on the right.
			name: "flags or-ed without parentheses",
			src:  "table inet f { chain in { type filter hook input priority 0; policy accept; tcp flags == syn|ack drop; } }",
			pkt:  tcp4(22, 20), want: ir.VerdictAccept,
		},
		{
			name: "masked flags or-ed without parentheses",
			src:  "table inet f { chain in { type filter hook input priority 0; policy accept; tcp flags & (syn|ack|fin) == fin|syn drop; tcp flags & (syn|ack) == syn drop; } }",
			pkt:  tcp4(22, 20), want: ir.VerdictDrop,
		},
		{
			name: "set of flags or-ed without parentheses",
			src:  "table inet f { chain in { type filter hook input priority 0; policy accept; tcp flags { fin|ack, syn } drop; } }",
			pkt:  tcp4(22, 20), want: ir.VerdictDrop,
		},
		{
			name: "any of the flags",
			src:  "table inet f { chain in { type filter hook input priority 0; policy accept; tcp flags fin,syn drop; } }",
			pkt:  tcp4(22, 20), want: ir.VerdictDrop,
		},
		{
			name: "defines and sets",
			src: `define nets = { 10.0.0.0/24, 192.168.0.0/16 }
table ip f { chain in { type filter hook input priority 0; policy accept; ip saddr $nets tcp dport { 1-100 } drop; } }`,
			pkt: tcp4(22, 20), want: ir.VerdictDrop,
		},
		{
			name: "script commands",
			src: `flush ruleset
add table ip f
add chain ip f in { type filter hook input priority 0; policy accept; }
add rule ip f in tcp dport 22 accept
insert rule ip f in ip saddr 10.0.0.1 drop`,
			pkt: tcp4(22, 20), want: ir.VerdictDrop,
		},
		{
			// nft merges the two "!=" into one 4-byte cmp neq: the kernel
			// tests NOT(sport == 47721 AND dport == 0) (internal/difftest,
			// nft-ipv6-seed-102).
			name: "merged udp sport != dport != matches when one port differs",
			src:  "table inet f { chain in { type filter hook input priority 0; policy drop; udp sport != 47721 udp dport != 0 accept; } }",
			fam:  rules.IPv6,
			pkt:  udp6(47721, 65534), want: ir.VerdictAccept,
		},
		{
			name: "merged udp sport != dport != in either order",
			src:  "table inet f { chain in { type filter hook input priority 0; policy drop; udp dport != 0 udp sport != 47721 accept; } }",
			fam:  rules.IPv6,
			pkt:  udp6(1, 0), want: ir.VerdictAccept,
		},
		{
			name: "merged udp sport != dport != rejects the pair itself",
			src:  "table inet f { chain in { type filter hook input priority 0; policy drop; udp sport != 47721 counter udp dport != 0 accept; } }",
			fam:  rules.IPv6,
			pkt:  udp6(47721, 0), want: ir.VerdictDrop,
		},
		{
			name: "merged ip ttl != protocol !=",
			src:  "table ip f { chain in { type filter hook input priority 0; policy drop; ip ttl != 64 ip protocol != tcp accept; } }",
			pkt:  tcp4(22, 20), want: ir.VerdictDrop,
		},
		{
			name: "merged ip ttl != protocol != matches another ttl",
			src:  "table ip f { chain in { type filter hook input priority 0; policy drop; ip ttl != 63 ip protocol != tcp accept; } }",
			pkt:  tcp4(22, 20), want: ir.VerdictAccept,
		},
		{
			// "!=" and "==" are not merged: both hold separately.
			name: "udp sport != dport == not merged",
			src:  "table inet f { chain in { type filter hook input priority 0; policy drop; udp sport != 47721 udp dport 0 accept; } }",
			fam:  rules.IPv6,
			pkt:  udp6(1, 65534), want: ir.VerdictDrop,
		},
		{
			// The ports are never adjacent to a single ip saddr: unchanged.
			name: "tcp dport != with a set is not merged",
			src:  "table ip f { chain in { type filter hook input priority 0; policy drop; tcp sport != 1234 tcp dport != { 22, 23 } accept; } }",
			pkt:  tcp4(80, 20), want: ir.VerdictDrop,
		},
		{
			// The second sport is merged with dport (nft sorts stably).
			name: "three port != keep the lone one separate",
			src:  "table ip f { chain in { type filter hook input priority 0; policy drop; tcp sport != 1 tcp sport != 1234 tcp dport != 22 accept; } }",
			pkt:  tcp4(23, 20), want: ir.VerdictAccept,
		},
		{
			// A batch of two is merged before the log; the lone sport
			// merges with nothing.
			name: "batch ends at a statement once it holds two",
			src:  "table ip f { chain in { type filter hook input priority 0; policy drop; ip ttl 64 tcp sport != 1234 log tcp dport != 23 accept; } }",
			pkt:  tcp4(22, 20), want: ir.VerdictDrop,
		},
		{
			name: "ipv6 bad extension headers do not match l4proto",
			src:  "table inet f { chain in { type filter hook input priority 0; policy accept; meta l4proto != udp drop; } }",
			fam:  rules.IPv6,
			pkt: &model.Packet{Family: rules.IPv6, Src: netip.MustParseAddr("::1"), Dst: netip.MustParseAddr("::2"),
				BadExtHeaders: true, Length: 80, TTL: 64},
			want: ir.VerdictAccept,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			chain := tc.chain
			if chain == "" {
				chain = "INPUT"
			}
			p := lower(t, tc.src, tc.fam, chain)
			if got := p.Eval(tc.pkt); got.Verdict != tc.want {
				t.Errorf("verdict %s, want %s\n%s", got, tc.want, p)
			}
		})
	}
}

func TestErrors(t *testing.T) {
	for _, tc := range []struct {
		name, src, want string
	}{
		{"syntax", "table inet f {\n chain c { type filter hook input priority 0;\n", "t.nft:3:1: unexpected"},
		{"undefined variable", "table ip f { chain c { tcp dport $x accept; } }\ntable ip g { chain in { type filter hook input priority 0; } }", "t.nft:1:34: undefined variable $x"},
		{"missing chain", "add rule ip f c accept", "t.nft:1:1: table ip f does not exist"},
		{"bad address", "table ip f { chain in { type filter hook input priority 0; ip saddr 300.1.1.1 drop; } }", `t.nft:1:69: bad address "300.1.1.1"`},
		{"icmpx in an ip table", "table ip f { chain in { type filter hook input priority 0; reject with icmpx type no-route; } }", "t.nft:1:60: reject with icmpx is not supported in an ip table"},
		{"icmpv6 in an ip table", "table ip f { chain in { type filter hook input priority 0; reject with icmpv6 type no-route; } }", "t.nft:1:60: reject with icmpv6 in an ip table"},
		{"merge across log", "table ip f { chain in { type filter hook input priority 0; udp sport != 1 log udp dport != 2 accept; } }", "t.nft:1:79: nft merges this match with the one at 1:60"},
		{"concatenation of the wrong length", "table ip f { chain in { type filter hook input priority 0; ip saddr . tcp dport { 10.0.0.1 } drop; } }", "t.nft:1:83: 1 values for a concatenation of 2 keys"},
		{"iif of a wildcard", `table ip f { chain in { type filter hook input priority 0; iif "eth*" drop; } }`, `t.nft:1:64: iif "eth*": not an interface name`},
		{"jump to missing chain", "table ip f { chain in { type filter hook input priority 0; jump nowhere; } }", "t.nft:1:60: chain nowhere does not exist in table ip f"},
		// nft -c refuses these three; an anonymous set's counters, and a
		// declared map's, it accepts (TestCountedElements).
		{"counter in an anonymous map", "table ip f { chain in { type filter hook input priority 0; tcp dport vmap { 80 counter : accept }; } }", "t.nft:1:77: missing statement in map declaration"},
		{"counter in an undeclared map", "table ip f { map m { type inet_service : verdict; elements = { 80 counter : accept } }\n chain in { type filter hook input priority 0; tcp dport vmap @m; } }", "t.nft:1:64: missing statement in map declaration"},
		{"counter in an undeclared set", "table ip f { set s { type inet_service; elements = { 80 counter } }\n chain in { type filter hook input priority 0; tcp dport @s accept; } }", "t.nft:1:54: missing statement in set declaration"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse("t.nft", []byte(tc.src), Options{})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want %q", err, tc.want)
			}
		})
	}
}

// TestCountedElements: element counters nft accepts are read as counters,
// which change no verdict.
func TestCountedElements(t *testing.T) {
	for _, src := range []string{
		"table ip f { chain in { type filter hook input priority 0; tcp dport { 80 counter, 443 } accept; } }",
		"table ip f { map m { type inet_service : verdict; counter; elements = { 80 counter packets 1 bytes 2 : accept } }\n chain in { type filter hook input priority 0; tcp dport vmap @m; } }",
		"table ip f { set s { type inet_service; counter; elements = { 80 counter } }\n chain in { type filter hook input priority 0; tcp dport @s accept; } }",
	} {
		if _, err := Parse("t.nft", []byte(src), Options{}); err != nil {
			t.Errorf("%s: %v", src, err)
		}
	}
}

// Constructs the model cannot express parse, and lowering names them with
// their position.
func TestUnsupportedLowersToError(t *testing.T) {
	src := "table inet f { chain in { type filter hook input priority 0;\n fib daddr type local accept\n" +
		" ip saddr . tcp dport { 10.0.0.0/8 . 22, 10.1.2.3 . 20-30 } accept\n iif 3 accept\n counter\n" +
		" meta l4proto tcp tproxy to :8080 accept\n ip saddr . tcp dport < { 10.0.0.1 . 22 } drop\n meta mark set 1\n" +
		" th dport 53 drop\n meta l4proto { udp, esp } th sport 1 drop\n } }"
	rs, err := Parse("t.nft", []byte(src), Options{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = ir.Lower(rs, ir.LowerOptions{})
	for _, want := range []string{"t.nft:2:2: fib daddr match is not supported",
		"t.nft:4:6: iif by number (bpfwall matches the interface by the name it has when loaded) match is not supported",
		"t.nft:6:19: tproxy: only valid in a prerouting chain",
		"t.nft:7:2: concatenation < match is not supported", "t.nft:8:2: meta mark set target is not supported",
		// th of any protocol, and of esp (its SPI)
		"t.nft:9:2: th dport (bpfwall reads it after a protocol match of tcp, udp, udplite, sctp or dccp) match is not supported",
		"t.nft:10:28: th sport (bpfwall"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v, want %q", err, want)
		}
	}
}

// TestUnreadRuleKeepsChain: a rule the grammar cannot read is an error
// where its hook reaches it. The chain around it was once read as an
// unknown object and dropped, with its policy: everything was accepted.
func TestUnreadRuleKeepsChain(t *testing.T) {
	src := "table ip f {\n chain in {\n  type filter hook input priority 0; policy drop;\n  fib saddr . iif oif 0 drop\n  tcp dport 22 accept\n }\n}\n"
	rs, err := Parse("t.nft", []byte(src), Options{})
	if err != nil {
		t.Fatal(err)
	}
	if c := rs.Table("filter").Chain("INPUT"); c == nil || c.Policy != rules.PolicyDrop || len(c.Rules) != 2 {
		t.Fatalf("INPUT is %+v, want the base chain with its policy and its rules", c)
	}
	_, err = ir.Lower(rs, ir.LowerOptions{})
	if want := `which bpfwall cannot read, match is not supported`; err == nil || !strings.Contains(err.Error(), "t.nft:4:") || !strings.Contains(err.Error(), want) {
		t.Errorf("lower: %v, want %q", err, want)
	}
}

// TestUnreadRuleInScript: "add rule" with a rule the grammar reads only
// the start of is one rule, refused where it is reached.
func TestUnreadRuleInScript(t *testing.T) {
	src := "add table ip f\nadd chain ip f in { type filter hook input priority 0; policy drop; }\nadd rule ip f in fib saddr . iif oif 0 drop\nadd rule ip f in tcp dport 22 accept\n"
	rs, err := Parse("t.nft", []byte(src), Options{})
	if err != nil {
		t.Fatal(err)
	}
	if c := rs.Table("filter").Chain("INPUT"); c == nil || len(c.Rules) != 2 {
		t.Fatalf("INPUT is %+v, want two rules", c)
	}
	if _, err := ir.Lower(rs, ir.LowerOptions{}); err == nil || !strings.Contains(err.Error(), `t.nft:3:18: rule "… 0 drop", which bpfwall cannot read`) {
		t.Errorf("lower: %v", err)
	}
}

// TestFamilyFromContent: an ip6-only rule set is for IPv6 packets, one
// with ip or inet tables for IPv4 unless asked; arp and bridge tables,
// whose hooks bpfwall has no program for, are refused by name.
func TestFamilyFromContent(t *testing.T) {
	for src, want := range map[string]rules.Family{
		"table ip6 t { chain c { type filter hook input priority 0; tcp dport 22 drop; } }\n":                                             rules.IPv6,
		"table ip6 t { }\ntable inet u { chain c { type filter hook input priority 0; } }\n":                                              rules.IPv4,
		"table ip t { chain c { type filter hook input priority 0; } }\ntable ip6 t { chain c { type filter hook input priority 0; } }\n": rules.IPv4,
		"# nothing\n": rules.IPv4,
	} {
		if got, err := Family("t.nft", []byte(src), Options{}); err != nil || got != want {
			t.Errorf("Family(%q) = %v, %v; want %v", src, got, err, want)
		}
	}
	// bridge's own priority names (out) are read, so that the refusal
	// is of the table, not of a name nft accepts.
	for fam, prio := range map[string]string{"bridge": "out", "arp": "0"} {
		src := "table " + fam + " b { chain c { type filter hook output priority " + prio + "; } }\ntable ip t { chain c { type filter hook input priority 0; } }\n"
		_, err := Parse("t.nft", []byte(src), Options{Family: rules.IPv4})
		if err == nil || !strings.Contains(err.Error(), "t.nft:1:1: table "+fam+" b: "+fam+" tables are not supported") || strings.Contains(err.Error(), "priority") {
			t.Errorf("%s table: %v, want a refusal that names it", fam, err)
		}
	}
}

// TestUnsupportedSetNotSwallowed: a set bpfwall cannot compile (a
// timeout set, whose elements come and go) is refused at the rule, not
// taken for an empty set that the rule never matches.
func TestUnsupportedSetNotSwallowed(t *testing.T) {
	src := "table ip t {\n set s { type inet_service; flags timeout; }\n chain c {\n  type filter hook input priority 0;\n  tcp dport @s drop\n }\n}\n"
	rs, err := Parse("t.nft", []byte(src), Options{Family: rules.IPv4})
	if err == nil {
		_, err = ir.Lower(rs, ir.LowerOptions{Table: "filter", Chain: "INPUT"})
	}
	if err == nil || !strings.Contains(err.Error(), "t.nft:5:3") || !strings.Contains(err.Error(), "timeout") {
		t.Errorf("tcp dport @timeoutset: %v, want a refusal at 5:3", err)
	}
}

// TestCatchAll: a set's catch-all element "*" holds for every key no
// other element has: a lookup in such a set matches every packet nft
// loads the key of, "!=" none; a verdict map's catch-all takes the keys
// its other elements do not. What bpfwall does not compile of it is
// refused at the rule that uses it (TestConstructsNFT compares the rest
// with the kernel).
func TestCatchAll(t *testing.T) {
	src := "table ip t {\n set s { type ipv4_addr; elements = { 192.168.3.5, * } }\n chain c {\n  type filter hook input priority 0;\n" +
		"  ip saddr @s drop\n  ip saddr != @s drop\n  tcp dport vmap { 22 : accept, * : drop }\n }\n}\n"
	rs, err := Parse("t.nft", []byte(src), Options{Family: rules.IPv4})
	if err != nil {
		t.Fatalf("parse: %v (nft takes it)", err)
	}
	var got []string
	for _, r := range rs.Table("filter").Chain("INPUT").Rules {
		got = append(got, r.Spec())
	}
	want := []string{"-j DROP", "-p tcp -m tcp --dport 22 -j ACCEPT", "-p tcp -m tcp ! --dport 22 -j DROP"}
	if !slices.Equal(got, want) {
		t.Errorf("rules\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	src = "table ip t {\n chain c {\n  type filter hook input priority 0;\n  ip saddr . tcp dport vmap { 10.0.0.1 . 22 : accept, * : drop }\n  meta mark @m drop\n }\n" +
		" set m { type mark; elements = { * } }\n}\n"
	if rs, err = Parse("t.nft", []byte(src), Options{Family: rules.IPv4}); err != nil {
		t.Fatalf("parse: %v (nft takes it)", err)
	}
	_, err = ir.Lower(rs, ir.LowerOptions{Table: "filter", Chain: "INPUT"})
	if want := "t.nft:4:55: ip saddr . tcp dport in a verdict map with a catch-all element * match is not supported"; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("lower: %v, want %q", err, want)
	}
}

// TestNFTSpellings: what nft accepts, read as nft reads it.
func TestNFTSpellings(t *testing.T) {
	for rule, want := range map[string]string{
		"tcp flags ! syn,rst drop":     "-A INPUT -p tcp -m tcp --tcp-flags SYN,RST NONE -j DROP",
		"ct state 8 drop":              "-A INPUT -m conntrack --ctstate NEW -j DROP",
		"ct state 6 accept":            "-A INPUT -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT",
		"ether saddr 0:1:2:3:4:5 drop": "-A INPUT -m mac --mac-source 00:01:02:03:04:05 -j DROP",
		// The entry's NAT flags are conntrack's states SNAT and DNAT;
		// "!" and "== 0" need an entry (ct status breaks without one).
		"ct status dnat accept":           "-A INPUT -m conntrack --ctstate DNAT -j ACCEPT",
		"ct status snat,dnat accept":      "-A INPUT -m conntrack --ctstate SNAT,DNAT -j ACCEPT",
		"ct status & 0x30 != 0 accept":    "-A INPUT -m conntrack --ctstate SNAT,DNAT -j ACCEPT",
		"ct status & dnat == dnat accept": "-A INPUT -m conntrack --ctstate DNAT -j ACCEPT",
		"ct status ! dnat drop":           "-A INPUT -m conntrack --ctstate NEW,RELATED,ESTABLISHED -m conntrack ! --ctstate DNAT -j DROP",
		"ct status & snat == 0 drop":      "-A INPUT -m conntrack --ctstate NEW,RELATED,ESTABLISHED -m conntrack ! --ctstate SNAT -j DROP",
		"ct status & snat != snat drop":   "-A INPUT -m conntrack --ctstate NEW,RELATED,ESTABLISHED -m conntrack ! --ctstate SNAT -j DROP",
		// Interface tests beyond the rule's one of each direction, as
		// OpenWrt's fw4 writes a zone's wildcard devices.
		`iifname "foo*" iifname != { "t3", "t4" } iifname != "baz*" drop`: "-A INPUT -i foo+ -m nft-iface ! --in t3,t4 -m nft-iface ! --in baz+ -j DROP",
		// A second address test with a mask, as fw4 writes subnet masks.
		"ip saddr 10.0.0.0/8 ip saddr & 0.0.0.255 != 0.0.0.1 drop": "-A INPUT -s 10.0.0.0/8 -m nft-addr ! --src 0.0.0.1/0.0.0.255 -j DROP",
		`oifname "a" oif != "lo" accept`:                           "-A INPUT -o a -m nft-iface ! --out lo -j ACCEPT",
	} {
		src := "table ip t {\n chain c {\n  type filter hook input priority 0;\n  " + rule + "\n }\n}\n"
		rs, err := Parse("t.nft", []byte(src), Options{Family: rules.IPv4})
		if err != nil {
			t.Errorf("%s: %v", rule, err)
			continue
		}
		if got := string(rs.Save(rules.SaveOptions{})); !strings.Contains(got, want+"\n") {
			t.Errorf("%s reads as\n%s\nwant %s", rule, got, want)
		}
	}
	// What nft refuses too.
	for _, rule := range []string{"ether saddr 0:1:2:3:4 drop", "ether saddr 0:1:2:3:4:100 drop", "ct state 16 drop", "ct state ! established drop",
		`meta iifname "" drop`, `oifname "" drop`, "tcp dport vmap { 1-100 : drop, 50-200 : accept }", "ip saddr vmap { 10.0.0.0/8 : drop, 10.1.0.0/16 : accept }",
		// nft takes these; the model does not have them: flags other
		// than snat and dnat, and comparisons of the whole status word.
		"ct status expected drop", "ct status snat,assured drop", "ct status == dnat drop", "ct status != dnat drop", "ct status { dnat } drop",
		"ct status & dnat == snat drop", "ct status xxx drop"} {
		src := "table ip t {\n chain c {\n  type filter hook input priority 0;\n  " + rule + "\n }\n}\n"
		rs, err := Parse("t.nft", []byte(src), Options{Family: rules.IPv4})
		if err == nil {
			_, err = ir.Lower(rs, ir.LowerOptions{Table: "filter", Chain: "INPUT"})
		}
		if err == nil {
			t.Errorf("%s: accepted", rule)
		}
	}
}

// TestTwoNegatedProtocols: "ip protocol != tcp ip protocol != udp" and
// "meta l4proto != { tcp, udp }" need more negations than a model rule's
// "! -p" holds: the others are a match of their own. Once the rule read
// as one that matches nothing, and every packet it was written to drop
// passed.
func TestTwoNegatedProtocols(t *testing.T) {
	src := "table ip f { chain in { type filter hook input priority 0;\n ip protocol != tcp ip protocol != udp accept\n ip protocol != tcp meta l4proto != tcp accept\n meta l4proto != { icmp, udp } drop\n } }"
	rs, err := Parse("t.nft", []byte(src), Options{})
	if err != nil {
		t.Fatal(err)
	}
	p, err := ir.Lower(rs, ir.LowerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		proto uint8
		want  string
	}{{6, "drop"}, {17, "accept"}, {1, "accept"}, {47, "accept"}} {
		pkt := &model.Packet{Family: rules.IPv4, Proto: tc.proto, Src: netip.MustParseAddr("10.0.0.1"), Dst: netip.MustParseAddr("10.0.0.2"), TTL: 64, Length: 60, L4Len: 40}
		got := p.Eval(pkt).Verdict
		if (tc.want == "drop") != (got == ir.VerdictDrop) {
			t.Errorf("protocol %d: %v, want %s", tc.proto, got, tc.want)
		}
	}
	text, err := Print(rs)
	if err != nil || !strings.Contains(string(text), "meta l4proto != tcp meta l4proto != { udp } accept") || !strings.Contains(string(text), "meta l4proto != { icmp, udp } drop") {
		t.Errorf("prints as (%v)\n%s", err, text)
	}
}

// TestOverlappingConcatCountsOnce: a concatenation's elements may share
// packets (iptables-translate's --ports 10); the model rules the nft rule
// becomes are disjoint, so that its counter and log count a packet once,
// and match exactly the packets some element matches.
func TestOverlappingConcatCountsOnce(t *testing.T) {
	p := lower(t, "table ip f { chain in { type filter hook input priority 0;\n"+
		" tcp sport . tcp dport { 0-65535 . 10, 10 . 0-65535, 9-11 . 9-11 } counter\n } }", rules.IPv4, "INPUT")
	for sport := uint16(8); sport <= 12; sport++ {
		for dport := uint16(8); dport <= 12; dport++ {
			pkt := tcp4(dport, 20)
			pkt.SrcPort = sport
			n := 0
			p.Trace(pkt, func(*ir.Rule) { n++ })
			want := 0
			if sport == 10 || dport == 10 || 9 <= sport && sport <= 11 && 9 <= dport && dport <= 11 {
				want = 1
			}
			if n != want {
				t.Errorf("sport %d dport %d: counted %d times, want %d", sport, dport, n, want)
			}
		}
	}
}

// TestTCPOptionTest: "tcp option KIND exists" is one test, refused by
// name (nft walks the options as --tcp-option does not), its verdict
// kept; an unknown kind is an error, as nft says.
func TestTCPOptionTest(t *testing.T) {
	for rule, want := range map[string]string{
		"tcp option maxseg exists drop": "t.nft:4:3: tcp option maxseg exists (nft's walk of the options is not --tcp-option's) match is not supported",
		"tcp option 255 missing accept": "t.nft:4:3: tcp option 255 missing (nft's walk of the options is not --tcp-option's) match is not supported",
		"tcp option foobar exists drop": `t.nft:4:3: unknown tcp option "foobar"`,
		"tcp option 256 exists drop":    "t.nft:4:3: tcp option 256 exceeds valid range 0-255",
	} {
		src := "table ip t {\n chain c {\n  type filter hook input priority 0;\n  " + rule + "\n }\n}\n"
		rs, err := Parse("t.nft", []byte(src), Options{Family: rules.IPv4})
		if err == nil {
			if !strings.Contains(string(rs.Save(rules.SaveOptions{})), "-j "+strings.ToUpper(rule[strings.LastIndexByte(rule, ' ')+1:])) {
				t.Errorf("%s loses its verdict:\n%s", rule, rs.Save(rules.SaveOptions{}))
			}
			_, err = ir.Lower(rs, ir.LowerOptions{Table: "filter", Chain: "INPUT"})
		}
		if err == nil || err.Error() != want {
			t.Errorf("%s: %v, want %s", rule, err, want)
		}
	}
}

// TestPktTypeRanges: a packet type range holds every type in it, and a
// type may be a number; types the model does not have are refused at
// compile time, by name.
func TestPktTypeRanges(t *testing.T) {
	for _, tc := range []struct {
		rule string
		want []string
	}{
		{"meta pkttype host - broadcast drop", []string{"--pkt-type unicast", "--pkt-type broadcast"}},
		{"meta pkttype 1-2 drop", []string{"--pkt-type broadcast", "--pkt-type multicast"}},
		{"meta pkttype 3 drop", []string{"--pkt-type otherhost"}},
	} {
		src := "table ip t {\n chain c {\n  type filter hook input priority 0;\n  " + tc.rule + "\n }\n}\n"
		rs, err := Parse("t.nft", []byte(src), Options{Family: rules.IPv4})
		if err != nil {
			t.Errorf("%s: %v", tc.rule, err)
			continue
		}
		saved := string(rs.Save(rules.SaveOptions{}))
		if n := strings.Count(saved, "--pkt-type"); n != len(tc.want) {
			t.Errorf("%s: %d pkttype rules, want %d:\n%s", tc.rule, n, len(tc.want), saved)
		}
		for _, w := range tc.want {
			if !strings.Contains(saved, w) {
				t.Errorf("%s: no %q in\n%s", tc.rule, w, saved)
			}
		}
	}
}
