package ir

import (
	"math/rand/v2"
	"slices"

	"bpfwall/internal/flatidx"
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
		// No later pass, and no plan, asks for a removed rule's form.
		// Kept, the forms of the rules taken out (2.5% of the mixed
		// bench's), scattered over the heap, pinned much of the memory
		// the other forms free as each is planned: at 1M rules, 130 MB
		// of partly used spans when the program was built.
		p.ForgetForms([]*Rule{rm.Rule})
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
		// The forms that take part: small ones without residual matches.
		form := func(r *Rule) (Form, bool) {
			f, ok := p.Form(r)
			return f, ok && len(f.Residual) == 0 && len(f.Tuples) > 0 && len(f.Tuples) <= shadowLimit
		}
		n := 0
		for _, r := range c.Rules {
			if f, ok := form(r); ok && Terminal(r.Action) {
				n += len(f.Tuples)
			}
		}
		idx := newCoverIndex(n)
		var shapes []cutHasher
		shapeOf := make(map[[NumFields]uint8]int)
		for i, r := range c.Rules {
			f, ok := form(r)
			if !ok {
				continue
			}
			found := false
			first := &f.Tuples[0]
		search:
			for s := range shapes {
				if !fits(shapes[s].lens, first.Len) {
					continue
				}
				for _, e := range idx.get(shapes[s].hash(first, idx.seed)) {
					if e < 0 {
						break
					}
					if ef, _ := p.Form(c.Rules[e]); p.covers(ef, f) {
						out = append(out, Removal{Rule: r, CoveredBy: c.Rules[e]})
						found = true
						break search
					}
				}
			}
			if found || !Terminal(r.Action) {
				continue
			}
			for j := range f.Tuples {
				t := &f.Tuples[j]
				s, ok := shapeOf[t.Len]
				if !ok {
					s = len(shapes)
					shapeOf[t.Len] = s
					shapes = append(shapes, newCutHasher(t.Len))
				}
				idx.add(shapes[s].hash(t, idx.seed), int32(i))
			}
		}
	}
	return out
}

// coverIndex maps the hash of a tuple (its value and its shape) to the
// first maxCoverCandidates rules, by their index in the chain, that hold
// a tuple of that hash; covers tells a tuple that only shares a hash
// apart. Go maps per shape held an entry per rule on the heap (17 MB of a
// 100k-rule compile) and cost a second of a 1M-rule one in probes.
type coverIndex struct {
	seed  uint64
	index *flatidx.Index // hash: index in rules
	rules [][maxCoverCandidates]int32
}

func newCoverIndex(n int) *coverIndex {
	return &coverIndex{seed: rand.Uint64(), index: flatidx.New(n), rules: make([][maxCoverCandidates]int32, 0, n)}
}

// get returns the rules of key h, ended by -1 when fewer than the most.
func (x *coverIndex) get(h uint64) []int32 {
	if i, ok := x.index.Get(h); ok {
		return x.rules[i][:]
	}
	return nil
}

// add records rule r under key h, unless the key holds the most rules
// already or r last.
func (x *coverIndex) add(h uint64, r int32) {
	i, had := x.index.Insert(h, int32(len(x.rules)))
	if !had {
		var l [maxCoverCandidates]int32
		for j := range l {
			l[j] = -1
		}
		l[0] = r
		x.rules = append(x.rules, l)
		return
	}
	l := &x.rules[i]
	for j, e := range l {
		if e == r {
			return
		}
		if e < 0 {
			l[j] = r
			return
		}
	}
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
