package nft

import (
	"slices"
	"strings"

	"bpfwall/rules"
)

// A nat base chain sees the first packet of each connection. It rewrites
// addresses and ports and accepts, and an accept ends one base chain
// only: the packet goes on to the hook's next base chain. So a nat chain
// that cannot drop the packet has no say in its hook's verdict, unless it
// rewrites what a base chain after it on the hook matches. Such a chain
// is left out of the hook's model (natSay); any other makes lowering
// refuse the hook, as the model has no nat. iptables-nft registers nat
// chains on every hook of its nat table, empty or not (INPUT and
// POSTROUTING after filter, PREROUTING after raw and mangle).

// natStatements rewrite addresses or ports; natTargets are iptables-nft's.
var (
	natStatements = []string{"snat", "dnat", "masquerade", "redirect"}
	natTargets    = []string{"SNAT", "DNAT", "MASQUERADE", "REDIRECT", "NETMAP"}
)

// natEffect says whether the rules c reaches may end in something other
// than accept, return or a jump (drops), and whether they rewrite
// addresses or ports. What it does not know counts as a drop.
func natEffect(c *chain) (drops, rewrites bool) {
	seen := map[*chain]bool{}
	var walk func(c *chain)
	walk = func(c *chain) {
		if seen[c] {
			return
		}
		seen[c] = true
		for _, sr := range c.rules {
			if sr.ast == nil || len(sr.ast.Rest) > 0 {
				drops = true
				continue
			}
			for _, t := range sr.ast.Terms {
				switch {
				case t.Verdict != nil && t.Verdict.Jump != "":
					name := unquote(t.Verdict.Chain)
					i := slices.IndexFunc(c.table.chains, func(o *chain) bool { return o.name == name })
					if i < 0 {
						drops = true
						continue
					}
					walk(c.table.chains[i])
				case t.Verdict != nil:
					if t.Verdict.Kind != "accept" && t.Verdict.Kind != "return" && t.Verdict.Kind != "continue" {
						drops = true
					}
				case t.Xt != nil && t.Xt.Kind == "target":
					switch name := unquote(t.Xt.Name); {
					case slices.Contains(natTargets, name):
						rewrites = true
					case name != "LOG":
						drops = true
					}
				case t.Other != nil && slices.Contains(natStatements, strings.ToLower(t.Other.Keyword)):
					rewrites = true
				case t.Counter != nil, t.Comment != nil, t.Log != nil, t.Limit != nil, t.Xt != nil, t.TCPOpt != nil:
				case t.Match != nil && t.Match.Set == nil && t.Match.VMap == nil:
				default:
					drops = true // reject, a vmap, a set statement, ...
				}
			}
		}
	}
	walk(c)
	return drops, rewrites
}

// natSay says why base[i], a nat chain, has a say in the verdict of its
// hook, whose base chains base are in the order they run; "" when it has
// none.
func natSay(base []*chain, i int) string {
	c := base[i]
	if c.hook.policy != rules.PolicyAccept {
		return "its policy drops"
	}
	drops, rewrites := natEffect(c)
	if drops {
		return "it may drop packets"
	}
	if !rewrites {
		return ""
	}
	for _, later := range base[i+1:] {
		if later.hook.typ != "nat" {
			return "it rewrites what base chain " + later.table.name + "/" + later.name + " after it matches"
		}
	}
	return ""
}
