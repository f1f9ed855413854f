package ir

import (
	"errors"
	"fmt"
	"net/netip"

	"bpfwall/model"
	"bpfwall/rules"
)

// Addr is -s / -d (ip_packet_match, ip6_packet_match): (address & Mask) ==
// Addr. Mask may be non-contiguous; Addr is already masked. A zero Mask with
// Neg never matches ("! -s 0/0").
type Addr struct {
	Dir        Dir
	Addr, Mask netip.Addr
	Neg        bool
}

// Prefix returns the prefix Addr/Mask and true when Mask is contiguous.
func (m Addr) Prefix() (netip.Prefix, bool) {
	bits := rules.Net{Addr: m.Addr, Mask: m.Mask}.Bits()
	if bits < 0 {
		return netip.Prefix{}, false
	}
	return netip.PrefixFrom(m.Addr, bits), true
}

func (m Addr) eval(p *Program, st *State, pkt *model.Packet) outcome {
	a := pkt.Src
	if m.Dir == Dst {
		a = pkt.Dst
	}
	return is((maskAddr(a, m.Mask) == m.Addr) != m.Neg)
}

func (m Addr) appendTo(b []byte, fam rules.Family) []byte {
	b = append(b, m.Dir.String()+" "...)
	b = neg(b, m.Neg)
	return append(b, rules.Net{Addr: m.Addr, Mask: m.Mask}.String()...)
}

func (m Addr) verify(v *verifier, st *ruleState) error {
	if err := errors.Join(v.dir(m.Dir, false), v.addr(m.Addr), v.addr(m.Mask)); err != nil {
		return err
	}
	if maskAddr(m.Addr, m.Mask) != m.Addr {
		return fmt.Errorf("address %s has bits outside mask %s", m.Addr, m.Mask)
	}
	return nil
}

func (m Addr) alternatives(p *Program, out []alt, limit int) ([]alt, bool) {
	pfx, ok := m.Prefix()
	if !ok || m.Neg {
		return nil, false
	}
	a := pfx.Addr().As16()
	v := a[:]
	if pfx.Addr().Is4() {
		v = a[12:]
	}
	return append(out, alt{addrField(m.Dir), prefixOf(v, pfx.Bits())}), true
}

func init() {
	lowers(func(l *lowerer, ms []Match, r *rules.Rule, m *rules.MaskedAddr, nft bool) []Match {
		return l.lowerMaskedAddr(ms, m)
	})
}

// lowerMaskedAddr lowers nft's second address test under a mask.
func (l *lowerer) lowerMaskedAddr(ms []Match, m *rules.MaskedAddr) []Match {
	dir := Src
	if m.Dst {
		dir = Dst
	}
	ms = l.addr(ms, dir, m.Net, m.Neg, m.Pos)
	return ms
}
