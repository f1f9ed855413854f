package nft

import (
	"fmt"
	"slices"

	"bpfwall/rules"
)

// nft (userspace, checked against 1.0.6) merges payload comparisons with
// constant values on adjacent header bytes into one load and one cmp
// before the rule reaches the kernel (stmt_reduce / payload_do_merge).
// For "==" that is the same conjunction; for "!=" the kernel then tests
// NOT(f1 == v1 AND f2 == v2), not f1 != v1 AND f2 != v2. mergeGroups
// replays nft's algorithm on the terms of a rule:
//
//   - candidates are matches "payload [==|!=] value" with one constant
//     value (a one-element anonymous set counts: nft turns it into a value);
//     sets, ranges, prefixes, masks, named sets and other operators are not;
//   - statements that are not expressions (counter, log, limit, ...) end a
//     batch, but only when it already holds two candidates or more: a lone
//     candidate is carried past them;
//   - a batch is sorted (stably) by header base and offset, and each
//     candidate joins the previous chain when it starts where the chain
//     ends, in the same header, with the same operator, the chain staying
//     within 4 bytes (16 in the link-layer header, or when one side is
//     already wider than 4 bytes).
//
// The merged comparison sits at one statement of the chain; when a log or
// limit lies between members, where it sits changes what the rule does, and
// the rule is rejected rather than approximated.

type payloadField struct {
	base   int // 0 link layer, 1 network, 2 transport
	off    int // bytes
	length int // bytes
}

var payloadFields = map[string]payloadField{
	"ether saddr":  {0, 6, 6},
	"ip length":    {1, 2, 2},
	"ip ttl":       {1, 8, 1},
	"ip protocol":  {1, 9, 1},
	"ip saddr":     {1, 12, 4},
	"ip daddr":     {1, 16, 4},
	"ip6 length":   {1, 4, 2},
	"ip6 hoplimit": {1, 7, 1},
	"ip6 saddr":    {1, 8, 16},
	"ip6 daddr":    {1, 24, 16},
	"tcp sport":    {2, 0, 2},
	"tcp dport":    {2, 2, 2},
	"udp sport":    {2, 0, 2},
	"udp dport":    {2, 2, 2},
	"sctp sport":   {2, 0, 2},
	"sctp dport":   {2, 2, 2},
	"tcp flags":    {2, 13, 1},
	"icmp type":    {2, 0, 1},
	"icmp code":    {2, 1, 1},
	"icmpv6 type":  {2, 0, 1},
	"icmpv6 code":  {2, 1, 1},
}

// mergeMember is one candidate comparison of a rule.
type mergeMember struct {
	term  int
	pos   rules.Pos
	key   string
	neg   bool
	val   rhs
	field payloadField
}

// negGroup is a chain of "!=" comparisons nft merges into one.
type negGroup struct {
	members []mergeMember // in header order
}

// mergeCandidate reports whether t is a comparison nft may merge.
func (b *ruleBuilder) mergeCandidate(i int, t *Term) (mergeMember, bool) {
	m := t.Match
	if m == nil || m.Set != nil || m.VMap != nil || m.Mask != nil || len(m.Left.Atoms) != 1 {
		return mergeMember{}, false
	}
	key := m.Left.Atoms[0].text()
	f, ok := payloadFields[key]
	if !ok {
		return mergeMember{}, false
	}
	op := normOp(m.Op)
	if op != "" && op != "==" && op != "!=" {
		return mergeMember{}, false
	}
	if key == "tcp flags" && op == "" {
		return mergeMember{}, false // "tcp flags syn" tests a bit
	}
	var errs rules.ErrorList
	rv := resolver{errs: &errs}
	val, ok := rv.list(m.Right, b.src.env)
	if !ok || len(errs) > 0 || len(val.elems) != 1 {
		return mergeMember{}, false
	}
	el := val.elems[0]
	if el.ref != "" || el.hasRange || el.hasMask || len(el.or) > 0 || el.verdict != nil {
		return mergeMember{}, false
	}
	return mergeMember{term: i, pos: toPos(m.Pos), key: key, neg: op == "!=", val: val, field: f}, true
}

