package nft

import (
	"cmp"
	"fmt"
	"slices"

	"bpfwall/rules"
)

// Options control Parse.
type Options struct {
	// Family selects the packets the model is for: an inet table
	// contributes to both, ip and ip6 tables to one.
	Family rules.Family
	// ReadFile reads included files; rules.ReadRegular when nil.
	ReadFile func(string) ([]byte, error)
	// IPSets gives the kernel's ipsets, which the xt set matches of
	// iptables-nft name; kernel.Read calls it only when a rule has one.
	IPSets func() (map[string]*rules.IPSet, error)
	// xt is set for the kernel's listing (ParseListing), whose "xt match" and "xt
	// target" statements carry their options; ipsets are the sets they
	// may name.
	xt     bool
	ipsets map[string]*rules.IPSet
}

// Parse reads an nft script or listing and returns the model of what the
// kernel would evaluate for packets of opts.Family.
//
// Base chains become builtin chains: hook input, forward and output of
// type filter (or route) are table "filter" INPUT, FORWARD and OUTPUT,
// prerouting and postrouting are table "mangle" PREROUTING and
// POSTROUTING, and netdev ingress is table "netdev" INGRESS. Several base
// chains on one hook run in priority order, as the kernel runs them: a
// packet must be accepted by each, and a drop in any ends it.
func Parse(name string, src []byte, opts Options) (*rules.Ruleset, error) {
	return parse(name, src, opts)
}

// ParseListing parses the listing of the kernel's rule set that package
// kernel writes, whose "xt match" and "xt target" statements carry their
// options (as iptables-nft-save prints them); ipsets are the sets they
// may name.
func ParseListing(name string, text []byte, opts Options, ipsets map[string]*rules.IPSet) (*rules.Ruleset, error) {
	opts.xt, opts.ipsets = true, ipsets
	return parse(name, text, opts)
}

func parse(name string, src []byte, opts Options) (*rules.Ruleset, error) {
	nrs, err := readRuleset(name, src, opts.ReadFile)
	if err != nil {
		return nil, err
	}
	rs, err := build(nrs, opts.Family, xtOptions{on: opts.xt, ipsets: opts.ipsets})
	if err != nil {
		return nil, err
	}
	markSharedLimits(nrs, rs)
	return rs, nil
}

// markSharedLimits sets BothFamilies on the limit statements of inet and
// netdev tables that the other family's packets reach too (their rule is
// in the other family's model as well): nftables has one bucket per
// statement, whatever the packet's family.
func markSharedLimits(nrs *ruleset, rs *rules.Ruleset) {
	var mixed []*rules.RateLimit
	each := func(rs *rules.Ruleset, f func(*rules.RateLimit)) {
		for _, t := range rs.Tables {
			for _, c := range t.Chains {
				for _, r := range c.Rules {
					for _, m := range r.Matches {
						if m, ok := m.(*rules.RateLimit); ok && (m.TableFamily == "inet" || m.TableFamily == "netdev") {
							f(m)
						}
					}
				}
			}
		}
	}
	each(rs, func(m *rules.RateLimit) { mixed = append(mixed, m) })
	if len(mixed) == 0 {
		return
	}
	other := rules.IPv6
	if rs.Family == rules.IPv6 {
		other = rules.IPv4
	}
	reached := map[rules.Pos]bool{}
	ors, err := build(nrs, other, xtOptions{})
	if err == nil {
		each(ors, func(m *rules.RateLimit) { reached[m.Pos] = true })
	}
	for _, m := range mixed {
		// A model of the other family that cannot be built says
		// nothing: assume its packets reach the statement.
		m.BothFamilies = err != nil || reached[m.Pos]
	}
}

// hookTargets maps nft hooks to the model's tables and builtin chains.
var hookTargets = map[string][2]string{
	"input":       {"filter", "INPUT"},
	"forward":     {"filter", "FORWARD"},
	"output":      {"filter", "OUTPUT"},
	"prerouting":  {"mangle", "PREROUTING"},
	"postrouting": {"mangle", "POSTROUTING"},
	"ingress":     {"netdev", "INGRESS"},
}

