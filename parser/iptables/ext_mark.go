package iptables

import (
	"strings"

	"bpfwall/rules"
)

// Match mark, revision 1 (libxt_mark.c): (skb mark & mask) == value.

func init() {
	registerMatch("mark", &matchExt{
		options: []optSpec{{name: "mark", arg: argOne, invert: true}},
		new:     func() matchParser { return &markParser{} },
	})
}

type markParser struct{ m *rules.Mark }

func (p *markParser) parse(o *opt) error {
	value, mask, hasMask := strings.Cut(o.Arg, "/")
	v, ok := parseUint(value, 1<<32-1)
	if !ok {
		return o.errorf("--mark: invalid mark %q", o.Arg)
	}
	m := uint64(1<<32 - 1)
	if hasMask {
		if m, ok = parseUint(mask, 1<<32-1); !ok {
			return o.errorf("--mark: invalid mask %q", mask)
		}
	}
	p.m = &rules.Mark{Value: uint32(v), Mask: uint32(m), Neg: o.Neg}
	return nil
}

func (p *markParser) finish(ctx *ruleCtx) (rules.Match, error) {
	if p.m == nil {
		return nil, rules.Errorf(ctx.Pos, "mark: --mark required")
	}
	m := *p.m
	m.Pos = ctx.Pos
	return &m, nil
}
