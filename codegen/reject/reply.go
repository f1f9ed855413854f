package reject

import (
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/btf"

	"bpfwall/codegen/abi"
	"bpfwall/codegen/insn"
	"bpfwall/codegen/pkt"
	"bpfwall/codegen/uapi"
)

// reply emits reject function k, which sends what with names.
// It returns the hook's code: the reply's transmission, or a drop.
//
//	r6 ctx, r7 pkt
func (g *gen) reply(k int, with string) {
	b := g.b
	t := types[with]
	v6 := g.IPv6
	sym := Sym(k)
	b.Function(&btf.Func{Name: sym, Linkage: btf.GlobalFunc, Type: g.Proto}, "REJECT --reject-with %s: build the reply in place and transmit it", with)
	l := func(s string) string { return sym + "_" + s }
	noReply := l("no_reply")
	b.Emit(
		insn.Movr(asm.R6, asm.R1),
		insn.Movr(asm.R7, asm.R2),
		asm.JEq.Imm(asm.R7, 0, noReply),
	)
	for off := int16(rjPkt); off < 0; off += 8 {
		b.Emit(insn.StImm(asm.R10, off, 0, asm.DWord))
	}
	b.Emit(
		insn.StImm(asm.R10, rjKey, 0, asm.Word),
		insn.Movr(asm.R2, asm.R10),
		asm.Add.Imm(asm.R2, rjKey),
		insn.MapRef(asm.R1, abi.RejectScratchMap),
		asm.FnMapLookupElem.Call(),
		asm.JEq.Imm(asm.R0, 0, noReply),
		insn.St(asm.R10, rjLoop+insn.LoopCtx, asm.R6, asm.DWord),
		insn.St(asm.R10, rjLoop+insn.LoopState, asm.R0, asm.DWord),
		insn.St(asm.R10, rjPkt, asm.R7, asm.DWord),
	)

	g.offsets(sym, noReply)
	g.silent(t, noReply)
	if t.tcpReset {
		g.tcpChecks(noReply)
	} else if v6 {
		g.icmpv6Checks(noReply)
	} else {
		g.icmpChecks(noReply)
	}
	g.verifyChecksum(sym, t.tcpReset, noReply)

	if t.tcpReset {
		g.buildReset(sym, noReply)
	} else {
		g.buildUnreach(sym, t.code, noReply)
	}

	b.Mark(noReply)
	b.Emit(insn.Mov(asm.R0, g.Drop), asm.Return())
}

// offsets stores the offsets of the IP header (after the VLAN tags
// parse skipped) and of the transport header in rjL3 and rjL4; r6 is the
// context and r7 the parsed packet.
func (g *gen) offsets(sym, noReply string) {
	b := g.b
	l := func(s string) string { return sym + "_" + s }
	b.Note("the offsets of the IP header (after the VLAN tags parse skipped) and of the transport header")
	done := l("l3_found")
	b.Emit(
		insn.Movr(asm.R1, asm.R6),
		insn.Mov(asm.R2, 12),
		insn.Movr(asm.R3, asm.R10),
		asm.Add.Imm(asm.R3, rjTmp),
		insn.Mov(asm.R4, 2),
		g.loadHelper().Call(),
		asm.JNE.Imm(asm.R0, 0, noReply),
		insn.Ld(asm.R9, asm.R10, rjTmp, asm.Half),
		insn.Ntoh(asm.R9, asm.Half),
		insn.Mov(asm.R8, 14),
	)
	for range 2 {
		tag := b.Fresh(sym + "_vlan")
		b.Emit(
			asm.JEq.Imm(asm.R9, uapi.EtherTypeVLAN, tag),
			asm.JNE.Imm(asm.R9, uapi.EtherTypeQinQ, done),
		)
		b.Mark(tag)
		b.Emit(
			insn.Movr(asm.R1, asm.R6),
			insn.Movr(asm.R2, asm.R8),
			asm.Add.Imm(asm.R2, 2),
			insn.Movr(asm.R3, asm.R10),
			asm.Add.Imm(asm.R3, rjTmp),
			insn.Mov(asm.R4, 2),
			g.loadHelper().Call(),
			asm.JNE.Imm(asm.R0, 0, noReply),
			insn.Ld(asm.R9, asm.R10, rjTmp, asm.Half),
			insn.Ntoh(asm.R9, asm.Half),
			asm.Add.Imm(asm.R8, 4),
		)
	}
	b.Mark(done)
	b.Emit(
		insn.St(asm.R10, rjL3, asm.R8, asm.DWord),
		// The transport header is pkt.L4Len bytes before the end.
		insn.Ld(asm.R1, asm.R7, pkt.Bytes, asm.Word),
		asm.Add.Reg(asm.R8, asm.R1),
		insn.Ld(asm.R1, asm.R7, pkt.L4Len, asm.Word),
		asm.Sub.Reg(asm.R8, asm.R1),
		insn.St(asm.R10, rjL4, asm.R8, asm.DWord),
	)

}

// silent goes to noReply for the packets the kernel answers with
// nothing, and loads the original link-layer and IP headers into rjL2
// and rjOrig.
func (g *gen) silent(t replyType, noReply string) {
	b := g.b
	v6 := g.IPv6
	b.Note("the packets the kernel sends nothing to")
	ipLen := int32(20)
	if v6 {
		ipLen = 40
	}
	b.Emit(
		// Where the datagram ends.
		insn.Ld(asm.R1, asm.R10, rjL3, asm.DWord),
		insn.Ld(asm.R2, asm.R7, pkt.Bytes, asm.Word),
		asm.Add.Reg(asm.R2, asm.R1),
		insn.St(asm.R10, rjEnd, asm.R2, asm.DWord),
		// Non-first fragments (for ICMP: icmp_send, reject6_csum_ok; for
		// TCP a fragment's data would have to pass as a TCP header with
		// a good checksum).
		insn.Ld(asm.R1, asm.R7, pkt.FragOff, asm.Word),
		asm.JNE.Imm(asm.R1, 0, noReply),
	)
	if g.Reassembled {
		// Netfilter rejects the reassembled datagram here, answering
		// about (and quoting) the whole of it; the program has only its
		// first fragment, and sends nothing (docs/reject.md).
		b.Emit(
			insn.Ld(asm.R1, asm.R7, pkt.Flags, asm.Byte),
			asm.And.Imm(asm.R1, pkt.FlagFragment),
			asm.JNE.Imm(asm.R1, 0, noReply),
		)
	}
	if v6 {
		// ipv6_skip_exthdr failed.
		b.Emit(
			insn.Ld(asm.R1, asm.R7, pkt.Flags, asm.Byte),
			asm.And.Imm(asm.R1, pkt.FlagBadExtHeaders),
			asm.JNE.Imm(asm.R1, 0, noReply),
		)
	}
	// The original headers: link layer, IP.
	b.Emit(
		insn.Ld(asm.R4, asm.R10, rjL3, asm.DWord),
		asm.JGT.Imm(asm.R4, 32, noReply),
		asm.JLT.Imm(asm.R4, 14, noReply),
		insn.Movr(asm.R1, asm.R6),
		insn.Mov(asm.R2, 0),
		insn.Movr(asm.R3, asm.R10),
		asm.Add.Imm(asm.R3, rjL2),
		g.loadHelper().Call(),
		asm.JNE.Imm(asm.R0, 0, noReply),
		insn.Movr(asm.R1, asm.R6),
		insn.Ld(asm.R2, asm.R10, rjL3, asm.DWord),
		insn.Movr(asm.R3, asm.R10),
		asm.Add.Imm(asm.R3, rjOrig),
		insn.Mov(asm.R4, ipLen),
		g.loadHelper().Call(),
		asm.JNE.Imm(asm.R0, 0, noReply),
	)
	if !v6 {
		g.ipOptions(noReply)
	}
	// Multicast and broadcast destinations: RTCF_MULTICAST and
	// RTCF_BROADCAST for IPv4 (icmp_send, nf_send_reset), for IPv6
	// icmp6_send's and nf_send_reset6's address checks.
	if v6 {
		b.Emit(
			insn.Ld(asm.R1, asm.R10, rjOrig+24, asm.Byte),
			asm.JEq.Imm(asm.R1, 0xff, noReply),
		)
		// An unspecified source; nf_send_reset6 also wants a unicast
		// destination (never ::, which ip6_rcv_core lets through).
		g.unspecified(rjOrig+8, noReply)
		if t.tcpReset {
			g.unspecified(rjOrig+24, noReply)
		}
	} else {
		b.Emit(
			insn.Ld(asm.R1, asm.R7, pkt.Dst, asm.Word),
			asm.JEq.Imm(asm.R1, -1, noReply),
			asm.RSh.Imm(asm.R1, 28),
			asm.JEq.Imm(asm.R1, 0xe, noReply),
		)
	}
	// icmp_send, icmp6_send: no replies to link-layer multicast and
	// broadcast (skb->pkt_type != PACKET_HOST). nf_send_reset and
	// nf_send_reset6 do reset such a frame when its IP destination is
	// unicast, from the device's MAC address, which the program does not
	// know: it sends nothing (a divergence, see docs/reject.md).
	g.notHost(noReply)

}

