package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"runtime/debug"
	"slices"
	"strings"

	"bpfwall/codegen"
	"bpfwall/ir"
	"bpfwall/loader"
	"bpfwall/parser/iptables"
	"bpfwall/rules"
)

// A restore without -i enforces the whole rule set of its family where
// netfilter runs it: each builtin chain of filter, raw and mangle that
// has rules, or a DROP policy, becomes a BPF netfilter program at the
// chain's hook and its table's priority (loader.NetfilterChains). Every
// chain is compiled before anything changes, then all are swapped as one
// (loader.SwapAll); the chains the new rule set leaves with nothing to do
// are unloaded last. The other family's chains are not touched: IPv4 and
// IPv6 run side by side, as iptables-restore and ip6tables-restore.

// restoreRequest is what runRestore read from its flags and input.
type restoreRequest struct {
	src []byte
	// again reads the input again (rereader), nil when only src has it.
	again    func() ([]byte, error)
	display  string
	family   rules.Family
	sets     map[string]*rules.IPSet
	opts     iptables.Options
	level    codegen.Level
	test     bool
	verbose  bool
	progress func(format string, args ...any)
	warn     *warner
	flags    *swapFlags
	// noDelegate refuses the tables bpfwall would leave to the kernel's
	// netfilter (delegate.go).
	noDelegate bool
	// accelerate names interfaces for the accelerator (accelerate.go).
	accelerate []string
}

// netfilterMode reports whether a restore applies its input at the
// chains' netfilter hooks: with --hook netfilter, or without -i and
// --hook when no filter is loaded at an interface hook (xdp, tc,
// sk-lookup) of this network namespace. (A namespace whose filters were
// loaded with -i keeps them: a restore without -i swaps those.)
//
// The two kinds do not mix, but for sk-lookup, which steers sockets: an
// INPUT chain at xdp would also judge the forwarded packets netfilter's
// INPUT never sees, and run beside the chain at its netfilter hook.
func netfilterMode(f *swapFlags) (bool, error) {
	explicit := f.hook == codegen.HookNetfilter.String()
	if explicit && len(f.ifaces) > 0 {
		return false, fmt.Errorf("%w: --hook netfilter runs every chain at its netfilter hook, in the whole network namespace; it takes no -i", errUsage)
	}
	ns, err := loader.NetNS()
	if err != nil {
		return false, err
	}
	places, err := loader.Places(pinRoot, ns)
	if err != nil {
		return false, privileged(err)
	}
	var chains, ifaceHooks []string
	for _, p := range places {
		switch {
		case p.Accelerator():
			// Netfilter mode's own (accelerate.go).
		case p.Hook == codegen.HookNetfilter:
			chains = append(chains, p.Name())
		case p.Hook == codegen.HookSkLookup:
		default:
			if !slices.Contains(ifaceHooks, p.Hook.String()) {
				ifaceHooks = append(ifaceHooks, p.Hook.String())
			}
		}
	}
	hook := f.hook
	if hook == "" && len(f.ifaces) > 0 {
		hook = codegen.HookXDP.String()
	}
	switch {
	case explicit || hook == "" && len(ifaceHooks) == 0:
		if len(ifaceHooks) > 0 {
			return false, fmt.Errorf("filters loaded with -i run at %s in this network namespace: a restore without -i would run the chains at their netfilter hooks beside them; bpfwall unload --hook %s first", strings.Join(ifaceHooks, ", "), ifaceHooks[0])
		}
		return true, nil
	case hook != codegen.HookSkLookup.String() && len(chains) > 0:
		return false, fmt.Errorf("%s runs at its netfilter hook in this network namespace (restore without -i): a filter at %s would run beside it, and judge packets that chain never sees; bpfwall unload --hook netfilter first", chains[0], hook)
	}
	return false, nil
}

// chainPlan is one chain of a netfilter restore, or its accelerator.
type chainPlan struct {
	t     target
	prog  *codegen.Program
	mode  counterMode
	accel bool
}

