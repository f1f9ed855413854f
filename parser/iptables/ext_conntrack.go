package iptables

import (
	"net/netip"
	"strconv"
	"strings"

	"bpfwall/rules"
)

// Matches conntrack, revision 3, and state, its alias (libxt_conntrack.c).

// ctOtherOptions are the conntrack options other than --ctstate, in the
// order iptables-save prints them; the parsed values are kept canonically
// in Conntrack.Other in this order.
var ctOtherOptions = []string{
	"ctproto",
	"ctorigsrc", "ctorigdst", "ctreplsrc", "ctrepldst",
	"ctorigsrcport", "ctorigdstport", "ctreplsrcport", "ctrepldstport",
	"ctstatus", "ctexpire", "ctdir",
}

func init() {
	opts := []optSpec{{name: "ctstate", arg: argOne, invert: true}}
	for _, name := range ctOtherOptions {
		opts = append(opts, optSpec{name: name, arg: argOne, invert: name != "ctdir"})
	}
	registerMatch("conntrack", &matchExt{options: opts, new: func() matchParser { return &conntrackParser{} }})
	registerMatch("state", &matchExt{
		options: []optSpec{{name: "state", arg: argOne, invert: true}},
		new:     func() matchParser { return &stateParser{} },
	})
}

// ctStateNames are the states in the order libxt_conntrack tries them as
// prefixes; ctStatePrint is the order it prints them in.
var (
	ctStateNames = []struct {
		name string
		bit  uint16
	}{
		{"INVALID", rules.CTInvalid}, {"NEW", rules.CTNew}, {"ESTABLISHED", rules.CTEstablished},
		{"RELATED", rules.CTRelated}, {"UNTRACKED", rules.CTUntracked}, {"SNAT", rules.CTSnat},
		{"DNAT", rules.CTDnat},
	}
	// stateMatchStates are the states -m state knows.
	stateMatchStates = rules.CTInvalid | rules.CTNew | rules.CTEstablished | rules.CTRelated | rules.CTUntracked
)

// parseCTStates parses a comma-separated list of states, each a prefix of
// a state name in any case, restricted to the states in allowed.
func parseCTStates(o *opt, allowed uint16) (uint16, error) {
	var mask uint16
	for _, s := range strings.Split(o.Arg, ",") {
		found := false
		for _, n := range ctStateNames {
			if n.bit&allowed != 0 && prefixOf(s, n.name) {
				mask |= n.bit
				found = true
				break
			}
		}
		if !found {
			return 0, o.errorf("--%s: bad state %q", o.Name, s)
		}
	}
	return mask, nil
}

type conntrackParser struct {
	m     rules.Conntrack
	state bool
	// other holds the options other than --ctstate by name; addresses are
	// parsed in finish, which knows the family.
	other map[string]*opt
}

func (p *conntrackParser) parse(o *opt) error {
	if o.Name == "ctstate" {
		mask, err := parseCTStates(o, ^uint16(0))
		if err != nil {
			return err
		}
		p.m.State, p.m.StateNeg, p.state = mask, o.Neg, true
		return nil
	}
	if p.other == nil {
		p.other = map[string]*opt{}
	}
	p.other[o.Name] = o
	return nil
}

func (p *conntrackParser) finish(ctx *ruleCtx) (rules.Match, error) {
	if !p.state && len(p.other) == 0 {
		return nil, rules.Errorf(ctx.Pos, "conntrack: at least one option is required")
	}
	m := p.m
	m.Pos = ctx.Pos
	for _, name := range ctOtherOptions {
		o := p.other[name]
		if o == nil {
			continue
		}
		arg, err := canonicalCTOption(o, ctx.Family)
		if err != nil {
			return nil, err
		}
		m.Other = append(m.Other, rules.Option{Name: name, Neg: o.Neg, Args: []string{arg}})
	}
	return &m, nil
}

