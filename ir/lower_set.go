package ir

import (
	"cmp"
	"net/netip"
	"slices"
	"strconv"

	"bpfwall/rules"
)

func init() {
	lowers(func(l *lowerer, ms []Match, r *rules.Rule, m *rules.Set, nft bool) []Match { return l.set(ms, m) })
}

// set lowers "-m set --match-set NAME src|dst" over a hash:ip or hash:net
// set into an AddrSet; every other kind of set, and every option that makes
// the result depend on more than the set's entries, is an error.
func (l *lowerer) set(ms []Match, m *rules.Set) []Match {
	s := l.sets[m.SetName]
	if s == nil {
		l.errorf(m.Pos, "set %q is not defined", m.SetName)
		return ms
	}
	if s.Type != "hash:ip" && s.Type != "hash:net" {
		l.errorf(m.Pos, "set %q: set type %s is not supported", s.Name, s.Type)
		return ms
	}
	if len(m.Dirs) != 1 {
		l.errorf(m.Pos, "set %q: a set match with %d directions is not supported", s.Name, len(m.Dirs))
		return ms
	}
	for _, o := range m.Other {
		// Counter updates do not change what matches.
		if o.Name != "update-counters" && o.Name != "update-subcounters" {
			l.errorf(m.Pos, "set match option --%s is not supported", o.Name)
			return ms
		}
	}
	if s.Family != l.fam {
		l.errorf(m.Pos, "set %q holds %s addresses, the rule set is %s", s.Name, s.Family, l.fam)
		return ms
	}
	netmask, ok := l.setNetmask(m, s)
	if !ok {
		return ms
	}

	// Later entries replace earlier ones for the same prefix, as
	// "ipset restore -exist" does.
	byPrefix := make(map[netip.Prefix]bool, len(s.Entries))
	for _, e := range s.Entries {
		if !e.Addr.IsValid() || e.Addr.Addr().BitLen() != l.fam.Bits() {
			l.errorf(e.Pos, "set %q: entry %s is not an %s address", s.Name, e.Addr, l.fam)
			return ms
		}
		if slices.Contains(e.Options, "timeout") || slices.Contains(e.Rest, "timeout") {
			l.errorf(e.Pos, "set %q: entries with a timeout are not supported", s.Name)
			return ms
		}
		if e.NoMatch && s.Type != "hash:net" {
			l.errorf(e.Pos, "set %q: nomatch entries are only valid in hash:net sets", s.Name)
			return ms
		}
		p := e.Addr
		if netmask < p.Bits() {
			p = netip.PrefixFrom(p.Addr(), netmask)
		}
		byPrefix[p.Masked()] = e.NoMatch
	}
	entries := make([]SetEntry, 0, len(byPrefix))
	for p, nomatch := range byPrefix {
		entries = append(entries, SetEntry{Prefix: p, NoMatch: nomatch})
	}
	slices.SortFunc(entries, func(a, b SetEntry) int {
		return cmp.Or(a.Prefix.Addr().Compare(b.Prefix.Addr()), cmp.Compare(a.Prefix.Bits(), b.Prefix.Bits()))
	})
	dir := Src
	if m.Dirs[0] == rules.SetDst {
		dir = Dst
	}
	return append(ms, AddrSet{Dir: dir, Set: s.Name, Entries: entries, Neg: m.Neg})
}

// setNetmask checks the set's create options and returns the prefix
// length its entries and lookups are masked to (hash:ip netmask).
func (l *lowerer) setNetmask(m *rules.Set, s *rules.IPSet) (int, bool) {
	netmask := l.fam.Bits()
	for i := 0; i < len(s.Options); i++ {
		switch o := s.Options[i]; o {
		case "counters", "comment", "skbinfo", "forceadd":
			// Per-entry data and insertion policy: no effect on lookups.
		case "hashsize", "maxelem", "bucketsize", "initval":
			i++
		case "netmask":
			if s.Type != "hash:ip" || i+1 >= len(s.Options) {
				l.errorf(m.Pos, "set %q: netmask is only supported for hash:ip sets", s.Name)
				return 0, false
			}
			i++
			n, err := strconv.Atoi(s.Options[i])
			if err != nil || n < 1 || n > l.fam.Bits() {
				l.errorf(m.Pos, "set %q: bad netmask %q", s.Name, s.Options[i])
				return 0, false
			}
			netmask = n
		default:
			// timeout (entries expire), bitmask, ... change what matches.
			l.errorf(m.Pos, "set %q: create option %s is not supported", s.Name, o)
			return 0, false
		}
	}
	return netmask, true
}
