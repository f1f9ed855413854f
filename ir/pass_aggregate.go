package ir

import (
	"cmp"
	"net/netip"
	"slices"

	"bpfwall/rules"
)

// mergePorts merges the ranges of a ports match that overlap or touch: a
// port is in the union either way, and fewer ranges are fewer prefixes
// for the classifier and fewer compares for the plain code. A match whose
// ranges are apart already stays as it is, in the order the rule gives,
// which no reader of the ranges depends on: sorting it alone copied the
// rule (the optimized program is a copy on write of the one Program.IR
// keeps): a tenth of the rules of bench's realistic family (realistic
// 1M: 14 MB of copied rules and 24 MB of merged ranges, live through the
// whole compile).
func mergePorts(p *Program) {
	for _, r := range p.Rules {
		for i, m := range r.Matches {
			if m, ok := m.(Ports); ok && len(m.Ranges) > 1 {
				merged, ok := mergeRanges(m.Ranges)
				if !ok {
					continue
				}
				m.Ranges = merged
				r = p.own(r.ID)
				r.Matches[i] = m
			}
		}
	}
	p.rechain()
}

// mergeRanges returns the union of rs as sorted ranges that neither
// overlap nor touch, and true; false when rs are such ranges already,
// in any order.
func mergeRanges(rs []rules.PortRange) ([]rules.PortRange, bool) {
	byLo := func(a, b rules.PortRange) int { return cmp.Or(cmp.Compare(a.Lo, b.Lo), cmp.Compare(a.Hi, b.Hi)) }
	// Sorted on the stack to find whether any merge: a multiport match
	// has at most 15 ranges.
	var buf [16]rules.PortRange
	sorted := append(buf[:0], rs...)
	slices.SortFunc(sorted, byLo)
	apart := true
	for i := 1; i < len(sorted) && apart; i++ {
		apart = uint32(sorted[i].Lo) > uint32(sorted[i-1].Hi)+1
	}
	if apart {
		return nil, false
	}
	out := slices.Clone(sorted)[:1]
	for _, r := range sorted[1:] {
		last := &out[len(out)-1]
		if uint32(r.Lo) <= uint32(last.Hi)+1 {
			last.Hi = max(last.Hi, r.Hi)
			continue
		}
		out = append(out, r)
	}
	return out, true
}

// aggregateSets shrinks the entries of every address set without changing
// what the longest containing entry says for any address: an entry whose
// nearest shorter entry says the same is dropped, and two sibling entries
// that say the same become their parent.
func aggregateSets(p *Program) {
	for _, r := range p.Rules {
		for i, m := range r.Matches {
			if m, ok := m.(AddrSet); ok && len(m.Entries) > 1 {
				m.Entries = aggregateEntries(m.Entries)
				r = p.own(r.ID)
				r.Matches[i] = m
			}
		}
	}
	p.rechain()
}

func aggregateEntries(es []SetEntry) []SetEntry {
	set := make(map[netip.Prefix]bool, len(es)) // prefix -> NoMatch
	for _, e := range es {
		set[e.Prefix] = e.NoMatch
	}
	// nearest returns the flag of the longest entry strictly containing p.
	nearest := func(p netip.Prefix) (bool, bool) {
		for bits := p.Bits() - 1; bits >= 0; bits-- {
			q, _ := p.Addr().Prefix(bits)
			if nm, ok := set[q]; ok {
				return nm, true
			}
		}
		return false, false
	}
	for changed := true; changed; {
		changed = false
		// Longest first, so that merged parents merge further.
		keys := make([]netip.Prefix, 0, len(set))
		for p := range set {
			keys = append(keys, p)
		}
		slices.SortFunc(keys, func(a, b netip.Prefix) int {
			return cmp.Or(cmp.Compare(b.Bits(), a.Bits()), a.Addr().Compare(b.Addr()))
		})
		for _, pfx := range keys {
			nm, ok := set[pfx]
			if !ok {
				continue
			}
			// Without it, its nearest shorter entry would decide the same;
			// a missing one means "not in the set", as nomatch does.
			if outer, found := nearest(pfx); (found && outer == nm) || (!found && nm) {
				delete(set, pfx)
				changed = true
				continue
			}
			if pfx.Bits() == 0 {
				continue
			}
			// Two siblings that say the same decide all of their parent,
			// whatever the parent entry said.
			if snm, ok := set[sibling(pfx)]; ok && snm == nm {
				parent, _ := pfx.Addr().Prefix(pfx.Bits() - 1)
				delete(set, pfx)
				delete(set, sibling(pfx))
				set[parent] = nm
				changed = true
			}
		}
	}
	out := make([]SetEntry, 0, len(set))
	for pfx, nm := range set {
		out = append(out, SetEntry{Prefix: pfx, NoMatch: nm})
	}
	slices.SortFunc(out, func(a, b SetEntry) int {
		return cmp.Or(a.Prefix.Addr().Compare(b.Prefix.Addr()), cmp.Compare(a.Prefix.Bits(), b.Prefix.Bits()))
	})
	return out
}

// sibling is the other half of p's parent.
func sibling(p netip.Prefix) netip.Prefix {
	b := p.Addr().AsSlice()
	bit := p.Bits() - 1
	b[bit/8] ^= 0x80 >> (bit % 8)
	a, _ := netip.AddrFromSlice(b)
	return netip.PrefixFrom(a, p.Bits())
}
