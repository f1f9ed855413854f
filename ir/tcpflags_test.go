package ir_test

import (
	"testing"

	"github.com/gopacket/gopacket/layers"

	"bpfwall/model"
	"bpfwall/rules"
)

// TestEvalTCPFlagsZeroMask: --tcp-flags NONE with flags to compare never
// matches, since tcp_mt tests (flags & 0) == comp (found by
// internal/difftest against netfilter).
func TestEvalTCPFlagsZeroMask(t *testing.T) {
	p := lowerText(t, rules.IPv4, "FORWARD", `*filter
:INPUT ACCEPT [0:0]
:FORWARD ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
-A FORWARD -p tcp -m tcp --dport 1 --tcp-flags NONE ACK -j DROP
-A FORWARD -p tcp -m tcp --dport 1 ! --tcp-flags NONE ACK -j REJECT
-A FORWARD -p tcp -m tcp --dport 2 --tcp-flags NONE NONE -j DROP
-A FORWARD -p tcp -m tcp --dport 3 ! --tcp-flags NONE NONE -j DROP
COMMIT
`)
	withFlags := func(dport uint16, ack bool) []byte {
		seg := tcp(1000, dport)
		seg.SYN, seg.ACK = false, ack
		return build(t, ether(layers.EthernetTypeIPv4), ip4("10.0.0.1", "198.51.100.1", layers.IPProtocolTCP), seg)
	}
	runEval(t, p, []evalCase{
		{"zero mask, ACK to compare, ACK set", withFlags(1, true), model.Meta{}, "REJECT r1"},
		{"zero mask, ACK to compare, no flags", withFlags(1, false), model.Meta{}, "REJECT r1"},
		{"zero mask, nothing to compare", withFlags(2, true), model.Meta{}, "DROP r2"},
		{"negated zero mask, nothing to compare", withFlags(3, true), model.Meta{}, "ACCEPT policy"},
	})
}
