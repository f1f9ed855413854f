package ir

import (
	"fmt"

	"bpfwall/rules"
)

// CompareOp is the comparison of a TTL match.
type CompareOp uint8

const (
	CmpEq CompareOp = iota + 1
	CmpNe
	CmpLt
	CmpGt
)

func (op CompareOp) String() string {
	switch op {
	case CmpEq:
		return "=="
	case CmpNe:
		return "!="
	case CmpLt:
		return "<"
	case CmpGt:
		return ">"
	}
	return fmt.Sprintf("CompareOp(%d)", uint8(op))
}

// TTL is -m ttl (IPv4 TTL) and -m hl (IPv6 hop limit), as ttl_mt / hl_mt6:
// the field compared with Value.
type TTL struct {
	Op    CompareOp
	Value uint8
}

func (m TTL) eval(p *Program, st *State, pkt *Packet) outcome {
	switch m.Op {
	case CmpEq:
		return is(pkt.TTL == m.Value)
	case CmpNe:
		return is(pkt.TTL != m.Value)
	case CmpLt:
		return is(pkt.TTL < m.Value)
	case CmpGt:
		return is(pkt.TTL > m.Value)
	}
	return noMatch
}

func (m TTL) appendTo(b []byte, fam rules.Family) []byte {
	name := "ttl"
	if fam == rules.IPv6 {
		name = "hl"
	}
	return fmt.Appendf(b, "%s %s %d", name, m.Op, m.Value)
}

func (m TTL) verify(v *verifier, st *ruleState) error {
	if m.Op < CmpEq || m.Op > CmpGt {
		return fmt.Errorf("ttl match with comparison %d", m.Op)
	}
	return nil
}
