package codegen

import (
	"github.com/cilium/ebpf/asm"

	"bpfwall/codegen/insn"
	"bpfwall/codegen/pkt"
	"bpfwall/ir"
)

// -m icmp and -m icmp6.
var icmpCode = &kind[ir.ICMP]{
	emit: func(c *compiler, _ *ir.Rule, m ir.ICMP, next, _ string) bool {
		c.icmp(m, next)
		return false
	},
	lookup: refuse[ir.ICMP]("icmp match"),
	pure:   always[ir.ICMP],
}

// icmp emits -m icmp / icmp6: the type is Type (unless Any) and the code
// in CodeMin..CodeMax.
func (c *compiler) icmp(m ir.ICMP, next string) {
	b := c.b
	if m.Any && m.CodeMin == 0 && m.CodeMax == 0xff {
		c.constant(!m.Neg, next)
		return
	}
	fail := next
	if m.Neg {
		fail = b.Fresh("icmp_other")
	}
	if !m.Any {
		b.Emit(
			insn.Ld(asm.R1, asm.R6, pkt.ICMPType, asm.Byte),
			asm.JNE.Imm(asm.R1, int32(m.Type), fail),
		)
	}
	if m.CodeMin > 0 || m.CodeMax < 0xff {
		b.Emit(insn.Ld(asm.R1, asm.R6, pkt.ICMPCode, asm.Byte))
		if m.CodeMin > 0 {
			b.Emit(asm.JLT.Imm(asm.R1, int32(m.CodeMin), fail))
		}
		if m.CodeMax < 0xff {
			b.Emit(asm.JGT.Imm(asm.R1, int32(m.CodeMax), fail))
		}
	}
	if m.Neg {
		b.Emit(insn.Ja(next))
		b.Mark(fail)
	}
}
