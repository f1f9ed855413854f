package ir

import (
	"fmt"

	"bpfwall/model"
	"bpfwall/rules"
)

// Proto is -p. In IPv4 it tests the header's protocol field. In IPv6 it
// tests the upper-layer header ipv6_find_hdr finds behind the extension
// headers, and drops the packet (hotdrop) when that search fails on a first
// fragment (ip6_packet_match). "-p all" is no match in IPv4; in IPv6 it is
// Proto 0, which tests only that the extension headers can be walked.
type Proto struct {
	Proto uint8
	Neg   bool
}

func (m Proto) eval(p *Program, st *State, pkt *model.Packet) outcome {
	// ip6_packet_match: when ipv6_find_hdr fails the rule does not
	// match, and the packet is dropped (the fragment offset it reports
	// is then always 0).
	if p.Family == rules.IPv6 && pkt.BadExtHeaders {
		return hotdrop
	}
	if m.Proto == 0 {
		return matched // ip6tables' "-p all": only the header walk above
	}
	return is((pkt.Proto == m.Proto) != m.Neg)
}

func (m Proto) appendTo(b []byte, fam rules.Family) []byte {
	b = append(b, "proto "...)
	b = neg(b, m.Neg)
	return append(b, rules.ProtoName(m.Proto)...)
}

func (m Proto) verify(v *verifier, st *ruleState) error {
	if m.Proto == 0 && (v.p.Family != rules.IPv6 || m.Neg) {
		return fmt.Errorf("protocol 0: -p all is only tested (for its extension header walk) in ipv6, never negated")
	}
	st.proto = st.proto || !m.Neg
	return nil
}

func init() {
	lowers(func(l *lowerer, ms []Match, r *rules.Rule, m *rules.ProtocolsNot, nft bool) []Match {
		return l.lowerProtocolsNot(ms, r, m)
	})
}

// lowerProtocolsNot lowers nft's negated protocol set.
func (l *lowerer) lowerProtocolsNot(ms []Match, r *rules.Rule, m *rules.ProtocolsNot) []Match {
	for _, p := range m.Protos {
		if r.NFT && l.fam == rules.IPv6 {
			// meta l4proto: no match where the extension headers
			// cannot be walked, as for the rule's own protocol.
			ms = append(ms, L4Proto{Proto: p, Neg: true})
		} else {
			ms = append(ms, Proto{Proto: p, Neg: true})
		}
	}
	return ms
}
