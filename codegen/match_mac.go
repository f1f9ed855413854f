package codegen

import (
	"encoding/binary"

	"bpfwall/codegen/pkt"
	"bpfwall/ir"
)

// -m mac --mac-source. A netfilter program has no Ethernet header.
var macCode = &kind[ir.SrcMAC]{
	emit: func(c *compiler, _ *ir.Rule, m ir.SrcMAC, next, _ string) bool {
		hi := uint32(binary.BigEndian.Uint16(m.Addr[0:2]))
		lo := binary.BigEndian.Uint32(m.Addr[2:6])
		c.words([]int16{pkt.MACHi, pkt.MACLo}, []uint32{hi, lo}, []uint32{0xffffffff, 0xffffffff}, m.Neg, next)
		return false
	},
	hooks: func(c *compiler, _ ir.SrcMAC) string {
		if c.hook == HookNetfilter {
			return "mac match"
		}
		return ""
	},
	lookup:  refuse[ir.SrcMAC]("mac match"),
	pure:    always[ir.SrcMAC],
	collect: func(c *compiler, _ ir.SrcMAC) { c.readsMAC = true },
}
