package nft

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"

	"bpfwall/rules"
)

// elem is one resolved element of a right-hand side: a value, a range
// lo-hi, a value with a prefix length or mask (lo/mask), a set reference,
// or an "a | b" combination of flags.
type elem struct {
	pos      rules.Pos
	lo, hi   string
	mask     string
	ref      string // @name
	or       []string
	quoted   bool
	hasRange bool
	hasMask  bool
	// verdict is the value of a verdict map element.
	verdict *Verdict
	// parts are the values of a concatenation "a . b".
	parts []elem
}

// rhs is a resolved right-hand side. set is true when it was written as a
// set "{ ... }" (or a variable holding one): membership, rather than the
// "any of these flags" meaning of a bare comma list.
type rhs struct {
	elems []elem
	set   bool
	// catchAll is a set literal's catch-all element "*", when the
	// resolver keeps them (resolver.keepCatchAll).
	catchAll *elem
}

// resolver expands variables and set literals.
type resolver struct {
	errs *rules.ErrorList
	// unsupported, when set, records a construct nft takes and bpfwall
	// does not compile (ruleBuilder.unsupported).
	unsupported func(pos rules.Pos, what string)
	// keepCatchAll: a set literal's catch-all element goes to
	// rhs.catchAll, for a caller that compiles it; otherwise it is
	// refused as unsupported.
	keepCatchAll bool
}

// catchAll refuses the catch-all element "*" of a set: bpfwall does not
// compile it (nft takes it).
func (rv *resolver) catchAll(el *Elem) {
	if rv.unsupported != nil {
		rv.unsupported(toPos(el.Pos), catchAllElement)
		return
	}
	rv.errorf(toPos(el.Pos), "%s is not supported", catchAllElement)
}

const catchAllElement = "catch-all set element *"

func (rv *resolver) errorf(pos rules.Pos, format string, args ...any) {
	*rv.errs = append(*rv.errs, rules.Errorf(pos, format, args...))
}

func (rv *resolver) list(l *List, e *env) (rhs, bool) {
	var out rhs
	for _, v := range l.Items {
		r, ok := rv.value(v, e, 0)
		if !ok {
			return out, false
		}
		out.elems = append(out.elems, r.elems...)
		if r.catchAll != nil {
			out.catchAll = r.catchAll
		}
		if len(l.Items) == 1 {
			out.set = r.set
		}
	}
	return out, true
}

func (rv *resolver) value(v *Value, e *env, depth int) (rhs, bool) {
	if depth > 16 {
		rv.errorf(toPos(v.Pos), "variables nested too deeply")
		return rhs{}, false
	}
	if len(v.Parts) > 1 {
		// "a . b": one element whose parts are matched by the keys of a
		// concatenation, each as a single value.
		el := elem{pos: toPos(v.Pos)}
		for _, u := range v.Parts {
			r, ok := rv.value(&Value{Pos: u.Pos, Parts: []*Unit{u}}, e, depth+1)
			if !ok {
				return rhs{}, false
			}
			if len(r.elems) != 1 || r.set || r.elems[0].parts != nil || r.elems[0].ref != "" {
				rv.errorf(toPos(u.Pos), "a part of a concatenation must be one value, range or prefix")
				return rhs{}, false
			}
			el.parts = append(el.parts, r.elems[0])
		}
		return rhs{elems: []elem{el}}, true
	}
	u := v.Parts[0]
	pos := toPos(u.Pos)
	lo := u.Lo
	// A variable or a set as the whole value expands to its elements.
	if u.Hi == nil && u.Mask == nil && u.Or == nil {
		switch {
		case lo.Var != nil:
			name := (*lo.Var)[1:]
			d, ok := e.vars[name]
			if !ok {
				rv.errorf(pos, "undefined variable $%s", name)
				return rhs{}, false
			}
			return rv.value(d, e.envs[name], depth+1)
		case lo.Set != nil:
			out := rhs{set: true}
			for _, el := range lo.Set.Elems {
				if pos, ok := elemCounter(el); ok && (el.Verdict != nil || el.Value != nil) {
					// An anonymous map declares no statements.
					rv.errorf(pos, "missing statement in map declaration: an anonymous map's elements cannot have counters")
					return rhs{}, false
				}
				if timed(el) {
					rv.errorf(toPos(el.Pos), "set element timeout is not supported")
					return rhs{}, false
				}
				if el.CatchAll && rv.keepCatchAll && depth == 0 {
					out.catchAll = &elem{pos: toPos(el.Pos), verdict: el.Verdict}
					continue
				}
				if el.CatchAll {
					rv.catchAll(el)
					continue
				}
				r, ok := rv.value(el.Key, e, depth+1)
				if !ok {
					return rhs{}, false
				}
				for i := range r.elems {
					r.elems[i].verdict = el.Verdict
					if el.Value != nil {
						// nft takes maps to data (meta mark set ip
						// saddr map { ... }); bpfwall compiles none.
						if rv.unsupported != nil {
							rv.unsupported(toPos(el.Pos), "map to data")
							return rhs{}, false
						}
						rv.errorf(toPos(el.Pos), "maps to data are not supported")
						return rhs{}, false
					}
				}
				out.elems = append(out.elems, r.elems...)
			}
			return out, true
		}
	}
	el := elem{pos: pos}
	if u.Or != nil {
		var vals []*Value
		for _, p := range append([]*Prim{lo}, u.Or...) {
			vals = append(vals, &Value{Pos: p.Pos, Parts: []*Unit{{Pos: p.Pos, Lo: p}}})
		}
		return rv.flags(el, vals, e, depth)
	}
	var ok bool
	if el.lo, el.quoted, ok = rv.atom(lo, e, depth); !ok {
		if lo.Ref != nil && u.Hi == nil && u.Mask == nil {
			return rhs{elems: []elem{{pos: pos, ref: (*lo.Ref)[1:]}}}, true
		}
		if lo.Paren != nil && u.Hi == nil && u.Mask == nil && u.Or == nil {
			return rv.flags(el, lo.Paren.Items, e, depth)
		}
		rv.errorf(pos, "unsupported value")
		return rhs{}, false
	}
	if u.Hi != nil {
		el.hasRange = true
		if el.hi, _, ok = rv.atom(u.Hi, e, depth); !ok {
			rv.errorf(pos, "bad range")
			return rhs{}, false
		}
	}
	if u.Mask != nil {
		el.hasMask = true
		if el.mask, _, ok = rv.atom(u.Mask, e, depth); !ok {
			// "syn / fin,syn" masks are lists; the caller joins them.
			rv.errorf(pos, "bad mask")
			return rhs{}, false
		}
	}
	return rhs{elems: []elem{el}}, true
}

