package ir_test

import (
	"testing"

	"github.com/gopacket/gopacket/layers"

	"bpfwall/model"
	"bpfwall/rules"
)

// TestEvalForwardTTL: in FORWARD the TTL match sees the TTL after
// ip_forward decremented it (found by internal/difftest against netfilter).
func TestEvalForwardTTL(t *testing.T) {
	p := lowerText(t, rules.IPv4, "FORWARD", `*filter
:INPUT ACCEPT [0:0]
:FORWARD ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
-A FORWARD -m ttl --ttl-lt 10 -j DROP
-A FORWARD -m ttl --ttl-eq 20 -j DROP
-A FORWARD -m ttl --ttl-gt 254 -j DROP
-A FORWARD -m ttl --ttl-eq 255 -j DROP
-A FORWARD -p udp -m ttl ! --ttl-eq 255 -j REJECT
COMMIT
`)
	withTTL := func(ttl uint8, proto layers.IPProtocol) []byte {
		ip := ip4("10.0.0.1", "198.51.100.1", proto)
		ip.TTL = ttl
		return build(t, ether(layers.EthernetTypeIPv4), ip, tcp(1, 2))
	}
	runEval(t, p, []evalCase{
		{"ttl 10 is 9 in FORWARD", withTTL(10, layers.IPProtocolTCP), model.Meta{}, "DROP r0"},
		{"ttl 11 is 10 in FORWARD", withTTL(11, layers.IPProtocolTCP), model.Meta{}, "ACCEPT policy"},
		{"ttl 21 is 20 in FORWARD", withTTL(21, layers.IPProtocolTCP), model.Meta{}, "DROP r1"},
		{"ttl 20 is 19 in FORWARD", withTTL(20, layers.IPProtocolTCP), model.Meta{}, "ACCEPT policy"},
		{"ttl 255 is 254 in FORWARD", withTTL(255, layers.IPProtocolTCP), model.Meta{}, "ACCEPT policy"},
		{"ttl != 255 always holds in FORWARD", withTTL(255, layers.IPProtocolUDP), model.Meta{}, "REJECT r4"},
	})
	pkt6 := func(hl uint8) []byte {
		ip := ip6("2001:db8::1", "2001:db8::2", layers.IPProtocolTCP)
		ip.HopLimit = hl
		return build(t, ether(layers.EthernetTypeIPv6), ip, tcp(1, 2))
	}
	p6 := lowerText(t, rules.IPv6, "FORWARD", `*filter
:INPUT ACCEPT [0:0]
:FORWARD ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
-A FORWARD -m hl --hl-eq 64 -j DROP
COMMIT
`)
	runEval(t, p6, []evalCase{
		{"hop limit 65 is 64 in FORWARD", pkt6(65), model.Meta{}, "DROP r0"},
		{"hop limit 64 is 63 in FORWARD", pkt6(64), model.Meta{}, "ACCEPT policy"},
	})
}
