package codegen

import (
	"encoding/binary"

	"github.com/cilium/ebpf/asm"

	"bpfwall/codegen/insn"
	"bpfwall/codegen/pkt"
	"bpfwall/ir"
)

// -m mac --mac-source. At a netfilter hook, a packet may have no MAC
// header xt_mac reads (parseNetfilterMAC): pkt.MACHi is then 0, and the
// match fails, inverted or not, as mac_mt's does.
var macCode = &kind[ir.SrcMAC]{
	emit: func(c *compiler, _ *ir.Rule, m ir.SrcMAC, next, _ string) bool {
		hi := uint32(binary.BigEndian.Uint16(m.Addr[0:2]))
		lo := binary.BigEndian.Uint32(m.Addr[2:6])
		if c.hook == HookNetfilter {
			hi |= macPresent
			if m.Neg {
				c.b.Emit(
					insn.Ld(asm.R1, asm.R6, pkt.MACHi, asm.Word),
					asm.JEq.Imm(asm.R1, 0, next),
				)
			}
		}
		c.words([]int16{pkt.MACHi, pkt.MACLo}, []uint32{hi, lo}, []uint32{0xffffffff, 0xffffffff}, m.Neg, next)
		return false
	},
	lookup:  refuse[ir.SrcMAC]("mac match"),
	pure:    always[ir.SrcMAC],
	collect: func(c *compiler, _ ir.SrcMAC) { c.readsMAC = true },
}
