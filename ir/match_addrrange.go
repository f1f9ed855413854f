package ir

import (
	"errors"
	"fmt"
	"net/netip"

	"bpfwall/model"
	"bpfwall/rules"
)

// AddrRange is -m iprange (iprange_mt4, iprange_mt6): From <= address <= To.
type AddrRange struct {
	Dir      Dir
	From, To netip.Addr
	Neg      bool
}

func (m AddrRange) eval(p *Program, st *State, pkt *model.Packet) outcome {
	a := pkt.Src
	if m.Dir == Dst {
		a = pkt.Dst
	}
	return is((m.From.Compare(a) <= 0 && a.Compare(m.To) <= 0) != m.Neg)
}

func (m AddrRange) appendTo(b []byte, fam rules.Family) []byte {
	b = append(b, m.Dir.String()+"-range "...)
	b = neg(b, m.Neg)
	return append(b, m.From.String()+"-"+m.To.String()...)
}

func (m AddrRange) verify(v *verifier, st *ruleState) error {
	if err := errors.Join(v.dir(m.Dir, false), v.addr(m.From), v.addr(m.To)); err != nil {
		return err
	}
	if m.From.Compare(m.To) > 0 {
		return fmt.Errorf("empty address range %s-%s", m.From, m.To)
	}
	return nil
}

func (m AddrRange) alternatives(p *Program, out []alt, limit int) ([]alt, bool) {
	if m.Neg {
		return nil, false
	}
	for _, fp := range rangePrefixes(nil, m.From.AsSlice(), m.To.AsSlice()) {
		out = append(out, alt{addrField(m.Dir), fp})
	}
	return out, true
}

func init() {
	lowers(func(l *lowerer, ms []Match, r *rules.Rule, m *rules.IPRange, nft bool) []Match {
		return l.lowerIPRange(ms, m)
	})
}

// lowerIPRange lowers -m iprange.
func (l *lowerer) lowerIPRange(ms []Match, m *rules.IPRange) []Match {
	ms = l.addrRange(ms, m, Src, m.Src, m.SrcNeg)
	ms = l.addrRange(ms, m, Dst, m.Dst, m.DstNeg)
	return ms
}

func (l *lowerer) addrRange(ms []Match, m rules.Match, dir Dir, r *rules.AddrRange, neg bool) []Match {
	if r == nil {
		return ms
	}
	if r.From.BitLen() != l.fam.Bits() || r.To.BitLen() != l.fam.Bits() {
		l.errorf(m.Position(), "address range %s-%s is not an %s range", r.From, r.To, l.fam)
		return ms
	}
	if r.From.Compare(r.To) > 0 {
		l.errorf(m.Position(), "address range %s-%s is empty", r.From, r.To)
		return ms
	}
	return append(ms, AddrRange{Dir: dir, From: r.From, To: r.To, Neg: neg})
}
