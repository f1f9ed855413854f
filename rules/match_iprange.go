package rules

import "net/netip"

// AddrRange is an inclusive address range.
type AddrRange struct{ From, To netip.Addr }

// Contains reports whether a is in r.
func (r AddrRange) Contains(a netip.Addr) bool {
	return a.BitLen() == r.From.BitLen() && r.From.Compare(a) <= 0 && a.Compare(r.To) <= 0
}

// IPRange is "-m iprange"; a nil range is not tested.
type IPRange struct {
	Located
	Src, Dst       *AddrRange
	SrcNeg, DstNeg bool
}

func (m *IPRange) Name() string { return "iprange" }

func (m *IPRange) appendSave(b []byte) []byte {
	for _, x := range []struct {
		name string
		r    *AddrRange
		neg  bool
	}{{"src-range", m.Src, m.SrcNeg}, {"dst-range", m.Dst, m.DstNeg}} {
		if x.r == nil {
			continue
		}
		b = appendFlag(b, x.name, x.neg)
		b = append(b, ' ')
		b = append(b, x.r.From.String()...)
		b = append(b, '-')
		b = append(b, x.r.To.String()...)
	}
	return b
}
