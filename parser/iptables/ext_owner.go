package iptables

import (
	"math"
	"strings"

	"bpfwall/rules"
)

// Match owner (libxt_owner.c, revision 1): [!] --uid-owner USER|ID[-ID],
// [!] --gid-owner GROUP|ID[-ID], --suppl-groups after --gid-owner, and
// [!] --socket-exists. A name is looked up as libxt_owner does with
// getpwnam and getgrnam, before it is read as a number.

func init() {
	registerMatch("owner", &matchExt{
		options: []optSpec{
			{name: "uid-owner", arg: argOne, invert: true},
			{name: "gid-owner", arg: argOne, invert: true},
			{name: "socket-exists", arg: argNone, invert: true},
			{name: "suppl-groups", arg: argNone, invert: true},
		},
		new: func() matchParser { return &ownerParser{m: &rules.Owner{}} },
	})
}

type ownerParser struct{ m *rules.Owner }

func (p *ownerParser) parse(o *opt) error {
	switch o.Name {
	case "uid-owner":
		r, err := ownerID(o, false)
		if err != nil {
			return err
		}
		p.m.UID, p.m.UIDNeg = &r, o.Neg
	case "gid-owner":
		r, err := ownerID(o, true)
		if err != nil {
			return err
		}
		p.m.GID, p.m.GIDNeg = &r, o.Neg
	case "socket-exists":
		p.m.Socket, p.m.SocketNeg = true, o.Neg
	case "suppl-groups":
		if o.Neg {
			return rules.Errorf(o.Pos, "owner: --suppl-groups cannot be inverted")
		}
		if p.m.GID == nil {
			return rules.Errorf(o.Pos, "owner: --suppl-groups needs --gid-owner before it")
		}
		p.m.SupplGroups = true
	}
	return nil
}

// ownerID reads a user or group: a name lookup finds, or an ID or a range
// of IDs (owner_parse_range: "-" or ":" between them, each up to
// 4294967294, since -1 is no ID).
func ownerID(o *opt, group bool) (rules.IDRange, error) {
	if id, ok := rules.LookupID(o.Arg, group); ok {
		return rules.IDRange{Min: id, Max: id}, nil
	}
	bad := func() (rules.IDRange, error) {
		return rules.IDRange{}, o.errorf("owner: Bad value for \"--%s\" option: %q", o.Name, o.Arg)
	}
	lo, hi, isRange := strings.Cut(o.Arg, "-")
	if !isRange {
		lo, hi, isRange = strings.Cut(o.Arg, ":")
	}
	first, ok := parseUint(lo, math.MaxUint32-1)
	if !ok {
		return bad()
	}
	last := first
	if isRange {
		if last, ok = parseUint(hi, math.MaxUint32-1); !ok {
			return bad()
		}
	}
	return rules.IDRange{Min: uint32(first), Max: uint32(last)}, nil
}

func (p *ownerParser) finish(ctx *ruleCtx) (rules.Match, error) {
	m := *p.m
	if m.UID == nil && m.GID == nil && !m.Socket {
		return nil, rules.Errorf(ctx.Pos, "owner: one of --uid-owner, --gid-owner or --socket-exists required")
	}
	// xt_owner's hooks; a user chain is checked where it is reached.
	if h := ctx.hook(); h != "" && h != "OUTPUT" && h != "POSTROUTING" {
		return nil, rules.Errorf(ctx.Pos, "owner: match is only valid in the OUTPUT and POSTROUTING chains, not %s", h)
	}
	m.Pos = ctx.Pos
	return &m, nil
}
