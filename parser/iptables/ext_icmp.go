package iptables

import (
	"strings"

	"bpfwall/rules"
)

// Matches icmp (libipt_icmp.c, IPv4) and icmp6 (libip6t_icmp6.c, IPv6);
// the type names are those of libxt_icmp.h.

func init() {
	registerMatch("icmp", &matchExt{
		options: []optSpec{{name: "icmp-type", arg: argOne, invert: true}},
		family:  onlyIPv4,
		new:     func() matchParser { return &icmpParser{} },
	})
	registerMatch("icmp6", &matchExt{
		options: []optSpec{{name: "icmpv6-type", arg: argOne, invert: true}},
		family:  onlyIPv6,
		new:     func() matchParser { return &icmpParser{v6: true} },
	})
}

// icmpName is a type name with the codes it stands for.
type icmpName struct {
	name             string
	typ              uint8
	codeMin, codeMax uint8
}

var icmpNames = []icmpName{
	{"any", 0xff, 0, 0xff},
	{"echo-reply", 0, 0, 0xff},
	{"pong", 0, 0, 0xff},
	{"destination-unreachable", 3, 0, 0xff},
	{"network-unreachable", 3, 0, 0},
	{"host-unreachable", 3, 1, 1},
	{"protocol-unreachable", 3, 2, 2},
	{"port-unreachable", 3, 3, 3},
	{"fragmentation-needed", 3, 4, 4},
	{"source-route-failed", 3, 5, 5},
	{"network-unknown", 3, 6, 6},
	{"host-unknown", 3, 7, 7},
	{"network-prohibited", 3, 9, 9},
	{"host-prohibited", 3, 10, 10},
	{"TOS-network-unreachable", 3, 11, 11},
	{"TOS-host-unreachable", 3, 12, 12},
	{"communication-prohibited", 3, 13, 13},
	{"host-precedence-violation", 3, 14, 14},
	{"precedence-cutoff", 3, 15, 15},
	{"source-quench", 4, 0, 0xff},
	{"redirect", 5, 0, 0xff},
	{"network-redirect", 5, 0, 0},
	{"host-redirect", 5, 1, 1},
	{"TOS-network-redirect", 5, 2, 2},
	{"TOS-host-redirect", 5, 3, 3},
	{"echo-request", 8, 0, 0xff},
	{"ping", 8, 0, 0xff},
	{"router-advertisement", 9, 0, 0xff},
	{"router-solicitation", 10, 0, 0xff},
	{"time-exceeded", 11, 0, 0xff},
	{"ttl-exceeded", 11, 0, 0xff},
	{"ttl-zero-during-transit", 11, 0, 0},
	{"ttl-zero-during-reassembly", 11, 1, 1},
	{"parameter-problem", 12, 0, 0xff},
	{"ip-header-bad", 12, 0, 0},
	{"required-option-missing", 12, 1, 1},
	{"timestamp-request", 13, 0, 0xff},
	{"timestamp-reply", 14, 0, 0xff},
	{"address-mask-request", 17, 0, 0xff},
	{"address-mask-reply", 18, 0, 0xff},
}

var icmpv6Names = []icmpName{
	{"destination-unreachable", 1, 0, 0xff},
	{"no-route", 1, 0, 0},
	{"communication-prohibited", 1, 1, 1},
	{"beyond-scope", 1, 2, 2},
	{"address-unreachable", 1, 3, 3},
	{"port-unreachable", 1, 4, 4},
	{"failed-policy", 1, 5, 5},
	{"reject-route", 1, 6, 6},
	{"packet-too-big", 2, 0, 0xff},
	{"time-exceeded", 3, 0, 0xff},
	{"ttl-exceeded", 3, 0, 0xff},
	{"ttl-zero-during-transit", 3, 0, 0},
	{"ttl-zero-during-reassembly", 3, 1, 1},
	{"parameter-problem", 4, 0, 0xff},
	{"bad-header", 4, 0, 0},
	{"unknown-header-type", 4, 1, 1},
	{"unknown-option", 4, 2, 2},
	{"echo-request", 128, 0, 0xff},
	{"ping", 128, 0, 0xff},
	{"echo-reply", 129, 0, 0xff},
	{"pong", 129, 0, 0xff},
	{"mld-listener-query", 130, 0, 0xff},
	{"mld-listener-report", 131, 0, 0xff},
	{"mld-listener-done", 132, 0, 0xff},
	{"mld-listener-reduction", 132, 0, 0xff},
	{"router-solicitation", 133, 0, 0xff},
	{"router-advertisement", 134, 0, 0xff},
	{"neighbour-solicitation", 135, 0, 0xff},
	{"neighbor-solicitation", 135, 0, 0xff},
	{"neighbour-advertisement", 136, 0, 0xff},
	{"neighbor-advertisement", 136, 0, 0xff},
	{"redirect", 137, 0, 0xff},
}

type icmpParser struct {
	v6 bool
	m  *rules.ICMP
}

func (p *icmpParser) parse(o *opt) error {
	names := icmpNames
	if p.v6 {
		names = icmpv6Names
	}
	m, err := parseICMPType(o, names)
	if err != nil {
		return err
	}
	m.V6, m.Neg = p.v6, o.Neg
	p.m = m
	return nil
}

func (p *icmpParser) finish(ctx *ruleCtx) (rules.Match, error) {
	name, opt, proto := "icmp", "icmp-type", uint8(1)
	if p.v6 {
		name, opt, proto = "icmp6", "icmpv6-type", 58
	}
	if p.m == nil {
		return nil, rules.Errorf(ctx.Pos, "%s: --%s required", name, opt)
	}
	if err := ctx.needProto(name, proto); err != nil {
		return nil, err
	}
	m := *p.m
	m.Pos = ctx.Pos
	return &m, nil
}

// parseICMPType parses a type name (a unique prefix of one, in any case),
// or "type[/code]" in numbers, where code may be a range "min:max". As in
// libxt_icmp.h a type may be written as a range too, but only of one type.
func parseICMPType(o *opt, names []icmpName) (*rules.ICMP, error) {
	var found *icmpName
	for i := range names {
		if !prefixOf(o.Arg, names[i].name) {
			continue
		}
		if found != nil {
			return nil, o.errorf("--%s: ambiguous type %q: %s or %s", o.Name, o.Arg, found.name, names[i].name)
		}
		found = &names[i]
	}
	if found != nil {
		return &rules.ICMP{Type: found.typ, CodeMin: found.codeMin, CodeMax: found.codeMax}, nil
	}
	typ, code, hasCode := strings.Cut(o.Arg, "/")
	tlo, thi, ok := parseByteRange(typ)
	if !ok {
		return nil, o.errorf("--%s: unknown type %q", o.Name, o.Arg)
	}
	if tlo != thi {
		return nil, o.errorf("--%s: type ranges are not supported", o.Name)
	}
	m := &rules.ICMP{Type: tlo, CodeMin: 0, CodeMax: 0xff}
	if hasCode {
		if m.CodeMin, m.CodeMax, ok = parseByteRange(code); !ok {
			return nil, o.errorf("--%s: invalid code %q", o.Name, code)
		}
	}
	return m, nil
}

// parseByteRange parses "n" or "lo:hi", numbers 0-255.
func parseByteRange(s string) (lo, hi uint8, ok bool) {
	l, h, isRange := strings.Cut(s, ":")
	a, ok := parseUint(l, 255)
	if !ok {
		return 0, 0, false
	}
	if !isRange {
		return uint8(a), uint8(a), true
	}
	b, ok := parseUint(h, 255)
	return uint8(a), uint8(b), ok
}