// canonicalCTOption validates a conntrack option other than --ctstate and
// returns its argument as iptables-save prints it.
func canonicalCTOption(o *opt, fam rules.Family) (string, error) {
	switch o.Name {
	case "ctproto":
		proto, ok := parseUint(o.Arg, 255)
		if !ok {
			p, err := parseProto(o.Arg)
			if err != nil {
				return "", o.errorf("--ctproto: unknown protocol %q", o.Arg)
			}
			proto = uint64(p)
		}
		if proto == 0 {
			return "", o.errorf("--ctproto: protocol 0 is not a protocol a connection can have")
		}
		return strconv.FormatUint(proto, 10), nil
	case "ctorigsrc", "ctorigdst", "ctreplsrc", "ctrepldst":
		return canonicalHostMask(o, fam)
	case "ctorigsrcport", "ctorigdstport", "ctreplsrcport", "ctrepldstport":
		r, err := parsePortRange(o, parseServicePort)
		if err != nil {
			return "", err
		}
		if r.Lo == r.Hi {
			return strconv.Itoa(int(r.Lo)), nil
		}
		return strconv.Itoa(int(r.Lo)) + ":" + strconv.Itoa(int(r.Hi)), nil
	case "ctstatus":
		return canonicalCTStatus(o)
	case "ctexpire":
		lo, hi, err := parseUintRange(o, 1<<32-1)
		if err != nil {
			return "", err
		}
		if lo == hi {
			return strconv.FormatUint(lo, 10), nil
		}
		return strconv.FormatUint(lo, 10) + ":" + strconv.FormatUint(hi, 10), nil
	case "ctdir":
		for _, d := range []string{"ORIGINAL", "REPLY"} {
			if strings.EqualFold(o.Arg, d) {
				return d, nil
			}
		}
		return "", o.errorf("--ctdir: bad direction %q (ORIGINAL or REPLY)", o.Arg)
	}
	return "", o.errorf("--%s: unknown conntrack option", o.Name)
}

// ctStatusNames are the connection status bits (IPS_*) in print order.
var ctStatusNames = []struct {
	name string
	bit  uint
}{{"EXPECTED", 1 << 0}, {"SEEN_REPLY", 1 << 1}, {"ASSURED", 1 << 2}, {"CONFIRMED", 1 << 3}}

func canonicalCTStatus(o *opt) (string, error) {
	var mask uint
	for _, s := range strings.Split(o.Arg, ",") {
		if prefixOf(s, "NONE") {
			continue
		}
		found := false
		for _, n := range ctStatusNames {
			if prefixOf(s, n.name) {
				mask |= n.bit
				found = true
				break
			}
		}
		if !found {
			return "", o.errorf("--ctstatus: bad status %q", s)
		}
	}
	var names []string
	for _, n := range ctStatusNames {
		if mask&n.bit != 0 {
			names = append(names, n.name)
		}
	}
	if len(names) == 0 {
		return "NONE", nil
	}
	return strings.Join(names, ","), nil
}

// canonicalHostMask parses "address[/mask]", the mask a prefix length or an
// address, and prints it as libxt_conntrack saves it: the address as given
// (not masked), no suffix for a full mask, "/len" otherwise. libxtables
// turns a mask that is not a prefix into a full mask, and so does this.
func canonicalHostMask(o *opt, fam rules.Family) (string, error) {
	addrPart, maskPart, hasMask := strings.Cut(o.Arg, "/")
	addr, ok := parseHost(addrPart, fam)
	if !ok {
		return "", o.errorf("--%s: invalid address %q (host names are not resolved)", o.Name, addrPart)
	}
	bits := fam.Bits()
	n := uint64(bits)
	if hasMask {
		if n, ok = parseUint(maskPart, uint64(bits)); !ok {
			mask, ok := parseHost(maskPart, fam)
			if !ok {
				return "", o.errorf("--%s: invalid mask %q", o.Name, maskPart)
			}
			n = uint64(bits)
			if b := (rules.Net{Mask: mask}).Bits(); b >= 0 {
				n = uint64(b)
			}
		}
	}
	if int(n) == bits {
		return addr.String(), nil
	}
	return addr.String() + "/" + strconv.FormatUint(n, 10), nil
}

// parseHost parses a numeric address as getaddrinfo(3) does: IPv4 in
// inet_aton(3) syntax, where "10.1" is 10.0.0.1 and parts may be written in
// hexadecimal or octal.
func parseHost(s string, fam rules.Family) (netip.Addr, bool) {
	if fam == rules.IPv6 {
		a, err := netip.ParseAddr(s)
		return a, err == nil && a.Is6() && a.Zone() == ""
	}
	parts := strings.Split(s, ".")
	if len(parts) > 4 {
		return netip.Addr{}, false
	}
	var v uint64
	for i, p := range parts {
		// Every part is a byte but the last, which fills the rest.
		width := 8
		if i == len(parts)-1 {
			width = 8 * (5 - len(parts))
		}
		x, ok := parseUint(p, 1<<width-1)
		if !ok {
			return netip.Addr{}, false
		}
		v = v<<width | x
	}
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)}), true
}

type stateParser struct{ m *rules.State }

func (p *stateParser) parse(o *opt) error {
	mask, err := parseCTStates(o, stateMatchStates)
	if err != nil {
		return err
	}
	p.m = &rules.State{State: mask, Neg: o.Neg}
	return nil
}

func (p *stateParser) finish(ctx *ruleCtx) (rules.Match, error) {
	if p.m == nil {
		return nil, rules.Errorf(ctx.Pos, "state: --state required")
	}
	m := *p.m
	m.Pos = ctx.Pos
	return &m, nil
}
