package codegen

import (
	"github.com/cilium/ebpf/asm"

	"bpfwall/codegen/insn"
	"bpfwall/codegen/pkt"
	"bpfwall/ir"
)

// -m ttl and -m hl.
var ttlCode = &kind[ir.TTL]{
	emit: func(c *compiler, _ *ir.Rule, m ir.TTL, next, _ string) bool {
		c.b.Emit(insn.Ld(asm.R1, asm.R6, pkt.TTL, asm.Byte))
		v := int32(m.Value)
		switch m.Op {
		case ir.CmpEq:
			c.b.Emit(asm.JNE.Imm(asm.R1, v, next))
		case ir.CmpNe:
			c.b.Emit(asm.JEq.Imm(asm.R1, v, next))
		case ir.CmpLt:
			c.b.Emit(asm.JGE.Imm(asm.R1, v, next))
		case ir.CmpGt:
			c.b.Emit(asm.JLE.Imm(asm.R1, v, next))
		}
		return false
	},
	lookup: refuse[ir.TTL]("ttl/hl match"),
	pure:   always[ir.TTL],
}
