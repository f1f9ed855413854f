package nft

import (
	"strings"
	"testing"

	"bpfwall/rules"
)

// TestPrint prints rules with the constructs the corpus has few of and
// checks the rule's text, and that the text parses back to a model that
// prints the same and means the same.
func TestPrint(t *testing.T) {
	for _, tc := range []struct {
		name, rule string
		fam        rules.Family
		want       string
	}{
		{"ports", "tcp sport 1-5 tcp dport 22 accept", rules.IPv4, "meta l4proto tcp tcp sport 1-5 tcp dport 22 accept"},
		// nft would merge "sport != 1 dport != 2" into NOT(sport 1 AND
		// dport 2); the second goes as a range to stay apart.
		{"negated ports", "tcp sport != 1-1 tcp dport != 2 drop", rules.IPv4, "meta l4proto tcp tcp sport != 1 tcp dport != 2-2 drop"},
		{"port set", "udp dport { 53, 67-68 } accept", rules.IPv6, "meta l4proto udp udp dport { 53, 67-68 } accept"},
		{"flags", "tcp flags & (syn | ack) == syn drop", rules.IPv4, "meta l4proto tcp tcp flags & (syn | ack) == syn drop"},
		{"flags never equal", "tcp flags syn,urg / syn,ecn drop", rules.IPv4, "meta l4proto tcp tcp flags syn,urg / syn,ecn drop"},
		{"address set", "ip saddr { 10.0.0.0/8, 192.0.2.1 } drop", rules.IPv4, "ip saddr { 10.0.0.0/8, 192.0.2.1 } drop"},
		{"address range", "ip6 daddr != 2001:db8::1-2001:db8::9 drop", rules.IPv6, "ip6 daddr != 2001:db8::1-2001:db8::9 drop"},
		{"ct state", "ct state established,related accept", rules.IPv4, "ct state { established, related } accept"},
		{"ct state negated", "ct state != new drop", rules.IPv4, "ct state != new drop"},
		{"ct status", "ct status snat,dnat accept", rules.IPv4, "ct status snat,dnat accept"},
		{"ct status negated", "ct status ! dnat drop", rules.IPv4, "ct state { established, related, new } ct status ! dnat drop"},
		{"masked addresses", "ip saddr & 0.0.0.255 == 0.0.0.1 ip saddr & 255.0.0.255 != 10.0.0.2 accept", rules.IPv4,
			"ip saddr & 0.0.0.255 == 0.0.0.1 ip saddr & 255.0.0.255 != 10.0.0.2 accept"},
		{"interfaces", `iifname "a*" iifname != { "a1", "a2" } oif != "lo" accept`, rules.IPv4, `iifname "a*" oif != "lo" iifname != { "a1", "a2" } accept`},
		{"icmp", "icmp type echo-request icmp code 0 accept", rules.IPv4, "meta l4proto icmp icmp type 8 icmp code 0 accept"},
		{"interfaces", `iifname "eth*" oifname != "lo" accept`, rules.IPv4, `iifname "eth*" oifname != "lo" accept`},
		{"mark", "meta mark & 0xff == 0x1 accept", rules.IPv4, "meta mark & 0xff == 0x1 accept"},
		{"ttl", "ip ttl 2-200 accept", rules.IPv4, "ip ttl > 1 ip ttl < 201 accept"},
		{"hoplimit", "ip6 hoplimit != 255 accept", rules.IPv6, "ip6 hoplimit != 255 accept"},
		{"length", "ip length 100-200 drop", rules.IPv4, "ip length 100-200 drop"},
		{"ether", "ether saddr 00:11:22:33:44:55 drop", rules.IPv4, "ether saddr 00:11:22:33:44:55 drop"},
		{"pkttype", "meta pkttype broadcast drop", rules.IPv4, "meta pkttype broadcast drop"},
		{"skuid", "meta skuid != 1000 meta skgid 5-7 drop", rules.IPv4, "meta skuid != 1000 meta skgid 5-7 drop"},
		{"skuid by name", "meta skuid root accept", rules.IPv6, "meta skuid 0 accept"},
		{"dscp", "ip dscp != af11 drop", rules.IPv4, "ip dscp != 0x0a drop"},
		{"dscp6", "ip6 dscp cs1 drop", rules.IPv6, "ip6 dscp 0x08 drop"},
		{"comment", `tcp dport 22 accept comment "ssh"`, rules.IPv4, `meta l4proto tcp tcp dport 22 accept comment "ssh"`},
		{"reject", "reject with icmp type host-prohibited", rules.IPv4, "reject with icmp type host-prohibited"},
		{"reject tcp", "tcp dport 25 reject with tcp reset", rules.IPv4, "meta l4proto tcp tcp dport 25 reject with tcp reset"},
		{"reject v6", "reject with icmpv6 type admin-prohibited", rules.IPv6, "reject with icmpv6 type admin-prohibited"},
		{"log", `log prefix "in: " level info flags tcp sequence,options flags skuid`, rules.IPv4,
			`log prefix "in: " level info flags tcp sequence,options flags skuid`},
		{"log all", `tcp dport 22 log flags all drop`, rules.IPv4, "meta l4proto tcp tcp dport 22 log flags all drop"},
		{"limit", "limit rate over 10/second burst 3 packets drop", rules.IPv4, "limit rate over 10/second burst 3 packets drop"},
		{"tproxy", "meta l4proto tcp tproxy ip to 127.0.0.1:8080 accept", rules.IPv4, "meta l4proto tcp tproxy ip to 127.0.0.1:8080 accept"},
		{"iif", `iif "lo" oif != "lo" accept`, rules.IPv4, `iif "lo" oif != "lo" accept`},
		{"concatenation", "ip saddr . tcp dport { 10.0.0.1 . 22, 10.0.0.0/24 . 80-81 } accept", rules.IPv4, "meta l4proto tcp ip saddr 10.0.0.0/24 tcp dport 80-81 accept"},
		{"negated concatenation", "ip saddr . tcp dport != { 10.0.0.1 . 22 } accept", rules.IPv4, "meta l4proto tcp ip saddr 10.0.0.1 tcp dport != 22 accept"},
		{"concatenated vmap", `iifname . ip6 daddr vmap { "eth0" . 2001:db8::1 : drop, "eth1" . 2001:db8::1 : accept }`, rules.IPv6, `ip6 daddr 2001:db8::1 iifname "eth1" accept`},
		{"vmap", "tcp dport vmap { 22 : accept, 23 : drop }", rules.IPv4, "meta l4proto tcp tcp dport 23 drop"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fam := "ip"
			if tc.fam == rules.IPv6 {
				fam = "ip6"
			}
			src := "table " + fam + " f {\n chain c {\n  type filter hook forward priority 0;\n  " + tc.rule + "\n }\n}\n"
			rs, err := Parse("t.nft", []byte(src), Options{Family: tc.fam})
			if err != nil {
				t.Fatalf("parse: %v", err)
			}
			text, err := Print(rs)
			if err != nil {
				t.Fatalf("print: %v", err)
			}
			if !strings.Contains(string(text), "\t\t"+tc.want+"\n") {
				t.Errorf("printed\n%s\nwant the rule %q", text, tc.want)
			}
			roundTrip(t, tc.name, rs, text)
		})
	}
}

// TestPrintErrors: what the model holds but nft text cannot say is an
// error with the rule's position.
func TestPrintErrors(t *testing.T) {
	src := "table ip f {\n chain c {\n  type filter hook forward priority 0;\n  ip saddr . tcp dport { 10.0.0.1 . 22 } accept\n }\n}\n"
	rs, err := Parse("t.nft", []byte(src), Options{Family: rules.IPv4})
	if err != nil {
		t.Fatalf("parse: %v", err)
	}
	rs.Tables[0].Chains[1].Rules = append(rs.Tables[0].Chains[1].Rules, &rules.Rule{Pos: rules.Pos{File: "x", Line: 9, Col: 1}, Target: &rules.Accept{}})
	_, err = Print(rs)
	if err == nil || !strings.Contains(err.Error(), "x:9:1: rule read from iptables") {
		t.Errorf("print: %v, want the iptables rule refused at x:9:1", err)
	}
}