// restoreNetfilter applies req at the chains' netfilter hooks.
func restoreNetfilter(req restoreRequest, stdout, stderr io.Writer) (rerr error) {
	ns, err := loader.NetNS()
	if err != nil {
		return err
	}
	loaded, first, err := loadedChains(ns, req.family)
	if err != nil {
		return err
	}
	// The active rule set, with its live counters, when the input needs
	// it: restore -n, or tables the input does not name, which stay.
	var active *rules.Ruleset
	activeRS := func() (*rules.Ruleset, error) {
		if active != nil || first == nil {
			return active, nil
		}
		rs, err := activeRuleset(&first.snap.Meta)
		if err != nil {
			return nil, fmt.Errorf("read the active rule set: %w", err)
		}
		for _, t := range loaded {
			if err := t.snap.Apply(rs); err != nil {
				return nil, err
			}
		}
		active = rs
		return rs, nil
	}
	opts := req.opts
	var activeSets map[string]*rules.IPSet
	if first != nil {
		if activeSets, err = metaSets(&first.snap.Meta); err != nil {
			return err
		}
	}
	opts.Sets = overSets(activeSets, req.sets)
	fromInput := countersFromRuleset
	if opts.Noflush && first != nil {
		a, err := activeRS()
		if err != nil {
			return err
		}
		opts.Base, fromInput = a, countersFollowRuleset
	}
	// parse reads the rule set: the input, with the active tables it
	// does not name, which stay (kept).
	kept := make(map[string]bool)
	parse := func() (*rules.Ruleset, error) {
		src := req.src
		if src == nil {
			var err error
			if src, err = req.again(); err != nil {
				return nil, err
			}
		}
		rs, err := iptables.Parse(req.display, src, opts)
		if err != nil {
			return rs, err
		}
		if !opts.Noflush && first != nil && keepsTables(first.snap.Meta.Source, rs) {
			a, err := activeRS()
			if err != nil {
				return nil, err
			}
			for _, at := range a.Tables {
				if rs.Table(at.Name) == nil {
					rs.Tables = append(rs.Tables, at)
					kept[at.Name] = true
				}
			}
		}
		return rs, nil
	}
	rs, err := parse()
	if req.again != nil {
		// A chain parsed again reads the input again.
		req.src = nil
	}
	if rs != nil {
		req.warn.print(stderr, rs.Warnings)
	}
	if err != nil {
		return reportRuleErrors(err, true, stderr)
	}
	req.progress("netfilter %s: parsed %d rules", req.family, countRules(rs))
	if fromInput == countersFromRuleset && len(kept) == 0 {
		// Nothing reads the running chains' snapshots again: their
		// counters do not carry, no table of theirs stays, and a parse
		// again adds none. Each holds the family's rule set (100k rules:
		// 18 MB), which would stay through the compile.
		for p, t := range loaded {
			t.snap = nil
			loaded[p] = t
		}
		first = nil
	}
	// What applyNetfilter needs of the parsed rule set, taken now: the
	// parsed rules (a third of a large restore's memory) go once the
	// chains are lowered, before they compile. (Nothing reads rs after
	// compileChains.) The metas' source, the rule set printed again, is
	// made on the other core while the chains lower and compile: both
	// only read rs.
	var metas *loader.MetaSource
	metasMade := make(chan struct{})
	if req.test {
		close(metasMade) // restore -t loads no meta
	} else {
		go func() {
			defer close(metasMade)
			metas = loader.NewMetaSource(rs)
			metas.Pack() // it stays through the compile
		}()
	}
	tables := shellTables(rs)
	limits := acceleratorLimits(rs)
	// The chains' rules take their texts from the metas' source, which
	// prints the rule set once for all of them.
	var texts func(*ir.Program) error
	if !req.test {
		texts = func(p *ir.Program) error {
			<-metasMade
			return metas.Texts(p)
		}
	}
	cc, err := compileChains(rs, parse, req.family, req.level, req.noDelegate, texts)
	<-metasMade
	if err != nil {
		return reportRuleErrors(err, true, stderr)
	}
	// A chain whose program the verifier gives up on (too large) goes to
	// the kernel too, as one that does not compile; the rest are loaded
	// again without it.
	var attached []loader.Iface // the accelerator's interfaces, attached once
	defer func() {
		if rerr != nil && attached != nil {
			// Bad input changes nothing.
			loader.DetachAcceleratorFrom(pinRoot, ns, attached)
		}
	}()
	for again := false; ; again = true {
		err := applyChains(req, ns, loaded, kept, fromInput, limits, cc, metas, tables, &attached, again, stdout, stderr)
		var pe *loader.PlaceError
		if err == nil || req.noDelegate || !errors.Is(err, loader.ErrTooLarge) || !errors.As(err, &pe) {
			return err
		}
		c, prog, ok := cc.chainAt(pe.Place)
		if !ok {
			return err
		}
		rs, perr := parse()
		if perr != nil {
			return perr
		}
		pos := rules.Pos{}
		if entry := prog.IR.Chains[0]; len(entry.Rules) > 0 {
			pos = entry.Rules[0].Pos
		}
		delete(cc.progs, c)
		// The answers of the REJECT rules the attempt added go: the
		// chain now delegated may have been one.
		cc.deleg = cc.deleg.again(rs)
		cc.deleg.chain(rs.Table(c.Table), c.Chain)
		cc.why[c.Table+" "+c.Chain] = rules.ErrorList{rules.Errorf(pos, "chain %s: the kernel's verifier gave up on its program: %v", c.Chain, pe.Err)}
	}
}