// ipOptions sends nothing to a packet with a record route or
// timestamp option. ip_options_compile writes into such a packet's header
// (its address, the time) without fixing the header checksum, and
// nf_ip_checksum sums the header with the payload: the checksum check
// fails, and neither nf_send_unreach nor nf_send_reset replies. (When the
// option has no room left, or the device vouched for the checksum, the
// kernel does reply, an ICMP error with the options echoed, which the
// program does not build: it sends nothing; see docs/reject.md.)
func (g *gen) ipOptions(noReply string) {
	b := g.b
	done := b.Fresh("no_ip_options")
	b.Emit(
		insn.Ld(asm.R4, asm.R10, rjOrig, asm.Byte),
		asm.And.Imm(asm.R4, 0x0f),
		asm.LSh.Imm(asm.R4, 2),
		asm.Sub.Imm(asm.R4, 20),
		asm.JEq.Imm(asm.R4, 0, done),
		asm.JGT.Imm(asm.R4, 40, noReply),
		insn.Ld(asm.R3, asm.R10, rjLoop+insn.LoopState, asm.DWord),
		insn.St(asm.R3, rsEnd, asm.R4, asm.DWord),
		insn.StImm(asm.R3, rsOff, 0, asm.DWord),
		insn.StImm(asm.R3, rsErr, 0, asm.DWord),
		asm.Add.Imm(asm.R3, rsBuf),
		insn.Movr(asm.R1, asm.R6),
		insn.Ld(asm.R2, asm.R10, rjL3, asm.DWord),
		asm.Add.Imm(asm.R2, 20),
		g.loadHelper().Call(),
		asm.JNE.Imm(asm.R0, 0, noReply),
		insn.Mov(asm.R1, 40),
	)
	g.loop(symOption, noReply)
	b.Mark(done)
}

// loop calls bpf_loop(r1, callback, rjLoop of this frame, 0) and
// goes to fail when the callback set rsErr; it leaves the loop state in
// r3.
func (g *gen) loop(callback, fail string) {
	g.b.Emit(
		insn.FuncRef(asm.R2, callback),
		insn.Movr(asm.R3, asm.R10),
		asm.Add.Imm(asm.R3, rjLoop),
		insn.Mov(asm.R4, 0),
		asm.FnLoop.Call(),
		insn.Ld(asm.R3, asm.R10, rjLoop+insn.LoopState, asm.DWord),
		insn.Ld(asm.R1, asm.R3, rsErr, asm.DWord),
		asm.JNE.Imm(asm.R1, 0, fail),
	)
}

// symOption is the IPv4 option walk's callback.
const symOption = "reject_ip_option_step"

// IPv4 options (ip_options_compile).
const (
	ipoptEnd       = 0
	ipoptNoop      = 1
	ipoptRR        = 7
	ipoptTimestamp = 68
)

// optionStep emits the callback that looks at the next IPv4 option
// in the scratch buffer: it sets rsErr at a record route or timestamp.
//
//	r6 state, r7 offset, r8 options' length
func (g *gen) optionStep() {
	b := g.b
	b.Function(insn.Callback(symOption), "the next IPv4 option: is it one the kernel writes into?")
	stop := symOption + "_stop"
	next := symOption + "_next"
	b.Emit(
		insn.Ld(asm.R6, asm.R2, insn.LoopState, asm.DWord),
		insn.Ld(asm.R7, asm.R6, rsOff, asm.DWord),
		insn.Ld(asm.R8, asm.R6, rsEnd, asm.DWord),
		asm.JGE.Reg(asm.R7, asm.R8, stop),
		asm.JGE.Imm(asm.R7, 40, stop),
		insn.Movr(asm.R1, asm.R6),
		asm.Add.Reg(asm.R1, asm.R7),
		insn.Ld(asm.R2, asm.R1, rsBuf, asm.Byte),
		asm.JEq.Imm(asm.R2, ipoptEnd, stop),
		insn.Movr(asm.R3, asm.R7),
		asm.Add.Imm(asm.R3, 1),
		asm.JEq.Imm(asm.R2, ipoptNoop, next),
		asm.JEq.Imm(asm.R2, ipoptRR, symOption+"_found"),
		asm.JEq.Imm(asm.R2, ipoptTimestamp, symOption+"_found"),
		// Another option: skip its length; a malformed one ends the
		// walk (ip_options_compile drops the packet before INPUT).
		asm.JGE.Reg(asm.R3, asm.R8, stop),
		insn.Ld(asm.R2, asm.R1, rsBuf+1, asm.Byte),
		asm.JLT.Imm(asm.R2, 2, stop),
		insn.Movr(asm.R3, asm.R7),
		asm.Add.Reg(asm.R3, asm.R2),
	)
	b.Mark(next)
	b.Emit(
		insn.St(asm.R6, rsOff, asm.R3, asm.DWord),
		insn.Mov(asm.R0, 0),
		asm.Return(),
	)
	b.Mark(symOption + "_found")
	b.Emit(insn.StImm(asm.R6, rsErr, 1, asm.DWord))
	b.Mark(stop)
	b.Emit(insn.Mov(asm.R0, 1), asm.Return())
}

// unspecified jumps to yes when the IPv6 address at r10+off is ::.
func (g *gen) unspecified(off int16, yes string) {
	b := g.b
	no := b.Fresh("specified")
	for i := int16(0); i < 16; i += 8 {
		b.Emit(
			insn.Ld(asm.R1, asm.R10, off+i, asm.DWord),
			asm.JNE.Imm(asm.R1, 0, no),
		)
	}
	b.Emit(insn.Ja(yes))
	b.Mark(no)
}

