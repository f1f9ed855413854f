package ir

import (
	"fmt"
	"strconv"

	"bpfwall/rules"
)

// ICMP is -m icmp / -m icmp6 (icmp_match, icmp6_match): the type is Type
// and the code is in CodeMin..CodeMax. Any tests no type: IPv4's type
// "any", which matches every type and code (CodeMin 0, CodeMax 255), or
// nft's "icmp code" without a type.
type ICMP struct {
	Any              bool
	Type             uint8
	CodeMin, CodeMax uint8
	Neg              bool
}

func (m ICMP) eval(p *Program, st *State, pkt *Packet) outcome {
	return is(((m.Any || pkt.ICMPType == m.Type) && m.CodeMin <= pkt.ICMPCode && pkt.ICMPCode <= m.CodeMax) != m.Neg)
}

func (m ICMP) appendTo(b []byte, fam rules.Family) []byte {
	if fam == rules.IPv6 {
		b = append(b, "icmpv6-type "...)
	} else {
		b = append(b, "icmp-type "...)
	}
	b = neg(b, m.Neg)
	if m.Any {
		b = append(b, "any"...)
	} else {
		b = strconv.AppendUint(b, uint64(m.Type), 10)
	}
	switch {
	case m.CodeMin == 0 && m.CodeMax == 0xff:
	case m.CodeMin == m.CodeMax:
		b = fmt.Appendf(b, "/%d", m.CodeMin)
	default:
		b = fmt.Appendf(b, "/%d:%d", m.CodeMin, m.CodeMax)
	}
	return b
}

func (m ICMP) verify(v *verifier, st *ruleState) error {
	n := 2
	if m.CodeMin == 0 && m.CodeMax == 0xff {
		n = 1 // the type alone, as nft loads it
	}
	if err := st.needs(n, "icmp match"); err != nil {
		return err
	}
	if m.CodeMin > m.CodeMax {
		return fmt.Errorf("empty icmp code range %d:%d", m.CodeMin, m.CodeMax)
	}
	if m.Any && m.CodeMin == 0 && m.CodeMax == 0xff && v.p.Family != rules.IPv4 {
		return fmt.Errorf("icmp type any in an %s program", v.p.Family)
	}
	return nil
}
