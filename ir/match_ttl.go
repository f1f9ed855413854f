package ir

import (
	"fmt"

	"bpfwall/model"
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

func (m TTL) eval(p *Program, st *State, pkt *model.Packet) outcome {
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

func init() {
	lowers(func(l *lowerer, ms []Match, r *rules.Rule, m *rules.TTL, nft bool) []Match { return l.lowerTTL(ms, m) })
	lowers(func(l *lowerer, ms []Match, r *rules.Rule, m *rules.HL, nft bool) []Match { return l.lowerHL(ms, m) })
}

// lowerTTL lowers -m ttl, an IPv4 match.
func (l *lowerer) lowerTTL(ms []Match, m *rules.TTL) []Match {
	if l.fam != rules.IPv4 {
		l.errorf(m.Pos, "ttl match is only valid in ipv4 rule sets")
		return ms
	}
	return l.ttl(ms, m, m.Op, m.Value)
}

// lowerHL lowers -m hl, an IPv6 match.
func (l *lowerer) lowerHL(ms []Match, m *rules.HL) []Match {
	if l.fam != rules.IPv6 {
		l.errorf(m.Pos, "hl match is only valid in ipv6 rule sets")
		return ms
	}
	return l.ttl(ms, m, m.Op, m.Value)
}

func (l *lowerer) ttl(ms []Match, m rules.Match, op rules.CompareOp, v uint8) []Match {
	var cmp CompareOp
	switch op {
	case rules.OpEq:
		cmp = CmpEq
	case rules.OpNe:
		cmp = CmpNe
	case rules.OpLt:
		cmp = CmpLt
	case rules.OpGt:
		cmp = CmpGt
	default:
		l.errorf(m.Position(), "%s match: unknown comparison %d", m.Name(), op)
		return ms
	}
	if l.hook == "FORWARD" {
		return forwardTTL(ms, cmp, v)
	}
	return append(ms, TTL{Op: cmp, Value: v})
}
