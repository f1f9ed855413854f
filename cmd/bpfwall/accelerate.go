package main

import (
	"fmt"
	"io"
	"slices"
	"strings"

	"bpfwall/codegen"
	"bpfwall/ir"
	"bpfwall/loader"
	"bpfwall/rules"
)

// A netfilter restore with --accelerate IFACE also runs an accelerator at
// xdp on IFACE (codegen.Accelerator, loader/accelerate.go): it drops
// early what filter INPUT and FORWARD would drop, and passes the rest to
// the chains, which enforce the whole rule set as without it. Every
// later restore of the family rebuilds it from its rules for the
// interfaces it runs on, in the same swap as the chains, or unloads it
// when they leave it nothing to judge; unload removes it with the chains.

// accelLimits say what keeps an accelerator from judging packets as the
// chains would: for both paths, or for INPUT or FORWARD alone ("" for
// nothing).
type accelLimits struct{ both, input, forward string }

// acceleratorLimits reads them from rs: the chains netfilter runs before
// filter INPUT and FORWARD, which may change the packet, its mark, its
// conntrack entry or its route before the chain sees it.
func acceleratorLimits(rs *rules.Ruleset) accelLimits {
	var l accelLimits
	for _, c := range [][2]string{{"raw", "PREROUTING"}, {"mangle", "PREROUTING"}, {"nat", "PREROUTING"}} {
		if l.both == "" && enforces(rs, c[0], c[1]) {
			l.both = fmt.Sprintf("%s %s has rules, which run before routing", c[0], c[1])
		}
	}
	if l.both == "" {
		if pos, ok := assignsHelper(rs); ok {
			l.both = fmt.Sprintf("%s assigns a conntrack helper, whose expectations make connections RELATED that an accelerator sees as NEW", pos)
		}
	}
	if enforces(rs, "mangle", "INPUT") {
		l.input = "mangle INPUT has rules, which run before filter INPUT"
	}
	if enforces(rs, "mangle", "FORWARD") {
		l.forward = "mangle FORWARD has rules, which run before filter FORWARD"
	}
	return l
}

// assignsHelper finds a rule of rs that assigns a conntrack helper
// (-j CT --helper).
func assignsHelper(rs *rules.Ruleset) (rules.Pos, bool) {
	for _, t := range rs.Tables {
		for _, c := range t.Chains {
			for _, r := range c.Rules {
				g, ok := r.Target.(*rules.GenericTarget)
				if ok && g.Target == "CT" && slices.ContainsFunc(g.Options, func(o rules.Option) bool { return o.Name == "helper" }) {
					return r.Pos, true
				}
			}
		}
	}
	return rules.Pos{}, false
}

// acceleratorPlan compiles the accelerator of req's family from the
// chains cc compiled. It returns nil when the accelerator has nothing to
// judge, and says why on stderr (the chains enforce everything anyway).
func acceleratorPlan(req restoreRequest, ns uint64, limits accelLimits, cc *compiledChains, stderr io.Writer) *chainPlan {
	place := loader.AcceleratorPlace(pinRoot, ns, req.family)
	note := func(format string, args ...any) {
		if !req.warn.quiet {
			fmt.Fprintf(stderr, "bpfwall: %s: %s; the chains at their netfilter hooks enforce the rule set\n", place.Name(), fmt.Sprintf(format, args...))
		}
	}
	if limits.both != "" {
		note("not built: %s", limits.both)
		return nil
	}
	chain := func(name, limit string) *codegen.Program {
		c, _ := loader.LookupNetfilterChain("filter", name)
		prog := cc.progs[c]
		if prog == nil {
			return nil
		}
		if limit != "" {
			note("%s not accelerated: %s", name, limit)
			return nil
		}
		return prog
	}
	input, forward := chain("INPUT", limits.input), chain("FORWARD", limits.forward)
	var in, fwd = irOf(input), irOf(forward)
	p, err := codegen.Accelerator(in, fwd)
	if err == nil && p == nil {
		note("not built: filter INPUT and FORWARD drop nothing bpfwall runs")
		return nil
	}
	var prog *codegen.Program
	if err == nil {
		prog, err = codegen.Compile(p, codegen.Options{Hook: codegen.HookXDP, Accelerate: true, Level: req.level})
	}
	if err != nil {
		note("not built: %v", err)
		return nil
	}
	req.progress("%s: compiled %d rules into %d instructions (%s)", place.Name(), len(prog.IR.Rules), prog.Size(), prog.Level)
	return &chainPlan{t: target{place: place}, prog: prog, mode: countersFromRuleset, accel: true}
}

// irOf is p's IR, nil without p.
func irOf(p *codegen.Program) *ir.Program {
	if p == nil {
		return nil
	}
	return p.IR
}

// acceleratorIfaces are the interfaces the accelerator of a restore runs
// on: those its namespace's dispatcher runs on, and those the command
// names.
func acceleratorIfaces(ns uint64, named []string) ([]string, error) {
	on, err := loader.AcceleratedIfaces(pinRoot, ns)
	if err != nil {
		return nil, privileged(err)
	}
	out := slices.Clone(named)
	for _, ifc := range on {
		if !slices.Contains(out, ifc.Name) {
			out = append(out, ifc.Name)
		}
	}
	return out, nil
}

// splitIfaces reads a list of interfaces given as repeated flags or
// separated by commas.
func splitIfaces(list []string) []string {
	var out []string
	for _, s := range list {
		for _, name := range strings.Split(s, ",") {
			if name = strings.TrimSpace(name); name != "" && !slices.Contains(out, name) {
				out = append(out, name)
			}
		}
	}
	return out
}
