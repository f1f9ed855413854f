package ir

import (
	"fmt"
	"strconv"

	"bpfwall/model"
	"bpfwall/rules"
)

// Length is -m length (length_mt, length_mt6): the IPv4 total length, or
// the IPv6 payload length plus 40, is in Min..Max.
type Length struct {
	Min, Max uint16
	Neg      bool
}

func (m Length) eval(p *Program, st *State, pkt *model.Packet) outcome {
	return is((int(m.Min) <= pkt.Length && pkt.Length <= int(m.Max)) != m.Neg)
}

func (m Length) appendTo(b []byte, fam rules.Family) []byte {
	b = append(b, "length "...)
	b = neg(b, m.Neg)
	if m.Min == m.Max {
		return strconv.AppendUint(b, uint64(m.Min), 10)
	}
	return fmt.Appendf(b, "%d:%d", m.Min, m.Max)
}

func (m Length) verify(v *verifier, st *ruleState) error {
	if m.Min > m.Max {
		return fmt.Errorf("empty length range %d:%d", m.Min, m.Max)
	}
	return nil
}

func init() {
	lowers(func(l *lowerer, ms []Match, r *rules.Rule, m *rules.Length, nft bool) []Match {
		return l.lowerLength(ms, m)
	})
}

// lowerLength lowers -m length.
func (l *lowerer) lowerLength(ms []Match, m *rules.Length) []Match {
	if m.Min > m.Max {
		l.errorf(m.Pos, "length range %d:%d is empty", m.Min, m.Max)
		return ms
	}
	if l.prog.Reassembled {
		l.errorf(m.Pos, "length match in %s: netfilter sees the reassembled datagram there, bpfwall its fragments, whose datagram length is unknown", l.hook)
		return ms
	}
	ms = append(ms, Length{Min: m.Min, Max: m.Max, Neg: m.Neg})
	return ms
}
