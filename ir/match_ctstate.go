package ir

import (
	"fmt"
	"strings"

	"bpfwall/rules"
)

// CTState is -m conntrack --ctstate and -m state --state (conntrack_mt,
// state_mt): the packet's conntrack state is one of States.
type CTState struct {
	States ConnState
	Neg    bool
}

// ConnState is a set of conntrack states, as conntrack_mt computes it for
// a packet: exactly one of INVALID, ESTABLISHED, RELATED, NEW and
// UNTRACKED, plus SNAT and DNAT when the connection is NATed.
type ConnState uint16

const (
	ConnInvalid ConnState = 1 << iota
	ConnEstablished
	ConnRelated
	ConnNew
	ConnUntracked
	ConnSNAT
	ConnDNAT
	// ConnUnknown is not a conntrack state: it marks a packet whose state
	// bpfwall's program cannot determine (Packet.ConntrackWithoutEntry).
	ConnUnknown
)

var connStateNames = []string{"INVALID", "ESTABLISHED", "RELATED", "NEW", "UNTRACKED", "SNAT", "DNAT", "UNKNOWN"}

func (s ConnState) String() string {
	if s == 0 {
		return "none"
	}
	var names []string
	for i, n := range connStateNames {
		if s&(1<<i) != 0 {
			names = append(names, n)
		}
	}
	if rest := s &^ (1<<len(connStateNames) - 1); rest != 0 {
		names = append(names, fmt.Sprintf("%#x", uint16(rest)))
	}
	return strings.Join(names, ",")
}

func (m CTState) eval(p *Program, st *State, pkt *Packet) outcome {
	state := pkt.CTState
	if state&ConnUnknown != 0 {
		// bpfwall's program cannot tell the state: it drops. (Class
		// U never gets here: TraceState defers it first.)
		return hotdrop
	}
	if state == 0 {
		state = ConnInvalid // no conntrack entry
	}
	return is((state&m.States != 0) != m.Neg)
}

func (m CTState) appendTo(b []byte, fam rules.Family) []byte {
	b = append(b, "ctstate "...)
	b = neg(b, m.Neg)
	return append(b, m.States.String()...)
}

func (m CTState) verify(v *verifier, st *ruleState) error {
	if m.States == 0 || m.States&^(ConnDNAT<<1-1) != 0 {
		return fmt.Errorf("bad conntrack states %s", m.States)
	}
	return nil
}

// conntrack reads the ports and TCP's header and options (tcp_error).
func (CTState) transportNeed() (int, bool) { return 0, true }

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
	var s ConnState
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