// notHost jumps to yes for a frame that is not PACKET_HOST.
func (g *gen) notHost(yes string) {
	b := g.b
	if g.TC {
		b.Emit(
			insn.Ld(asm.R1, asm.R6, uapi.SkbPktType, asm.Word),
			asm.JNE.Imm(asm.R1, 0, yes),
		)
		return
	}
	// XDP: the group bit of the destination MAC (eth_type_trans).
	b.Emit(
		insn.Ld(asm.R1, asm.R10, rjL2, asm.Byte),
		asm.And.Imm(asm.R1, 1),
		asm.JNE.Imm(asm.R1, 0, yes),
	)
}

// tcpChecks: nf_reject_ip_tcphdr_get, nf_reject_ip6_tcphdr_get: a
// whole TCP header, no RST in reply to a RST. The header goes to rjTCP.
func (g *gen) tcpChecks(noReply string) {
	b := g.b
	b.Emit(
		insn.Ld(asm.R1, asm.R7, pkt.Proto, asm.Byte),
		asm.JNE.Imm(asm.R1, uapi.ProtoTCP, noReply),
		insn.Ld(asm.R2, asm.R10, rjL4, asm.DWord),
		insn.Movr(asm.R1, asm.R2),
		asm.Add.Imm(asm.R1, 20),
		insn.Ld(asm.R3, asm.R10, rjEnd, asm.DWord),
		asm.JGT.Reg(asm.R1, asm.R3, noReply),
		insn.Movr(asm.R1, asm.R6),
		insn.Movr(asm.R3, asm.R10),
		asm.Add.Imm(asm.R3, rjTCP),
		insn.Mov(asm.R4, 20),
		g.loadHelper().Call(),
		asm.JNE.Imm(asm.R0, 0, noReply),
		insn.Ld(asm.R1, asm.R10, rjTCP+13, asm.Byte),
		asm.And.Imm(asm.R1, 0x04),
		asm.JNE.Imm(asm.R1, 0, noReply),
	)
}

// icmpErrorTypes are the ICMP types icmp_pointers marks as errors.
const icmpErrorTypes = 1<<1 | 1<<2 | 1<<3 | 1<<4 | 1<<5 | 1<<6 | 1<<7 | 1<<9 | 1<<10 | 1<<11 | 1<<12

// icmpChecks: icmp_send sends no error about an ICMP error, nor
// about an ICMP packet too short to have a type.
func (g *gen) icmpChecks(noReply string) {
	b := g.b
	done := b.Fresh("not_icmp_error")
	b.Emit(
		insn.Ld(asm.R1, asm.R7, pkt.Proto, asm.Byte),
		asm.JNE.Imm(asm.R1, uapi.ProtoICMP, done),
		insn.Ld(asm.R1, asm.R7, pkt.L4Len, asm.Word),
		asm.JEq.Imm(asm.R1, 0, noReply),
		insn.Ld(asm.R1, asm.R7, pkt.ICMPType, asm.Byte),
		asm.JGT.Imm(asm.R1, 18, noReply),
		insn.Mov(asm.R2, icmpErrorTypes),
		asm.RSh.Reg(asm.R2, asm.R1),
		asm.And.Imm(asm.R2, 1),
		asm.JNE.Imm(asm.R2, 0, noReply),
	)
	b.Mark(done)
}

// icmpv6Checks: reject6_csum_ok wants a transport header inside
// the packet; is_ineligible: no error about an ICMPv6 error or an ICMPv6
// packet without a type.
func (g *gen) icmpv6Checks(noReply string) {
	b := g.b
	done := b.Fresh("not_icmp6_error")
	b.Emit(
		insn.Ld(asm.R1, asm.R10, rjL4, asm.DWord),
		insn.Ld(asm.R2, asm.R10, rjEnd, asm.DWord),
		asm.JGE.Reg(asm.R1, asm.R2, noReply),
		insn.Ld(asm.R1, asm.R7, pkt.Proto, asm.Byte),
		asm.JNE.Imm(asm.R1, uapi.ProtoICMPv6, done),
		insn.Ld(asm.R1, asm.R7, pkt.ICMPType, asm.Byte),
		asm.JLT.Imm(asm.R1, 128, noReply),
	)
	b.Mark(done)
}

// Protocols whose checksum nf_reject_verify_csum does not check: GRE,
// ESP, AH, SCTP, UDP-Lite. (DCCP left the list when Linux 6.16 retired
// DCCP: its checksum is checked as any other protocol's, as the random
// differential test found.)
var uncheckedProtos = []int32{47, 50, 51, uapi.ProtoSCTP, uapi.ProtoUDPLite}

// verifyChecksum: the kernel replies only to a packet whose
// transport checksum is right (nf_reject_verify_csum, nf_ip_checksum,
// nf_ip6_checksum), unless the device vouched for it
// (CHECKSUM_UNNECESSARY, which bpf_csum_level tells on tc).
func (g *gen) verifyChecksum(sym string, tcp bool, noReply string) {
	b := g.b
	v6 := g.IPv6
	ok := sym + "_csum_ok"
	verify := sym + "_csum_verify"
	b.Note("the transport checksum")
	if g.TC {
		b.Emit(
			insn.Movr(asm.R1, asm.R6),
			insn.Mov(asm.R2, 0), // BPF_CSUM_LEVEL_QUERY
			asm.FnCsumLevel.Call(),
			asm.JSGE.Imm(asm.R0, 0, ok),
		)
	}
	b.Emit(insn.Ld(asm.R1, asm.R7, pkt.Proto, asm.Byte))
	if !tcp {
		for _, p := range uncheckedProtos {
			b.Emit(asm.JEq.Imm(asm.R1, p, ok))
		}
		// A UDP checksum of zero means none.
		b.Emit(
			asm.JNE.Imm(asm.R1, uapi.ProtoUDP, verify),
			insn.Ld(asm.R2, asm.R7, pkt.L4Len, asm.Word),
			asm.JLT.Imm(asm.R2, 8, verify),
			insn.Movr(asm.R1, asm.R6),
			insn.Ld(asm.R2, asm.R10, rjL4, asm.DWord),
			asm.Add.Imm(asm.R2, 6),
			insn.Movr(asm.R3, asm.R10),
			asm.Add.Imm(asm.R3, rjTmp),
			insn.Mov(asm.R4, 2),
			g.loadHelper().Call(),
			asm.JNE.Imm(asm.R0, 0, noReply),
			insn.Ld(asm.R1, asm.R10, rjTmp, asm.Half),
			asm.JEq.Imm(asm.R1, 0, ok),
		)
	}
	b.Mark(verify)
	// Sum the pseudo-header: IPv4's for TCP and UDP, IPv6's always.
	b.Emit(
		insn.StImm(asm.R10, rjSum, 0, asm.DWord),
		insn.Ld(asm.R1, asm.R10, rjEnd, asm.DWord),
		insn.Ld(asm.R2, asm.R10, rjL4, asm.DWord),
		asm.Sub.Reg(asm.R1, asm.R2),
		insn.St(asm.R10, rjTmp, asm.R1, asm.DWord), // transport length
	)
	pseudo := sym + "_pseudo"
	sumL4 := sym + "_sum_l4"
	if !v6 {
		b.Emit(
			insn.Ld(asm.R1, asm.R7, pkt.Proto, asm.Byte),
			asm.JEq.Imm(asm.R1, uapi.ProtoTCP, pseudo),
			asm.JEq.Imm(asm.R1, uapi.ProtoUDP, pseudo),
			insn.Ja(sumL4),
		)
	}
	b.Mark(pseudo)
	g.pseudoProto(rjOrig, -1)
	g.partialChecksum(sym, ok)
	b.Mark(sumL4)
	b.Emit(
		insn.Ld(asm.R1, asm.R10, rjL4, asm.DWord),
		insn.Ld(asm.R2, asm.R10, rjEnd, asm.DWord),
	)
	g.sumRange(noReply)
	b.Emit(insn.Ld(asm.R0, asm.R10, rjSum, asm.DWord))
	b.Emit(fold(asm.R0, asm.R1)...)
	// A valid sum is 0xffff; IPv4's sum also covers the IP header, which
	// turns an all-zero sum (an empty or all-zero payload) into 0xffff.
	b.Emit(asm.JEq.Imm(asm.R0, 0xffff, ok))
	if !v6 {
		b.Emit(asm.JEq.Imm(asm.R0, 0, ok))
	}
	b.Emit(insn.Ja(noReply))
	b.Mark(ok)
}

