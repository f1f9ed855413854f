package iptables

import (
	"fmt"
	"slices"
	"strings"

	"bpfwall/rules"
)

// apply carries out one command on the open table, as iptables-restore
// does. Problems that iptables reports for the line but that do not stop
// the reading of the rest (missing chains, chains still in use) are
// collected; malformed commands fail at once.
func (p *parser) apply(c *command) error {
	t := p.table
	var chain *rules.Chain
	if c.chain != "" {
		chain = t.Chain(c.chain)
	}
	needChain := func() bool {
		if chain == nil {
			p.errs = append(p.errs, rules.Errorf(c.chainPos, "chain %q does not exist in table %s", c.chain, t.Name))
			return false
		}
		return true
	}
	switch c.kind {
	case cmdAppend, cmdInsert, cmdReplace, cmdCheck:
		if !needChain() || !p.checkTargets(c) {
			return nil
		}
	}
	switch c.kind {
	case cmdAppend:
		chain.Rules = append(chain.Rules, c.spec...)
	case cmdInsert:
		n := max(c.num, 1)
		if n > len(chain.Rules)+1 {
			return p.fail(rules.Errorf(c.numPos, "index of insertion too big"))
		}
		// iptables inserts each expanded rule at the same index, so a list of
		// addresses ends up in reverse order.
		for _, r := range c.spec {
			chain.Rules = slices.Insert(chain.Rules, n-1, r)
		}
	case cmdReplace:
		if len(c.spec) != 1 {
			return p.fail(rules.Errorf(c.pos, "replacement rule does not specify a unique address"))
		}
		if c.num > len(chain.Rules) {
			return p.fail(rules.Errorf(c.numPos, "index of replacement too big"))
		}
		chain.Rules[c.num-1] = c.spec[0]
	case cmdDelete:
		if !needChain() {
			return nil
		}
		if c.num != 0 {
			if c.num > len(chain.Rules) {
				return p.fail(rules.Errorf(c.numPos, "index of deletion too big"))
			}
			chain.Rules = slices.Delete(chain.Rules, c.num-1, c.num)
			return nil
		}
		for _, r := range c.spec {
			i := findRule(chain, r)
			if i < 0 {
				return p.fail(rules.Errorf(c.pos, "bad rule (does a matching rule exist in that chain?)"))
			}
			chain.Rules = slices.Delete(chain.Rules, i, i+1)
		}
	case cmdCheck:
		for _, r := range c.spec {
			if findRule(chain, r) < 0 {
				return p.fail(rules.Errorf(c.pos, "bad rule (does a matching rule exist in that chain?)"))
			}
		}
	case cmdList:
		if c.chain != "" {
			needChain()
		}
	case cmdFlush:
		if c.chain == "" {
			for _, ch := range t.Chains {
				ch.Rules = nil
			}
		} else if needChain() {
			chain.Rules = nil
		}
	case cmdZero:
		p.zero(t, c, chain, needChain)
	case cmdNewChain:
		if err := p.checkChainName(c.chain, c.chainPos); err != nil {
			return p.fail(err)
		}
		if chain != nil {
			return p.fail(&rules.Error{Pos: c.chainPos, Msg: fmt.Sprintf("chain %q already exists", c.chain), Related: chain.Pos})
		}
		t.Chains = append(t.Chains, &rules.Chain{Name: c.chain, Pos: c.chainPos})
	case cmdDeleteChain:
		p.deleteChains(t, c, chain, needChain)
	case cmdRename:
		if !needChain() {
			return nil
		}
		if chain.Builtin {
			return p.fail(rules.Errorf(c.chainPos, "cannot rename builtin chain %q", c.chain))
		}
		if err := p.checkChainName(c.arg, c.argPos); err != nil {
			return p.fail(err)
		}
		if other := t.Chain(c.arg); other != nil {
			return p.fail(&rules.Error{Pos: c.argPos, Msg: fmt.Sprintf("chain %q already exists", c.arg), Related: other.Pos})
		}
		renameReferences(t, c.chain, c.arg)
		chain.Name = c.arg
	case cmdPolicy:
		if !needChain() {
			return nil
		}
		if !chain.Builtin {
			p.errs = append(p.errs, rules.Errorf(c.argPos, "policy %s on user-defined chain %q (only builtin chains have policies)", c.arg, c.chain))
			return nil
		}
		switch c.arg {
		case "ACCEPT":
			chain.Policy = rules.PolicyAccept
		case "DROP":
			chain.Policy = rules.PolicyDrop
		default:
			return p.fail(rules.Errorf(c.argPos, "bad policy name %q", c.arg))
		}
	}
	return nil
}

// checkTargets reports jumps to chains that do not exist and jumps to
// builtin chains.
func (p *parser) checkTargets(c *command) bool {
	if len(c.spec) == 0 {
		return true
	}
	var name string
	var pos rules.Pos
	switch tg := c.spec[0].Target.(type) {
	case *rules.Jump:
		name, pos = tg.Chain, tg.Pos
	case *rules.Goto:
		name, pos = tg.Chain, tg.Pos
	default:
		return true
	}
	target := p.table.Chain(name)
	switch {
	case target == nil && p.opts.Fragment:
		p.warnf(pos, "jump to chain %q, which this input does not define; it must exist when the input is applied", name)
		return true
	case target == nil:
		p.errs = append(p.errs, rules.Errorf(pos, "jump to missing chain %q (or unknown target)", name))
		return false
	case target.Builtin:
		p.errs = append(p.errs, rules.Errorf(pos, "jump to builtin chain %q", name))
		return false
	}
	return true
}

