package iptables

import (
	"fmt"
	"net/netip"
	"strings"

	"bpfwall/rules"
)

// ParseIPSets reads "ipset save" output: "create NAME TYPE [options]" and
// "add NAME ENTRY [options]" lines. Address ranges in entries
// ("10.0.0.1-10.0.0.9") are stored as the prefixes that cover them exactly.
func ParseIPSets(name string, src []byte) (map[string]*rules.IPSet, error) {
	sets := map[string]*rules.IPSet{}
	var errs rules.ErrorList
	for i, line := range strings.Split(string(src), "\n") {
		pos := rules.Pos{File: name, Line: i + 1, Col: 1}
		f := strings.Fields(line)
		if len(f) == 0 || strings.HasPrefix(f[0], "#") {
			continue
		}
		if f[0] == "-exist" || f[0] == "-!" {
			f = f[1:]
		}
		switch {
		case len(f) >= 3 && (f[0] == "create" || f[0] == "-N" || f[0] == "n"):
			if old, dup := sets[f[1]]; dup {
				errs = append(errs, &rules.Error{Pos: pos, Msg: fmt.Sprintf("set %q already defined", f[1]), Related: old.Pos})
				continue
			}
			s := &rules.IPSet{Name: f[1], Pos: pos, Type: f[2]}
			for j := 3; j < len(f); j++ {
				if f[j] == "family" && j+1 < len(f) {
					if f[j+1] == "inet6" {
						s.Family = rules.IPv6
					}
					j++
					continue
				}
				s.Options = append(s.Options, f[j])
			}
			sets[s.Name] = s
		case len(f) >= 3 && (f[0] == "add" || f[0] == "-A" || f[0] == "a"):
			s := sets[f[1]]
			if s == nil {
				errs = append(errs, rules.Errorf(pos, "add to undefined set %q", f[1]))
				continue
			}
			entries, err := parseSetEntry(s, f[2], f[3:], pos)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			s.Entries = append(s.Entries, entries...)
		default:
			errs = append(errs, rules.Errorf(pos, "unknown ipset command %q", line))
		}
	}
	return sets, errs.Err()
}

func parseSetEntry(s *rules.IPSet, elem string, opts []string, pos rules.Pos) ([]rules.IPSetEntry, *rules.Error) {
	parts := strings.Split(elem, ",")
	base := rules.IPSetEntry{Pos: pos, Rest: parts[1:]}
	for _, o := range opts {
		if o == "nomatch" {
			base.NoMatch = true
		} else {
			base.Options = append(base.Options, o)
		}
	}
	kind, _, _ := strings.Cut(strings.TrimPrefix(strings.TrimPrefix(s.Type, "hash:"), "bitmap:"), ",")
	if kind != "ip" && kind != "net" {
		// Sets keyed by MAC, port or interface first: keep the element as written.
		base.Rest = parts
		return []rules.IPSetEntry{base}, nil
	}
	var prefixes []netip.Prefix
	if from, to, ok := strings.Cut(parts[0], "-"); ok {
		a, err1 := netip.ParseAddr(from)
		b, err2 := netip.ParseAddr(to)
		if err1 != nil || err2 != nil || a.BitLen() != b.BitLen() || b.Less(a) {
			return nil, rules.Errorf(pos, "invalid address range %q", parts[0])
		}
		prefixes = RangePrefixes(a, b)
	} else {
		p, err := netip.ParsePrefix(parts[0])
		if err != nil {
			a, err := netip.ParseAddr(parts[0])
			if err != nil {
				return nil, rules.Errorf(pos, "invalid address %q", parts[0])
			}
			p = netip.PrefixFrom(a, a.BitLen())
		}
		prefixes = []netip.Prefix{p.Masked()}
	}
	out := make([]rules.IPSetEntry, len(prefixes))
	for i, p := range prefixes {
		out[i] = base
		out[i].Addr = p
	}
	return out, nil
}

// RangePrefixes returns the fewest prefixes whose union is exactly from..to.
func RangePrefixes(from, to netip.Addr) []netip.Prefix {
	var out []netip.Prefix
	for {
		bits := from.BitLen()
		// Grow the prefix while it starts at from and stays within to.
		for bits > 0 {
			p := netip.PrefixFrom(from, bits-1).Masked()
			if p.Addr() != from || lastAddr(p).Compare(to) > 0 {
				break
			}
			bits--
		}
		p := netip.PrefixFrom(from, bits)
		out = append(out, p)
		last := lastAddr(p)
		if last.Compare(to) >= 0 {
			return out
		}
		from = last.Next()
	}
}

// lastAddr returns the highest address of p.
func lastAddr(p netip.Prefix) netip.Addr {
	a := p.Addr().AsSlice()
	for i := p.Bits(); i < len(a)*8; i++ {
		a[i/8] |= 0x80 >> (i % 8)
	}
	last, _ := netip.AddrFromSlice(a)
	return last
}