// chainAt returns the chain whose program runs at place p, and that
// program; false for another place (the accelerator's).
func (cc *compiledChains) chainAt(p loader.Place) (loader.NetfilterChain, *codegen.Program, bool) {
	for c, prog := range cc.progs {
		if p.Hook == codegen.HookNetfilter && p.Table == c.Table && p.Chain == c.Chain {
			return c, prog, true
		}
	}
	return loader.NetfilterChain{}, nil, false
}

// applyChains loads the compiled chains of cc, and with them the
// accelerator and the kernel's tables, and swaps them in (restore -t
// only loads them). A program's failure to load is a loader.PlaceError.
// It attaches the accelerator's dispatcher once, noting its interfaces
// in attached; again, it has printed the chains' warnings already.
func applyChains(req restoreRequest, ns uint64, loaded map[loader.Place]target, kept map[string]bool, fromInput counterMode, limits accelLimits,
	cc *compiledChains, metas *loader.MetaSource, tables map[string]*rules.Table, attached *[]loader.Iface, again bool, stdout, stderr io.Writer) error {
	deleg := cc.deleg
	// Everything is compiled before anything is swapped.
	var plans []chainPlan
	var drop []target
	for _, c := range loader.NetfilterChains {
		p := loader.ChainPlace(pinRoot, ns, req.family, c.Table, c.Chain)
		t, ok := loaded[p]
		if !ok {
			t = target{place: p}
		}
		prog := cc.progs[c]
		if prog == nil {
			// Nothing to do, or the kernel runs it: the BPF program
			// that ran it goes.
			if ok {
				drop = append(drop, t)
			}
			continue
		}
		if !again {
			req.warn.print(stderr, prog.Warnings)
			req.progress("netfilter %s %s %s: compiled %d rules into %d instructions (%s)", req.family, c.Table, c.Chain, len(prog.IR.Rules), prog.Size(), prog.Level)
		}
		mode := fromInput
		if kept[c.Table] && ok {
			mode = countersFollowRuleset
		}
		if t.snap == nil {
			mode = countersFromRuleset
		}
		plans = append(plans, chainPlan{t: t, prog: prog, mode: mode})
	}

	// The accelerator follows the chains wherever it runs, or goes.
	accelOn, err := acceleratorIfaces(ns, req.accelerate)
	if err != nil {
		return err
	}
	accelPlace := loader.AcceleratorPlace(pinRoot, ns, req.family)
	accelerated := false
	if len(accelOn) > 0 {
		if ap := acceleratorPlan(req, ns, limits, cc, stderr); ap != nil {
			plans = append(plans, *ap)
			accelerated = true
		}
	}
	if a, err := loader.Open(accelPlace); err == nil && !accelerated {
		// Nothing it can judge, or every interface it ran on is gone.
		a.Close()
		drop = append(drop, target{place: accelPlace})
	}

	deleg.note(stderr, cc.why)
	// What the kernel runs, it checks first: its refusal names the line
	// of the input, and changes nothing.
	if err := deleg.check(); err != nil {
		return err
	}
	if req.test {
		for _, p := range plans {
			l, err := loader.Load(p.prog, loader.Options{})
			if err != nil {
				return &loader.PlaceError{Place: p.t.place, Err: privileged(err)}
			}
			if req.verbose {
				fmt.Fprintf(stdout, "%s: %d rules verified, %d instructions processed\n", p.t.place.Name(), len(p.prog.IR.Rules), l.VerifiedInsns)
			}
			l.Close()
		}
		return nil
	}
	if accelerated && len(req.accelerate) > 0 && *attached == nil {
		// Before the swap, with empty slots: it changes no verdict.
		xdpMode, err := loader.ParseXDPMode(req.flags.xdpMode)
		if err != nil {
			return fmt.Errorf("%w: %v", errUsage, err)
		}
		added, err := loader.AttachAccelerator(pinRoot, ns, req.accelerate, xdpMode)
		if err != nil {
			return privileged(err)
		}
		*attached = append([]loader.Iface{}, added...)
	}
	return applyNetfilter(req, metas, tables, plans, drop, deleg, stdout)
}

