package codegen

import (
	"github.com/cilium/ebpf/asm"

	"bpfwall/ir"
)

// -m dscp: parse stores the DSCP only in programs whose rules test it.
var dscpCode = kind[ir.DSCP]{
	emit: func(c *compiler, _ *ir.Rule, m ir.DSCP, next, _ string) bool {
		c.b.emit(ld(asm.R1, asm.R6, pktDSCP, asm.Byte))
		c.equal(asm.R1, uint32(m.Value), m.Neg, next)
		return false
	},
	lookup:  refuse[ir.DSCP]("dscp match"),
	pure:    always[ir.DSCP],
	collect: func(c *compiler, _ ir.DSCP) { c.readsDSCP = true },
}
