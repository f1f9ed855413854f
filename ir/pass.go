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

// Clone returns a deep copy of p whose rules have the same IDs.
func (p *Program) Clone() *Program {
	q := &Program{Family: p.Family, Table: p.Table, Reassembled: p.Reassembled, Forward: p.Forward, Rules: make([]*Rule, len(p.Rules))}
	for i, r := range p.Rules {
		c := *r
		c.Matches = slices.Clone(r.Matches)
		c.form = nil // the passes may change the clone's matches
		q.Rules[i] = &c
	}
	for _, c := range p.Chains {
		qc := &Chain{Name: c.Name, Policy: c.Policy, Rules: make([]*Rule, len(c.Rules))}
		for i, r := range c.Rules {
			qc.Rules[i] = q.Rules[r.ID]
		}
		q.Chains = append(q.Chains, qc)
	}
	for _, rm := range p.Removed {
		q.Removed = append(q.Removed, Removal{Rule: q.Rules[rm.Rule.ID], CoveredBy: q.Rules[rm.CoveredBy.ID]})
	}
	return q
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