// Family is the IP family whose packets a rule set is for when no
// family is asked for: IPv6 when its only IP tables are ip6 tables, else
// IPv4.
func Family(name string, src []byte, opts Options) (rules.Family, error) {
	nrs, err := readRuleset(name, src, opts.ReadFile)
	if err != nil {
		return rules.IPv4, err
	}
	v6 := false
	for _, t := range nrs.tables {
		switch t.family {
		case "ip", "inet":
			return rules.IPv4, nil
		case "ip6":
			v6 = true
		}
	}
	if v6 {
		return rules.IPv6, nil
	}
	return rules.IPv4, nil
}

func familyApplies(tableFamily string, fam rules.Family) bool {
	switch tableFamily {
	case "inet", "netdev":
		return true
	case "ip":
		return fam == rules.IPv4
	case "ip6":
		return fam == rules.IPv6
	}
	return false // arp, bridge: not IP hooks
}

// xtOptions say whether "xt" statements carry options (Options.xt), and
// the ipsets they may name.
type xtOptions struct {
	on     bool
	ipsets map[string]*rules.IPSet
}

type builder struct {
	fam   rules.Family
	xt    xtOptions
	rs    *rules.Ruleset
	errs  rules.ErrorList
	names map[string]int // nft chain names, to tell when to qualify
}

func build(nrs *ruleset, fam rules.Family, xt xtOptions) (*rules.Ruleset, error) {
	b := &builder{fam: fam, xt: xt, rs: &rules.Ruleset{Family: fam, Sets: map[string]*rules.IPSet{}}, names: map[string]int{}}
	// Base chains by model hook, in the order they were declared.
	byHook := map[[2]string][]*chain{}
	for _, t := range nrs.tables {
		if t.family == "arp" || t.family == "bridge" {
			// Not IP hooks: refused by name rather than left unenforced.
			b.errs = append(b.errs, rules.Errorf(t.pos, "table %s %s: %s tables are not supported (bpfwall compiles ip, ip6, inet and netdev tables)", t.family, t.name, t.family))
			continue
		}
		if !familyApplies(t.family, fam) {
			continue
		}
		for _, c := range t.chains {
			b.names[c.name]++
			if c.hook == nil {
				continue
			}
			target, ok := hookTargets[c.hook.hook]
			if !ok || (t.family == "netdev") != (c.hook.hook == "ingress") {
				b.errs = append(b.errs, rules.Errorf(c.hook.pos, "hook %s in a %s table is not supported", c.hook.hook, t.family))
				continue
			}
			byHook[target] = append(byHook[target], c)
		}
	}
	for _, tn := range []string{"filter", "mangle", "netdev"} {
		var tbl *rules.Table
		for _, target := range sortedTargets(byHook, tn) {
			if tbl == nil {
				tbl = &rules.Table{Name: tn}
				b.rs.Tables = append(b.rs.Tables, tbl)
			}
			base := byHook[target]
			// Equal priorities run in the order registered (nf_hook_entries_grow).
			slices.SortStableFunc(base, func(x, y *chain) int { return cmp.Compare(x.hook.prio, y.hook.prio) })
			b.hook(tbl, target[1], base)
		}
	}
	if tbl := b.rs.Table("filter"); tbl != nil {
		// The filter table always has its three builtin chains.
		for _, name := range rules.BuiltinChains["filter"] {
			if tbl.Chain(name) == nil {
				tbl.Chains = append(tbl.Chains, &rules.Chain{Name: name, Builtin: true, Policy: rules.PolicyAccept})
			}
		}
	} else {
		b.rs.Tables = append(b.rs.Tables, rules.NewTable("filter", rules.Pos{}))
	}
	// nft refuses a bad rule in any chain, reached or not.
	for _, t := range nrs.tables {
		if !familyApplies(t.family, fam) {
			continue
		}
		for _, c := range t.chains {
			for _, sr := range c.rules {
				rb := &ruleBuilder{fam: fam, tbl: t, src: sr, errs: &b.errs, sets: map[string]*rules.IPSet{}, xt: xt}
				rb.xtTable, rb.xtChain = xtContext(c)
				rb.translate()
			}
		}
	}
	if len(b.errs) > 0 {
		return nil, dedupErrors(b.errs).Err()
	}
	return b.rs, nil
}

