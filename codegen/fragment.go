package codegen

import (
	"github.com/cilium/ebpf/asm"

	"bpfwall/codegen/abi"
	"bpfwall/codegen/insn"
	"bpfwall/codegen/pkt"
	"bpfwall/codegen/uapi"
)

// fragmentGate decides fragments before the chain where netfilter sees
// reassembled datagrams (ir.Program.Reassembled): a later fragment passes
// (abi.LaterFragment), a first fragment without the transport bytes the
// program reads is dropped (abi.TinyFragment), and any other first fragment
// goes through the chain as the datagram it stands for. r8 is 0.
func (c *compiler) fragmentGate() {
	b := c.b
	b.Note("netfilter sees reassembled datagrams here: the first fragment decides")
	whole := b.Fresh("whole_datagram")
	base := c.mainPkt()
	b.Emit(
		insn.Ld(asm.R1, asm.R10, base+pkt.Flags, asm.Byte),
		asm.And.Imm(asm.R1, pkt.FlagFragment),
		asm.JEq.Imm(asm.R1, 0, whole),
		insn.Ld(asm.R1, asm.R10, base+pkt.FragOff, asm.Word),
		insn.Mov(asm.R7, int32(abi.LaterFragment)),
		insn.Mov(asm.R9, c.hook.pass()),
		asm.JNE.Imm(asm.R1, 0, symMainEnd),
	)
	if c.defers() {
		// Conntrack sees the reassembled datagram: the netfilter stage
		// decides it (not from a VLAN-tagged frame: see deferClassU).
		b.Emit(
			insn.Ld(asm.R1, asm.R10, base+pkt.Flags, asm.Byte),
			asm.JSet.Imm(asm.R1, pkt.FlagVLAN, "fragment_tagged"),
			insn.Ja(symDeferred),
		)
		b.Mark("fragment_tagged")
	}
	if need, _ := c.orig.FirstFragmentNeed(uapi.ProtoTCP); need == 0 {
		b.Mark(whole) // the program reads no transport header
		return
	}
	b.Emit(
		insn.Ld(asm.R1, asm.R10, base+pkt.Proto, asm.Byte),
		insn.Ld(asm.R2, asm.R10, base+pkt.L4Len, asm.Word),
		insn.Ld(asm.R3, asm.R10, base+pkt.Flags, asm.Byte),
		asm.And.Imm(asm.R3, pkt.FlagTCPOptsTruncated),
		insn.Mov(asm.R7, int32(abi.TinyFragment)),
		insn.Mov(asm.R9, c.hook.drop()),
	)
	// The protocols with a header of their own; every other protocol
	// needs what FirstFragmentNeed says for protocol 0.
	for _, proto := range []uint8{uapi.ProtoICMP, uapi.ProtoTCP, uapi.ProtoUDP, uapi.ProtoDCCP, uapi.ProtoICMPv6, uapi.ProtoSCTP, uapi.ProtoUDPLite} {
		need, opts := c.orig.FirstFragmentNeed(proto)
		if need == 0 && !opts {
			continue
		}
		other := b.Fresh("fragment_not_proto")
		b.Emit(asm.JNE.Imm(asm.R1, int32(proto), other))
		if need > 0 {
			b.Emit(asm.JLT.Imm(asm.R2, int32(need), symMainEnd))
		}
		if opts {
			b.Emit(asm.JNE.Imm(asm.R3, 0, symMainEnd))
		}
		b.Emit(insn.Ja(whole))
		b.Mark(other)
	}
	if need, _ := c.orig.FirstFragmentNeed(0); need > 0 {
		b.Emit(asm.JLT.Imm(asm.R2, int32(need), symMainEnd))
	}
	b.Mark(whole)
}
