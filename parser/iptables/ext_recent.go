package iptables

import (
	"net/netip"
	"strings"

	"bpfwall/rules"
)

// Match recent (libxt_recent.c revision 1, kernel xt_recent.c): a table of
// recently seen addresses. Refused here is what libxt_recent refuses and
// what recent_mt_check refuses when the rule is loaded.

// recentMaxNstamps is XT_RECENT_MAX_NSTAMPS: --hitcount is below it.
const recentMaxNstamps = 65536

func init() {
	registerMatch("recent", &matchExt{
		options: []optSpec{
			{name: "set", arg: argNone, invert: true},
			{name: "rcheck", arg: argNone, invert: true},
			{name: "update", arg: argNone, invert: true},
			{name: "remove", arg: argNone, invert: true},
			{name: "seconds", arg: argOne},
			{name: "reap", arg: argNone},
			{name: "hitcount", arg: argOne},
			{name: "rttl", arg: argNone},
			{name: "name", arg: argOne},
			{name: "rsource", arg: argNone},
			{name: "rdest", arg: argNone},
			{name: "mask", arg: argOne},
		},
		new: func() matchParser { return &recentParser{m: rules.Recent{Table: "DEFAULT"}} },
	})
}

type recentParser struct {
	m       rules.Recent
	command *opt // the first of --set, --rcheck, --update, --remove
	seen    map[string]*opt
}

func (p *recentParser) parse(o *opt) error {
	if p.seen == nil {
		p.seen = make(map[string]*opt)
	}
	if _, dup := p.seen[o.Name]; dup && o.Name != "rsource" && o.Name != "rdest" {
		return rules.Errorf(o.Pos, "recent: --%s given twice", o.Name)
	}
	p.seen[o.Name] = o
	switch o.Name {
	case "set", "rcheck", "update", "remove":
		if p.command != nil {
			return rules.Errorf(o.Pos, "recent: --%s cannot be used with --%s: --set, --rcheck, --update and --remove are mutually exclusive", o.Name, p.command.Name)
		}
		p.command = o
		p.m.Command = map[string]rules.RecentCommand{
			"set": rules.RecentSet, "rcheck": rules.RecentCheck,
			"update": rules.RecentUpdate, "remove": rules.RecentRemove,
		}[o.Name]
		p.m.Invert = o.Neg
	case "seconds", "hitcount":
		v, ok := parseUint(o.Arg, 0xFFFFFFFF)
		if !ok || (o.Name == "seconds" && v == 0) {
			return o.errorf("--%s: bad value %q", o.Name, o.Arg)
		}
		if o.Name == "seconds" {
			p.m.Seconds = uint32(v)
		} else {
			p.m.HitCount = uint32(v)
		}
	case "reap":
		p.m.Reap = true
	case "rttl":
		p.m.TTL = true
	case "name":
		p.m.Table = o.Arg
	case "rsource":
		p.m.Dest = false
	case "rdest":
		p.m.Dest = true
	case "mask":
		fam := rules.IPv4
		if strings.Contains(o.Arg, ":") {
			fam = rules.IPv6
		}
		a, ok := parseHost(o.Arg, fam)
		if !ok {
			return o.errorf("--mask: invalid netmask %q (host names are not resolved)", o.Arg)
		}
		p.m.Mask = a
	}
	return nil
}

func (p *recentParser) finish(ctx *ruleCtx) (rules.Match, error) {
	m := p.m
	m.Pos = ctx.Pos
	at := func(name string) rules.Pos {
		if o := p.seen[name]; o != nil {
			return o.Pos
		}
		return ctx.Pos
	}
	if p.command == nil {
		return nil, rules.Errorf(ctx.Pos, "recent: you must specify one of `--set', `--rcheck' `--update' or `--remove'")
	}
	if m.Reap && m.Seconds == 0 {
		return nil, rules.Errorf(at("reap"), "recent: --reap needs --seconds")
	}
	if m.TTL && (m.Command == rules.RecentSet || m.Command == rules.RecentRemove) {
		return nil, rules.Errorf(at("rttl"), "recent: --rttl cannot be used with --%s", m.Command)
	}
	// recent_mt_check's refusals.
	// It tests the values (a --hitcount 0 is none) and the --reap flag.
	if m.Command == rules.RecentSet || m.Command == rules.RecentRemove {
		for _, o := range []struct {
			name string
			set  bool
		}{{"seconds", m.Seconds != 0}, {"hitcount", m.HitCount != 0}, {"reap", m.Reap}} {
			if o.set {
				return nil, rules.Errorf(at(o.name), "recent: --%s cannot be used with --%s (the kernel refuses it)", o.name, m.Command)
			}
		}
	}
	if m.HitCount >= recentMaxNstamps {
		return nil, rules.Errorf(at("hitcount"), "recent: hitcount (%d) is larger than allowed maximum (%d) (the kernel refuses it)", m.HitCount, recentMaxNstamps-1)
	}
	switch n := m.Table; {
	case n == "" || n == "." || n == "..":
		return nil, rules.Errorf(at("name"), "recent: invalid --name %q", n)
	case strings.Contains(n, "/"):
		return nil, rules.Errorf(at("name"), "recent: --name %q contains a '/'", n)
	case len(n) >= rules.RecentNameLen:
		return nil, rules.Errorf(at("name"), "recent: --name is longer than %d characters", rules.RecentNameLen-1)
	}
	full := netip.AddrFrom4([4]byte{255, 255, 255, 255})
	if ctx.Family == rules.IPv6 {
		full = netip.AddrFrom16([16]byte{0: 255, 1: 255, 2: 255, 3: 255, 4: 255, 5: 255, 6: 255, 7: 255, 8: 255, 9: 255, 10: 255, 11: 255, 12: 255, 13: 255, 14: 255, 15: 255})
	}
	switch {
	case !m.Mask.IsValid():
		m.Mask = full
	case m.Mask.Is4() != full.Is4():
		return nil, rules.Errorf(at("mask"), "recent: --mask %s is not an %s netmask", m.Mask, ctx.Family)
	}
	return &m, nil
}