// dedupErrors drops repeated errors: a chain's rules are read once for
// each base chain that reaches it.
func dedupErrors(l rules.ErrorList) rules.ErrorList {
	seen := map[string]bool{}
	var out rules.ErrorList
	for _, e := range l {
		if k := e.Error(); !seen[k] {
			seen[k] = true
			out = append(out, e)
		}
	}
	return out
}

func sortedTargets(byHook map[[2]string][]*chain, table string) [][2]string {
	var out [][2]string
	for k := range byHook {
		if k[0] == table {
			out = append(out, k)
		}
	}
	order := []string{"PREROUTING", "INGRESS", "INPUT", "FORWARD", "OUTPUT", "POSTROUTING"}
	slices.SortFunc(out, func(a, b [2]string) int { return cmp.Compare(slices.Index(order, a[1]), slices.Index(order, b[1])) })
	return out
}

// instance is one model chain made from an nft chain for one base chain
// of a hook. A "top" instance is reached from its base chain by gotos
// only: in nft its return (and its end) is the base chain's policy.
type instKey struct {
	c   *chain
	idx int // the base chain's index on its hook
	top bool
}

type hookBuilder struct {
	*builder
	tbl   *rules.Table
	hook  string
	base  []*chain
	names map[instKey]string
	todo  []instKey
}

// hook builds the builtin chain for one hook and the user chains its base
// chains reach.
func (b *builder) hook(tbl *rules.Table, builtin string, base []*chain) {
	entry := &rules.Chain{Name: builtin, Builtin: true, Pos: base[0].hook.pos, Policy: rules.PolicyAccept}
	tbl.Chains = append(tbl.Chains, entry)
	// Nat chains that have no say in the verdict are not the model's
	// (nat.go); if that leaves none, the hook accepts every packet.
	var kept []*chain
	for i, c := range base {
		if c.hook.typ != "nat" {
			kept = append(kept, c)
			continue
		}
		if why := natSay(base, i); why != "" {
			// A nat chain sees the first packet of a connection only;
			// lowering this hook fails at the chain.
			entry.Rules = []*rules.Rule{{Pos: c.hook.pos, NFT: true, Matches: []rules.Match{
				&rules.Generic{Located: rules.Located{Pos: c.hook.pos}, Ext: "type nat base chain " + c.name + " (" + why + ")"}}}}
			return
		}
	}
	if base = kept; len(base) == 0 {
		return
	}
	hb := &hookBuilder{builder: b, tbl: tbl, hook: builtin, base: base, names: map[instKey]string{}}
	for _, c := range base {
		if c.hook.typ != "filter" && c.hook.typ != "route" {
			b.errs = append(b.errs, rules.Errorf(c.hook.pos, "chain %s: unknown chain type %s", c.name, c.hook.typ))
			return
		}
	}
	if len(base) == 1 {
		// The model's own call stack and policy are nft's.
		entry.Policy = base[0].hook.policy
		entry.Rules = hb.rules(base[0], instKey{c: base[0], idx: 0}, false)
	} else {
		entry.Policy = rules.PolicyAccept
		first := hb.inst(instKey{c: base[0], idx: 0, top: true})
		entry.Rules = []*rules.Rule{{Pos: base[0].hook.pos, NFT: true, Target: &rules.Goto{Located: rules.Located{Pos: base[0].hook.pos}, Chain: first}}}
	}
	for len(hb.todo) > 0 {
		k := hb.todo[0]
		hb.todo = hb.todo[1:]
		uc := &rules.Chain{Name: hb.names[k], Pos: k.c.pos}
		tbl.Chains = append(tbl.Chains, uc)
		uc.Rules = hb.rules(k.c, k, len(base) > 1)
	}
}

