package codegen

import (
	"github.com/cilium/ebpf/asm"

	"bpfwall/codegen/insn"
	"bpfwall/codegen/pkt"
	"bpfwall/ir"
)

// --tcp-flags and --syn: the flags under Mask equal Comp.
var tcpFlagsCode = &kind[ir.TCPFlags]{
	emit: func(c *compiler, _ *ir.Rule, m ir.TCPFlags, next, _ string) bool {
		if m.Mask == 0 {
			c.constant((m.Comp == 0) != m.Neg, next)
			return false
		}
		c.b.Emit(insn.Ld(asm.R1, asm.R6, pkt.TCPFlags, asm.Byte))
		if m.Mask != 0xff {
			c.b.Emit(asm.And.Imm(asm.R1, int32(m.Mask)))
		}
		c.equal(asm.R1, uint32(m.Comp), m.Neg, next)
		return false
	},
	lookup: refuse[ir.TCPFlags]("tcp flags match"),
	pure:   always[ir.TCPFlags],
}
