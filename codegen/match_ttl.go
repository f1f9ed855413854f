package codegen

import (
	"github.com/cilium/ebpf/asm"

	"bpfwall/ir"
)

// -m ttl and -m hl.
var ttlCode = kind[ir.TTL]{
	emit: func(c *compiler, _ *ir.Rule, m ir.TTL, next, _ string) bool {
		c.b.emit(ld(asm.R1, asm.R6, pktTTL, asm.Byte))
		v := int32(m.Value)
		switch m.Op {
		case ir.CmpEq:
			c.b.emit(asm.JNE.Imm(asm.R1, v, next))
		case ir.CmpNe:
			c.b.emit(asm.JEq.Imm(asm.R1, v, next))
		case ir.CmpLt:
			c.b.emit(asm.JGE.Imm(asm.R1, v, next))
		case ir.CmpGt:
			c.b.emit(asm.JLE.Imm(asm.R1, v, next))
		}
		return false
	},
	lookup: refuse[ir.TTL]("ttl/hl match"),
	pure:   always[ir.TTL],
}
