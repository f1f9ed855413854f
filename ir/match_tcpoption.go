package ir

import (
	"fmt"
	"strconv"

	"bpfwall/model"
	"bpfwall/rules"
)

// TCPOption is --tcp-option (tcp_find_option): an option of kind Kind is
// present. Options beyond the end of the packet drop it (hotdrop).
type TCPOption struct {
	Kind uint8
	Neg  bool
}

func (m TCPOption) eval(p *Program, st *State, pkt *model.Packet) outcome {
	if pkt.TCPOptionsTruncated {
		return hotdrop
	}
	return is(hasTCPOption(pkt.TCPOptions, m.Kind) != m.Neg)
}

func (m TCPOption) appendTo(b []byte, fam rules.Family) []byte {
	b = append(b, "tcp-option "...)
	b = neg(b, m.Neg)
	return strconv.AppendUint(b, uint64(m.Kind), 10)
}

func (m TCPOption) verify(v *verifier, st *ruleState) error {
	if m.Kind == 0 {
		return fmt.Errorf("tcp option 0")
	}
	return st.needs(20, "tcp option match")
}

// conntrack reads the ports and TCP's header and options (tcp_error).
func (TCPOption) transportNeed() (int, bool) { return 0, true }