// partialChecksum goes to ok for a TCP or UDP packet whose checksum
// field holds the sum of its pseudo-header, now in rjSum: the packet of a
// sender that left its checksum to the device (CHECKSUM_PARTIAL), as a
// veth's peer, a bridge port or a local socket sends it. The kernel counts
// such a packet as checked (skb_csum_unnecessary) and replies; a program
// cannot see ip_summed, and a frame from a wire whose wrong checksum
// happens to be that sum gets a reply too (see docs/reject.md).
func (g *gen) partialChecksum(sym string, ok string) {
	b := g.b
	notPartial := sym + "_not_partial"
	read := sym + "_partial_field"
	b.Note("a checksum the device was left to fill in (CHECKSUM_PARTIAL)")
	b.Emit(
		insn.Ld(asm.R1, asm.R7, pkt.Proto, asm.Byte),
		insn.Mov(asm.R2, 16), // tcphdr.check
		asm.JEq.Imm(asm.R1, uapi.ProtoTCP, read),
		insn.Mov(asm.R2, 6), // udphdr.check
		asm.JNE.Imm(asm.R1, uapi.ProtoUDP, notPartial),
	)
	b.Mark(read)
	b.Emit(
		insn.Ld(asm.R1, asm.R10, rjL4, asm.DWord),
		asm.Add.Reg(asm.R2, asm.R1),
		insn.Movr(asm.R1, asm.R6),
		insn.Movr(asm.R3, asm.R10),
		asm.Add.Imm(asm.R3, rjTmp),
		insn.Mov(asm.R4, 2),
		g.loadHelper().Call(),
		// A header too short to hold the field: the whole sum decides.
		asm.JNE.Imm(asm.R0, 0, notPartial),
		insn.Ld(asm.R0, asm.R10, rjSum, asm.DWord),
	)
	b.Emit(fold(asm.R0, asm.R1)...)
	b.Emit(
		insn.Ld(asm.R1, asm.R10, rjTmp, asm.Half),
		asm.JEq.Reg(asm.R0, asm.R1, ok),
	)
	b.Mark(notPartial)
}

// fold folds the 32-bit ones' complement sum in r to 16 bits.
func fold(r, tmp asm.Register) []asm.Instruction {
	return []asm.Instruction{
		asm.Mov.Reg32(r, r),
		insn.Movr(tmp, r), asm.And.Imm(tmp, 0xffff), asm.RSh.Imm(r, 16), asm.Add.Reg(r, tmp),
		insn.Movr(tmp, r), asm.And.Imm(tmp, 0xffff), asm.RSh.Imm(r, 16), asm.Add.Reg(r, tmp),
	}
}

// pseudoProto adds to rjSum the pseudo-header of the IP header at
// r10+ip, whose transport length is at rjTmp, with protocol proto, or
// the original packet's for -1. The pseudo-header is built at rsPseudo.
func (g *gen) pseudoProto(ip int16, proto int32) {
	b := g.b
	v6 := g.IPv6
	addrs, size := int16(12), int32(12)
	if v6 {
		addrs, size = 8, 40
	}
	b.Emit(insn.Ld(asm.R3, asm.R10, rjLoop+insn.LoopState, asm.DWord))
	// The addresses, then length and protocol in network order.
	n := int16(8)
	if v6 {
		n = 32
	}
	for i := int16(0); i < n; i += 4 {
		b.Emit(
			insn.Ld(asm.R1, asm.R10, ip+addrs+i, asm.Word),
			insn.St(asm.R3, rsPseudo+i, asm.R1, asm.Word),
		)
	}
	if proto < 0 {
		b.Emit(insn.Ld(asm.R1, asm.R7, pkt.Proto, asm.Byte))
	} else {
		b.Emit(insn.Mov(asm.R1, proto))
	}
	b.Emit(insn.Ld(asm.R2, asm.R10, rjTmp, asm.DWord))
	if v6 {
		// u32 length, three zero bytes, next header.
		b.Emit(
			asm.HostTo(asm.BE, asm.R2, asm.Word),
			insn.St(asm.R3, rsPseudo+32, asm.R2, asm.Word),
			insn.StImm(asm.R3, rsPseudo+36, 0, asm.Word),
			insn.St(asm.R3, rsPseudo+39, asm.R1, asm.Byte),
		)
	} else {
		// A zero byte, the protocol, u16 length.
		b.Emit(
			insn.StImm(asm.R3, rsPseudo+8, 0, asm.Byte),
			insn.St(asm.R3, rsPseudo+9, asm.R1, asm.Byte),
			asm.HostTo(asm.BE, asm.R2, asm.Half),
			insn.St(asm.R3, rsPseudo+10, asm.R2, asm.Half),
		)
	}
	b.Emit(asm.Add.Imm(asm.R3, rsPseudo))
	g.sum(size)
}

// sumStack adds n bytes (a multiple of 4) at r10+off to rjSum.
func (g *gen) sumStack(off int16, n int32) {
	g.b.Emit(
		insn.Movr(asm.R3, asm.R10),
		asm.Add.Imm(asm.R3, int32(off)),
	)
	g.sum(n)
}

// sum adds n bytes (a multiple of 4) at r3 to rjSum.
func (g *gen) sum(n int32) {
	g.b.Emit(
		insn.Mov(asm.R1, 0),
		insn.Mov(asm.R2, 0),
		insn.Mov(asm.R4, n),
		insn.Ld(asm.R5, asm.R10, rjSum, asm.DWord),
		asm.FnCsumDiff.Call(),
		asm.Mov.Reg32(asm.R0, asm.R0),
		insn.St(asm.R10, rjSum, asm.R0, asm.DWord),
	)
}

