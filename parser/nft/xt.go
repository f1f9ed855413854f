package nft

import (
	"slices"

	"bpfwall/parser/iptables"
	"bpfwall/rules"
)

// xtExtension translates "xt match NAME OPTIONS" and "xt target NAME
// OPTIONS": the options, printed from the extension's info by kernel.Read,
// are read by the iptables parser, which gives the model exactly what
// iptables-restore input with the same options gives.
func (b *ruleBuilder) xtExtension(x *Xt) {
	pos := toPos(x.Pos)
	name := unquote(x.Name)
	if x.Options == nil || !b.xt.on {
		b.errorf(pos, "xt %s %s is an xtables extension that iptables-nft installed, and nft's listing does not show its options: read the rule set with --from-kernel, or from iptables-nft-save", x.Kind, name)
		return
	}
	args := unquote(*x.Options)
	ctx := func(r *rules.Rule) iptables.Context {
		return iptables.Context{Family: b.fam, Table: b.xtTable, Chain: b.xtChain, Proto: r.Proto, ProtoNeg: r.ProtoNeg, Sets: b.xt.ipsets}
	}
	if x.Kind == "match" {
		b.add(always1(func(r *rules.Rule) bool {
			m, err := iptables.ParseMatch(ctx(r), name, args, pos)
			if err != nil {
				b.xtError(pos, err)
				return false
			}
			// The kernel runs it as iptables does (ir's lowering asks).
			m.(interface{ MarkXT() }).MarkXT()
			if s, ok := m.(*rules.Set); ok {
				b.sets[s.SetName] = b.xt.ipsets[s.SetName]
			}
			r.Matches = append(r.Matches, m)
			return true
		}))
		return
	}
	// A target ends the rule. Its checks may depend on the protocol
	// (REJECT --reject-with tcp-reset), which each model rule has.
	b.verdict = true
	n := len(b.out)
	b.emit(action{kind: actTarget, pos: pos})
	for i := n; i < len(b.out); i++ {
		r := b.out[i].rule
		t, err := iptables.ParseTarget(ctx(r), name, args, pos)
		if err != nil {
			b.xtError(pos, err)
			return
		}
		b.out[i].act.target = t
	}
}

// xtError reports err, an error of the iptables parser, at pos.
func (b *ruleBuilder) xtError(pos rules.Pos, err error) {
	switch e := err.(type) {
	case *rules.Error:
		b.errorf(pos, "%s", e.Msg)
	case rules.ErrorList:
		for _, e := range e {
			b.errorf(pos, "%s", e.Msg)
		}
	default:
		b.errorf(pos, "%v", err)
	}
}

// xtContext is the iptables table and chain the xt statements of chain c
// are checked for. iptables-nft names its tables and base chains as
// iptables does: the rules of table ip mangle are mangle's, even where
// the model merges its INPUT chain into filter INPUT. A base chain is
// its hook's builtin chain, a user chain is one whose hooks are not known
// (""); a table that is not iptables' is taken as its hook's.
func xtContext(c *chain) (table, builtin string) {
	table = "filter"
	if c.hook != nil {
		if t, ok := hookTargets[c.hook.hook]; ok && t[0] != "netdev" {
			table, builtin = t[0], t[1]
		}
	}
	if _, ok := rules.BuiltinChains[c.table.name]; ok {
		table = c.table.name
		if !slices.Contains(rules.BuiltinChains[table], builtin) {
			builtin = "" // nat's and raw's have no such chain: no hook check
		}
	}
	return table, builtin
}
