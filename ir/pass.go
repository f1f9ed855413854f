package ir

import (
	"fmt"
	"slices"

	"bpfwall/rules"
)

// Pass is an optimization: it rewrites a program in place and never
// changes what Trace reports for a packet (verdict, deciding rule, the
// rules counted).
// Every pass is an optimization: -O0 runs none of them, -O1 all.
type Pass struct {
	Name string
	Fn   func(*Program)
}

// Passes are the optimizations, in the order they run.
var Passes = []Pass{
	{Name: "merge-ports", Fn: mergePorts},
	{Name: "aggregate-sets", Fn: aggregateSets},
	{Name: "remove-shadowed", Fn: removeShadowed},
}

// OptimizeOptions control Optimize.
type OptimizeOptions struct {
	// Check, when not nil, is called after every pass; an error stops
	// the optimization. Tests pass Verify.
	Check func(pass string, p *Program) error
}

// Optimize returns a copy of p rewritten by every pass; p is unchanged.
func Optimize(p *Program, opts OptimizeOptions) (*Program, error) {
	q := p.Clone()
	for _, pass := range Passes {
		pass.Fn(q)
		if opts.Check != nil {
			if err := opts.Check(pass.Name, q); err != nil {
				return nil, fmt.Errorf("after pass %s: %w", pass.Name, err)
			}
		}
	}
	return q, nil
}

// Clone returns a copy of p for the passes to rewrite. It shares p's
// rules: a pass that changes a rule copies it first (own), so that p is
// unchanged, and the rules no pass changes (most of a large rule set)
// are not copied at all. The copy's rules have the same IDs.
func (p *Program) Clone() *Program {
	q := &Program{Family: p.Family, Table: p.Table, Reassembled: p.Reassembled, Forward: p.Forward, TableBuckets: p.TableBuckets, Texts: p.Texts, Rules: slices.Clone(p.Rules), shared: true, ifaces: p.ifaces}
	for _, c := range p.Chains {
		q.Chains = append(q.Chains, &Chain{Name: c.Name, Policy: c.Policy, Rules: slices.Clone(c.Rules)})
	}
	q.Removed = slices.Clone(p.Removed)
	return q
}

// own returns rule id for a pass to change: in a Clone, a copy of the
// original's rule the first time. The pass calls rechain when it is done.
func (p *Program) own(id int) *Rule {
	if !p.shared || p.owned[id] {
		return p.Rules[id]
	}
	if p.owned == nil {
		p.owned = make(map[int]bool)
	}
	r := *p.Rules[id]
	r.Matches = slices.Clone(r.Matches)
	p.Rules[id] = &r
	if id < len(p.forms) {
		p.forms[id] = nil // its matches change
	}
	p.owned[id] = true
	return &r
}

// rechain points the chains and removals at the rules own copied.
func (p *Program) rechain() {
	if len(p.owned) == 0 {
		return
	}
	for _, c := range p.Chains {
		for i, r := range c.Rules {
			c.Rules[i] = p.Rules[r.ID]
		}
	}
	for i, rm := range p.Removed {
		p.Removed[i] = Removal{Rule: p.Rules[rm.Rule.ID], CoveredBy: p.Rules[rm.CoveredBy.ID]}
	}
}

// Warning is something suspicious about a rule set that is not an error.
type Warning struct {
	Pos rules.Pos
	Msg string
}

func (w Warning) String() string {
	return fmt.Sprintf("%s:%d: %s", posFile(w.Pos), w.Pos.Line, w.Msg)
}

// Shadowed returns a warning for every rule that never matches because an
// earlier terminal rule of its chain matches every packet it would.
func Shadowed(p *Program) []Warning {
	var out []Warning
	for _, rm := range shadowed(p) {
		out = append(out, Warning{
			Pos: rm.Rule.Pos,
			Msg: fmt.Sprintf("never matches: covered by %s:%d", posFile(rm.CoveredBy.Pos), rm.CoveredBy.Pos.Line),
		})
	}
	return out
}
