package iptables

import "bpfwall/rules"

// Matches ttl (libipt_ttl.c, IPv4) and hl (libip6t_hl.c, IPv6): one
// comparison of the TTL or hop limit, "! --ttl-eq" meaning not equal.

func init() {
	registerMatch("ttl", &matchExt{
		options: []optSpec{
			{name: "ttl-eq", arg: argOne, invert: true},
			{name: "ttl-lt", arg: argOne},
			{name: "ttl-gt", arg: argOne},
		},
		family: onlyIPv4,
		new:    func() matchParser { return &ttlParser{ext: "ttl"} },
	})
	registerMatch("hl", &matchExt{
		options: []optSpec{
			{name: "hl-eq", arg: argOne, invert: true},
			{name: "hl-lt", arg: argOne},
			{name: "hl-gt", arg: argOne},
		},
		family: onlyIPv6,
		new:    func() matchParser { return &ttlParser{ext: "hl"} },
	})
}

type ttlParser struct {
	ext   string // "ttl" or "hl"
	seen  bool
	op    rules.CompareOp
	value uint8
}

func (p *ttlParser) parse(o *opt) error {
	if p.seen {
		return rules.Errorf(o.Pos, "%s: only one of --%[1]s-eq, --%[1]s-lt or --%[1]s-gt allowed", p.ext)
	}
	p.seen = true
	v, ok := parseUint(o.Arg, 255)
	if !ok {
		return o.errorf("--%s: invalid value %q (0-255)", o.Name, o.Arg)
	}
	p.value = uint8(v)
	switch o.Name[len(o.Name)-2:] {
	case "eq":
		p.op = rules.OpEq
		if o.Neg {
			p.op = rules.OpNe
		}
	case "lt":
		p.op = rules.OpLt
	case "gt":
		p.op = rules.OpGt
	}
	return nil
}

func (p *ttlParser) finish(ctx *ruleCtx) (rules.Match, error) {
	if !p.seen {
		return nil, rules.Errorf(ctx.Pos, "%s: one of --%[1]s-eq, --%[1]s-lt or --%[1]s-gt required", p.ext)
	}
	loc := rules.Located{Pos: ctx.Pos}
	if p.ext == "hl" {
		return &rules.HL{Located: loc, Op: p.op, Value: p.value}, nil
	}
	return &rules.TTL{Located: loc, Op: p.op, Value: p.value}, nil
}
