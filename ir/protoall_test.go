package ir_test

import (
	"net/netip"
	"testing"

	"bpfwall/ir"
	"bpfwall/model"
	"bpfwall/parser/iptables"
	"bpfwall/rules"
)

// TestIPv6ExplicitProtoAll: in ip6tables "-p all" makes the rule walk the
// extension headers (IP6T_F_PROTO) and drop a packet where that fails; a
// rule without -p does not look at them.
func TestIPv6ExplicitProtoAll(t *testing.T) {
	bad := &model.Packet{Family: rules.IPv6, Src: netip.MustParseAddr("2001:db8::1"), Dst: netip.MustParseAddr("2001:db8::2"), BadExtHeaders: true, Length: 80}
	good := *bad
	good.BadExtHeaders, good.Proto = false, 6
	tests := []struct {
		rule      string
		pkt       *model.Packet
		want      ir.Verdict
		byRule    bool
		isHotdrop bool
	}{
		{"-A INPUT -p all -j ACCEPT", bad, ir.VerdictDrop, true, true},
		{"-A INPUT -j ACCEPT", bad, ir.VerdictAccept, true, false},
		{"-A INPUT -p all -j ACCEPT", &good, ir.VerdictAccept, true, false},
	}
	for _, tc := range tests {
		rs, err := iptables.Parse("t", []byte("*filter\n:INPUT DROP [0:0]\n"+tc.rule+"\nCOMMIT\n"), iptables.Options{Family: rules.IPv6, ForceFamily: true})
		if err != nil {
			t.Fatal(err)
		}
		p, err := ir.Lower(rs, ir.LowerOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if err := ir.Verify(p); err != nil {
			t.Fatal(err)
		}
		res := p.Eval(tc.pkt)
		if res.Verdict != tc.want || (res.Rule != nil) != tc.byRule || res.Hotdrop != tc.isHotdrop {
			t.Errorf("%s, bad headers %v: %v", tc.rule, tc.pkt.BadExtHeaders, res)
		}
	}
}