// sumRange adds the packet bytes from offset r1 to r2 to rjSum,
// with a bpf_loop over chunks; it jumps to fail when a load fails.
func (g *gen) sumRange(fail string) {
	b := g.b
	b.Emit(
		insn.Ld(asm.R3, asm.R10, rjLoop+insn.LoopState, asm.DWord),
		insn.St(asm.R3, rsOff, asm.R1, asm.DWord),
		insn.St(asm.R3, rsEnd, asm.R2, asm.DWord),
		insn.Ld(asm.R4, asm.R10, rjSum, asm.DWord),
		insn.St(asm.R3, rsSum, asm.R4, asm.DWord),
		insn.StImm(asm.R3, rsErr, 0, asm.DWord),
		// As many steps as there are chunks (none for an empty range).
		insn.Mov(asm.R0, 0),
	)
	skip := b.Fresh("sum_steps")
	b.Emit(
		asm.JGE.Reg(asm.R1, asm.R2, skip),
		insn.Movr(asm.R0, asm.R2),
		asm.Sub.Reg(asm.R0, asm.R1),
		asm.Add.Imm(asm.R0, rsChunk-1),
		asm.RSh.Imm(asm.R0, 9),
	)
	b.Mark(skip)
	b.Emit(insn.Movr(asm.R1, asm.R0))
	g.loop(symStep, fail)
	b.Emit(
		insn.Ld(asm.R1, asm.R3, rsSum, asm.DWord),
		insn.St(asm.R10, rjSum, asm.R1, asm.DWord),
	)
}

// step emits the checksum loop's callback: it sums the next chunk.
//
//	r6 state, r7 offset, r8 end, r9 chunk length
func (g *gen) step() {
	b := g.b
	b.Function(insn.Callback(symStep), "sum the next %d bytes of the range into the checksum", rsChunk)
	stop := symStep + "_stop"
	b.Emit(
		insn.Ld(asm.R1, asm.R2, insn.LoopCtx, asm.DWord),
		insn.St(asm.R10, insn.CallbackCtx, asm.R1, asm.DWord),
		insn.Ld(asm.R6, asm.R2, insn.LoopState, asm.DWord),
		insn.Ld(asm.R7, asm.R6, rsOff, asm.DWord),
		insn.Ld(asm.R8, asm.R6, rsEnd, asm.DWord),
		asm.JGE.Reg(asm.R7, asm.R8, stop),
		insn.Movr(asm.R9, asm.R8),
		asm.Sub.Reg(asm.R9, asm.R7),
		asm.JLE.Imm(asm.R9, rsChunk, symStep+"_len"),
		insn.Mov(asm.R9, rsChunk),
	)
	b.Mark(symStep + "_len")
	b.Emit(
		asm.JLT.Imm(asm.R9, 1, stop),
		// Zero the word that the chunk's last bytes start, so that the
		// sum of the rounded-up length adds nothing after them.
		insn.Movr(asm.R1, asm.R9),
		asm.And.Imm(asm.R1, ^3),
		insn.Movr(asm.R2, asm.R6),
		asm.Add.Imm(asm.R2, rsBuf),
		asm.Add.Reg(asm.R2, asm.R1),
		insn.StImm(asm.R2, 0, 0, asm.Word),
		insn.Ld(asm.R1, asm.R10, insn.CallbackCtx, asm.DWord),
		insn.Movr(asm.R2, asm.R7),
		insn.Movr(asm.R3, asm.R6),
		asm.Add.Imm(asm.R3, rsBuf),
		insn.Movr(asm.R4, asm.R9),
		g.loadHelper().Call(),
		asm.JEq.Imm(asm.R0, 0, symStep+"_sum"),
		insn.StImm(asm.R6, rsErr, 1, asm.DWord),
		insn.Ja(stop),
	)
	b.Mark(symStep + "_sum")
	b.Emit(
		insn.Mov(asm.R1, 0),
		insn.Mov(asm.R2, 0),
		insn.Movr(asm.R3, asm.R6),
		asm.Add.Imm(asm.R3, rsBuf),
		insn.Movr(asm.R4, asm.R9),
		asm.Add.Imm(asm.R4, 3),
		asm.And.Imm(asm.R4, ^3),
		insn.Ld(asm.R5, asm.R6, rsSum, asm.DWord),
		asm.FnCsumDiff.Call(),
		asm.Mov.Reg32(asm.R0, asm.R0),
		insn.St(asm.R6, rsSum, asm.R0, asm.DWord),
		asm.Add.Reg(asm.R7, asm.R9),
		insn.St(asm.R6, rsOff, asm.R7, asm.DWord),
		insn.Mov(asm.R0, 0),
		asm.Return(),
	)
	b.Mark(stop)
	b.Emit(insn.Mov(asm.R0, 1), asm.Return())
}

// Quoting limits: icmp_send returns as much of the packet as fits in 576
// bytes; icmp6_send, in IPV6_MIN_MTU (1280).
const (
	maxQuote4 = 576 - 20 - 8
	maxQuote6 = 1280 - 40 - 8
)

// icmpTOSMask is the part of the original TOS an ICMP error keeps
// (__icmp_send: RT_TOS, IPTOS_TOS_MASK), to which it adds
// IPTOS_PREC_INTERNETCONTROL.
const (
	icmpTOSMask        = 0x1e
	icmpTOSInternetCtl = 0xc0
)

// config loads the reply's TTL (IPv4) or hop limit (IPv6) into r1.
func (g *gen) config(noReply string) {
	off := int16(0)
	if g.IPv6 {
		off = 1
	}
	g.b.Emit(
		insn.StImm(asm.R10, rjKey, 0, asm.Word),
		insn.Movr(asm.R2, asm.R10),
		asm.Add.Imm(asm.R2, rjKey),
		insn.MapRef(asm.R1, abi.RejectConfigMap),
		asm.FnMapLookupElem.Call(),
		asm.JEq.Imm(asm.R0, 0, noReply),
		insn.Ld(asm.R1, asm.R0, off, asm.Byte),
	)
}

