package ir

import (
	"fmt"

	"bpfwall/model"
	"bpfwall/rules"
)

// L4Header starts every group of transport-header matches that came from
// one extension (tcp_mt, udp_mt, multiport_mt, icmp_match, icmp6_match). It
// does not match non-first fragments; on a first fragment or an unfragmented
// packet with fewer than Len bytes of transport header it drops the packet
// (hotdrop).
type L4Header struct {
	Len int
	// TinyFragDrop is tcp_mt's extra rule: an IPv4 fragment at offset 8
	// bytes (1 in the header's units) is dropped, since it could rewrite the
	// TCP flags of the first fragment.
	TinyFragDrop bool
}

func (m L4Header) eval(p *Program, st *State, pkt *model.Packet) outcome {
	// "Must not be a fragment" in tcp_mt, udp_mt, multiport_mt,
	// icmp_match and icmp6_match; tcp_mt also drops the "evil" IPv4
	// fragment at offset 1 (8 bytes).
	if pkt.FragOffset != 0 {
		if m.TinyFragDrop && p.Family == rules.IPv4 && pkt.FragOffset == 8 {
			return hotdrop
		}
		return noMatch
	}
	// skb_header_pointer failed: "we can't examine this packet, hence
	// no choice but to drop".
	if pkt.L4Len < m.Len {
		return hotdrop
	}
	return matched
}

func (m L4Header) appendTo(b []byte, fam rules.Family) []byte {
	b = fmt.Appendf(b, "l4hdr %d", m.Len)
	if m.TinyFragDrop {
		b = append(b, " frag8-drop"...)
	}
	return b
}

func (m L4Header) verify(v *verifier, st *ruleState) error {
	if m.Len <= 0 {
		return fmt.Errorf("L4Header of %d bytes", m.Len)
	}
	// The kernel refuses transport matches in rules that do not test
	// for their protocol.
	if !st.proto {
		return fmt.Errorf("L4Header without a protocol match before it")
	}
	st.guard = max(st.guard, m.Len)
	return nil
}

func (L4Header) transportNeed() (int, bool) { return 0, false }
