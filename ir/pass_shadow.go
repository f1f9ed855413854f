package ir

import (
	"hash/maphash"
	"slices"

	"bpfwall/rules"
)

// shadowLimit bounds the tuples of a rule the shadow analysis looks at;
// rules that expand into more are neither checked nor used as covers.
const shadowLimit = 64

// maxCoverCandidates bounds how many earlier rules with a covering tuple
// are tried per rule, which keeps the analysis linear in the rule count.
const maxCoverCandidates = 4

// removeShadowed takes out of their chains the rules an earlier terminal
// rule covers.
func removeShadowed(p *Program) {
	rms := shadowed(p)
	if len(rms) == 0 {
		return
	}
	gone := make(map[*Rule]bool, len(rms))
	for _, rm := range rms {
		gone[rm.Rule] = true
	}
	for _, c := range p.Chains {
		c.Rules = slices.DeleteFunc(c.Rules, func(r *Rule) bool { return gone[r] })
	}
	p.Removed = append(p.Removed, rms...)
	slices.SortFunc(p.Removed, func(a, b Removal) int { return a.Rule.ID - b.Rule.ID })
}

// shadowed finds, chain by chain, the rules whose every packet an earlier
// terminal rule decides: one whose tuples cover the rule's, and whose
// drops (hotdrop) happen whenever the rule's would. Rules are looked up by
// tuple space search: for every shape (prefix lengths) of the earlier
// rules' tuples, the later rule's first tuple cut to that shape.
func shadowed(p *Program) []Removal {
	var out []Removal
	for _, c := range p.Chains {
		p.Forms(c.Rules)
		type cover struct {
			rule *Rule
			form Form
		}
		// The index is by shape, then by the tuples' hashes: covers tells
		// a tuple that only shares a hash apart. (One map keyed by whole
		// tuples cost a third of the pass, in cache misses.)
		type shapeIndex struct {
			lens [NumFields]uint8
			m    map[uint64][]*cover
		}
		seed := maphash.MakeSeed()
		var shapes []*shapeIndex
		byShape := make(map[[NumFields]uint8]*shapeIndex)
		for _, r := range c.Rules {
			// The form the classifier takes too (Program.Form), of
			// which only small ones without residual matches serve.
			f, ok := p.Form(r)
			if !ok || len(f.Residual) > 0 || len(f.Tuples) == 0 || len(f.Tuples) > shadowLimit {
				continue
			}
			found := false
			first := f.Tuples[0]
		search:
			for _, s := range shapes {
				if !fits(s.lens, first.Len) {
					continue
				}
				for _, e := range s.m[maphash.Comparable(seed, first.Cut(s.lens))] {
					if p.covers(e.form, f) {
						out = append(out, Removal{Rule: r, CoveredBy: e.rule})
						found = true
						break search
					}
				}
			}
			if found || !Terminal(r.Action) {
				continue
			}
			e := &cover{rule: r, form: f}
			for _, t := range f.Tuples {
				s := byShape[t.Len]
				if s == nil {
					s = &shapeIndex{lens: t.Len, m: make(map[uint64][]*cover)}
					byShape[t.Len] = s
					shapes = append(shapes, s)
				}
				h := maphash.Comparable(seed, t)
				if l := s.m[h]; len(l) < maxCoverCandidates && (len(l) == 0 || l[len(l)-1] != e) {
					s.m[h] = append(l, e)
				}
			}
		}
	}
	return out
}

// fits reports whether a tuple of lengths lens can be cut to shape.
func fits(shape, lens [NumFields]uint8) bool {
	for f := range NumFields {
		if shape[f] > lens[f] {
			return false
		}
	}
	return true
}

// covers reports whether a rule of form e, placed before one of form r,
// decides every packet r would: r's tuples are covered by e's, and
// whenever r would drop a packet (hotdrop), e drops or matches it.
func (p *Program) covers(e, r Form) bool {
	if !coveredBy(r.Tuples, e.Tuples) {
		return false
	}
	switch {
	case r.L4Len == 0 && e.L4Len > 0:
		return false // e never matches the fragments r matches
	case r.L4Len > 0 && e.L4Len == 0:
		if !coveredBy(r.PreL4, e.Tuples) {
			return false
		}
	case r.L4Len > 0:
		// A packet too short for r is too short for e; a tiny fragment
		// r drops, e drops too.
		if e.L4Len < r.L4Len || (r.Tiny && !e.Tiny) || !coveredBy(r.PreL4, e.PreL4) {
			return false
		}
	}
	if p.Family == rules.IPv6 && r.Proto {
		// Extension headers that cannot be walked: r drops on PreProto.
		if e.Proto {
			return coveredBy(r.PreProto, e.PreProto)
		}
		return coveredBy(r.PreProto, e.Tuples)
	}
	return true
}

// coveredBy reports whether every tuple of ts is covered by one of by.
func coveredBy(ts, by []Tuple) bool {
	for _, t := range ts {
		if !slices.ContainsFunc(by, func(u Tuple) bool { return u.Covers(t) }) {
			return false
		}
	}
	return true
}