// ipHeader writes the reply's IP header at rjHdr: from the
// original's destination to its source, carrying proto and payload bytes
// of payload after it (the length in r9).
//
//	r9 payload length
func (g *gen) ipHeader(proto int32, noReply string) {
	b := g.b
	g.config(noReply)
	if g.IPv6 {
		b.Emit(
			insn.StImm(asm.R10, rjHdr, 0x60, asm.Byte),
			insn.St(asm.R10, rjHdr+7, asm.R1, asm.Byte),
			insn.StImm(asm.R10, rjHdr+6, proto, asm.Byte),
			insn.Movr(asm.R2, asm.R9),
			asm.HostTo(asm.BE, asm.R2, asm.Half),
			insn.St(asm.R10, rjHdr+4, asm.R2, asm.Half),
		)
		for i := int16(0); i < 16; i += 8 {
			b.Emit(
				insn.Ld(asm.R2, asm.R10, rjOrig+24+i, asm.DWord),
				insn.St(asm.R10, rjHdr+8+i, asm.R2, asm.DWord),
				insn.Ld(asm.R2, asm.R10, rjOrig+8+i, asm.DWord),
				insn.St(asm.R10, rjHdr+24+i, asm.R2, asm.DWord),
			)
		}
		return
	}
	b.Emit(
		insn.StImm(asm.R10, rjHdr, 0x45, asm.Byte),
		insn.St(asm.R10, rjHdr+8, asm.R1, asm.Byte),
		insn.StImm(asm.R10, rjHdr+9, proto, asm.Byte),
		insn.Movr(asm.R2, asm.R9),
		asm.Add.Imm(asm.R2, 20),
		asm.HostTo(asm.BE, asm.R2, asm.Half),
		insn.St(asm.R10, rjHdr+2, asm.R2, asm.Half),
		insn.Ld(asm.R2, asm.R10, rjOrig+16, asm.Word),
		insn.St(asm.R10, rjHdr+12, asm.R2, asm.Word),
		insn.Ld(asm.R2, asm.R10, rjOrig+12, asm.Word),
		insn.St(asm.R10, rjHdr+16, asm.R2, asm.Word),
	)
	if proto == uapi.ProtoTCP {
		// nf_reject_iphdr_put: TOS 0, ID 0, DF.
		b.Emit(insn.StImm(asm.R10, rjHdr+6, 0x40, asm.Byte))
	} else {
		// __icmp_send: the TOS bits and the precedence of internetwork
		// control; ip_select_ident picks the ID, not DF (the ICMP
		// socket's IP_PMTUDISC_DONT).
		b.Emit(
			insn.Ld(asm.R2, asm.R10, rjOrig+1, asm.Byte),
			asm.And.Imm(asm.R2, icmpTOSMask),
			asm.Or.Imm(asm.R2, icmpTOSInternetCtl),
			insn.St(asm.R10, rjHdr+1, asm.R2, asm.Byte),
			asm.FnGetPrandomU32.Call(),
			insn.St(asm.R10, rjHdr+4, asm.R0, asm.Half),
		)
	}
	// The header checksum.
	b.Emit(
		insn.Mov(asm.R1, 0),
		insn.Mov(asm.R2, 0),
		insn.Movr(asm.R3, asm.R10),
		asm.Add.Imm(asm.R3, rjHdr),
		insn.Mov(asm.R4, 20),
		insn.Mov(asm.R5, 0),
		asm.FnCsumDiff.Call(),
	)
	b.Emit(fold(asm.R0, asm.R1)...)
	b.Emit(
		asm.Xor.Imm(asm.R0, 0xffff),
		insn.St(asm.R10, rjHdr+10, asm.R0, asm.Half),
	)
}

// swapL2 swaps the link-layer header's addresses at rjL2, a half
// word at a time (the stack wants aligned accesses).
func (g *gen) swapL2() {
	for i := int16(0); i < 6; i += 2 {
		g.b.Emit(
			insn.Ld(asm.R1, asm.R10, rjL2+i, asm.Half),
			insn.Ld(asm.R2, asm.R10, rjL2+6+i, asm.Half),
			insn.St(asm.R10, rjL2+i, asm.R2, asm.Half),
			insn.St(asm.R10, rjL2+6+i, asm.R1, asm.Half),
		)
	}
}

// l4Checksum sums the n-byte transport header at rjHdr+off into
// rjSum, with the pseudo-header of the reply's IP header for a length at
// rjTmp and proto (not for ICMP over IPv4), and stores the checksum at
// rjHdr+off+at.
func (g *gen) l4Checksum(off int16, n int32, proto int32, at int16) {
	b := g.b
	if proto != uapi.ProtoICMP {
		g.pseudoProto(rjHdr, proto)
	}
	g.sumStack(rjHdr+off, n)
	b.Emit(insn.Ld(asm.R0, asm.R10, rjSum, asm.DWord))
	b.Emit(fold(asm.R0, asm.R1)...)
	b.Emit(
		asm.Xor.Imm(asm.R0, 0xffff),
		insn.St(asm.R10, rjHdr+off+at, asm.R0, asm.Half),
	)
}

// buildReset turns the packet into nf_send_reset's (or
// nf_send_reset6's) RST and transmits it.
func (g *gen) buildReset(sym, noReply string) {
	b := g.b
	v6 := g.IPv6
	ipLen := int16(20)
	if v6 {
		ipLen = 40
	}
	tcp := rjHdr + ipLen
	b.Note("the RST: ports swapped; seq from the ACK, or an ACK of everything the packet carried")
	b.Emit(insn.Mov(asm.R9, 20))
	g.ipHeader(uapi.ProtoTCP, noReply)
	hasACK, flags := sym+"_has_ack", sym+"_flags"
	b.Emit(
		insn.Ld(asm.R1, asm.R10, rjTCP, asm.Half),
		insn.St(asm.R10, tcp+2, asm.R1, asm.Half),
		insn.Ld(asm.R1, asm.R10, rjTCP+2, asm.Half),
		insn.St(asm.R10, tcp, asm.R1, asm.Half),
		insn.StImm(asm.R10, tcp+12, 0x50, asm.Byte),
		insn.Ld(asm.R1, asm.R10, rjTCP+13, asm.Byte),
		insn.Movr(asm.R2, asm.R1),
		asm.And.Imm(asm.R2, 0x10),
		asm.JNE.Imm(asm.R2, 0, hasACK),
		// ack_seq = seq + SYN + FIN + the payload's length.
		insn.Movr(asm.R3, asm.R1),
		asm.RSh.Imm(asm.R3, 1),
		asm.And.Imm(asm.R3, 1), // SYN
		asm.And.Imm(asm.R1, 1), // FIN
		asm.Add.Reg(asm.R3, asm.R1),
		insn.Ld(asm.R1, asm.R10, rjTCP+4, asm.Word),
		insn.Ntoh(asm.R1, asm.Word),
		asm.Add.Reg(asm.R3, asm.R1),
		insn.Ld(asm.R1, asm.R10, rjEnd, asm.DWord),
		asm.Add.Reg(asm.R3, asm.R1),
		insn.Ld(asm.R1, asm.R10, rjL4, asm.DWord),
		asm.Sub.Reg(asm.R3, asm.R1),
		insn.Ld(asm.R1, asm.R10, rjTCP+12, asm.Byte),
		asm.RSh.Imm(asm.R1, 4),
		asm.LSh.Imm(asm.R1, 2),
		asm.Sub.Reg(asm.R3, asm.R1),
		asm.HostTo(asm.BE, asm.R3, asm.Word),
		insn.St(asm.R10, tcp+8, asm.R3, asm.Word),
		insn.StImm(asm.R10, tcp+13, 0x14, asm.Byte), // RST, ACK
		insn.Ja(flags),
	)
	b.Mark(hasACK)
	b.Emit(
		insn.Ld(asm.R1, asm.R10, rjTCP+8, asm.Word),
		insn.St(asm.R10, tcp+4, asm.R1, asm.Word),
		insn.StImm(asm.R10, tcp+13, 0x04, asm.Byte), // RST
	)
	b.Mark(flags)
	b.Emit(
		insn.StImm(asm.R10, rjSum, 0, asm.DWord),
		insn.StImm(asm.R10, rjTmp, 20, asm.DWord),
	)
	g.l4Checksum(ipLen, 20, uapi.ProtoTCP, 16)
	g.swapL2()

	b.Note("cut the frame to the headers, write them, transmit")
	b.Emit(
		insn.Ld(asm.R9, asm.R10, rjL3, asm.DWord),
		asm.Add.Imm(asm.R9, int32(ipLen)+20),
	)
	g.resize(noReply)
	g.store(int32(ipLen)+20, noReply)
	g.transmit()
}

