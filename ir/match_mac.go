package ir

import (
	"bytes"
	"net"
	"slices"

	"bpfwall/model"
	"bpfwall/rules"
)

// SrcMAC is -m mac --mac-source (mac_mt). A packet without an Ethernet
// header never matches, even when Neg is set.
type SrcMAC struct {
	Addr [6]byte
	Neg  bool
}

func (m SrcMAC) eval(p *Program, st *State, pkt *model.Packet) outcome {
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

func init() {
	lowers(func(l *lowerer, ms []Match, r *rules.Rule, m *rules.MAC, nft bool) []Match { return l.lowerMAC(ms, m) })
}

// lowerMAC lowers -m mac.
func (l *lowerer) lowerMAC(ms []Match, m *rules.MAC) []Match {
	if len(m.Addr) != 6 {
		l.errorf(m.Pos, "mac address %s is not 6 bytes long", m.Addr)
		return ms
	}
	// xt_mac registers for these hooks only; the kernel refuses the
	// table otherwise.
	if !slices.Contains([]string{"PREROUTING", "INPUT", "FORWARD"}, l.hook) {
		l.errorf(m.Pos, "mac match is only valid in PREROUTING, INPUT and FORWARD, not %s", l.hook)
		return ms
	}
	var a [6]byte
	copy(a[:], m.Addr)
	ms = append(ms, SrcMAC{Addr: a, Neg: m.Neg})
	return ms
}
