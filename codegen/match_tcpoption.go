package codegen

import (
	"fmt"
	"slices"

	"github.com/cilium/ebpf/asm"

	"bpfwall/codegen/insn"
	"bpfwall/codegen/pkt"
	"bpfwall/ir"
)

// -m tcp --tcp-option: parse sets a bit per option kind the rules test;
// options cut short drop the packet, as tcp_find_option's caller does.
var tcpOptionCode = &kind[ir.TCPOption]{
	emit: func(c *compiler, _ *ir.Rule, m ir.TCPOption, next, hotdrop string) bool {
		c.b.Emit(
			insn.Ld(asm.R1, asm.R6, pkt.Flags, asm.Byte),
			asm.And.Imm(asm.R1, pkt.FlagTCPOptsTruncated),
			asm.JNE.Imm(asm.R1, 0, hotdrop),
		)
		c.bit(pkt.TCPOpts, c.optBit(m.Kind), m.Neg, next)
		return true
	},
	lookup: refuse[ir.TCPOption]("tcp option match"),
	collect: func(c *compiler, m ir.TCPOption) {
		if !slices.Contains(c.optKinds, m.Kind) {
			c.optKinds = append(c.optKinds, m.Kind)
		}
	},
}

func (c *compiler) optBit(kind uint8) int {
	for i, k := range c.optKinds {
		if k == kind {
			return i
		}
	}
	panic(fmt.Sprintf("codegen: tcp option %d was not collected", kind))
}
