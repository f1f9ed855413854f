package nft

import (
	"strings"

	"bpfwall/rules"
)

// meta skuid and meta skgid (nft_meta): the fsuid or fsgid of the file
// of the packet's full socket (skb_to_full_sk). A packet without one, or
// whose socket has no file, ends the expression whatever the operator:
// "meta skuid != 1000" needs a process's socket too. The model's owner
// match has xt_owner's negation, which holds without a socket; so !=
// becomes a test that there is a file (any ID) and the negated IDs.

// anyID is every ID an owner match takes: -1 is no ID.
var anyID = rules.IDRange{Min: 0, Max: 1<<32 - 2}

// ownerID reads a user or group as nft does: a name it looks up, or a
// number.
func ownerID(s string, gid bool) (uint64, bool) {
	s = strings.Trim(s, `"`)
	if v, err := parseNum(s, 32); err == nil {
		return v, v <= uint64(anyID.Max)
	}
	v, ok := rules.LookupID(s, gid)
	return uint64(v), ok && v <= anyID.Max
}

func (b *ruleBuilder) skOwner(pos rules.Pos, key, op string, val rhs) {
	gid := strings.HasSuffix(key, "skgid")
	elems := b.expandRef(pos, val)
	var ranges []rules.IDRange
	for _, e := range elems {
		lo, ok := ownerID(e.lo, gid)
		hi := lo
		if ok && e.hasRange {
			hi, ok = ownerID(e.hi, gid)
		}
		if !ok || e.hasMask || hi < lo {
			b.errorf(e.pos, "bad %s value %q", key, e.lo)
			return
		}
		if lo, hi, ok = b.opRange(pos, op, elems, e, lo, hi, uint64(anyID.Max)); !ok {
			return
		}
		ranges = append(ranges, rules.IDRange{Min: uint32(lo), Max: uint32(hi)})
	}
	for i, x := range ranges {
		for _, y := range ranges[:i] {
			if x.Min <= y.Max && y.Min <= x.Max {
				b.unsupported(pos, "overlapping "+key+" set")
				return
			}
		}
	}
	mk := func(r rules.IDRange, neg bool) cond {
		return func(rl *rules.Rule) bool {
			m := &rules.Owner{Located: rules.Located{Pos: pos}}
			if gid {
				m.GID, m.GIDNeg = &r, neg
			} else {
				m.UID, m.UIDNeg = &r, neg
			}
			rl.Matches = append(rl.Matches, m)
			return true
		}
	}
	if op == "!=" {
		a := alt{mk(anyID, false)}
		for _, r := range ranges {
			a = append(a, mk(r, true))
		}
		b.add(choice{a})
		return
	}
	var c choice
	for _, r := range ranges {
		c = append(c, alt{mk(r, false)})
	}
	b.add(c)
}
