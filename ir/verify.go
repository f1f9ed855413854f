package ir

import (
	"errors"
	"fmt"
	"net/netip"

	"bpfwall/rules"
)

// maxIfaceName is IFNAMSIZ - 1.
const maxIfaceName = 15

// Verify checks the invariants every Program must keep, before and after
// every pass: the entry chain has a policy, rule IDs are dense and unique,
// jumps and gotos stay in range and never form a loop, and every match is
// well formed for the program's family. It reports every problem found.
func Verify(p *Program) error {
	v := &verifier{p: p}
	v.program()
	return errors.Join(v.errs...)
}

type verifier struct {
	p    *Program
	errs []error
	// st is the state of the rule being verified: a variable of rule's
	// would go to the heap for every rule, as the matches' verify
	// methods, called through an interface, take its address.
	st ruleState
}

func (v *verifier) errorf(format string, args ...any) {
	v.errs = append(v.errs, fmt.Errorf(format, args...))
}

func (v *verifier) program() {
	p := v.p
	if p.Family != rules.IPv4 && p.Family != rules.IPv6 {
		v.errorf("unknown family %d", p.Family)
		return
	}
	if len(p.Chains) == 0 {
		v.errorf("program has no chains")
		return
	}
	if pol := p.Chains[0].Policy; pol != rules.PolicyAccept && pol != rules.PolicyDrop {
		v.errorf("entry chain %s has policy %s, want ACCEPT or DROP", p.Chains[0].Name, pol)
	}
	names := make(map[string]bool, len(p.Chains))
	seen := make([]bool, len(p.Rules))
	for ci, c := range p.Chains {
		if names[c.Name] {
			v.errorf("chain %s appears twice", c.Name)
		}
		names[c.Name] = true
		if ci > 0 && c.Policy != rules.PolicyNone {
			v.errorf("user chain %s has policy %s", c.Name, c.Policy)
		}
		for _, r := range c.Rules {
			v.rule(ci, r, seen)
		}
	}
	for _, rm := range p.Removed {
		switch r := rm.Rule; {
		case r.ID < 0 || r.ID >= len(p.Rules) || p.Rules[r.ID] != r:
			v.errorf("removed rule r%d is not Program.Rules[%d]", r.ID, r.ID)
		case seen[r.ID]:
			v.errorf("removed rule r%d is still in a chain", r.ID)
		default:
			seen[r.ID] = true
		}
		if c := rm.CoveredBy; c == nil || c.ID >= rm.Rule.ID || c.Chain != rm.Rule.Chain || !Terminal(c.Action) {
			v.errorf("removed rule r%d is not covered by an earlier terminal rule of its chain", rm.Rule.ID)
		}
	}
	for id, ok := range seen {
		if !ok {
			v.errorf("rule r%d is in no chain", id)
		}
	}
	v.buckets()
	v.acyclic()
}

// buckets checks that the limit matches that share a token bucket (the
// rules one nft rule splits into) agree on what it is.
func (v *verifier) buckets() {
	first := make(map[int]Match)
	for _, r := range v.p.Rules {
		for _, m := range r.Matches {
			id, ok := Bucket(m)
			if !ok {
				continue
			}
			if id < 0 {
				v.errorf("rule r%d: negative token bucket %d", r.ID, id)
			}
			if f, seen := first[id]; seen && f != m {
				v.errorf("rule r%d: token bucket %d is another limit's too", r.ID, id)
			}
			first[id] = m
		}
	}
}

func (v *verifier) rule(ci int, r *Rule, seen []bool) {
	p := v.p
	switch {
	case r.ID < 0 || r.ID >= len(p.Rules) || p.Rules[r.ID] != r:
		v.errorf("rule r%d of chain %s is not Program.Rules[%d]", r.ID, p.Chains[ci].Name, r.ID)
	case seen[r.ID]:
		v.errorf("rule r%d is in more than one place", r.ID)
	default:
		seen[r.ID] = true
	}
	if r.Chain != ci {
		v.errorf("r%d: Chain is %d, but the rule is in chain %d", r.ID, r.Chain, ci)
	}
	switch a := r.Action.(type) {
	case Jump:
		v.target(r, a.Chain)
	case Goto:
		v.target(r, a.Chain)
	case Reject:
		if a.With == "" {
			v.errorf("r%d: REJECT without --reject-with", r.ID)
		}
	case TProxy:
		if a.Proto != 6 && a.Proto != 17 || a.Port == 0 {
			v.errorf("r%d: TPROXY to %s port %d", r.ID, rules.ProtoName(a.Proto), a.Port)
		}
	case Accept, Drop, Return, Log, None:
	default:
		v.errorf("r%d: unknown action %T", r.ID, r.Action)
	}
	v.st = ruleState{}
	for _, m := range r.Matches {
		if err := m.verify(v, &v.st); err != nil {
			v.errorf("r%d: %v", r.ID, err)
		}
	}
}

func (v *verifier) target(r *Rule, to int) {
	if to <= 0 || to >= len(v.p.Chains) {
		v.errorf("r%d: jump to chain %d, want 1..%d", r.ID, to, len(v.p.Chains)-1)
	}
}

// acyclic checks that no chain can reach itself through jumps and gotos.
func (v *verifier) acyclic() {
	state := make([]uint8, len(v.p.Chains)) // 0 new, 1 on the path, 2 done
	var visit func(ci int) bool
	visit = func(ci int) bool {
		state[ci] = 1
		for _, r := range v.p.Chains[ci].Rules {
			to, ok := JumpTarget(r.Action)
			if !ok || to <= 0 || to >= len(v.p.Chains) {
				continue
			}
			if state[to] == 1 {
				v.errorf("r%d: jump to %s makes a loop", r.ID, v.p.Chains[to].Name)
				return false
			}
			if state[to] == 0 && !visit(to) {
				return false
			}
		}
		state[ci] = 2
		return true
	}
	for ci := range v.p.Chains {
		if state[ci] == 0 && !visit(ci) {
			return
		}
	}
}

func (v *verifier) addr(a netip.Addr) error {
	if !a.IsValid() || a.BitLen() != v.p.Family.Bits() {
		return fmt.Errorf("address %v is not an %s address", a, v.p.Family)
	}
	return nil
}

// ruleState is what a rule's earlier matches ensure.
type ruleState struct {
	proto bool // a Proto match without Neg
	guard int  // bytes of transport header ensured by L4Header matches
}

// needs checks that the rule's earlier L4Header matches ensure n bytes
// of transport header for the match what.
func (st *ruleState) needs(n int, what string) error {
	if st.guard < n {
		return fmt.Errorf("%s without an L4Header of at least %d bytes before it", what, n)
	}
	return nil
}

func (v *verifier) dir(d Dir, either bool) error {
	if d == Src || d == Dst || (either && d == SrcOrDst) {
		return nil
	}
	return fmt.Errorf("bad direction %s", d)
}