// shellTables are the tables of rs by name, each with its builtin chains
// and none of their rules: what the kernel's tables that answer REJECT
// rules are made from (delegation.answer).
func shellTables(rs *rules.Ruleset) map[string]*rules.Table {
	out := make(map[string]*rules.Table)
	for _, t := range rs.Tables {
		st := &rules.Table{Name: t.Name, Pos: t.Pos}
		for _, c := range t.Chains {
			if c.Builtin {
				st.Chains = append(st.Chains, &rules.Chain{Name: c.Name, Pos: c.Pos, Builtin: true, Policy: c.Policy})
			}
		}
		out[t.Name] = st
	}
	return out
}

// loadedChains returns the chains of the family that run now in the
// network namespace ns, and the first of them, nil for none.
func loadedChains(ns uint64, family rules.Family) (map[loader.Place]target, *target, error) {
	loaded := make(map[loader.Place]target)
	var first *target
	for _, c := range loader.NetfilterChains {
		p := loader.ChainPlace(pinRoot, ns, family, c.Table, c.Chain)
		a, err := loader.Open(p)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, nil, privileged(err)
		}
		t := target{place: p}
		t.snap, err = a.Snapshot()
		a.Close()
		if err != nil {
			return nil, nil, err
		}
		loaded[p] = t
		if first == nil {
			first = &t
		}
	}
	return loaded, first, nil
}

