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

// -p. In IPv6 it drops the packet when ipv6_find_hdr fails, whatever the
// protocol tested, as ip6_packet_match does; "-p all" is that walk and
// nothing else.
var protoCode = &kind[ir.Proto]{
	emit: func(c *compiler, _ *ir.Rule, m ir.Proto, next, hotdrop string) bool {
		b := c.b
		if c.p.Family == rules.IPv6 {
			b.Emit(
				insn.Ld(asm.R1, asm.R6, pkt.Flags, asm.Byte),
				asm.And.Imm(asm.R1, pkt.FlagBadExtHeaders),
				asm.JNE.Imm(asm.R1, 0, hotdrop),
			)
		}
		if m.Proto != 0 || c.p.Family != rules.IPv6 {
			b.Emit(insn.Ld(asm.R1, asm.R6, pkt.Proto, asm.Byte))
			c.equal(asm.R1, uint32(m.Proto), m.Neg, next)
		}
		return c.p.Family == rules.IPv6
	},
	// A rule for another protocol would drop or accept packets that
	// never come to socket lookup: it means nothing there.
	lookup: func(m ir.Proto) string {
		if !m.Neg && m.Proto != 0 && m.Proto != uapi.ProtoTCP && m.Proto != uapi.ProtoUDP {
			return fmt.Sprintf("protocol %s (only tcp and udp reach socket lookup)", rules.ProtoName(m.Proto))
		}
		return ""
	},
	// The IPv6 walk drops a packet whose extension headers cannot be
	// walked, whatever the protocol tested.
	pure: func(c *compiler, _ ir.Proto) bool { return c.p.Family == rules.IPv4 },
}
