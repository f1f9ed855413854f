package iptables

import (
	"strings"

	"bpfwall/rules"
)

// Match addrtype, revision 1 (libxt_addrtype.c, kernel xt_addrtype.c).

func init() {
	registerMatch("addrtype", &matchExt{
		options: []optSpec{
			{name: "src-type", arg: argOne, invert: true},
			{name: "dst-type", arg: argOne, invert: true},
			{name: "limit-iface-in", arg: argNone},
			{name: "limit-iface-out", arg: argNone},
		},
		new: func() matchParser { return &addrtypeParser{} },
	})
}

// addrTypeNames are the route types, bit i being 1<<i, in the order
// libxt_addrtype tries them as prefixes and prints them.
var addrTypeNames = []string{
	"UNSPEC", "UNICAST", "LOCAL", "BROADCAST", "ANYCAST", "MULTICAST",
	"BLACKHOLE", "UNREACHABLE", "PROHIBIT", "THROW", "NAT", "XRESOLVE",
}

type addrtypeParser struct {
	m                rules.AddrType
	srcSeen, dstSeen bool
}

func (p *addrtypeParser) parse(o *opt) error {
	switch o.Name {
	case "src-type":
		p.srcSeen, p.m.SrcNeg = true, o.Neg
		return parseAddrTypes(o, &p.m.Src)
	case "dst-type":
		p.dstSeen, p.m.DstNeg = true, o.Neg
		return parseAddrTypes(o, &p.m.Dst)
	case "limit-iface-in":
		p.m.LimitIfaceIn = true
	case "limit-iface-out":
		p.m.LimitIfaceOut = true
	}
	if p.m.LimitIfaceIn && p.m.LimitIfaceOut {
		return rules.Errorf(o.Pos, "addrtype: --limit-iface-in and --limit-iface-out cannot be used together")
	}
	return nil
}

// parseAddrTypes parses a comma-separated list of route types, each a
// prefix of a type name in any case.
func parseAddrTypes(o *opt, mask *uint16) error {
	for _, s := range strings.Split(o.Arg, ",") {
		found := false
		for i, name := range addrTypeNames {
			if prefixOf(s, name) {
				*mask |= 1 << i
				found = true
				break
			}
		}
		if !found {
			return o.errorf("--%s: bad address type %q", o.Name, s)
		}
	}
	return nil
}

func (p *addrtypeParser) finish(ctx *ruleCtx) (rules.Match, error) {
	m := p.m
	m.Pos = ctx.Pos
	if !p.srcSeen && !p.dstSeen {
		return nil, rules.Errorf(ctx.Pos, "addrtype: --src-type or --dst-type required")
	}
	switch ctx.hook() {
	case "PREROUTING", "INPUT":
		if m.LimitIfaceOut {
			return nil, rules.Errorf(ctx.Pos, "addrtype: --limit-iface-out is not valid in the %s chain", ctx.Chain)
		}
	case "POSTROUTING", "OUTPUT":
		if m.LimitIfaceIn {
			return nil, rules.Errorf(ctx.Pos, "addrtype: --limit-iface-in is not valid in the %s chain", ctx.Chain)
		}
	}
	if ctx.Family == rules.IPv6 {
		// IPv6 routes have none of these types (xt_addrtype checkentry).
		types := m.Src | m.Dst
		switch {
		case types&rules.AddrBlackhole != 0:
			return nil, rules.Errorf(ctx.Pos, "addrtype: IPv6 has no BLACKHOLE addresses")
		case types >= rules.AddrProhibit:
			return nil, rules.Errorf(ctx.Pos, "addrtype: IPv6 has no PROHIBIT, THROW, NAT or XRESOLVE addresses")
		case types&rules.AddrBroadcast != 0:
			return nil, rules.Errorf(ctx.Pos, "addrtype: IPv6 has no BROADCAST addresses")
		}
	}
	return &m, nil
}
