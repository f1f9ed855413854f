package codegen

import (
	"bpfwall/codegen/pkt"
	"bpfwall/ir"
)

// -m mark: the skb's mark, which only hooks with an sk_buff see.
var markCode = &kind[ir.Mark]{
	emit: func(c *compiler, _ *ir.Rule, m ir.Mark, next, _ string) bool {
		c.words([]int16{pkt.Mark}, []uint32{m.Value}, []uint32{m.Mask}, m.Neg, next)
		return false
	},
	hooks:  skbOnly[ir.Mark]("mark match"),
	lookup: refuse[ir.Mark]("mark match"),
	pure:   always[ir.Mark],
}
