package ir

import (
	"fmt"
	"strconv"

	"bpfwall/model"
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

func (m ICMP) eval(p *Program, st *State, pkt *model.Packet) outcome {
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

func init() {
	lowers(func(l *lowerer, ms []Match, r *rules.Rule, m *rules.ICMP, nft bool) []Match {
		return l.icmp(ms, r, m, nft, false)
	})
	lowers(func(l *lowerer, ms []Match, r *rules.Rule, m *rules.ICMPCode, nft bool) []Match {
		// nft's "icmp code" alone: its dependency, the load of the type
		// and code bytes, and the code of any type.
		return l.icmp(ms, r, &rules.ICMP{Located: m.Located, V6: m.V6, CodeMin: m.CodeMin, CodeMax: m.CodeMax}, nft, true)
	})
}

func (l *lowerer) icmp(ms []Match, r *rules.Rule, m *rules.ICMP, nft, anyType bool) []Match {
	if m.V6 != (l.fam == rules.IPv6) {
		l.errorf(m.Pos, "%s match is not valid in %s rule sets", m.Name(), l.fam)
		return ms
	}
	proto, name := uint8(model.ProtoICMP), "icmp"
	if m.V6 {
		proto, name = model.ProtoICMPv6, "icmpv6"
	}
	if !l.needProto(r, m, name, proto) {
		return ms
	}
	if m.CodeMin > m.CodeMax {
		l.errorf(m.Pos, "icmp code range %d:%d is empty", m.CodeMin, m.CodeMax)
		return ms
	}
	switch {
	case !nft:
		ms = l4Header(ms, 8, false) // struct icmphdr and icmp6hdr are 8 bytes
	case anyType, m.CodeMin != 0 || m.CodeMax != 0xff:
		ms = transport(ms, 2) // nft loads the type and the code byte
	default:
		ms = transport(ms, 1)
	}
	switch {
	case anyType && m.CodeMin == 0 && m.CodeMax == 0xff:
		return ms // every code: the load is the test
	case anyType:
		return append(ms, ICMP{Any: true, Type: 0xff, CodeMin: m.CodeMin, CodeMax: m.CodeMax})
	}
	// Type 255 is "any" in icmp_type_code_match only; icmp6_type_code_match
	// compares it like any other type.
	if !m.V6 && m.Type == 0xff {
		return append(ms, ICMP{Any: true, Type: 0xff, CodeMin: 0, CodeMax: 0xff, Neg: m.Neg})
	}
	return append(ms, ICMP{Type: m.Type, CodeMin: m.CodeMin, CodeMax: m.CodeMax, Neg: m.Neg})
}