// findRule returns the index of the first rule with the same specification
// as r, or -1.
func findRule(c *rules.Chain, r *rules.Rule) int {
	spec := r.Spec()
	return slices.IndexFunc(c.Rules, func(x *rules.Rule) bool { return x.Spec() == spec })
}

func (p *parser) zero(t *rules.Table, c *command, chain *rules.Chain, needChain func() bool) {
	zeroChain := func(ch *rules.Chain) {
		ch.Counters = rules.Counters{}
		for i, r := range ch.Rules {
			nr := *r
			nr.Counters = rules.Counters{}
			ch.Rules[i] = &nr
		}
	}
	switch {
	case c.chain == "":
		for _, ch := range t.Chains {
			zeroChain(ch)
		}
	case !needChain():
	case c.num == 0:
		zeroChain(chain)
	case c.num > len(chain.Rules):
		p.errs = append(p.errs, rules.Errorf(c.numPos, "index of rule too big"))
	default:
		nr := *chain.Rules[c.num-1]
		nr.Counters = rules.Counters{}
		chain.Rules[c.num-1] = &nr
	}
}

// deleteChains handles -X: one user chain, or all of them. A chain must be
// empty and not the target of any rule.
func (p *parser) deleteChains(t *rules.Table, c *command, chain *rules.Chain, needChain func() bool) {
	var victims []*rules.Chain
	if c.chain == "" {
		for _, ch := range t.Chains {
			if !ch.Builtin {
				victims = append(victims, ch)
			}
		}
	} else {
		if !needChain() {
			return
		}
		if chain.Builtin {
			p.errs = append(p.errs, rules.Errorf(c.chainPos, "cannot delete builtin chain %q", c.chain))
			return
		}
		victims = []*rules.Chain{chain}
	}
	pos := c.chainPos
	if !pos.IsValid() {
		pos = c.pos
	}
	for _, v := range victims {
		if len(v.Rules) > 0 {
			p.errs = append(p.errs, &rules.Error{Pos: pos, Msg: fmt.Sprintf("cannot delete chain %q: it is not empty", v.Name), Related: v.Pos})
			continue
		}
		if ref := referrer(t, v.Name); ref != nil {
			p.errs = append(p.errs, &rules.Error{Pos: pos, Msg: fmt.Sprintf("cannot delete chain %q: it is still referenced", v.Name), Related: ref.Pos})
			continue
		}
		t.DeleteChain(v.Name)
	}
}

// referrer returns a rule that jumps or goes to chain name, or nil.
func referrer(t *rules.Table, name string) *rules.Rule {
	for _, ch := range t.Chains {
		for _, r := range ch.Rules {
			if targetChain(r.Target) == name {
				return r
			}
		}
	}
	return nil
}

func targetChain(t rules.Target) string {
	switch tg := t.(type) {
	case *rules.Jump:
		return tg.Chain
	case *rules.Goto:
		return tg.Chain
	}
	return ""
}

// renameReferences makes rules that jump to old jump to new.
func renameReferences(t *rules.Table, old, new string) {
	for _, ch := range t.Chains {
		for i, r := range ch.Rules {
			var nt rules.Target
			switch tg := r.Target.(type) {
			case *rules.Jump:
				if tg.Chain == old {
					nt = &rules.Jump{Located: tg.Located, Chain: new}
				}
			case *rules.Goto:
				if tg.Chain == old {
					nt = &rules.Goto{Located: tg.Located, Chain: new}
				}
			}
			if nt != nil {
				nr := *r
				nr.Target = nt
				ch.Rules[i] = &nr
			}
		}
	}
}

// checkChainName applies iptables' rules for new chain names.
func (p *parser) checkChainName(name string, pos rules.Pos) error {
	switch {
	case name == "":
		return rules.Errorf(pos, "empty chain name")
	case len(name) > maxChainNameLen:
		return rules.Errorf(pos, "chain name %q too long (must be under %d chars)", name, maxChainNameLen+1)
	case name[0] == '-':
		return rules.Errorf(pos, "chain name %q may not start with a dash", name)
	case name[0] == '!':
		return rules.Errorf(pos, "chain name %q may not start with '!'", name)
	case standardTargets[name] || knownTargets[name] || targetExts[name] != nil:
		return rules.Errorf(pos, "chain name %q may not clash with target name", name)
	case strings.ContainsAny(name, " \t\n"):
		return rules.Errorf(pos, "invalid chain name %q", name)
	}
	return nil
}

// checkLoops reports jumps that close a cycle in the chain graph, which the
// kernel refuses (ELOOP).
func (p *parser) checkLoops(t *rules.Table) {
	const (
		unvisited = iota
		active
		done
	)
	state := map[string]int{}
	var path []string
	var visit func(c *rules.Chain)
	visit = func(c *rules.Chain) {
		state[c.Name] = active
		path = append(path, c.Name)
		for _, r := range c.Rules {
			name := targetChain(r.Target)
			if name == "" {
				continue
			}
			next := t.Chain(name)
			if next == nil {
				continue
			}
			switch state[name] {
			case active:
				i := slices.Index(path, name)
				cycle := strings.Join(append(slices.Clone(path[i:]), name), " -> ")
				p.errs = append(p.errs, rules.Errorf(r.Target.Position(), "jump to %q forms a loop: %s", name, cycle))
			case unvisited:
				visit(next)
			}
		}
		path = path[:len(path)-1]
		state[c.Name] = done
	}
	for _, c := range t.Chains {
		if state[c.Name] == unvisited {
			visit(c)
		}
	}
}