// mergeGroups replays nft's payload merge on the rule's terms. It returns
// the "!=" chains by the index of their first term, and the terms that
// belong to a chain but are not its first.
func (b *ruleBuilder) mergeGroups() (map[int]*negGroup, map[int]bool, bool) {
	terms := b.src.ast.Terms
	groups := map[int]*negGroup{}
	skip := map[int]bool{}
	ok := true
	var batch []mergeMember
	merge := func() {
		slices.SortStableFunc(batch, func(x, y mergeMember) int {
			if x.field.base != y.field.base {
				return x.field.base - y.field.base
			}
			return x.field.off - y.field.off
		})
		var chains [][]mergeMember
		var cur []mergeMember
		var end, total int
		for _, m := range batch {
			if len(cur) > 0 && canMerge(cur[0].field.base, cur[0].field.off, total, end, m) && m.neg == cur[0].neg {
				cur = append(cur, m)
				end += m.field.length
				total += m.field.length
				continue
			}
			if len(cur) > 1 {
				chains = append(chains, cur)
			}
			cur = []mergeMember{m}
			end, total = m.field.off+m.field.length, m.field.length
		}
		if len(cur) > 1 {
			chains = append(chains, cur)
		}
		for _, c := range chains {
			lo, hi := c[0].term, c[0].term
			for _, m := range c {
				lo, hi = min(lo, m.term), max(hi, m.term)
			}
			for j := lo + 1; j < hi; j++ {
				if t := terms[j]; t.Log != nil || t.Limit != nil {
					what := "log"
					if t.Limit != nil {
						what = "limit"
					}
					b.errorf(toPos(terms[hi].Pos), "nft merges this match with the one at %s into one comparison placed on one side of the %s statement between them; not modelled", posString(toPos(terms[lo].Pos)), what)
					ok = false
				}
			}
			if !c[0].neg {
				continue // merged "==" is the same conjunction
			}
			groups[lo] = &negGroup{members: c}
			for _, m := range c {
				if m.term != lo {
					skip[m.term] = true
				}
			}
		}
		batch = nil
	}
	for i, t := range terms {
		switch {
		case t.Comment != nil:
		case t.Verdict != nil, t.Counter != nil, t.Log != nil, t.Limit != nil,
			t.Reject != nil, t.Tproxy != nil, t.Other != nil,
			t.Match != nil && t.Match.Set != nil:
			if len(batch) >= 2 {
				merge()
			}
		default:
			if m, ok := b.mergeCandidate(i, t); ok {
				batch = append(batch, m)
			}
		}
	}
	if len(batch) >= 2 {
		merge()
	}
	return groups, skip, ok
}

// canMerge is nft's payload_can_merge for a chain starting at off in
// header base, total bytes long and ending at end, and the next candidate.
func canMerge(base, off, total, end int, m mergeMember) bool {
	if m.field.base != base || m.field.off != end {
		return false
	}
	sum := total + m.field.length
	switch {
	case sum > 16:
		return false
	case sum <= 4, base == 0, total > 4, m.field.length > 4:
		return true
	}
	return false
}

func posString(p rules.Pos) string { return fmt.Sprintf("%d:%d", p.Line, p.Col) }

// negGroup adds NOT(f1 == v1 AND ... AND fn == vn) as the disjoint
// alternatives "f1 != v1", "f1 == v1 AND f2 != v2", ...
func (b *ruleBuilder) negGroup(g *negGroup) {
	saved := b.conds
	var out choice
	for k := range g.members {
		b.conds = nil
		for i, m := range g.members[:k+1] {
			op := "=="
			if i == k {
				op = "!="
			}
			b.relation(m.pos, m.key, op, nil, m.val)
		}
		alts := choice{alt{}}
		for _, c := range b.conds {
			var next choice
			for _, a := range alts {
				for _, x := range c {
					next = append(next, append(slices.Clone(a), x...))
				}
			}
			alts = next
		}
		out = append(out, alts...)
	}
	b.conds = saved
	b.add(out)
}