// applyNetfilter swaps the compiled chains in, with the kernel's tables
// for the delegated chains and the REJECT answers in the same restore,
// and unloads the chains the rule set leaves nothing to do.
func applyNetfilter(req restoreRequest, metas *loader.MetaSource, tables map[string]*rules.Table, plans []chainPlan, drop []target, deleg *delegation, stdout io.Writer) error {
	var swaps []*loader.Swap
	for _, p := range plans {
		if p.accel {
			swaps = append(swaps, &loader.Swap{Place: p.t.place, Program: p.prog, Meta: metas.AcceleratorMeta(p.prog, req.display)})
			continue
		}
		meta, counters, err := metas.Meta(p.prog, req.display)
		if err != nil {
			return err
		}
		s := &loader.Swap{Place: p.t.place, Program: p.prog, Meta: meta, Counters: counters}
		if p.t.snap != nil && p.mode == countersFollowRuleset {
			s.Since = p.t.snap
		}
		swaps = append(swaps, s)
	}
	// The kernel's REJECT answers the REJECT rules of the chains bpfwall
	// runs: their answers are pinned before the kernel's rules name them.
	for _, p := range plans {
		paths, err := loader.EnsureAnswers(p.t.place, p.prog)
		if err != nil {
			return privileged(err)
		}
		if len(paths) > 0 {
			deleg.answer(tables[p.t.place.Table], p.t.place.Chain, paths)
			req.progress("netfilter %s %s %s: the kernel answers its REJECT rules", req.family, p.t.place.Table, p.t.place.Chain)
		}
	}
	if len(deleg.chains) > 0 {
		req.progress("netfilter %s: handing %s to the kernel's netfilter", req.family, strings.Join(deleg.chains, ", "))
	}
	var restored []string
	for name := range tables {
		restored = append(restored, name)
	}
	kernel, err := deleg.kernelTables(req.opts.Counters, restored)
	if err != nil {
		return err
	}
	req.progress("netfilter %s: loading %d chains (the kernel verifies each) and swapping", req.family, len(swaps))
	var drops []loader.Place
	for _, t := range drop {
		drops = append(drops, t.place)
	}
	results, err := loader.SwapAll(swaps, drops, kernel)
	if err != nil && results == nil {
		return privileged(err)
	}
	for i, res := range results {
		if req.verbose && res != nil {
			describeSwap(stdout, plans[i].t, res)
		}
	}
	if err != nil {
		return privileged(err)
	}
	if req.verbose {
		for _, t := range drop {
			fmt.Fprintf(stdout, "%s: unloaded: the rule set leaves it nothing to do\n", t.place.Name())
		}
	}
	return nil
}

// compiledChains are a rule set's chains, compiled for their netfilter
// hooks, and what goes to the kernel instead.
type compiledChains struct {
	// progs are the chains' programs; a chain with nothing to enforce,
	// or delegated, has none.
	progs map[loader.NetfilterChain]*codegen.Program
	deleg *delegation
	// why holds, by delegated chain ("filter INPUT"), the rules bpfwall
	// cannot compile.
	why map[string]rules.ErrorList
}

