package ir

import (
	"fmt"
	"strconv"

	"bpfwall/model"
	"bpfwall/rules"
)

// L4Proto is nft's "meta l4proto", and the protocol dependency of nft's
// transport expressions, in IPv6 (in IPv4 it is Proto): the protocol
// nft_set_pktinfo_ipv6 finds with ipv6_find_hdr and IP6_FH_F_AUTH, which
// stops at an authentication header. Where that search fails no rule
// testing it matches, whatever Neg; nothing is dropped.
type L4Proto struct {
	Proto uint8
	Neg   bool
}

func (m L4Proto) eval(p *Program, st *State, pkt *model.Packet) outcome {
	proto := pkt.Proto
	switch {
	case p.Family == rules.IPv6 && pkt.AuthHeader:
		proto = model.ProtoAH
	case p.Family == rules.IPv6 && pkt.BadExtHeaders:
		return noMatch // NFT_BREAK
	}
	return is((proto == m.Proto) != m.Neg)
}

func (m L4Proto) appendTo(b []byte, fam rules.Family) []byte {
	b = append(b, "l4proto "...)
	b = neg(b, m.Neg)
	return strconv.AppendUint(b, uint64(m.Proto), 10)
}

func (m L4Proto) verify(v *verifier, st *ruleState) error {
	if v.p.Family != rules.IPv6 {
		return fmt.Errorf("l4proto match in an %s program", v.p.Family)
	}
	st.proto = st.proto || !m.Neg
	return nil
}
