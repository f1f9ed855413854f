package codegen

import (
	"github.com/cilium/ebpf/asm"

	"bpfwall/codegen/insn"
	"bpfwall/codegen/pkt"
	"bpfwall/ir"
)

// nft's payload loads of the transport header: a load past the packet
// fails to no match, never a drop.
var transportCode = &kind[ir.Transport]{
	emit: func(c *compiler, _ *ir.Rule, m ir.Transport, next, _ string) bool {
		c.b.Emit(
			insn.Ld(asm.R1, asm.R6, pkt.L4Len, asm.Word),
			asm.JLT.Imm(asm.R1, int32(m.Len), next),
		)
		return false
	},
	pure: always[ir.Transport],
}