// compileChains compiles every chain of rs that bpfwall runs at its
// netfilter hook, and delegates the nat and security tables and the
// chains it cannot compile; with noDelegate those are errors at their
// rules' positions. It lowers every chain first and compiles them after,
// without rs: a chain that then fails to compile is delegated from the
// rule set parse reads again. With texts, the chains lower without their
// rules' texts, and texts sets them before they compile.
func compileChains(rs *rules.Ruleset, parse func() (*rules.Ruleset, error), family rules.Family, level codegen.Level, noDelegate bool, texts func(*ir.Program) error) (*compiledChains, error) {
	cc := &compiledChains{progs: make(map[loader.NetfilterChain]*codegen.Program), deleg: newDelegation(family), why: make(map[string]rules.ErrorList)}
	var errs rules.ErrorList
	if noDelegate {
		if err := refuseTables(rs); err != nil {
			errs = append(errs, err.(rules.ErrorList)...)
		}
	} else {
		for _, t := range rs.Tables {
			if delegable(t.Name) {
				cc.deleg.table(t)
			}
		}
	}
	// refused delegates chain c, or with noDelegate refuses it, for err.
	refused := func(rs *rules.Ruleset, c loader.NetfilterChain, err error) error {
		list, ok := rules.AsErrorList(err)
		if !ok {
			return fmt.Errorf("%s %s: %w", c.Table, c.Chain, err)
		}
		if noDelegate {
			errs = append(errs, list...)
			return nil
		}
		cc.deleg.chain(rs.Table(c.Table), c.Chain)
		cc.why[c.Table+" "+c.Chain] = list
		return nil
	}
	lowered := make(map[loader.NetfilterChain]*ir.Program)
	for _, c := range loader.NetfilterChains {
		if !enforces(rs, c.Table, c.Chain) {
			continue
		}
		// The chains are swapped as one (loader.SwapAll), with the recent
		// tables and token buckets netfilter shares between hooks shared.
		p, err := ir.Lower(rs, ir.LowerOptions{Table: c.Table, Chain: c.Chain, SharedState: true, NoText: texts != nil})
		if err != nil {
			if err := refused(rs, c, err); err != nil {
				return nil, err
			}
			continue
		}
		lowered[c] = p
	}
	rs = nil
	// The parsed rule set, a third of the heap, is garbage now: collected
	// before the compile allocates on top of it, the heap the collector
	// paces from is the one the compile keeps (mixed 100k: median peak
	// RSS 168 -> 161 MB over five interleaved rounds; 1M the same). Its
	// pages go back to the kernel too: the runtime returns free pages
	// slowly, and the compile does not reuse all of them, so they stayed
	// resident beside the pages it mapped (realistic 1M: peak RSS 1.13 ->
	// 1.03 GiB, a swap 1.19 -> 1.03 GiB, in the same time).
	debug.FreeOSMemory()
	for _, c := range loader.NetfilterChains {
		p := lowered[c]
		if p == nil {
			continue
		}
		delete(lowered, c)
		if texts != nil {
			if err := texts(p); err != nil {
				return nil, err
			}
		}
		prog, err := codegen.Compile(p, codegen.Options{Hook: codegen.HookNetfilter, Level: level})
		if err == nil {
			cc.progs[c] = prog
			continue
		}
		if rs == nil {
			var perr error
			if rs, perr = parse(); perr != nil {
				return nil, perr
			}
		}
		if err := refused(rs, c, err); err != nil {
			return nil, err
		}
	}
	if len(errs) > 0 {
		errs.Sort()
		return nil, errs
	}
	return cc, nil
}

// enforces reports whether chain of table has anything to enforce: a
// rule, or a policy other than ACCEPT.
func enforces(rs *rules.Ruleset, table, chain string) bool {
	t := rs.Table(table)
	if t == nil {
		return false
	}
	c := t.Chain(chain)
	return c != nil && (len(c.Rules) > 0 || c.Policy != rules.PolicyAccept)
}

// refuseTables names the tables of rs that bpfwall does not run at
// netfilter hooks and that hold a rule, for restore --no-delegate.
// Nothing a user wrote is left unenforced.
func refuseTables(rs *rules.Ruleset) error {
	var errs rules.ErrorList
	for _, t := range rs.Tables {
		if slices.ContainsFunc(loader.NetfilterChains, func(c loader.NetfilterChain) bool { return c.Table == t.Name }) {
			continue
		}
		// The first rule says it, once per table.
	chains:
		for _, c := range t.Chains {
			for _, r := range c.Rules {
				errs = append(errs, rules.Errorf(r.Pos, "table %s is not supported: bpfwall runs the chains of filter, raw and mangle at their netfilter hooks; %s", t.Name, tableWhy(t.Name)))
				break chains
			}
		}
	}
	if len(errs) == 0 {
		return nil
	}
	return errs
}

// tableWhy says why bpfwall does not run a table.
func tableWhy(table string) string {
	hint := " (without --no-delegate, bpfwall leaves it to the kernel's netfilter)"
	if table == "nat" {
		return "no BPF program here rewrites addresses" + hint
	}
	return "no BPF program here can do what its targets do" + hint
}
