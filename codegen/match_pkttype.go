package codegen

import (
	"github.com/cilium/ebpf/asm"

	"bpfwall/codegen/insn"
	"bpfwall/codegen/pkt"
	"bpfwall/ir"
)

// -m pkttype: the skb's packet type, which only hooks with an sk_buff
// see.
var pktTypeCode = &kind[ir.PktType]{
	emit: func(c *compiler, _ *ir.Rule, m ir.PktType, next, _ string) bool {
		c.b.Emit(insn.Ld(asm.R1, asm.R6, pkt.PktType, asm.Byte))
		c.equal(asm.R1, uint32(m.Type), m.Neg, next)
		return false
	},
	hooks:  skbOnly[ir.PktType]("pkttype match"),
	lookup: refuse[ir.PktType]("pkttype match"),
	pure:   always[ir.PktType],
}