// buildUnreach turns the packet into icmp_send's (or icmp6_send's)
// destination unreachable error with code, quoting the packet, and
// transmits it.
func (g *gen) buildUnreach(sym string, code uint8, noReply string) {
	b := g.b
	v6 := g.IPv6
	ipLen, maxQuote, typ, proto := int16(20), int32(maxQuote4), int32(3), int32(uapi.ProtoICMP)
	if v6 {
		ipLen, maxQuote, typ, proto = 40, maxQuote6, 1, uapi.ProtoICMPv6
	}
	icmp := rjHdr + ipLen
	b.Emit(insn.Mov(asm.R1, maxQuote), insn.St(asm.R10, rjQuoteMax, asm.R1, asm.DWord))
	if g.Forward {
		g.route(noReply)
	}
	b.Note("the error quotes up to %d bytes of the packet", maxQuote)
	b.Emit(
		insn.Ld(asm.R2, asm.R10, rjQuoteMax, asm.DWord),
		insn.Ld(asm.R1, asm.R7, pkt.Bytes, asm.Word),
		asm.JLE.Reg(asm.R1, asm.R2, sym+"_quote"),
		insn.Movr(asm.R1, asm.R2),
	)
	b.Mark(sym + "_quote")
	b.Emit(asm.JGT.Imm(asm.R1, maxQuote, noReply)) // for the verifier: never
	b.Emit(insn.St(asm.R10, rjQuote, asm.R1, asm.DWord))
	if g.Forward {
		g.forwardTTL(noReply)
		b.Emit(insn.Ld(asm.R1, asm.R10, rjQuote, asm.DWord))
	}
	b.Emit(
		insn.StImm(asm.R10, rjSum, 0, asm.DWord),
		insn.Ld(asm.R2, asm.R10, rjL3, asm.DWord),
		asm.Add.Reg(asm.R2, asm.R1),
		insn.Ld(asm.R1, asm.R10, rjL3, asm.DWord),
	)
	g.sumRange(noReply)
	b.Emit(
		insn.Ld(asm.R9, asm.R10, rjQuote, asm.DWord),
		asm.Add.Imm(asm.R9, 8),
		insn.St(asm.R10, rjTmp, asm.R9, asm.DWord),
	)
	g.ipHeader(proto, noReply)
	b.Emit(
		insn.StImm(asm.R10, icmp, typ, asm.Byte),
		insn.StImm(asm.R10, icmp+1, int32(code), asm.Byte),
	)
	g.l4Checksum(ipLen, 8, proto, 2)
	if !g.Forward {
		g.swapL2() // route filled in the next hop's
	}

	hdrs := int32(ipLen) + 8
	b.Note("make room for the headers in front of the packet, cut it after the quote, write them, transmit")
	if g.TC {
		b.Emit(
			insn.Movr(asm.R1, asm.R6),
			insn.Mov(asm.R2, hdrs),
			insn.Mov(asm.R3, 0),
			asm.FnSkbChangeHead.Call(),
		)
	} else {
		b.Emit(
			insn.Movr(asm.R1, asm.R6),
			insn.Mov(asm.R2, -hdrs),
			asm.FnXdpAdjustHead.Call(),
		)
	}
	b.Emit(
		asm.JNE.Imm(asm.R0, 0, noReply),
		insn.Ld(asm.R9, asm.R10, rjL3, asm.DWord),
		asm.Add.Imm(asm.R9, hdrs),
		insn.Ld(asm.R1, asm.R10, rjQuote, asm.DWord),
		asm.Add.Reg(asm.R9, asm.R1),
	)
	g.resize(noReply)
	g.store(hdrs, noReply)
	g.transmit()
}

// route asks the routing table, as icmp_send does in FORWARD, for
// the route back to the packet's source: the error comes from the
// route's preferred source address (fib_result_prefsrc, which
// BPF_FIB_LOOKUP_SRC returns), goes to its next hop, and quotes at most
// what its MTU leaves of 576 bytes. The address replaces the original
// destination in rjOrig, where ipHeader takes the reply's source
// from; the next hop's MAC addresses stay in rjFib. Without a route, a
// resolved neighbour, or with a route through another device, the
// program sends nothing (see docs/reject.md).
func (g *gen) route(noReply string) {
	b := g.b
	mtuDone := b.Fresh("route_mtu")
	b.Note("the route back to the source: the error's source address, next hop and MTU (icmp_route_lookup)")
	// struct bpf_fib_lookup goes in the scratch buffer, free until the
	// quote is summed: the stack has no room left.
	b.Emit(
		insn.Ld(asm.R7, asm.R10, rjLoop+insn.LoopState, asm.DWord),
		asm.Add.Imm(asm.R7, rsBuf),
	)
	for off := int16(0); off < uapi.FibSize; off += 8 {
		b.Emit(insn.StImm(asm.R7, off, 0, asm.DWord))
	}
	v6 := g.IPv6
	// The reply goes to the original source; its source address takes
	// the original destination's place in rjOrig.
	family, proto, origSrc, origDst, addrLen := int32(uapi.AFInet), int32(uapi.ProtoICMP), int16(12), int16(16), int16(4)
	if v6 {
		family, proto, origSrc, origDst, addrLen = uapi.AFInet6, uapi.ProtoICMPv6, 8, 24, 16
	}
	b.Emit(
		insn.StImm(asm.R7, uapi.FibFamily, family, asm.Byte),
		insn.StImm(asm.R7, uapi.FibProto, proto, asm.Byte),
		g.ifindex(asm.R1),
		insn.St(asm.R7, uapi.FibIfindex, asm.R1, asm.Word),
	)
	for i := int16(0); i < addrLen; i += 4 {
		b.Emit(
			insn.Ld(asm.R1, asm.R10, rjOrig+origSrc+i, asm.Word),
			insn.St(asm.R7, uapi.FibDst+i, asm.R1, asm.Word),
		)
	}
	b.Emit(
		insn.Movr(asm.R1, asm.R6),
		insn.Movr(asm.R2, asm.R7),
		insn.Mov(asm.R3, uapi.FibSize),
		insn.Mov(asm.R4, uapi.FibLookupSrc),
		asm.FnFibLookup.Call(),
		asm.JNE.Imm(asm.R0, uapi.FibLookupSuccess, noReply),
		g.ifindex(asm.R1),
		insn.Ld(asm.R2, asm.R7, uapi.FibIfindex, asm.Word),
		asm.JNE.Reg(asm.R1, asm.R2, noReply),
	)
	for i := int16(0); i < addrLen; i += 4 {
		b.Emit(
			insn.Ld(asm.R1, asm.R7, uapi.FibSrc+i, asm.Word),
			insn.St(asm.R10, rjOrig+origDst+i, asm.R1, asm.Word),
		)
	}
	// The next hop's addresses, as routing found them.
	for i := int16(0); i < 6; i += 2 {
		b.Emit(
			insn.Ld(asm.R1, asm.R7, uapi.FibDMAC+i, asm.Half),
			insn.St(asm.R10, rjL2+i, asm.R1, asm.Half),
			insn.Ld(asm.R1, asm.R7, uapi.FibSMAC+i, asm.Half),
			insn.St(asm.R10, rjL2+6+i, asm.R1, asm.Half),
		)
	}
	if v6 {
		// icmp6_send quotes up to IPV6_MIN_MTU whatever the route.
		b.Emit(insn.Ld(asm.R7, asm.R10, rjPkt, asm.DWord))
		return
	}
	b.Emit(
		// room = min(mtu, 576) - 28; nothing when it cannot hold an IP
		// header.
		insn.Ld(asm.R1, asm.R7, uapi.FibMTU, asm.Half),
		asm.JGE.Imm(asm.R1, 576, mtuDone),
		asm.Sub.Imm(asm.R1, 28),
		asm.JLE.Imm(asm.R1, 20, noReply),
		insn.St(asm.R10, rjQuoteMax, asm.R1, asm.DWord),
	)
	b.Mark(mtuDone)
	// r7 is the parsed packet again.
	b.Emit(insn.Ld(asm.R7, asm.R10, rjPkt, asm.DWord))
}