// inst returns the model name of an instance, scheduling it to be built.
func (hb *hookBuilder) inst(k instKey) string {
	if n, ok := hb.names[k]; ok {
		return n
	}
	name := k.c.name
	if hb.builder.names[name] > 1 {
		name = k.c.table.family + "/" + k.c.table.name + "/" + name
	}
	if len(hb.base) > 1 {
		name = fmt.Sprintf("%s@%s.%d", name, hb.hook, k.idx)
		if k.top {
			name += ".top"
		}
	} else if slices.Contains(rules.BuiltinChains["filter"], name) || slices.Contains(rules.BuiltinChains["mangle"], name) || name == "INGRESS" {
		// iptables-nft names its base chains INPUT, ...; a user chain may
		// not take a builtin's name.
		name = k.c.table.name + "/" + name
	}
	hb.names[k] = name
	hb.todo = append(hb.todo, k)
	return name
}

// rules translates the rules of c for instance k. With several base
// chains (multi) accept goes on to the next base chain, and a top
// instance ends in its base chain's policy.
func (hb *hookBuilder) rules(c *chain, k instKey, multi bool) []*rules.Rule {
	var out []*rules.Rule
	for _, sr := range c.rules {
		rb := &ruleBuilder{fam: hb.fam, tbl: c.table, hook: hb.hook, src: sr, errs: &hb.errs, sets: hb.rs.Sets, xt: hb.xt}
		rb.xtTable, rb.xtChain = xtContext(c)
		for _, o := range rb.translate() {
			o.rule.Target = hb.target(c, k, o.act, multi)
			out = append(out, o.rule)
		}
	}
	if multi && k.top {
		pos := c.pos
		if k.c.hook != nil {
			pos = k.c.hook.pos
		}
		out = append(out, &rules.Rule{Pos: pos, NFT: true, Target: hb.policyTarget(k.idx, pos)})
	}
	return out
}

// policyTarget is what the policy of base chain idx does in the model.
func (hb *hookBuilder) policyTarget(idx int, pos rules.Pos) rules.Target {
	loc := rules.Located{Pos: pos}
	if hb.base[idx].hook.policy == rules.PolicyDrop {
		return &rules.Drop{Located: loc}
	}
	return hb.acceptTarget(idx, pos)
}

// acceptTarget: accept ends only the last base chain; before it, the
// packet goes on to the next one.
func (hb *hookBuilder) acceptTarget(idx int, pos rules.Pos) rules.Target {
	loc := rules.Located{Pos: pos}
	if idx+1 < len(hb.base) {
		return &rules.Goto{Located: loc, Chain: hb.inst(instKey{c: hb.base[idx+1], idx: idx + 1, top: true})}
	}
	return &rules.Accept{Located: loc}
}

func (hb *hookBuilder) target(c *chain, k instKey, a action, multi bool) rules.Target {
	loc := rules.Located{Pos: a.pos}
	switch a.kind {
	case actAccept:
		if multi {
			return hb.acceptTarget(k.idx, a.pos)
		}
		return &rules.Accept{Located: loc}
	case actDrop:
		return &rules.Drop{Located: loc}
	case actReturn:
		if multi && k.top {
			return hb.policyTarget(k.idx, a.pos)
		}
		return &rules.Return{Located: loc}
	case actJump, actGoto:
		to := c.table.chain(a.chain)
		if to == nil {
			hb.errs = append(hb.errs, rules.Errorf(a.pos, "chain %s does not exist in table %s %s", a.chain, c.table.family, c.table.name))
			return nil
		}
		if to.hook != nil {
			hb.errs = append(hb.errs, rules.Errorf(a.pos, "cannot jump to base chain %s", a.chain))
			return nil
		}
		if a.kind == actJump {
			return &rules.Jump{Located: loc, Chain: hb.inst(instKey{c: to, idx: k.idx})}
		}
		return &rules.Goto{Located: loc, Chain: hb.inst(instKey{c: to, idx: k.idx, top: k.top && multi})}
	case actTarget:
		return a.target
	}
	return nil
}