// timed reports whether a set element has a timeout or an expiry, which
// change what the set holds over time. Counters and comments do not
// change a verdict.
func timed(el *Elem) bool {
	for _, o := range el.Options {
		if o.Key == "timeout" || o.Key == "expires" {
			return true
		}
	}
	return false
}

// flags resolves the operands of "a | b | c" into el.or.
func (rv *resolver) flags(el elem, vals []*Value, e *env, depth int) (rhs, bool) {
	for _, x := range vals {
		r, ok := rv.value(x, e, depth+1)
		if !ok {
			return rhs{}, false
		}
		for _, y := range r.elems {
			if y.hasRange || y.hasMask || y.ref != "" {
				rv.errorf(y.pos, "bad flag in | expression")
				return rhs{}, false
			}
			if y.or != nil {
				el.or = append(el.or, y.or...) // a nested "a | b"
			} else {
				el.or = append(el.or, y.lo)
			}
		}
	}
	return rhs{elems: []elem{el}}, true
}

// atom returns a literal, or the literal a variable holds.
func (rv *resolver) atom(p *Prim, e *env, depth int) (string, bool, bool) {
	switch {
	case p.Atom != nil:
		s := *p.Atom
		return unquote(s), strings.HasPrefix(s, `"`), true
	case p.Bracket != nil:
		return *p.Bracket, false, true
	case p.Var != nil && depth < 16:
		name := (*p.Var)[1:]
		d, ok := e.vars[name]
		if !ok || len(d.Parts) != 1 || d.Parts[0].Hi != nil || d.Parts[0].Mask != nil {
			return "", false, false
		}
		return rv.atom(d.Parts[0].Lo, e.envs[name], depth+1)
	}
	return "", false, false
}

// parseNum parses a decimal or 0x number of at most bits bits.
func parseNum(s string, bits int) (uint64, error) {
	return strconv.ParseUint(s, 0, bits)
}

var protoNames = map[string]uint8{
	"icmp": 1, "igmp": 2, "ipip": 4, "tcp": 6, "egp": 8, "pup": 12, "udp": 17, "idp": 22,
	"tp": 29, "dccp": 33, "ipv6": 41, "routing": 43, "fragment": 44, "rsvp": 46, "gre": 47,
	"esp": 50, "ah": 51, "icmpv6": 58, "ipv6-icmp": 58, "none": 59, "dstopts": 60, "mtp": 92,
	"encap": 98, "pim": 103, "comp": 108, "sctp": 132, "mh": 135, "udplite": 136, "raw": 255,
}

func parseProto(s string) (uint8, error) {
	if p, ok := protoNames[s]; ok {
		return p, nil
	}
	n, err := parseNum(s, 8)
	if err != nil {
		return 0, fmt.Errorf("unknown protocol %q", s)
	}
	return uint8(n), nil
}

