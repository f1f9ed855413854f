package iptables

import "bpfwall/rules"

// Target REJECT (libipt_REJECT.c, libip6t_REJECT.c, kernel ipt_REJECT.c
// and ip6t_REJECT.c).

func init() {
	registerTarget("REJECT", &targetExt{
		options: []optSpec{{name: "reject-with", arg: argOne}},
		new:     func() targetParser { return &rejectParser{} },
	})
}

// rejectName is a --reject-with type: its canonical name and its alias.
type rejectName struct{ name, alias string }

// rejectNames are the types per family in the order iptables tries them;
// the first one that the argument is a prefix of (ignoring case) wins.
var rejectNames = map[rules.Family][]rejectName{
	rules.IPv4: {
		{"icmp-net-unreachable", "net-unreach"},
		{"icmp-host-unreachable", "host-unreach"},
		{"icmp-proto-unreachable", "proto-unreach"},
		{"icmp-port-unreachable", "port-unreach"},
		{"icmp-net-prohibited", "net-prohib"},
		{"icmp-host-prohibited", "host-prohib"},
		{"tcp-reset", "tcp-rst"},
		{"icmp-admin-prohibited", "admin-prohib"},
	},
	rules.IPv6: {
		{"icmp6-no-route", "no-route"},
		{"icmp6-adm-prohibited", "adm-prohibited"},
		{"icmp6-addr-unreachable", "addr-unreach"},
		{"icmp6-port-unreachable", "port-unreach"},
		{"tcp-reset", "tcp-reset"},
		{"icmp6-policy-fail", "policy-fail"},
		{"icmp6-reject-route", "reject-route"},
	},
}

// defaultReject is what REJECT sends without --reject-with.
var defaultReject = map[rules.Family]string{
	rules.IPv4: "icmp-port-unreachable",
	rules.IPv6: "icmp6-port-unreachable",
}

type rejectParser struct {
	// with is parsed in finish, which knows the family.
	with *opt
}

func (p *rejectParser) parse(o *opt) error {
	p.with = o
	return nil
}

func (p *rejectParser) finish(ctx *ruleCtx) (rules.Target, error) {
	t := &rules.Reject{Located: rules.Located{Pos: ctx.Pos}, With: defaultReject[ctx.Family]}
	if p.with != nil {
		t.With = ""
		for _, n := range rejectNames[ctx.Family] {
			if prefixOf(p.with.Arg, n.name) || prefixOf(p.with.Arg, n.alias) {
				t.With = n.name
				break
			}
		}
		if t.With == "" {
			return nil, p.with.errorf("--reject-with: unknown reject type %q", p.with.Arg)
		}
	}
	// The kernel's checks: a TCP reset needs a TCP packet, and REJECT only
	// exists in the filter table's INPUT, FORWARD and OUTPUT hooks.
	if t.With == "tcp-reset" && (ctx.Proto != 6 || ctx.ProtoNeg) {
		return nil, p.with.errorf("--reject-with tcp-reset needs -p tcp")
	}
	if ctx.Table != "filter" {
		return nil, rules.Errorf(ctx.Pos, "REJECT is only valid in the filter table, not %s", ctx.Table)
	}
	return t, nil
}
