package ir

import (
	"cmp"
	"slices"

	"bpfwall/rules"
)

// eachMatchInLoadOrder calls f for every match of every rule of the rule
// set, reachable or not, in the order the kernel checks them when
// iptables-restore loads the rule set: the tables in the order they are
// committed (the file's), and in each table the blob libiptc builds —
// the builtin chains in hook order, then the user chains sorted by name
// (strcmp) — rule by rule. xt_recent and xt_hashlimit create a table when
// the first rule naming it is checked, reachable or not, and that rule
// fixes the table's configuration (recent: the mask; hashlimit: the whole
// cfg). f returns false to stop the walk.
func (l *lowerer) eachMatchInLoadOrder(f func(r *rules.Rule, m rules.Match) bool) {
	for _, t := range l.rs.Tables {
		chains := slices.Clone(t.Chains)
		slices.SortStableFunc(chains, func(a, b *rules.Chain) int {
			switch {
			case a.Builtin && b.Builtin:
				return 0 // already in hook order
			case a.Builtin:
				return -1
			case b.Builtin:
				return 1
			}
			return cmp.Compare(a.Name, b.Name)
		})
		for _, c := range chains {
			for _, r := range c.Rules {
				for _, m := range r.Matches {
					if !f(r, m) {
						return
					}
				}
			}
		}
	}
}

// matchElsewhere returns the position of the first match, in load order,
// for which is returns true among the rules outside the program's chains
// that another hook runs: the rules of another table, of another builtin
// chain, or of a user chain another builtin chain reaches. Rules no
// builtin chain reaches run nowhere; eachMatchInLoadOrder sees them.
func (l *lowerer) matchElsewhere(is func(rules.Match) bool) (rules.Pos, bool) {
	if l.elsewhere == nil {
		l.elsewhere = l.rulesElsewhere()
	}
	var pos rules.Pos
	found := false
	l.eachMatchInLoadOrder(func(r *rules.Rule, m rules.Match) bool {
		if l.elsewhere[r] && is(m) {
			pos, found = m.Position(), true
		}
		return !found
	})
	return pos, found
}

// rulesElsewhere returns the rules outside the program's chains that
// another hook runs; see matchElsewhere.
func (l *lowerer) rulesElsewhere() map[*rules.Rule]bool {
	l.sharedChains()
	elsewhere := make(map[*rules.Rule]bool)
	for _, t := range l.rs.Tables {
		for _, c := range t.Chains {
			other := t != l.table
			if !other {
				_, reached := l.shared[c.Name]
				other = reached || (c.Builtin && c.Name != l.hook)
			}
			for _, r := range c.Rules {
				if other && !l.inProgram(r) {
					elsewhere[r] = true
				}
			}
		}
	}
	return elsewhere
}