// forwardTTL decrements the TTL in the packet as ip_forward does
// before the FORWARD hook (ip_decrease_ttl, its checksum arithmetic
// included): the error quotes the packet as FORWARD saw it. A packet
// whose TTL runs out never gets there.
func (g *gen) forwardTTL(noReply string) {
	b := g.b
	if g.IPv6 {
		// ip6_forward: hop_limit--, nothing else.
		b.Note("the hop limit FORWARD saw (ip6_forward)")
		b.Emit(
			insn.Ld(asm.R1, asm.R10, rjOrig+7, asm.Byte),
			asm.JLE.Imm(asm.R1, 1, noReply),
			asm.Sub.Imm(asm.R1, 1),
			insn.St(asm.R10, rjOrig+7, asm.R1, asm.Byte),
		)
		g.storeOrig(7, 1, noReply)
		return
	}
	carry := b.Fresh("ttl_carry")
	b.Note("the TTL FORWARD saw (ip_decrease_ttl)")
	b.Emit(
		insn.Ld(asm.R1, asm.R10, rjOrig+8, asm.Byte),
		asm.JLE.Imm(asm.R1, 1, noReply),
		asm.Sub.Imm(asm.R1, 1),
		insn.St(asm.R10, rjOrig+8, asm.R1, asm.Byte),
		insn.Ld(asm.R2, asm.R10, rjOrig+10, asm.Half),
		insn.Mov(asm.R3, 0x0100),
		asm.HostTo(asm.BE, asm.R3, asm.Half),
		asm.Add.Reg(asm.R2, asm.R3),
		asm.JLT.Imm(asm.R2, 0xffff, carry),
		asm.Add.Imm(asm.R2, 1),
	)
	b.Mark(carry)
	b.Emit(insn.St(asm.R10, rjOrig+10, asm.R2, asm.Half))
	g.storeOrig(8, 4, noReply)
}

// storeOrig writes back into the packet the n bytes of its IP
// header at offset off, from the copy at rjOrig.
func (g *gen) storeOrig(off, n int32, noReply string) {
	b := g.b
	store := asm.FnXdpStoreBytes
	if g.TC {
		store = asm.FnSkbStoreBytes
	}
	b.Emit(
		insn.Movr(asm.R1, asm.R6),
		insn.Ld(asm.R2, asm.R10, rjL3, asm.DWord),
		asm.Add.Imm(asm.R2, off),
		insn.Movr(asm.R3, asm.R10),
		asm.Add.Imm(asm.R3, rjOrig+off),
		insn.Mov(asm.R4, n),
	)
	if g.TC {
		b.Emit(insn.Mov(asm.R5, 0))
	}
	b.Emit(store.Call(), asm.JNE.Imm(asm.R0, 0, noReply))
}

// resize makes the frame r9 bytes long.
func (g *gen) resize(noReply string) {
	b := g.b
	if g.TC {
		// bpf_skb_change_tail refuses to cut before the transport
		// header, which the sender's stack or GRO may have recorded past
		// the RST's end (IPv6 extension headers): then the bytes go from
		// after the IP header instead (bpf_skb_adjust_room), all of them
		// rewritten anyway.
		done := b.Fresh("resized")
		b.Emit(
			insn.Movr(asm.R1, asm.R6),
			insn.Movr(asm.R2, asm.R9),
			insn.Mov(asm.R3, 0),
			asm.FnSkbChangeTail.Call(),
			asm.JEq.Imm(asm.R0, 0, done),
			insn.Ld(asm.R2, asm.R6, uapi.SkbLen, asm.Word),
			asm.JLE.Reg(asm.R2, asm.R9, noReply),
			insn.Movr(asm.R2, asm.R9),
			insn.Ld(asm.R1, asm.R6, uapi.SkbLen, asm.Word),
			asm.Sub.Reg(asm.R2, asm.R1),
			insn.Movr(asm.R1, asm.R6),
			insn.Mov(asm.R3, 0), // BPF_ADJ_ROOM_NET
			insn.Mov(asm.R4, 0),
			asm.FnSkbAdjustRoom.Call(),
			asm.JNE.Imm(asm.R0, 0, noReply),
		)
		b.Mark(done)
		return
	}
	done := b.Fresh("resized")
	b.Emit(
		insn.Movr(asm.R1, asm.R6),
		asm.FnXdpGetBuffLen.Call(),
		insn.Movr(asm.R2, asm.R9),
		asm.Sub.Reg(asm.R2, asm.R0),
		asm.JEq.Imm(asm.R2, 0, done),
		insn.Movr(asm.R1, asm.R6),
		asm.FnXdpAdjustTail.Call(),
		asm.JNE.Imm(asm.R0, 0, noReply),
	)
	b.Mark(done)
}

// store writes the link-layer header at offset 0 and the n bytes of
// headers at rjHdr after it.
func (g *gen) store(n int32, noReply string) {
	b := g.b
	store := asm.FnXdpStoreBytes
	if g.TC {
		store = asm.FnSkbStoreBytes
	}
	flags := func() {
		if g.TC {
			b.Emit(insn.Mov(asm.R5, 1)) // BPF_F_RECOMPUTE_CSUM
		}
	}
	b.Emit(
		insn.Movr(asm.R1, asm.R6),
		insn.Mov(asm.R2, 0),
		insn.Movr(asm.R3, asm.R10),
		asm.Add.Imm(asm.R3, rjL2),
		insn.Ld(asm.R4, asm.R10, rjL3, asm.DWord),
		asm.JGT.Imm(asm.R4, 32, noReply),
		asm.JLT.Imm(asm.R4, 14, noReply),
	)
	flags()
	b.Emit(
		store.Call(),
		asm.JNE.Imm(asm.R0, 0, noReply),
		insn.Movr(asm.R1, asm.R6),
		insn.Ld(asm.R2, asm.R10, rjL3, asm.DWord),
		insn.Movr(asm.R3, asm.R10),
		asm.Add.Imm(asm.R3, rjHdr),
		insn.Mov(asm.R4, n),
	)
	flags()
	b.Emit(
		store.Call(),
		asm.JNE.Imm(asm.R0, 0, noReply),
	)
}

// transmit sends the reply back where the packet came from.
func (g *gen) transmit() {
	b := g.b
	if !g.TC {
		b.Emit(insn.Mov(asm.R0, uapi.XDPTx), asm.Return())
		return
	}
	b.Emit(
		// The device's checksum verdict was about the old packet; the
		// reply carries no mark (IP4_REPLY_MARK without fwmark_reflect).
		insn.Movr(asm.R1, asm.R6),
		insn.Mov(asm.R2, 3), // BPF_CSUM_LEVEL_RESET
		asm.FnCsumLevel.Call(),
		insn.StImm(asm.R6, uapi.SkbMark, 0, asm.Word),
		insn.Ld(asm.R1, asm.R6, uapi.SkbIfindex, asm.Word),
		insn.Mov(asm.R2, 0),
		asm.FnRedirect.Call(),
		asm.Return(),
	)
}
