package iptables

import "bpfwall/rules"

// Match length (libxt_length.c).

func init() {
	registerMatch("length", &matchExt{
		options: []optSpec{{name: "length", arg: argOne, invert: true}},
		new:     func() matchParser { return &lengthParser{} },
	})
}

type lengthParser struct{ m *rules.Length }

func (p *lengthParser) parse(o *opt) error {
	lo, hi, err := parseUintRange(o, 65535)
	if err != nil {
		return err
	}
	p.m = &rules.Length{Min: uint16(lo), Max: uint16(hi), Neg: o.Neg}
	return nil
}

func (p *lengthParser) finish(ctx *ruleCtx) (rules.Match, error) {
	if p.m == nil {
		return nil, rules.Errorf(ctx.Pos, "length: --length required")
	}
	m := *p.m
	m.Pos = ctx.Pos
	return &m, nil
}
