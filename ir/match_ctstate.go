package ir

import (
	"fmt"

	"bpfwall/model"
	"bpfwall/rules"
)

// CTState is -m conntrack --ctstate and -m state --state (conntrack_mt,
// state_mt): the packet's conntrack state is one of States.
type CTState struct {
	States model.ConnState
	Neg    bool
}

func (m CTState) eval(p *Program, st *State, pkt *model.Packet) outcome {
	state := pkt.CTState
	if state&model.ConnUnknown != 0 {
		// bpfwall's program cannot tell the state: it drops. (Class
		// U never gets here: TraceState defers it first.)
		return hotdrop
	}
	if state == 0 {
		state = model.ConnInvalid // no conntrack entry
	}
	return is((state&m.States != 0) != m.Neg)
}

func (m CTState) appendTo(b []byte, fam rules.Family) []byte {
	b = append(b, "ctstate "...)
	b = neg(b, m.Neg)
	return append(b, m.States.String()...)
}

func (m CTState) verify(v *verifier, st *ruleState) error {
	if m.States == 0 || m.States&^(model.ConnDNAT<<1-1) != 0 {
		return fmt.Errorf("bad conntrack states %s", m.States)
	}
	return nil
}

// conntrack reads the ports and TCP's header and options (tcp_error).
func (CTState) transportNeed() (int, bool) { return 0, true }

func init() {
	lowers(func(l *lowerer, ms []Match, r *rules.Rule, m *rules.Conntrack, nft bool) []Match {
		return l.lowerConntrack(ms, m)
	})
	lowers(func(l *lowerer, ms []Match, r *rules.Rule, m *rules.State, nft bool) []Match {
		return l.ctState(ms, m, m.State, m.Neg)
	})
}

// lowerConntrack lowers -m conntrack, whose state test alone bpfwall compiles.
func (l *lowerer) lowerConntrack(ms []Match, m *rules.Conntrack) []Match {
	if len(m.Other) > 0 {
		l.errorf(m.Pos, "conntrack --%s is not supported", m.Other[0].Name)
		return ms
	}
	return l.ctState(ms, m, m.State, m.StateNeg)
}

func (l *lowerer) ctState(ms []Match, m rules.Match, state uint16, neg bool) []Match {
	if state == 0 {
		return ms // no state test
	}
	var s model.ConnState
	for _, b := range ctStateBits {
		if state&b.from != 0 {
			s |= b.to
			state &^= b.from
		}
	}
	if state != 0 {
		l.errorf(m.Position(), "%s match: unknown state bits %#x", m.Name(), state)
		return ms
	}
	return append(ms, CTState{States: s, Neg: neg})
}
