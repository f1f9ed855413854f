package iptables

import (
	"strconv"
	"strings"

	"bpfwall/rules"
)

// Match set, revision 4 (libxt_set.c, kernel xt_set.c).

const (
	maxSetNameLen = 31 // IPSET_MAXNAMELEN - 1
	maxSetDims    = 6  // IPSET_DIM_MAX
)

func init() {
	registerMatch("set", &matchExt{
		options: []optSpec{
			// Two arguments, the set and its directions; the core hands
			// over every following non-option token.
			{name: "match-set", arg: argGreedy, invert: true},
			{name: "set", arg: argGreedy, invert: true}, // deprecated synonym
			{name: "return-nomatch", arg: argNone},
			{name: "update-counters", arg: argNone, invert: true},
			{name: "update-subcounters", arg: argNone, invert: true},
			{name: "packets-eq", arg: argOne, invert: true},
			{name: "packets-lt", arg: argOne},
			{name: "packets-gt", arg: argOne},
			{name: "bytes-eq", arg: argOne, invert: true},
			{name: "bytes-lt", arg: argOne},
			{name: "bytes-gt", arg: argOne},
		},
		new: func() matchParser { return &setParser{} },
	})
}

type setParser struct {
	m        rules.Set
	matchSet *opt
	// Options kept in Set.Other, by the slot iptables-save prints them in.
	returnNomatch, skipCounters, skipSubcounters bool
	packets, bytes                               *rules.Option
}

func (p *setParser) parse(o *opt) error {
	switch o.Name {
	case "match-set", "set":
		if p.matchSet != nil {
			return rules.Errorf(o.Pos, "--match-set can be given only once")
		}
		p.matchSet = o
		if len(o.Args) != 2 {
			return rules.Errorf(o.Pos, "--%s requires two arguments, the set name and its directions (src,dst,...)", o.Name)
		}
		name, dirs := o.Args[0], o.Args[1]
		if len(name) > maxSetNameLen {
			return o.errorf("--%s: set name %q too long (%d characters at most)", o.Name, name, maxSetNameLen)
		}
		p.m.SetName, p.m.Neg = name, o.Neg
		for _, d := range strings.Split(dirs, ",") {
			if len(p.m.Dirs) == maxSetDims {
				return o.errorf("--%s: more than %d directions", o.Name, maxSetDims)
			}
			// libxt_set compares only the first three characters.
			switch {
			case strings.HasPrefix(d, "src"):
				p.m.Dirs = append(p.m.Dirs, rules.SetSrc)
			case strings.HasPrefix(d, "dst"):
				p.m.Dirs = append(p.m.Dirs, rules.SetDst)
			default:
				return o.errorf("--%s: bad direction %q (a comma-separated list of src and dst)", o.Name, d)
			}
		}
	case "return-nomatch":
		p.returnNomatch = true
	case "update-counters":
		p.skipCounters = o.Neg // without "!" it is the default
	case "update-subcounters":
		p.skipSubcounters = o.Neg
	default: // packets-eq ... bytes-gt
		slot := &p.packets
		if strings.HasPrefix(o.Name, "bytes") {
			slot = &p.bytes
		}
		if *slot != nil {
			kind, _, _ := strings.Cut(o.Name, "-")
			return rules.Errorf(o.Pos, "only one of --%s-eq, --%s-lt or --%s-gt allowed", kind, kind, kind)
		}
		v, ok := parseUint(o.Arg, 1<<64-1)
		if !ok {
			return o.errorf("--%s: invalid counter value %q", o.Name, o.Arg)
		}
		*slot = &rules.Option{Name: o.Name, Neg: o.Neg, Args: []string{strconv.FormatUint(v, 10)}}
	}
	return nil
}

func (p *setParser) finish(ctx *ruleCtx) (rules.Match, error) {
	if p.matchSet == nil {
		return nil, rules.Errorf(ctx.Pos, "set: --match-set required")
	}
	if _, ok := ctx.Sets[p.m.SetName]; !ok {
		return nil, p.matchSet.errorf("set %q does not exist", p.m.SetName)
	}
	m := p.m
	m.Pos = ctx.Pos
	if p.returnNomatch {
		m.Other = append(m.Other, rules.Option{Name: "return-nomatch"})
	}
	if p.skipCounters {
		m.Other = append(m.Other, rules.Option{Name: "update-counters", Neg: true})
	}
	if p.skipSubcounters {
		m.Other = append(m.Other, rules.Option{Name: "update-subcounters", Neg: true})
	}
	for _, c := range []*rules.Option{p.packets, p.bytes} {
		if c != nil {
			m.Other = append(m.Other, *c)
		}
	}
	return &m, nil
}
