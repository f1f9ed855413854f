package codegen

import (
	"github.com/cilium/ebpf/asm"

	"bpfwall/codegen/insn"
	"bpfwall/codegen/pkt"
	"bpfwall/ir"
)

// -m dscp: parse stores the DSCP only in programs whose rules test it.
var dscpCode = &kind[ir.DSCP]{
	emit: func(c *compiler, _ *ir.Rule, m ir.DSCP, next, _ string) bool {
		c.b.Emit(insn.Ld(asm.R1, asm.R6, pkt.DSCP, asm.Byte))
		c.equal(asm.R1, uint32(m.Value), m.Neg, next)
		return false
	},
	lookup:  refuse[ir.DSCP]("dscp match"),
	pure:    always[ir.DSCP],
	collect: func(c *compiler, _ ir.DSCP) { c.readsDSCP = true },
}
