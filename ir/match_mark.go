package ir

import (
	"fmt"

	"bpfwall/model"
	"bpfwall/rules"
)

// Mark is -m mark (mark_mt): (mark & Mask) == Value.
type Mark struct {
	Value, Mask uint32
	Neg         bool
}

func (m Mark) eval(p *Program, st *State, pkt *model.Packet) outcome {
	return is((pkt.Mark&m.Mask == m.Value) != m.Neg)
}

func (m Mark) appendTo(b []byte, fam rules.Family) []byte {
	b = append(b, "mark "...)
	b = neg(b, m.Neg)
	b = fmt.Appendf(b, "%#x", m.Value)
	if m.Mask != 0xffffffff {
		b = fmt.Appendf(b, "/%#x", m.Mask)
	}
	return b
}

func (m Mark) verify(v *verifier, st *ruleState) error {
	return nil
}

func init() {
	lowers(func(l *lowerer, ms []Match, r *rules.Rule, m *rules.Mark, nft bool) []Match {
		return append(ms, Mark{Value: m.Value, Mask: m.Mask, Neg: m.Neg})
	})
}
