package codegen

import (
	"fmt"

	"github.com/cilium/ebpf/asm"

	"bpfwall/codegen/insn"
	"bpfwall/codegen/pkt"
	"bpfwall/codegen/uapi"
	"bpfwall/ir"
	"bpfwall/rules"
)

// nft's meta l4proto.
var l4ProtoCode = &kind[ir.L4Proto]{
	emit: func(c *compiler, _ *ir.Rule, m ir.L4Proto, next, _ string) bool {
		c.l4Proto(m, next)
		return false
	},
	lookup: func(m ir.L4Proto) string {
		if !m.Neg && m.Proto != uapi.ProtoTCP && m.Proto != uapi.ProtoUDP {
			return fmt.Sprintf("protocol %s (only tcp and udp reach socket lookup)", rules.ProtoName(m.Proto))
		}
		return ""
	},
	pure: always[ir.L4Proto],
}

// l4Proto emits nft's IPv6 protocol test: the protocol is 51 where the
// walk meets an authentication header, and no rule matches, whatever Neg,
// where the walk fails.
func (c *compiler) l4Proto(m ir.L4Proto, next string) {
	b := c.b
	auth, cmp := b.Fresh("l4proto_auth"), b.Fresh("l4proto_cmp")
	b.Emit(
		insn.Ld(asm.R2, asm.R6, pkt.Flags, asm.Byte),
		insn.Movr(asm.R1, asm.R2),
		asm.And.Imm(asm.R1, pkt.FlagAuthHeader),
		asm.JNE.Imm(asm.R1, 0, auth),
		asm.And.Imm(asm.R2, pkt.FlagBadExtHeaders),
		asm.JNE.Imm(asm.R2, 0, next),
		insn.Ld(asm.R1, asm.R6, pkt.Proto, asm.Byte),
		insn.Ja(cmp),
	)
	b.Mark(auth)
	b.Emit(insn.Mov(asm.R1, nextAuth))
	b.Mark(cmp)
	c.equal(asm.R1, uint32(m.Proto), m.Neg, next)
}
