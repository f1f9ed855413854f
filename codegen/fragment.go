package codegen

import "github.com/cilium/ebpf/asm"

// fragmentGate decides fragments before the chain where netfilter sees
// reassembled datagrams (ir.Program.Reassembled): a later fragment passes
// (LaterFragment), a first fragment without the transport bytes the
// program reads is dropped (TinyFragment), and any other first fragment
// goes through the chain as the datagram it stands for. r8 is 0.
func (c *compiler) fragmentGate() {
	b := c.b
	b.note("netfilter sees reassembled datagrams here: the first fragment decides")
	whole := b.fresh("whole_datagram")
	pkt := c.mainPkt()
	b.emit(
		ld(asm.R1, asm.R10, pkt+pktFlags, asm.Byte),
		asm.And.Imm(asm.R1, flagFragment),
		asm.JEq.Imm(asm.R1, 0, whole),
		ld(asm.R1, asm.R10, pkt+pktFragOff, asm.Word),
		mov(asm.R7, LaterFragment),
		mov(asm.R9, c.hook.pass()),
		asm.JNE.Imm(asm.R1, 0, symMainEnd),
	)
	if c.defers() {
		// Conntrack sees the reassembled datagram: the netfilter stage
		// decides it (not from a VLAN-tagged frame: see deferClassU).
		b.emit(
			ld(asm.R1, asm.R10, pkt+pktFlags, asm.Byte),
			asm.JSet.Imm(asm.R1, flagVLAN, "fragment_tagged"),
			ja(symDeferred),
		)
		b.mark("fragment_tagged")
	}
	if need, _ := c.orig.FirstFragmentNeed(protoTCP); need == 0 {
		b.mark(whole) // the program reads no transport header
		return
	}
	b.emit(
		ld(asm.R1, asm.R10, pkt+pktProto, asm.Byte),
		ld(asm.R2, asm.R10, pkt+pktL4Len, asm.Word),
		ld(asm.R3, asm.R10, pkt+pktFlags, asm.Byte),
		asm.And.Imm(asm.R3, flagTCPOptsTruncated),
		mov(asm.R7, TinyFragment),
		mov(asm.R9, c.hook.drop()),
	)
	// The protocols with a header of their own; every other protocol
	// needs what FirstFragmentNeed says for protocol 0.
	for _, proto := range []uint8{protoICMP, protoTCP, protoUDP, protoDCCP, protoICMPv6, protoSCTP, protoUDPLite} {
		need, opts := c.orig.FirstFragmentNeed(proto)
		if need == 0 && !opts {
			continue
		}
		other := b.fresh("fragment_not_proto")
		b.emit(asm.JNE.Imm(asm.R1, int32(proto), other))
		if need > 0 {
			b.emit(asm.JLT.Imm(asm.R2, int32(need), symMainEnd))
		}
		if opts {
			b.emit(asm.JNE.Imm(asm.R3, 0, symMainEnd))
		}
		b.emit(ja(whole))
		b.mark(other)
	}
	if need, _ := c.orig.FirstFragmentNeed(0); need > 0 {
		b.emit(asm.JLT.Imm(asm.R2, int32(need), symMainEnd))
	}
	b.mark(whole)
}
