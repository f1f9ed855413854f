package ir

import (
	"fmt"
	"net/netip"

	"bpfwall/model"
	"bpfwall/rules"
)

// TProxyTo is nft's tproxy statement (nft_tproxy_eval): it holds when the
// socket on Addr:Port of protocol Proto exists (Addr invalid: the address
// the packet arrived on), and makes it the packet's socket, which the
// verdict then delivers (accept) or not (drop); without a socket the rule
// does not match. It is the last match of its rule. Eval assumes the
// socket exists.
type TProxyTo struct {
	Proto uint8 // 6 or 17
	Addr  netip.Addr
	Port  uint16
}

func (m TProxyTo) eval(p *Program, st *State, pkt *model.Packet) outcome {
	return matched // the socket is assumed to exist
}

func (m TProxyTo) appendTo(b []byte, fam rules.Family) []byte {
	b = fmt.Appendf(b, "tproxy %s", rules.ProtoName(m.Proto))
	if m.Addr.IsValid() {
		b = append(b, " "+m.Addr.String()...)
	}
	return fmt.Appendf(b, " port %d", m.Port)
}

func (m TProxyTo) verify(v *verifier, st *ruleState) error {
	if m.Proto != 6 && m.Proto != 17 || m.Port == 0 {
		return fmt.Errorf("tproxy to %s port %d", rules.ProtoName(m.Proto), m.Port)
	}
	return nil
}
