package iptables

import (
	"strings"

	"bpfwall/rules"
)

// Match dscp (libxt_dscp.c): --dscp VALUE (0-63) or --dscp-class CLASS,
// once, either inverted.

func init() {
	registerMatch("dscp", &matchExt{
		options: []optSpec{
			{name: "dscp", arg: argOne, invert: true},
			{name: "dscp-class", arg: argOne, invert: true},
		},
		new: func() matchParser { return &dscpParser{} },
	})
}

type dscpParser struct{ m *rules.DSCP }

func (p *dscpParser) parse(o *opt) error {
	if p.m != nil {
		return rules.Errorf(o.Pos, "dscp: only one of --dscp or --dscp-class allowed")
	}
	var v uint8
	if o.Name == "dscp" {
		n, ok := parseUint(o.Arg, 63)
		if !ok {
			return o.errorf("dscp: bad value for option \"--dscp\", or out of range (0-63)")
		}
		v = uint8(n)
	} else {
		var ok bool
		if v, ok = dscpClass(o.Arg); !ok {
			return o.errorf("Invalid DSCP value `%s'", o.Arg)
		}
	}
	p.m = &rules.DSCP{Value: v, Neg: o.Neg}
	return nil
}

// dscpClass is class_to_dscp: the first class, in libxt_dscp's order,
// whose name begins the argument, ignoring case ("af111" is AF11).
func dscpClass(arg string) (uint8, bool) {
	for _, c := range dscpClassOrder {
		if len(arg) >= len(c) && strings.EqualFold(arg[:len(c)], c) {
			return rules.DSCPClasses[c], true
		}
	}
	return 0, false
}

// dscpClassOrder is the order of libxt_dscp's table of classes.
var dscpClassOrder = []string{
	"CS0", "CS1", "CS2", "CS3", "CS4", "CS5", "CS6", "CS7", "BE",
	"AF11", "AF12", "AF13", "AF21", "AF22", "AF23",
	"AF31", "AF32", "AF33", "AF41", "AF42", "AF43", "EF",
}

func (p *dscpParser) finish(ctx *ruleCtx) (rules.Match, error) {
	if p.m == nil {
		return nil, rules.Errorf(ctx.Pos, "dscp: --dscp or --dscp-class required")
	}
	m := *p.m
	m.Pos = ctx.Pos
	return &m, nil
}
