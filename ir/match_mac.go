package ir

import (
	"bytes"
	"net"

	"bpfwall/rules"
)

// SrcMAC is -m mac --mac-source (mac_mt). A packet without an Ethernet
// header never matches, even when Neg is set.
type SrcMAC struct {
	Addr [6]byte
	Neg  bool
}

func (m SrcMAC) eval(p *Program, st *State, pkt *Packet) outcome {
	// mac_mt: no Ethernet header, no match, whatever the inversion.
	if len(pkt.SrcMAC) != 6 {
		return noMatch
	}
	return is(bytes.Equal(pkt.SrcMAC, m.Addr[:]) != m.Neg)
}

func (m SrcMAC) appendTo(b []byte, fam rules.Family) []byte {
	b = append(b, "mac-src "...)
	b = neg(b, m.Neg)
	return append(b, net.HardwareAddr(m.Addr[:]).String()...)
}

func (m SrcMAC) verify(v *verifier, st *ruleState) error {
	return nil
}
