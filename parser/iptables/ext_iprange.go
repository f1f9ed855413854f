package iptables

import (
	"strings"

	"bpfwall/rules"
)

// Match iprange, revision 1 (libxt_iprange.c).

func init() {
	registerMatch("iprange", &matchExt{
		options: []optSpec{
			{name: "src-range", arg: argOne, invert: true},
			{name: "dst-range", arg: argOne, invert: true},
		},
		new: func() matchParser { return &iprangeParser{} },
	})
}

type iprangeParser struct {
	// Addresses are parsed in finish, which knows the family.
	src, dst *opt
}

func (p *iprangeParser) parse(o *opt) error {
	if o.Name == "src-range" {
		p.src = o
	} else {
		p.dst = o
	}
	return nil
}

func (p *iprangeParser) finish(ctx *ruleCtx) (rules.Match, error) {
	if p.src == nil && p.dst == nil {
		return nil, rules.Errorf(ctx.Pos, "iprange: --src-range or --dst-range required")
	}
	m := &rules.IPRange{Located: rules.Located{Pos: ctx.Pos}}
	var err error
	if p.src != nil {
		if m.Src, err = parseAddrRange(p.src, ctx.Family); err != nil {
			return nil, err
		}
		m.SrcNeg = p.src.Neg
	}
	if p.dst != nil {
		if m.Dst, err = parseAddrRange(p.dst, ctx.Family); err != nil {
			return nil, err
		}
		m.DstNeg = p.dst.Neg
	}
	return m, nil
}

// parseAddrRange parses "from-to" or a single address. A reversed range is
// accepted, as iptables only warns that it never matches.
func parseAddrRange(o *opt, fam rules.Family) (*rules.AddrRange, error) {
	from, to, isRange := strings.Cut(o.Arg, "-")
	if !isRange {
		to = from
	}
	a, err := parseAddr(from, fam)
	if err != nil {
		return nil, o.errorf("--%s: invalid address %q", o.Name, from)
	}
	b, err := parseAddr(to, fam)
	if err != nil {
		return nil, o.errorf("--%s: invalid address %q", o.Name, to)
	}
	return &rules.AddrRange{From: a, To: b}, nil
}
