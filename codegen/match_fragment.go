package codegen

import (
	"github.com/cilium/ebpf/asm"

	"bpfwall/codegen/insn"
	"bpfwall/codegen/pkt"
	"bpfwall/ir"
)

// -f: the fragment offset is not 0.
var fragmentCode = &kind[ir.Fragment]{
	emit: func(c *compiler, _ *ir.Rule, m ir.Fragment, next, _ string) bool {
		c.b.Emit(insn.Ld(asm.R1, asm.R6, pkt.FragOff, asm.Word))
		// -f holds for a non-zero offset: fails when it equals 0.
		c.equal(asm.R1, 0, !m.Neg, next)
		return false
	},
	lookup: refuse[ir.Fragment]("fragment match (-f)"),
	pure:   always[ir.Fragment],
}