// serviceNames are the /etc/services names nft resolves most often.
var serviceNames = map[string]uint16{
	"ftp-data": 20, "ftp": 21, "ssh": 22, "telnet": 23, "smtp": 25, "domain": 53, "bootps": 67,
	"bootpc": 68, "tftp": 69, "http": 80, "kerberos": 88, "pop3": 110, "sunrpc": 111, "auth": 113,
	"ntp": 123, "netbios-ns": 137, "netbios-dgm": 138, "netbios-ssn": 139, "imap": 143, "imap2": 143,
	"snmp": 161, "snmp-trap": 162, "bgp": 179, "ldap": 389, "https": 443, "microsoft-ds": 445,
	"isakmp": 500, "submission": 587, "ldaps": 636, "imaps": 993, "pop3s": 995, "openvpn": 1194,
	"mysql": 3306, "postgresql": 5432, "ipsec-nat-t": 4500, "dhcpv6-client": 546, "dhcpv6-server": 547,
	"syslog": 514, "rsync": 873, "sip": 5060, "http-alt": 8080, "mdns": 5353, "xmpp-client": 5222,
	"smtps": 465, "nfs": 2049, "ms-wbt-server": 3389, "rdp": 3389, "domain-s": 853,
}

func parsePort(s string) (uint16, error) {
	if p, ok := serviceNames[s]; ok {
		return p, nil
	}
	n, err := parseNum(s, 16)
	if err != nil {
		return 0, fmt.Errorf("unknown port %q", s)
	}
	return uint16(n), nil
}

var icmpTypes = map[string]uint8{
	"echo-reply": 0, "destination-unreachable": 3, "source-quench": 4, "redirect": 5,
	"echo-request": 8, "router-advertisement": 9, "router-solicitation": 10, "time-exceeded": 11,
	"parameter-problem": 12, "timestamp-request": 13, "timestamp-reply": 14, "info-request": 15,
	"info-reply": 16, "address-mask-request": 17, "address-mask-reply": 18,
}

var icmpv6Types = map[string]uint8{
	"destination-unreachable": 1, "packet-too-big": 2, "time-exceeded": 3, "parameter-problem": 4,
	"echo-request": 128, "echo-reply": 129, "mld-listener-query": 130, "mld-listener-report": 131,
	"mld-listener-done": 132, "mld-listener-reduction": 132, "nd-router-solicit": 133,
	"nd-router-advert": 134, "nd-neighbor-solicit": 135, "nd-neighbor-advert": 136,
	"nd-redirect": 137, "router-renumbering": 138, "ind-neighbor-solicit": 141,
	"ind-neighbor-advert": 142, "mld2-listener-report": 143,
}

var icmpCodes = map[string]uint8{
	"net-unreachable": 0, "host-unreachable": 1, "prot-unreachable": 2, "port-unreachable": 3,
	"frag-needed": 4, "net-prohibited": 9, "host-prohibited": 10, "admin-prohibited": 13,
}

var icmpv6Codes = map[string]uint8{
	"no-route": 0, "admin-prohibited": 1, "addr-unreachable": 3, "port-unreachable": 4,
	"policy-fail": 5, "reject-route": 6,
}

func lookupByte(names map[string]uint8, s string) (uint8, error) {
	if v, ok := names[s]; ok {
		return v, nil
	}
	n, err := parseNum(s, 8)
	if err != nil {
		return 0, fmt.Errorf("unknown value %q", s)
	}
	return uint8(n), nil
}

var tcpFlagNames = map[string]uint8{
	"fin": rules.TCPFin, "syn": rules.TCPSyn, "rst": rules.TCPRst, "psh": rules.TCPPsh,
	"ack": rules.TCPAck, "urg": rules.TCPUrg, "ecn": rules.TCPEce, "cwr": rules.TCPCwr,
}

var ctStateNames = map[string]uint16{
	"invalid": rules.CTInvalid, "established": rules.CTEstablished, "related": rules.CTRelated,
	"new": rules.CTNew, "untracked": rules.CTUntracked,
}

var pktTypeNames = map[string]uint8{
	"host": rules.PacketHost, "unicast": rules.PacketHost, "broadcast": rules.PacketBroadcast,
	"multicast": rules.PacketMulticast, "other": rules.PacketOtherHost,
}

// prefixOf reads an address, or an address with a prefix length, of the
// given family.
func prefixOf(el elem, fam rules.Family) (netip.Prefix, error) {
	a, err := netip.ParseAddr(el.lo)
	if err != nil || a.Zone() != "" {
		return netip.Prefix{}, fmt.Errorf("bad address %q", el.lo)
	}
	if a.BitLen() != fam.Bits() {
		return netip.Prefix{}, fmt.Errorf("%s is not an %s address", el.lo, fam)
	}
	bits := a.BitLen()
	if el.hasMask {
		n, err := strconv.Atoi(el.mask)
		if err != nil || n < 0 || n > a.BitLen() {
			return netip.Prefix{}, fmt.Errorf("bad prefix length %q", el.mask)
		}
		bits = n
	}
	return netip.PrefixFrom(a, bits).Masked(), nil
}
