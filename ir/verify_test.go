package ir_test

import (
	"net/netip"
	"strings"
	"testing"

	"bpfwall/ir"
	"bpfwall/rules"
)

func TestVerify(t *testing.T) {
	// controlFlowRules lowers to chains INPUT, EMPTY, A, B; A's r9 goes
	// to B.
	fresh := func(t *testing.T) *ir.Program { return lowerText(t, rules.IPv4, "INPUT", controlFlowRules) }
	addMatch := func(id int, m ir.Match) func(p *ir.Program) {
		return func(p *ir.Program) { p.Rules[id].Matches = append(p.Rules[id].Matches, m) }
	}
	// r0 of controlFlowRules has no matches: give it a protocol and a
	// guard for the transport matches.
	proto, guard := ir.Proto{Proto: 6}, ir.L4Header{Len: 4}
	for _, tc := range []struct {
		name   string
		mutate func(p *ir.Program)
		want   string
	}{
		{"entry chain without policy", func(p *ir.Program) { p.Chains[0].Policy = rules.PolicyNone }, "entry chain INPUT has policy -"},
		{"user chain with policy", func(p *ir.Program) { p.Chains[2].Policy = rules.PolicyAccept }, "user chain A has policy ACCEPT"},
		{"jump to the entry chain", func(p *ir.Program) { p.Rules[1].Action = ir.Jump{Chain: 0} }, "r1: jump to chain 0"},
		{"goto past the last chain", func(p *ir.Program) { p.Rules[3].Action = ir.Goto{Chain: 4} }, "r3: jump to chain 4"},
		{"loop", func(p *ir.Program) { p.Rules[11].Action = ir.Jump{Chain: 2} }, "jump to A makes a loop"},
		{"duplicate rule ID", func(p *ir.Program) { p.Rules[1].ID = 0 }, "is not Program.Rules[0]"},
		{"rule missing from Rules", func(p *ir.Program) { p.Rules = p.Rules[:len(p.Rules)-1] }, "rule r13 of chain B is not Program.Rules[13]"},
		{"rule in two chains", func(p *ir.Program) { p.Chains[1].Rules = append(p.Chains[1].Rules, p.Rules[0]) }, "r0 is in more than one place"},
		{"wrong chain index", func(p *ir.Program) { p.Rules[8].Chain = 3 }, "r8: Chain is 3, but the rule is in chain 2"},
		{"unknown action", func(p *ir.Program) { p.Rules[0].Action = nil }, "r0: unknown action <nil>"},
		{"reject without a reason", func(p *ir.Program) { p.Rules[0].Action = ir.Reject{} }, "REJECT without --reject-with"},
		{"unmasked address", addMatch(0, ir.Addr{Dir: ir.Src, Addr: netip.MustParseAddr("10.0.0.1"), Mask: netip.MustParseAddr("255.0.0.0")}), "has bits outside mask"},
		{"address of the other family", addMatch(0, ir.Addr{Dir: ir.Dst, Addr: netip.MustParseAddr("2001:db8::"), Mask: netip.MustParseAddr("ffff::")}), "is not an ipv4 address"},
		{"address without direction", addMatch(0, ir.AddrRange{From: netip.MustParseAddr("10.0.0.1"), To: netip.MustParseAddr("10.0.0.2")}), "bad direction"},
		{"empty address range", addMatch(0, ir.AddrRange{Dir: ir.Src, From: netip.MustParseAddr("10.0.0.2"), To: netip.MustParseAddr("10.0.0.1")}), "empty address range"},
		{"unmasked set prefix", addMatch(0, ir.AddrSet{Dir: ir.Src, Set: "s", Entries: []ir.SetEntry{{Prefix: netip.MustParsePrefix("10.0.0.1/8")}}}), "prefix 10.0.0.1/8 is not masked"},
		{"protocol 0", addMatch(0, ir.Proto{}), "protocol 0"},
		{"ports without a guard", addMatch(0, ir.Ports{Dir: ir.Dst, Ranges: []rules.PortRange{{Lo: 1, Hi: 2}}}), "ports match without an L4Header"},
		{"guard without a protocol", addMatch(0, guard), "L4Header without a protocol match"},
		{"guard after a negated protocol", func(p *ir.Program) { addMatch(0, ir.Proto{Proto: 6, Neg: true})(p); addMatch(0, guard)(p) }, "L4Header without a protocol match"},
		{"ports without ranges", func(p *ir.Program) {
			addMatch(0, proto)(p)
			addMatch(0, guard)(p)
			addMatch(0, ir.Ports{Dir: ir.Dst})(p)
		}, "ports match without ranges"},
		{"empty port range", func(p *ir.Program) {
			addMatch(0, proto)(p)
			addMatch(0, guard)(p)
			addMatch(0, ir.Ports{Dir: ir.SrcOrDst, Ranges: []rules.PortRange{{Lo: 2, Hi: 1}}})(p)
		}, "empty port range 2:1"},
		{"tcp option after a short guard", func(p *ir.Program) {
			addMatch(0, proto)(p)
			addMatch(0, guard)(p)
			addMatch(0, ir.TCPOption{Kind: 2})(p)
		}, "tcp option match without an L4Header of at least 20 bytes"},
		{"interface name too long", addMatch(0, ir.Iface{Dir: ir.IfaceIn, Name: "a-very-long-interface"}), "bad interface name"},
		{"no conntrack states", addMatch(0, ir.CTState{}), "bad conntrack states"},
		{"unknown ttl comparison", addMatch(0, ir.TTL{}), "ttl match with comparison 0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := fresh(t)
			tc.mutate(p)
			err := ir.Verify(p)
			if err == nil {
				t.Fatalf("no error, want %q", tc.want)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q does not mention %q", err, tc.want)
			}
		})
	}
}
