package codegen

import (
	"net/netip"

	"github.com/cilium/ebpf/asm"

	"bpfwall/codegen/insn"
	"bpfwall/ir"
)

// -m iprange.
var addrRangeCode = &kind[ir.AddrRange]{
	emit: func(c *compiler, _ *ir.Rule, m ir.AddrRange, next, _ string) bool {
		c.addrRange(m, next)
		return false
	},
	pure: always[ir.AddrRange],
}

// addrRange emits -m iprange: From <= address <= To, comparing the
// address word by word.
func (c *compiler) addrRange(m ir.AddrRange, next string) {
	b := c.b
	from, to := addrWords(m.From), addrWords(m.To)
	lowest := m.From == netip.IPv4Unspecified() || m.From == netip.IPv6Unspecified()
	highest := m.To == netip.AddrFrom4([4]byte{255, 255, 255, 255}) ||
		m.To == netip.AddrFrom16([16]byte{255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255})
	if lowest && highest {
		c.constant(!m.Neg, next)
		return
	}
	outside := next
	if m.Neg {
		outside = b.Fresh("outside")
	}
	off := addrOff(m.Dir)
	if !lowest {
		c.compareWords(off, from, asm.JGT, asm.JLT, outside)
	}
	if !highest {
		c.compareWords(off, to, asm.JLT, asm.JGT, outside)
	}
	if m.Neg {
		b.Emit(insn.Ja(next))
		b.Mark(outside)
	}
}

// compareWords compares the address at off with bound, most significant
// word first: the first word that differs decides. It jumps to fail when
// that word is beyond the bound (beyond is JLT for a lower bound, JGT for
// an upper one) and falls through when the address is within it.
func (c *compiler) compareWords(off int16, bound []uint32, within, beyond asm.JumpOp, fail string) {
	b := c.b
	ok := b.Fresh("within")
	for i, w := range bound {
		b.Emit(insn.Ld(asm.R1, asm.R6, off+int16(4*i), asm.Word))
		if i < len(bound)-1 {
			b.Emit(within.Imm32(asm.R1, insn.U32(w), ok))
		}
		b.Emit(beyond.Imm32(asm.R1, insn.U32(w), fail))
	}
	b.Mark(ok)
}
