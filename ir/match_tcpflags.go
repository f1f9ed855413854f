package ir

import (
	"bpfwall/model"
	"bpfwall/rules"
)

// TCPFlags is --tcp-flags / --syn: (flags & Mask) == Comp.
type TCPFlags struct {
	Mask, Comp uint8
	Neg        bool
}

func (m TCPFlags) eval(p *Program, st *State, pkt *model.Packet) outcome {
	return is((pkt.TCPFlags&m.Mask == m.Comp) != m.Neg)
}

func (m TCPFlags) appendTo(b []byte, fam rules.Family) []byte {
	b = append(b, "tcp-flags "...)
	b = neg(b, m.Neg)
	return append(b, tcpFlagNames(m.Mask)+"="+tcpFlagNames(m.Comp)...)
}

func (m TCPFlags) verify(v *verifier, st *ruleState) error {
	return st.needs(14, "tcp flags match")
}
