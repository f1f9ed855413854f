package codegen

import (
	"encoding/binary"
	"net/netip"

	"bpfwall/codegen/pkt"
	"bpfwall/ir"
)

// -s and -d: the address under a mask.
var addrCode = &kind[ir.Addr]{
	emit: func(c *compiler, _ *ir.Rule, m ir.Addr, next, _ string) bool {
		c.addr(m, next)
		return false
	},
	pure: always[ir.Addr],
}

// addrWords returns the address as host-order words, as parse stores it.
func addrWords(a netip.Addr) []uint32 {
	if a.Is4() {
		b := a.As4()
		return []uint32{binary.BigEndian.Uint32(b[:])}
	}
	b := a.As16()
	w := make([]uint32, 4)
	for i := range w {
		w[i] = binary.BigEndian.Uint32(b[4*i:])
	}
	return w
}

func addrOff(d ir.Dir) int16 {
	if d == ir.Dst {
		return pkt.Dst
	}
	return pkt.Src
}

// addr emits -s / -d: (address & Mask) == Addr.
func (c *compiler) addr(m ir.Addr, next string) {
	want, mask := addrWords(m.Addr), addrWords(m.Mask)
	offs := make([]int16, len(want))
	for i := range offs {
		offs[i] = addrOff(m.Dir) + int16(4*i)
	}
	c.words(offs, want, mask, m.Neg, next)
}
