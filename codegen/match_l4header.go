package codegen

import (
	"github.com/cilium/ebpf/asm"

	"bpfwall/codegen/insn"
	"bpfwall/codegen/pkt"
	"bpfwall/ir"
	"bpfwall/rules"
)

// The transport header a tcp, udp or icmp match needs: a first fragment
// whose header is cut short is dropped, as the matches' hotdrop does.
var l4HeaderCode = &kind[ir.L4Header]{
	emit: func(c *compiler, _ *ir.Rule, m ir.L4Header, next, hotdrop string) bool {
		b := c.b
		b.Emit(insn.Ld(asm.R1, asm.R6, pkt.FragOff, asm.Word))
		if m.TinyFragDrop && c.p.Family == rules.IPv4 {
			b.Emit(asm.JEq.Imm(asm.R1, 8, hotdrop))
		}
		b.Emit(
			asm.JNE.Imm(asm.R1, 0, next),
			insn.Ld(asm.R1, asm.R6, pkt.L4Len, asm.Word),
			asm.JLT.Imm(asm.R1, int32(m.Len), hotdrop),
		)
		return true
	},
}
