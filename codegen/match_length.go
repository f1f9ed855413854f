package codegen

import (
	"github.com/cilium/ebpf/asm"

	"bpfwall/codegen/pkt"
	"bpfwall/ir"
)

// -m length: the IPv4 total length, or the IPv6 payload length plus 40.
var lengthCode = &kind[ir.Length]{
	emit: func(c *compiler, _ *ir.Rule, m ir.Length, next, _ string) bool {
		c.inRanges([]int16{pkt.Length}, asm.Word, []valueRange{{uint32(m.Min), uint32(m.Max)}}, 0xffffffff, m.Neg, next)
		return false
	},
	lookup: refuse[ir.Length]("length match"),
	pure:   always[ir.Length],
}
