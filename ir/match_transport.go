package ir

import (
	"fmt"

	"bpfwall/model"
	"bpfwall/rules"
)

// Transport guards the transport-header payload loads of an nft rule:
// with fewer than Len bytes of transport header the load fails and the
// rule does not match. Unlike L4Header it never drops the packet, and it
// holds for non-first fragments: the loads nft rules make (ports, flags,
// icmp type and code; 1, 2 or 4 aligned bytes) take
// nft_payload_fast_eval, which reads the fragment from nft's transport
// offset (see Decode) without testing the fragment offset.
type Transport struct{ Len int }

func (m Transport) eval(p *Program, st *State, pkt *model.Packet) outcome {
	// Loads of 1, 2 and 4 aligned bytes take nft_payload_fast_eval,
	// which checks the length but not the fragment offset.
	if pkt.L4Len < m.Len {
		return noMatch
	}
	return matched
}

func (m Transport) appendTo(b []byte, fam rules.Family) []byte {
	return fmt.Appendf(b, "transport %d", m.Len)
}

func (m Transport) verify(v *verifier, st *ruleState) error {
	if m.Len <= 0 {
		return fmt.Errorf("Transport of %d bytes", m.Len)
	}
	if !st.proto {
		return fmt.Errorf("Transport without a protocol match before it")
	}
	st.guard = max(st.guard, m.Len)
	return nil
}

func (m Transport) transportNeed() (int, bool) { return m.Len, false }
