package ir

import (
	"fmt"

	"bpfwall/model"
	"bpfwall/rules"
)

// PktType is -m pkttype (pkttype_mt).
type PktType struct {
	Type model.PacketType
	Neg  bool
}

func (m PktType) eval(p *Program, st *State, pkt *model.Packet) outcome {
	return is((p.pktType(pkt) == m.Type) != m.Neg)
}

func (m PktType) appendTo(b []byte, fam rules.Family) []byte {
	b = append(b, "pkttype "...)
	b = neg(b, m.Neg)
	return append(b, m.Type.String()...)
}

func (m PktType) verify(v *verifier, st *ruleState) error {
	if m.Type > model.PacketOutgoing {
		return fmt.Errorf("bad packet type %s", m.Type)
	}
	return nil
}

func init() {
	lowers(func(l *lowerer, ms []Match, r *rules.Rule, m *rules.PktType, nft bool) []Match {
		return append(ms, PktType{Type: model.PacketType(m.Type), Neg: m.Neg})
	})
}
