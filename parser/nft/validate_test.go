package nft

import (
	"fmt"
	"os/exec"
	"strings"
	"testing"

	"bpfwall/internal/testenv"
	"bpfwall/rules"
)

// validateCases pair rules nft refuses with ones like them it takes, for
// each check of validate.go. want is a part of bpfwall's error, "" for a
// rule nft takes. Rules nft takes only with a kernel module or a newer nft
// than CI installs (queue, vxlan, gretap, statements that set a field from
// an expression of it) are left out: nftables' own tests in the nft-t
// corpus have them (TestNftT).
var validateCases = []struct {
	family, chain, rule, want string
}{
	// conntrack keys, directions and values
	{"ip", filterOut, "ct zone 65535", ""},
	{"ip", filterOut, "ct zone 65536", "exceeds valid range 0-65535"},
	{"ip", filterOut, "ct direction reply", ""},
	{"ip", filterOut, "ct direction xxx", "Could not parse conntrack direction"},
	{"ip", filterOut, "ct status snat", ""},
	{"ip", filterOut, "ct status xxx", "Could not parse conntrack status"},
	{"ip", filterOut, "ct original zone 1", ""},
	{"ip", filterOut, "ct original mark 42", "takes no direction"},
	{"ip", filterOut, "ct mark original", "Could not parse packet mark"},
	{"ip", filterOut, "ct helper \"123456789012345\"", ""},
	{"ip", filterOut, "ct helper \"1234567890123456\"", "String exceeds maximum length of 16"},
	{"ip", filterOut, "ct helper \"\"", "Empty string"},
	{"ip", filterOut, "ct expiration 1m-1h", ""},
	{"ip", filterOut, "ct expiration 1d-1h", "zero or negative size"},
	{"ip", filterOut, "ct label 127", ""},
	{"ip", filterOut, "ct label 128", "exceeds valid range"},
	{"ip", filterOut, "meta nftrace set 1", ""},
	{"ip", filterOut, "nftrace set 1", ""},
	{"ip", filterOut, "ct invalid", "unknown conntrack key"},
	{"ip", filterOut, "ct original ip saddr 1.2.3.4", ""},
	{"ip", filterOut, "ct ip saddr 1.2.3.4", "needs a direction"},
	{"inet", filterOut, "meta nfproto ipv4 ct original ip saddr 1.2.3.4", ""},
	{"inet", filterOut, "meta nfproto ipv6 ct original ip saddr 1.2.3.4", "conflicting protocols"},
	{"ip", filterOut, "ct event set new,destroy", ""},
	{"ip", filterOut, "ct mark set 0x11", ""},
	{"ip", filterOut, "ct mark set {0x11333, 0x11}", "cannot be a set"},
	// protocols a rule names
	{"ip", filterOut, "ip6 saddr ::1", "conflicting protocols"},
	{"ip6", filterOut, "meta nfproto ipv6", "only useful in the inet family"},
	{"inet", filterOut, "ip saddr 1.2.3.4 ip6 daddr ::1", "conflicting protocols"},
	{"inet", filterOut, "ip saddr 1.2.3.4 meta nfproto ipv6 ip6 daddr ::1", ""},
	{"inet", filterOut, "ip6 saddr ::1 meta nfproto ipv4 reject with icmp host-unreachable", ""},
	{"inet", filterOut, "meta nfproto ipv6 reject with icmpv6 no-route", ""},
	{"inet", filterOut, "meta nfproto ipv6 reject with icmp host-unreachable", "conflicting protocols"},
	{"ip", filterOut, "ether type vlan vlan id 1", ""},
	{"ip", filterOut, "ether type ip vlan id 1", "conflicting protocols"},
	{"ip", filterOut, "vlan id 4095", ""},
	{"ip", filterOut, "vlan id 4096", "exceeds valid range"},
	// sets
	{"ip", filterOut + "; } ; add set ip t s { type ipv4_addr", "ip saddr @s", ""},
	{"ip", filterOut, "ip saddr @missing", "does not exist"},
	{"inet", filterOut + "; } ; add set inet t s { type ipv4_addr", "ip6 saddr @s", "datatype mismatch"},
	// statements
	{"ip", natPost, "tcp dport 22 masquerade", ""},
	{"ip", natPost, "tcp dport 22 masquerade accept", "Statement after terminal statement"},
	{"ip", natPost, "tcp dport 22 redirect to :993 random", ""},
	{"ip", natPost, "tcp dport 22 redirect random to :993", "flags come after to"},
	{"ip", natPost, "redirect to :1234", "transport protocol"},
	{"inet", natPost, "tcp dport 81 snat ip to 192.168.3.2", ""},
	{"inet", natPost, "snat to 192.168.3.2", "disambiguate"},
	{"ip", natPost, "snat to dead::beef", "Address family"},
	{"inet", natPost, "ip6 daddr dead::beef dnat ip to 10.1.2.3", "conflicting protocols"},
	// "to" may be left out, as OpenWrt's fw4 does, but not after a family
	{"ip", natPost, "tcp dport 22 dnat 10.0.0.2:22", ""},
	{"ip", natPost, "snat 10.1.1.1-10.1.1.5", ""},
	{"ip", natPost, "dnat 10.0.0.2:22", "transport protocol mapping"},
	{"inet", natPost, "meta nfproto ipv4 tcp dport 22 dnat 10.0.0.2", ""},
	{"inet", natPost, "dnat ip 10.0.0.2", "expected to"},
	{"ip", mangle, "meta l4proto 6 tproxy to 192.0.2.1:50080", ""},
	{"ip", mangle, "tproxy to 192.0.2.1:50080", "requires transport protocol match"},
	{"inet", mangle, "meta l4proto 6 tproxy to 192.0.2.1", "Family has to be specified"},
	{"ip", filterOut, "queue num 65536", "exceeds valid range"},
	{"ip", filterOut, "queue num oif", "takes a number"},
	{"ip", filterOut, "log level alert", ""},
	{"ip", filterOut, "log level alert group 2", "mutually exclusive"},
	{"ip", filterOut, "log level audit", ""},
	{"ip", filterOut, "log level audit prefix \"foo\"", "no further options"},
	{"ip", filterOut, "limit rate 1 mbytes / second", ""},
	{"ip", filterOut, "limit rate 1 gbytes / second", "Wrong rate format"},
	{"ip", filterOut, "tcp option sack left 1", ""},
	{"ip", filterOut, "tcp option sack window 1", "has no field window"},
	{"ip", filterOut, "tcp option foobar", "unknown option"},
	{"ip", filterOut, "tcp option 256 exists", "exceeds valid range 0-255"},
	{"ip", filterOut, "meta day \"Saturday\"", ""},
	{"ip", filterOut, "meta day 7", "exceeds valid range 0-6"},
	{"ip", filterOut, "meta hour \"23:59\"", ""},
	{"ip", filterOut, "meta hour \"24:00\"", "wrong time format"},
	{"ip", filterOut, "meta time \"2019-06-21 17:00:00\"", ""},
	{"ip", filterOut, "meta time \"meh\"", "Cannot parse date"},
	{"ip", filterOut, "ip dscp cs1", ""},
	{"ip", filterOut, "ip dscp 64", "exceeds valid range 0-63"},
	{"ip", filterOut, "vxlan vni 10", "needs a udp dport"},
	{"ip", filterOut, "udp dport 4789 vxlan ip saddr set 1.2.3.4", "cannot be set"},
	{"ip", filterOut, "meta ibrname \"br0\"", "only in bridge tables"},
	{"ip", filterOut + "; } ; add counter ip t c1 { ", "counter name \"c1\"", ""},
	{"ip", filterOut + "; } ; add counter ip t c1 { ", "counter name c1 accept", ""},
	{"ip", filterOut + "; } ; add counter ip t c1 { ", "counter name \"c2\"", "does not exist"},
	{"ip", filterOut + "; } ; add quota ip t q1 { 25 mbytes ", "quota name \"q1\"", ""},
	{"ip", filterOut + "; } ; add quota ip t q1 { 25 mbytes ", "quota name \"q2\"", "does not exist"},
	{"ip", filterOut, "ct event set new or related", ""},
	{"ip", filterOut, "ct event set new or foobar", "Could not parse conntrack event bits"},
	{"ip", filterOut, "ip dscp set ip dscp & 0x4f", "exceeds valid range 0-63"},
	{"ip", filterOut, "tcp flags & (fin | syn) == syn", ""},
	{"ip", filterOut, "tcp flags & (fin | syn) ! syn", "cannot combine negation"},
	{"ip", filterOut, "fib daddr . mark oif lo", ""},
	{"ip", filterOut, "fib mark oif lo", "need either saddr or daddr"},
	{"ip", filterOut, "fib saddr . daddr oif lo", "mutually exclusive"},
	{"ip", filterOut, "ipsec in reqid 1", ""},
	{"ip", filterOut, "ipsec i reqid 1", "expected in or out"},
	{"ip", filterOut, "ipsec in spnum 3 reqid 1", ""},
	{"ip", filterOut, "ipsec in spnum 256 reqid 1", "value too large"},
	{"ip", filterOut, "ipsec out spnum 7", "expecting ip or ip6 or spi or reqid"},
	{"ip", filterOut, "ipsec out spi 1", ""},
	{"ip", filterOut, "filter-input ip saddr 1.2.3.4", "unexpected filter-input"},
	{"ip", filterOut, "osf ttl skip name \"Linux\"", ""},
	{"ip", filterOut, "osf ttl nottl name \"Linux\"", "invalid ttl option"},
	{"ip", filterOut, "gre ether saddr 62:87:4d:d6:19:05", "no Ethernet header"},
	{"ip", filterOut, "last used foo", "wrong time format"},
	// the link layer's protocol as the context of netdev rules
	{"netdev", ingressLo, "meta protocol ip reject with icmp host-unreachable", ""},
	{"netdev", ingressLo, "meta protocol ip6 reject with icmp host-unreachable", "conflicting protocols specified: ip vs ip6"},
	{"netdev", ingressLo, "meta protocol ip6 ip protocol icmp", "conflicting protocols specified: ip6 vs. ip"},
	{"netdev", ingressLo, "ether type ip6 ip6 nexthdr tcp", ""},
	// fields that only some ICMP types have
	{"ip", filterOut, "icmp type echo-reply icmp id 5", ""},
	{"ip", filterOut, "icmp type 2 icmp id 5", "rule has 2, need 8"},
	{"ip", filterOut, "icmp type { 2, 8 } icmp id 5", ""},
	{"ip", filterOut, "icmp type != 2 icmp mtu 4", ""},
	{"ip", filterOut, "icmp mtu 5 icmp type 2", ""},
	{"ip", filterOut, "icmp code != 1 icmp type 2 icmp mtu 5", "rule has 2, need 3"},
	{"ip6", filterOut, "icmpv6 type 2 icmpv6 mtu 1280", ""},
	{"ip6", filterOut, "icmpv6 type 1 icmpv6 id 5", "rule has 1, need 128"},
	// the data of a NAT statement's map
	{"ip", natPost, "snat ip to ip saddr map { 10.141.11.4 : 192.168.2.3 }", ""},
	{"ip", natPost, "snat ip to ip saddr map { 10.141.11.4 : 192.168.2.3 . 80 }", "transport protocol mapping"},
	{"ip", natPost, "meta l4proto 17 snat ip to ip saddr map { 10.141.11.4 : 192.168.2.3 . 80 }", ""},
	{"ip", natPost, "snat ip to ip saddr . tcp dport map { 10.141.11.4 . 20 : 192.168.2.3 . 80 }", ""},
	{"ip", natPost, "snat ip to ip saddr . th dport map { 10.141.11.4 . 20 : 192.168.2.3 . 80 }", "transport protocol mapping"},
	{"inet", natPost, "snat ip to ip daddr map { 10.0.0.1 : 1.2.3.4 }", ""},
	{"inet", natPost, "snat ip6 to ip6 daddr map { ::1 : 1.2.3.4 }", "Address family for hostname not supported"},
	// catch-all elements, which check takes and compile refuses
	{"ip", filterOut, "ip saddr vmap { 1.1.1.1 : drop, * : accept }", ""},
	{"ip", filterOut + "; } ; add set ip t s { type ipv4_addr; elements = { 192.168.3.5, * } ", "ip saddr @s drop", ""},
	// range and prefix elements need an interval set
	{"ip", filterOut + "; } ; add set ip t s { type ipv4_addr; flags interval; elements = { 10.0.0.0/8, 11.2.0.1-11.2.0.9 } ", "ip saddr @s drop", ""},
	{"ip", filterOut + "; } ; add set ip t s { type ipv4_addr; elements = { 10.0.0.0/8 } ", "ip saddr @s drop", "You must add 'flags interval' to your set declaration if you want to add prefix elements"},
	{"ip", filterOut + "; } ; add map ip t m { type inet_service : verdict; elements = { 1-9 : drop } ", "tcp dport vmap @m", "You must add 'flags interval' to your map declaration if you want to add range elements"},
	{"ip", filterOut + "; } ; add set ip t s { type ipv4_addr; flags interval; elements = { 10.0.0.0/8, 10.2.0.1-10.2.0.9 } ", "ip saddr @s drop", "conflicting intervals specified"},
	{"ip", filterOut + "; } ; add set ip t s { type ipv4_addr; flags interval; auto-merge; elements = { 10.0.0.0/8, 10.2.0.1-10.2.0.9 } ", "ip saddr @s drop", ""},
	{"ip", filterOut + "; } ; add set ip t s { type inet_service; flags interval; elements = { 20-30, 25 } ", "tcp dport @s drop", "conflicting intervals specified"},
	// conntrack addresses in a concatenation
	{"ip", filterOut, "ct original ip saddr . meta mark { 1.1.1.1 . 0x00000014 }", ""},
	{"ip", filterOut, "ct original saddr . meta mark { 1.1.1.1 . 0x00000014 }", "specify either ip or ip6"},
	{"ip", filterOut, "meta mark set ct original daddr map { 1.1.1.1 : 0x00000011 }", "specify either ip or ip6"},
	{"ip", filterOut, "meta mark set ct original ip daddr map { 1.1.1.1 : 0x00000011 }", ""},
	{"ip", filterOut, "meta mark set ct reply saddr . meta mark map { 1.1.1.1 . 0x14 : 0x1e }", "specify either ip or ip6"},
}

