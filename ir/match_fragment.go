package ir

import (
	"fmt"

	"bpfwall/model"
	"bpfwall/rules"
)

// Fragment is -f (IPv4 only): the packet is a non-first fragment (its
// fragment offset is not zero). Neg is "! -f".
type Fragment struct{ Neg bool }

func (m Fragment) eval(p *Program, st *State, pkt *model.Packet) outcome {
	return is((pkt.FragOffset != 0) != m.Neg)
}

func (m Fragment) appendTo(b []byte, fam rules.Family) []byte {
	b = neg(b, m.Neg)
	return append(b, "frag"...)
}

func (m Fragment) verify(v *verifier, st *ruleState) error {
	if v.p.Family != rules.IPv4 {
		return fmt.Errorf("fragment match in an %s program", v.p.Family)
	}
	return nil
}