const (
	filterOut = "type filter hook output priority 0"
	natPost   = "type nat hook postrouting priority 0"
	ingressLo = "type filter hook ingress device lo priority 0"
	mangle    = "type filter hook prerouting priority -150"
)

// TestValidate runs each case through Parse, which check runs, and, where
// nft is installed, through nft -c -f in a namespace of the test's own:
// both must take or refuse it.
func TestValidate(t *testing.T) {
	withNft := exec.Command("nft", "--version").Run() == nil
	if !withNft && testenv.InCI() {
		t.Fatal("nft is not installed")
	}
	for _, c := range validateCases {
		script := fmt.Sprintf("add table %s t\nadd chain %s t c { %s; }\nadd rule %s t c %s\n", c.family, c.family, c.chain, c.family, c.rule)
		fam := rules.IPv4
		if c.family == "ip6" {
			fam = rules.IPv6
		}
		_, err := Parse("t.nft", []byte(script), Options{Family: fam})
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s (%s): %v", c.rule, c.family, err)
		case c.want != "" && err == nil:
			t.Errorf("%s (%s): accepted, want an error with %q", c.rule, c.family, c.want)
		case c.want != "" && !strings.Contains(err.Error(), c.want):
			t.Errorf("%s (%s): error %v, want one with %q", c.rule, c.family, err, c.want)
		}
		if !withNft {
			continue
		}
		testenv.InFreshNetns(t, func() {
			cmd := exec.Command("nft", "-c", "-f", "-")
			cmd.Stdin = strings.NewReader(script)
			out, err := cmd.CombinedOutput()
			if (err == nil) != (c.want == "") {
				t.Errorf("%s (%s): nft -c says %v %s; the case says %q", c.rule, c.family, err, out, c.want)
			}
		})
	}
}
