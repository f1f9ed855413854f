package codegen

import (
	"github.com/cilium/ebpf/asm"

	"bpfwall/codegen/abi"
	"bpfwall/codegen/insn"
	"bpfwall/codegen/kernel"
	"bpfwall/codegen/pkt"
	"bpfwall/codegen/uapi"
	"bpfwall/rules"
)

// Bounds of the loops, beyond anything a packet can make them do.
const (
	// Every extension header is at least 8 bytes long: an 8 MiB packet
	// has fewer than this many.
	maxExtHeaders = 1 << 20
	// A hop-by-hop header is at most 2048 bytes, each option at least one.
	maxHopByHopSteps = 2048
	// TCP options are at most 40 bytes, each at least one.
	maxTCPOptionSteps = 40
)

// loadHelper is the helper that copies packet bytes to the stack:
// bpf_xdp_load_bytes or bpf_skb_load_bytes, both (ctx, offset, to, len).
// Going through it, every header is bounds-checked by the kernel, also in
// the non-linear parts of a packet.
func (c *compiler) loadHelper() asm.BuiltinFunc {
	if c.hook.tc() {
		return asm.FnSkbLoadBytes
	}
	return asm.FnXdpLoadBytes
}

// load copies n bytes of packet (r4 holds the length when n is 0) from the
// offset in r2 to frame+buf, with the context in r1; it jumps to fail when
// the packet is shorter. It clobbers r0-r5, as a helper call does.
//
// A fixed length at xdp and tc is read in place when the bytes are in the
// packet's linear data (direct packet access, a few loads), and through
// the load helper only past it (a multi-buffer frame's fragments, a
// nonlinear skb): a helper call costs more than the rest of a rule.
func (c *compiler) load(frame asm.Register, buf int16, n int32, fail string) {
	if n > 0 && !c.hook.nf() {
		c.directLoad(frame, buf, n, fail)
		return
	}
	c.b.Emit(insn.Movr(asm.R3, frame), asm.Add.Imm(asm.R3, int32(buf)))
	if n > 0 {
		c.b.Emit(insn.Mov(asm.R4, n))
	}
	c.loadCall()
	c.b.Emit(asm.JNE.Imm(asm.R0, 0, fail))
}

// maxDirectOffset bounds the offset of a direct read, for the verifier:
// past it, the helper reads.
const maxDirectOffset = 0x3fff

// directLoad is load's fixed-length copy: in place from the linear data
// when all n bytes are there, else through the helper.
func (c *compiler) directLoad(frame asm.Register, buf int16, n int32, fail string) {
	b := c.b
	slow, done := b.Fresh("load_helper"), b.Fresh("loaded")
	data, end := int16(uapi.XDPData), int16(uapi.XDPDataEnd)
	if c.hook.tc() {
		data, end = uapi.SkbData, uapi.SkbDataEnd
	}
	b.Emit(
		asm.JGT.Imm(asm.R2, maxDirectOffset, slow),
		insn.Ld(asm.R5, asm.R1, data, asm.Word),
		insn.Ld(asm.R0, asm.R1, end, asm.Word),
		asm.Add.Reg(asm.R5, asm.R2),
		insn.Movr(asm.R4, asm.R5),
		asm.Add.Imm(asm.R4, n),
		asm.JGT.Reg(asm.R4, asm.R0, slow),
	)
	for i := int32(0); i < n; {
		// The largest access that fits and that the destination's
		// alignment allows (the verifier refuses misaligned stack
		// access).
		w, size := int32(8), asm.DWord
		for w > n-i || (int32(buf)+i)%w != 0 {
			w /= 2
		}
		switch w {
		case 4:
			size = asm.Word
		case 2:
			size = asm.Half
		case 1:
			size = asm.Byte
		}
		b.Emit(insn.Ld(asm.R4, asm.R5, int16(i), size), insn.St(frame, buf+int16(i), asm.R4, size))
		i += w
	}
	b.Emit(insn.Mov(asm.R0, 0), insn.Ja(done))
	b.Mark(slow)
	b.Emit(insn.Movr(asm.R3, frame), asm.Add.Imm(asm.R3, int32(buf)), insn.Mov(asm.R4, n))
	c.loadCall()
	b.Emit(asm.JNE.Imm(asm.R0, 0, fail))
	b.Mark(done)
}

// frameHolds jumps to fail unless the frame holds n bytes (a register)
// from the current header on; r9 holds the bytes known to be there. At
// xdp r9 is the linear data's part of them, a lower bound: n within it
// costs a compare, and only n past it (a multi-buffer frame) asks the
// kernel for the frame's length. r9 and n are kept; on that path r0-r5
// are clobbered. r9 is not made exact, so that both paths go on in one
// verifier state: the callers set it from the header's length next.
func (c *compiler) frameHolds(n asm.Register, fail string) {
	b := c.b
	if c.hook != HookXDP {
		b.Emit(asm.JSGT.Reg(n, asm.R9, fail))
		return
	}
	ok := b.Fresh("frame_holds")
	b.Emit(
		// Signed: the headers may start past the linear data.
		asm.JSLE.Reg(n, asm.R9, ok),
		insn.St(asm.R10, parseScratch, n, asm.DWord),
		insn.Movr(asm.R1, asm.R6),
		asm.FnXdpGetBuffLen.Call(),
		asm.Sub.Reg(asm.R0, asm.R8),
		insn.Ld(n, asm.R10, parseScratch, asm.DWord),
		asm.JSGT.Reg(n, asm.R0, fail),
	)
	b.Mark(ok)
}

// ifindex loads the index of the device the program runs on into dst.
func (c *compiler) ifindex(dst asm.Register) asm.Instruction {
	if c.hook.tc() {
		return insn.Ld(dst, asm.R6, uapi.SkbIfindex, asm.Word)
	}
	return insn.Ld(dst, asm.R6, uapi.XDPIngressIfindex, asm.Word)
}

// bpfLoop calls bpf_loop(n, callback, parseLoop of this frame, 0); the
// loop state must be set up with loopState.
func (c *compiler) bpfLoop(n int32, callback string) {
	c.b.Emit(
		insn.Mov(asm.R1, n),
		insn.FuncRef(asm.R2, callback),
		insn.Movr(asm.R3, asm.R10),
		asm.Add.Imm(asm.R3, parseLoop),
		insn.Mov(asm.R4, 0),
		asm.FnLoop.Call(),
	)
}

// loopState looks abi.ScratchMap's value up, puts it and the context in
// parseLoop for a callback, and leaves it in r0 for the caller to set up.
func (c *compiler) loopState() {
	c.scratchValue()
	c.b.Emit(
		insn.St(asm.R10, parseLoop+insn.LoopCtx, asm.R6, asm.DWord),
		insn.St(asm.R10, parseLoop+insn.LoopState, asm.R0, asm.DWord),
	)
}

// scratchValue leaves abi.ScratchMap's value in r0, for parse.
func (c *compiler) scratchValue() {
	c.b.Emit(
		insn.StImm(asm.R10, parseScratch, 0, asm.Word),
		insn.Movr(asm.R2, asm.R10),
		asm.Add.Imm(asm.R2, parseScratch),
		insn.MapRef(asm.R1, abi.ScratchMap),
		asm.FnMapLookupElem.Call(),
		// An array's only entry is always there.
		asm.JEq.Imm(asm.R0, 0, "parse_invalid"),
	)
}

// loopResult loads the loop state after a loop into r3.
func (c *compiler) loopResult() {
	c.b.Emit(insn.Ld(asm.R3, asm.R10, parseLoop+insn.LoopState, asm.DWord))
}

// callbackPrologue keeps the context in the callback's frame and the loop
// state in r6.
func (c *compiler) callbackPrologue() {
	c.b.Emit(
		insn.Ld(asm.R1, asm.R2, insn.LoopCtx, asm.DWord),
		insn.St(asm.R10, insn.CallbackCtx, asm.R1, asm.DWord),
		insn.Ld(asm.R6, asm.R2, insn.LoopState, asm.DWord),
	)
	if c.hook.nf() {
		c.dynptr = cbDynptr
		// Every step reads from a dynptr of its own frame.
		c.b.Emit(insn.Ld(asm.R1, asm.R10, insn.CallbackCtx, asm.DWord))
		fail := c.b.Fresh("cb_no_dynptr")
		ok := c.b.Fresh("cb_dynptr")
		c.dynptrFromSkb(asm.R1, cbDynptr, fail)
		c.b.Emit(insn.Ja(ok))
		c.b.Mark(fail)
		c.b.Emit(insn.Mov(asm.R0, 1), asm.Return())
		c.b.Mark(ok)
	}
}

// parse emits the function that fills in the bpfwall_pkt at r2 from the
// packet, as model.Decode does, and returns parseOK, parseNotIP or
// parseInvalid.
//
//	r6 ctx, r7 pkt, r8 offset of the current header, r9 bytes from there
//	to the end of the packet
func (c *compiler) parse() {
	if !c.parseInlined() {
		c.parseFunction("parse_frame", "parse the packet into the bpfwall_pkt at r2, as model.Decode does")
		c.parseBody()
	}
	if c.p.Family == rules.IPv6 {
		c.hopByHopCallback()
		c.extHeadersCallback()
	}
	if len(c.optKinds) > 0 {
		c.tcpOptionsCallback()
	}
}

// parseFunction starts the parse function: the context in r6, the
// bpfwall_pkt in r7, and the code at body unless the pointer is NULL, as
// far as the verifier knows of a global function's argument.
func (c *compiler) parseFunction(body, note string) {
	c.b.Function(c.funcCtxPkt(symParse), "%s", note)
	c.b.Emit(
		insn.Movr(asm.R6, asm.R1),
		insn.Movr(asm.R7, asm.R2),
		asm.JNE.Imm(asm.R7, 0, body),
		insn.Mov(asm.R0, parseNotIP),
		asm.Return(),
	)
}

// parseInlined reports whether the main function holds the parser's code
// instead of calling it: at xdp, tc and a chain's netfilter hook. A
// BPF-to-BPF call and its return cost a third of the parser where returns
// are mitigated (SRSO's safe RET, on AMD); the netfilter stage's main
// function still calls it.
func (c *compiler) parseInlined() bool { return c.inlineParse }

// parseBody emits the parser, with the context in r6 and the bpfwall_pkt
// at r7. It ends with r0 parseOK, parseNotIP or parseInvalid: returned
// from parse, or, inlined in main, at parse_done.
func (c *compiler) parseBody() {
	b := c.b
	b.Mark("parse_frame")
	// Loads of variable length, and the TCP option walk, read the buffer
	// at offsets the verifier does not know: it must be initialized. Main
	// zeroes its whole frame when it holds the parser.
	if !c.parseInlined() {
		for off := int16(parseBuf); off < parseBuf+64; off += 8 {
			b.Emit(insn.StImm(asm.R10, off, 0, asm.DWord))
		}
	}
	if c.hook.nf() {
		c.dynptr = parseDynptr
		c.dynptrFromSkb(asm.R6, parseDynptr, "parse_not_ip")
	}
	switch c.hook {
	case HookStage:
		c.parseNetfilterL2()
	case HookNetfilter:
		b.Note("the packet starts at the network header")
		b.Emit(insn.Mov(asm.R8, 0))
		if c.readsMAC {
			c.parseNetfilterMAC()
		}
	default:
		c.parseEthernet()
	}

	if c.hook.nf() {
		b.Mark("parse_meta")
		c.parseNetfilterMeta()
	}
	if c.hook.tc() {
		b.Note("skb metadata; ip_rcv_core and ip6_rcv_core drop packets for other hosts")
		b.Emit(
			insn.Ld(asm.R1, asm.R6, uapi.SkbMark, asm.Word),
			insn.St(asm.R7, pkt.Mark, asm.R1, asm.Word),
			insn.Ld(asm.R1, asm.R6, uapi.SkbPktType, asm.Word),
			insn.St(asm.R10, parseRawType, asm.R1, asm.DWord),
			insn.St(asm.R7, pkt.PktType, asm.R1, asm.Byte),
			asm.JEq.Imm(asm.R1, uapi.PacketOtherHost, "parse_invalid"),
		)
	}
	if c.readsOwner {
		c.parseOwner()
	}
	if len(c.ifaces) > 0 && c.hook == HookNetfilter {
		c.netfilterIfaces()
	} else if len(c.ifaces) > 0 || c.accel {
		b.Note("the interface's name patterns, from %s", abi.IfacesMap)
		unnamed := "parse_ip"
		if c.accel {
			// An interface created since the swap: its -i and -o
			// cannot be tested.
			unnamed = b.Fresh("iface_unnamed")
		}
		if c.ifaceSlots() {
			// The interface's slot, unless another has it.
			hashed := b.Fresh("iface_hashed")
			c.emitIfindex(asm.R1)
			b.Emit(
				asm.And.Imm(asm.R1, abi.IfaceSlots-1),
				insn.St(asm.R10, parseScratch, asm.R1, asm.Word),
			)
			b.Emit(insn.Lookup(abi.IfaceSlotsMap, asm.R10, parseScratch)...)
			b.Emit(asm.JEq.Imm(asm.R0, 0, hashed))
			c.emitIfindex(asm.R1)
			b.Emit(
				insn.Ld(asm.R2, asm.R0, 0, asm.Word),
				asm.JNE.Reg(asm.R2, asm.R1, hashed),
				insn.Ld(asm.R1, asm.R0, 8, asm.DWord),
				insn.St(asm.R7, pkt.Ifaces, asm.R1, asm.DWord),
				insn.Ja("parse_ip"),
			)
			b.Mark(hashed)
		}
		c.emitIfindex(asm.R1)
		b.Emit(insn.St(asm.R10, parseScratch, asm.R1, asm.Word))
		b.Emit(insn.Lookup(abi.IfacesMap, asm.R10, parseScratch)...)
		b.Emit(
			asm.JEq.Imm(asm.R0, 0, unnamed),
			insn.Ld(asm.R1, asm.R0, 0, asm.DWord),
			insn.St(asm.R7, pkt.Ifaces, asm.R1, asm.DWord),
		)
		if c.accel {
			b.Emit(insn.Ja("parse_ip"))
			b.Mark(unnamed)
			c.setFlag(pkt.FlagUnnamedIface)
		}
	}
	b.Mark("parse_ip")
	switch {
	case c.hook.nf():
		c.emitSkb(asm.R9, asm.R6)
		b.Emit(kernel.Load(asm.R9, asm.R9, asm.Word, kernel.SkbLen))
	case c.hook.tc():
		b.Emit(insn.Ld(asm.R9, asm.R6, uapi.SkbLen, asm.Word))
	default:
		// The linear data's length: a lower bound of the frame's, which
		// frameHolds asks for when a check needs more.
		b.Emit(
			insn.Ld(asm.R9, asm.R6, uapi.XDPDataEnd, asm.Word),
			insn.Ld(asm.R1, asm.R6, uapi.XDPData, asm.Word),
			asm.Sub.Reg(asm.R9, asm.R1),
		)
	}
	b.Emit(asm.Sub.Reg(asm.R9, asm.R8))
	if c.p.Family == rules.IPv4 {
		c.parseIPv4()
	} else {
		c.parseIPv6()
	}
	c.parseL4()
	for _, exit := range []struct {
		label string
		code  int32
	}{{"parse_ok", parseOK}, {"parse_not_ip", parseNotIP}, {"parse_invalid", parseInvalid}} {
		b.Mark(exit.label)
		b.Emit(insn.Mov(asm.R0, exit.code))
		if c.parseInlined() {
			b.Emit(insn.Ja(symParseDone))
		} else {
			b.Emit(asm.Return())
		}
	}
}

// parseEthernet parses the Ethernet header and up to two VLAN tags; it
// leaves the network header's offset in r8 and goes on with packets of
// the program's family.
func (c *compiler) parseEthernet() {
	b := c.b
	b.Note("ethernet header, up to two VLAN tags")
	b.Emit(insn.Movr(asm.R1, asm.R6), insn.Mov(asm.R2, 0))
	c.load(asm.R10, parseBuf, 14, "parse_not_ip")
	b.Emit(
		insn.Ld(asm.R1, asm.R10, parseBuf+6, asm.Half),
		insn.Ntoh(asm.R1, asm.Half),
		insn.St(asm.R7, pkt.MACHi, asm.R1, asm.Word),
		insn.Ld(asm.R1, asm.R10, parseBuf+8, asm.Word),
		insn.Ntoh(asm.R1, asm.Word),
		insn.St(asm.R7, pkt.MACLo, asm.R1, asm.Word),
		insn.Ld(asm.R9, asm.R10, parseBuf+12, asm.Half),
		insn.Ntoh(asm.R9, asm.Half),
		insn.Mov(asm.R8, 14),
	)
	if c.hook.tc() {
		// The kernel takes the outer VLAN tag off a frame before tc sees
		// it (skb_vlan_untag, or the device did): it counts toward the
		// two tags model.Decode skips.
		b.Emit(
			insn.Ld(asm.R1, asm.R6, uapi.SkbVLANPresent, asm.Word),
			insn.St(asm.R10, parseTmp, asm.R1, asm.DWord),
		)
		if c.marksClassU() {
			untagged := b.Fresh("untagged")
			b.Emit(asm.JEq.Imm(asm.R1, 0, untagged))
			c.setFlag(pkt.FlagVLAN)
			b.Mark(untagged)
		}
	}
	for range 2 {
		tag := b.Fresh("vlan")
		b.Emit(
			asm.JEq.Imm(asm.R9, uapi.EtherTypeVLAN, tag),
			asm.JNE.Imm(asm.R9, uapi.EtherTypeQinQ, "parse_ethertype"),
		)
		b.Mark(tag)
		if c.marksClassU() {
			c.setFlag(pkt.FlagVLAN)
		}
		if c.hook.tc() {
			b.Emit(
				insn.Ld(asm.R1, asm.R10, parseTmp, asm.DWord),
				asm.JGE.Imm(asm.R1, 2, "parse_not_ip"),
				asm.Add.Imm(asm.R1, 1),
				insn.St(asm.R10, parseTmp, asm.R1, asm.DWord),
			)
		}
		b.Emit(insn.Movr(asm.R1, asm.R6), insn.Movr(asm.R2, asm.R8))
		c.load(asm.R10, parseBuf, 4, "parse_not_ip")
		b.Emit(
			insn.Ld(asm.R9, asm.R10, parseBuf+2, asm.Half),
			insn.Ntoh(asm.R9, asm.Half),
			asm.Add.Imm(asm.R8, 4),
		)
	}
	b.Emit(
		asm.JEq.Imm(asm.R9, uapi.EtherTypeVLAN, "parse_not_ip"),
		asm.JEq.Imm(asm.R9, uapi.EtherTypeQinQ, "parse_not_ip"),
	)
	b.Mark("parse_ethertype")
	ethertype := int32(uapi.EtherTypeIPv4)
	if c.p.Family == rules.IPv6 {
		ethertype = uapi.EtherTypeIPv6
	}
	// Packets of the other family go to the other table: to the program
	// they are not IP.
	b.Emit(asm.JNE.Imm(asm.R9, ethertype, "parse_not_ip"))

}

// parseIPv4 is ir's decodeIPv4: ip_rcv_core's checks, then the fields.
// It leaves the transport header's offset in r8 and its length in r9.
func (c *compiler) parseIPv4() {
	b := c.b
	b.Note("ipv4 header: version, header length, checksum, total length (ip_rcv_core)")
	// A frame too short for the header, or for its options, fails their
	// load: only the total length is checked against the frame.
	b.Emit(insn.Movr(asm.R1, asm.R6), insn.Movr(asm.R2, asm.R8))
	c.load(asm.R10, parseBuf, 20, "parse_invalid")
	b.Emit(
		insn.Ld(asm.R1, asm.R10, parseBuf, asm.Byte),
		insn.Movr(asm.R2, asm.R1),
		asm.RSh.Imm(asm.R2, 4),
		asm.JNE.Imm(asm.R2, 4, "parse_invalid"),
		asm.And.Imm(asm.R1, 0x0f),
		asm.LSh.Imm(asm.R1, 2),
		asm.JLT.Imm(asm.R1, 20, "parse_invalid"),
		insn.St(asm.R10, parseTmp, asm.R1, asm.DWord),
		asm.JLE.Imm(asm.R1, 20, "ipv4_checksum"),
		// The options.
		insn.Movr(asm.R4, asm.R1),
		asm.Sub.Imm(asm.R4, 20),
		insn.Movr(asm.R2, asm.R8),
		asm.Add.Imm(asm.R2, 20),
		insn.Movr(asm.R1, asm.R6),
	)
	c.load(asm.R10, parseBuf+20, 0, "parse_invalid")
	b.Mark("ipv4_checksum")
	if !c.hook.nf() {
		c.ipv4Checksum() // netfilter's packets passed ip_rcv_core
	}
	b.Emit(
		insn.Ld(asm.R1, asm.R10, parseBuf+2, asm.Half),
		insn.Ntoh(asm.R1, asm.Half),
	)
	c.frameHolds(asm.R1, "parse_invalid")
	b.Emit(
		insn.Ld(asm.R2, asm.R10, parseTmp, asm.DWord),
		asm.JLT.Reg(asm.R1, asm.R2, "parse_invalid"),
	)
	b.Note("ipv4 fields; the packet ends at its total length (pskb_trim_rcsum)")
	b.Emit(
		insn.St(asm.R7, pkt.Length, asm.R1, asm.Word),
		insn.St(asm.R7, pkt.Bytes, asm.R1, asm.Word),
		insn.Movr(asm.R9, asm.R1),
		asm.Sub.Reg(asm.R9, asm.R2),
		asm.Add.Reg(asm.R8, asm.R2),
		insn.Ld(asm.R1, asm.R10, parseBuf+12, asm.Word),
		insn.Ntoh(asm.R1, asm.Word),
		insn.St(asm.R7, pkt.Src, asm.R1, asm.Word),
		insn.Ld(asm.R1, asm.R10, parseBuf+16, asm.Word),
		insn.Ntoh(asm.R1, asm.Word),
		insn.St(asm.R7, pkt.Dst, asm.R1, asm.Word),
		insn.Ld(asm.R1, asm.R10, parseBuf+8, asm.Byte),
	)
	c.forwardedTTL()
	b.Emit(
		insn.St(asm.R7, pkt.TTL, asm.R1, asm.Byte),
		insn.Ld(asm.R1, asm.R10, parseBuf+9, asm.Byte),
		insn.St(asm.R7, pkt.Proto, asm.R1, asm.Byte),
		insn.Ld(asm.R1, asm.R10, parseBuf+6, asm.Half),
		insn.Ntoh(asm.R1, asm.Half),
		asm.And.Imm(asm.R1, 0x1fff),
		asm.LSh.Imm(asm.R1, 3),
		insn.St(asm.R7, pkt.FragOff, asm.R1, asm.Word),
	)
	if c.readsDSCP {
		b.Emit(
			insn.Ld(asm.R1, asm.R10, parseBuf+1, asm.Byte),
			asm.RSh.Imm(asm.R1, 2),
			insn.St(asm.R7, pkt.DSCP, asm.R1, asm.Byte),
		)
	}
	if c.fragFlag() {
		notFrag := b.Fresh("not_fragment")
		b.Emit(
			insn.Ld(asm.R1, asm.R10, parseBuf+6, asm.Half),
			insn.Ntoh(asm.R1, asm.Half),
			asm.And.Imm(asm.R1, 0x3fff), // MF and the offset
			asm.JEq.Imm(asm.R1, 0, notFrag),
			insn.Ld(asm.R1, asm.R7, pkt.Flags, asm.Byte),
			asm.Or.Imm(asm.R1, pkt.FlagFragment),
			insn.St(asm.R7, pkt.Flags, asm.R1, asm.Byte),
		)
		b.Mark(notFrag)
	}
	if c.skbHook() {
		// pkttype_mt: a looped-back packet is multicast when its
		// destination is, broadcast otherwise.
		b.Emit(
			insn.Ld(asm.R1, asm.R10, parseRawType, asm.DWord),
			asm.JNE.Imm(asm.R1, uapi.PacketLoopback, "parse_l4"),
			insn.StImm(asm.R7, pkt.PktType, 1, asm.Byte),
			insn.Ld(asm.R1, asm.R7, pkt.Dst, asm.Word),
			asm.RSh.Imm(asm.R1, 28),
			asm.JNE.Imm(asm.R1, 0xe, "parse_l4"),
			insn.StImm(asm.R7, pkt.PktType, 2, asm.Byte),
		)
	}
	// parseL4 follows.
}

// ipv4Checksum checks the header checksum of the IPv4 header of
// parseTmp bytes at parseBuf, as ip_rcv_core does: the ones' complement
// sum of the header's 16-bit words is 0xffff. It sums the header as 32-bit
// words in a 64-bit register and folds the sum to 16 bits, in line: a
// helper call (bpf_csum_diff) costs more than the 5 to 15 additions.
func (c *compiler) ipv4Checksum() {
	b := c.b
	folded := b.Fresh("csum_folded")
	// The loop counts words in a value of its own: compared with the
	// header length itself, each length would be a verifier state of
	// its own for the rest of the parser.
	b.Emit(
		insn.Ld(asm.R4, asm.R10, parseTmp, asm.DWord),
		asm.RSh.Imm(asm.R4, 2),
		insn.Mov(asm.R0, 0),
	)
	for i := int16(0); i < 15; i++ {
		if i >= 5 {
			b.Emit(asm.JLE.Imm(asm.R4, int32(i), folded))
		}
		b.Emit(
			insn.Ld(asm.R1, asm.R10, parseBuf+4*i, asm.Word),
			asm.Add.Reg(asm.R0, asm.R1),
		)
	}
	b.Mark(folded)
	// At most 15 words: the sum is below 2^36. Folding the upper 32
	// bits in leaves it below 2^32 + 15, and three 16-bit folds bring
	// that to 16 bits. The words' byte order does not change the test:
	// 0xffff reads the same either way.
	b.Emit(
		asm.Mov.Reg32(asm.R1, asm.R0),
		asm.RSh.Imm(asm.R0, 32),
		asm.Add.Reg(asm.R0, asm.R1),
	)
	for range 3 {
		b.Emit(
			insn.Movr(asm.R1, asm.R0),
			asm.And.Imm(asm.R1, 0xffff),
			asm.RSh.Imm(asm.R0, 16),
			asm.Add.Reg(asm.R0, asm.R1),
		)
	}
	b.Emit(asm.JNE.Imm(asm.R0, 0xffff, "parse_invalid"))
}

// parseIPv6 is ir's decodeIPv6: ip6_rcv_core's checks, the hop-by-hop
// options (ipv6_parse_hopopts), then the walk to the upper-layer header
// (ipv6_find_hdr). It leaves the transport header's offset in r8 and its
// length in r9, or ends parsing.
func (c *compiler) parseIPv6() {
	b := c.b
	b.Note("ipv6 header: version, addresses (ip6_rcv_core)")
	// A frame too short for the header fails its load.
	b.Emit(insn.Movr(asm.R1, asm.R6), insn.Movr(asm.R2, asm.R8))
	c.load(asm.R10, parseBuf, 40, "parse_invalid")
	b.Emit(
		insn.Ld(asm.R1, asm.R10, parseBuf, asm.Byte),
		asm.RSh.Imm(asm.R1, 4),
		asm.JNE.Imm(asm.R1, 6, "parse_invalid"),
	)
	for i := int16(0); i < 8; i++ {
		b.Emit(
			insn.Ld(asm.R1, asm.R10, parseBuf+8+4*i, asm.Word),
			insn.Ntoh(asm.R1, asm.Word),
			insn.St(asm.R7, pkt.Src+4*i, asm.R1, asm.Word),
		)
	}
	c.ipv6Addresses()

	b.Note("payload length; the packet ends there unless a jumbo option says otherwise")
	b.Emit(
		insn.Ld(asm.R1, asm.R10, parseBuf+4, asm.Half),
		insn.Ntoh(asm.R1, asm.Half),
		insn.St(asm.R10, parseTmp, asm.R1, asm.DWord),
		insn.Ld(asm.R2, asm.R10, parseBuf+6, asm.Byte),
		asm.JNE.Imm(asm.R1, 0, "ipv6_trim"),
		asm.JEq.Imm(asm.R2, 0, "ipv6_jumbo"),
	)
	b.Mark("ipv6_trim")
	b.Emit(
		insn.Movr(asm.R3, asm.R1),
		asm.Add.Imm(asm.R3, 40),
	)
	c.frameHolds(asm.R3, "parse_invalid")
	b.Emit(
		insn.Movr(asm.R9, asm.R3),
		insn.Ld(asm.R1, asm.R10, parseTmp, asm.DWord),
		insn.Ld(asm.R2, asm.R10, parseBuf+6, asm.Byte),
		insn.Ja("ipv6_fields"),
	)
	b.Mark("ipv6_jumbo")
	if c.hook == HookXDP {
		// A jumbogram's length is the frame's: r9 must be exact.
		b.Emit(
			insn.Movr(asm.R1, asm.R6),
			asm.FnXdpGetBuffLen.Call(),
			asm.Mov.Reg32(asm.R9, asm.R0),
			asm.Sub.Reg(asm.R9, asm.R8),
			insn.Mov(asm.R1, 0),
			insn.Mov(asm.R2, 0),
		)
	}
	b.Mark("ipv6_fields")
	b.Emit(
		asm.Add.Imm(asm.R1, 40),
		insn.St(asm.R7, pkt.Length, asm.R1, asm.Word),
		insn.Ld(asm.R1, asm.R10, parseBuf+7, asm.Byte),
	)
	c.forwardedTTL()
	b.Emit(insn.St(asm.R7, pkt.TTL, asm.R1, asm.Byte))
	if c.readsDSCP {
		// The traffic class is the 8 bits after the version.
		b.Emit(
			insn.Ld(asm.R1, asm.R10, parseBuf, asm.Half),
			insn.Ntoh(asm.R1, asm.Half),
			asm.RSh.Imm(asm.R1, 6),
			asm.And.Imm(asm.R1, 0x3f),
			insn.St(asm.R7, pkt.DSCP, asm.R1, asm.Byte),
		)
	}
	if c.skbHook() {
		// pkttype_mt: every looped-back IPv6 packet is multicast.
		b.Emit(
			insn.Ld(asm.R1, asm.R10, parseRawType, asm.DWord),
			asm.JNE.Imm(asm.R1, uapi.PacketLoopback, "ipv6_hop_by_hop"),
			insn.StImm(asm.R7, pkt.PktType, 2, asm.Byte),
		)
	}
	b.Mark("ipv6_hop_by_hop")
	b.Emit(asm.JNE.Imm(asm.R2, 0, "ipv6_ext_headers"))
	c.ipv6HopByHop()
	c.ipv6ExtHeaders()
}

// ipv6Addresses checks the addresses as ip6_rcv_core does: no loopback
// address from another device, no multicast source, and interface-local
// multicast only from ourselves.
func (c *compiler) ipv6Addresses() {
	b := c.b
	if c.hook == HookNetfilter {
		// ip6_rcv_core checked these before any hook; OUTPUT's packets
		// are the stack's own.
		b.Emit(insn.Ja("ipv6_src_checked"))
	}
	// ipv6_addr_loopback (::1) and ipv6_addr_is_multicast (ff00::/8).
	loopbackDev := c.hook != HookTCEgress
	if loopbackDev {
		c.emitIfindex(asm.R1)
		b.Emit(asm.JEq.Imm(asm.R1, uapi.LoopbackIfindex, "ipv6_multicast"))
	}
	c.ipv6Loopback(pkt.Src, "parse_invalid")
	c.ipv6Loopback(pkt.Dst, "parse_invalid")
	b.Mark("ipv6_multicast")
	c.ipv6Multicast(pkt.Dst, "ipv6_dst_multicast")
	b.Emit(insn.Ja("ipv6_src"))
	b.Mark("ipv6_dst_multicast")
	b.Emit(
		insn.Ld(asm.R1, asm.R10, parseBuf+25, asm.Byte),
		asm.And.Imm(asm.R1, 0x0f),
		asm.JEq.Imm(asm.R1, 0, "parse_invalid"),
		asm.JNE.Imm(asm.R1, 1, "ipv6_src"),
	)
	// Interface-local scope: only from ourselves.
	if loopbackDev {
		c.emitIfindex(asm.R1)
		b.Emit(asm.JEq.Imm(asm.R1, uapi.LoopbackIfindex, "ipv6_src"))
	}
	if c.skbHook() {
		b.Emit(
			insn.Ld(asm.R1, asm.R10, parseRawType, asm.DWord),
			asm.JEq.Imm(asm.R1, uapi.PacketLoopback, "ipv6_src"),
		)
	}
	b.Emit(insn.Ja("parse_invalid"))
	b.Mark("ipv6_src")
	c.ipv6Multicast(pkt.Src, "parse_invalid")
	if c.hook == HookNetfilter {
		b.Mark("ipv6_src_checked")
	}

}

// ipv6HopByHop walks the hop-by-hop options (ipv6_parse_hopopts,
// ip6_parse_tlv), whose jumbo option gives a jumbogram its length.
func (c *compiler) ipv6HopByHop() {
	b := c.b
	b.Note("hop-by-hop options (ipv6_parse_hopopts, ip6_parse_tlv)")
	b.Emit(
		asm.JLT.Imm(asm.R9, 48, "parse_invalid"),
		insn.Movr(asm.R1, asm.R6),
		insn.Movr(asm.R2, asm.R8),
		asm.Add.Imm(asm.R2, 40),
	)
	c.load(asm.R10, parseScratch, 8, "parse_invalid")
	b.Emit(
		insn.Ld(asm.R1, asm.R10, parseScratch+1, asm.Byte),
		asm.Add.Imm(asm.R1, 1),
		asm.LSh.Imm(asm.R1, 3),
		insn.Movr(asm.R2, asm.R1),
		asm.Add.Imm(asm.R2, 40),
		asm.JGT.Reg(asm.R2, asm.R9, "parse_invalid"),
		insn.St(asm.R10, parseSave, asm.R1, asm.DWord),
	)
	c.loopState()
	b.Emit(
		insn.Ld(asm.R1, asm.R10, parseSave, asm.DWord),
		insn.Movr(asm.R2, asm.R8),
		asm.Add.Imm(asm.R2, 42),
		insn.St(asm.R0, hbhOff, asm.R2, asm.DWord),
		asm.Sub.Imm(asm.R1, 2),
		insn.St(asm.R0, hbhRem, asm.R1, asm.DWord),
		insn.StImm(asm.R0, hbhResult, loopRunning, asm.DWord),
		insn.StImm(asm.R0, hbhPad, 0, asm.DWord),
		insn.StImm(asm.R0, hbhCount, 0, asm.DWord),
		insn.StImm(asm.R0, hbhAlign, 42%4, asm.DWord),
		insn.StImm(asm.R0, hbhJumbo, 0, asm.DWord),
		insn.StImm(asm.R0, hbhMaxJumbo, 0, asm.DWord),
	)
	c.bpfLoop(maxHopByHopSteps, symHopByHop)
	c.loopResult()
	b.Emit(
		insn.Ld(asm.R1, asm.R3, hbhResult, asm.DWord),
		asm.JNE.Imm(asm.R1, loopDone, "parse_invalid"),
		// ipv6_hop_jumbo: the payload length must be 0 and every jumbo
		// length within the packet; the last one trims it.
		insn.Ld(asm.R1, asm.R3, hbhMaxJumbo, asm.DWord),
		asm.JEq.Imm(asm.R1, 0, "ipv6_ext_headers"),
		insn.Ld(asm.R2, asm.R10, parseTmp, asm.DWord),
		asm.JNE.Imm(asm.R2, 0, "parse_invalid"),
		insn.Movr(asm.R2, asm.R9),
		asm.Sub.Imm(asm.R2, 40),
		asm.JGT.Reg(asm.R1, asm.R2, "parse_invalid"),
		insn.Ld(asm.R9, asm.R3, hbhJumbo, asm.DWord),
		asm.Add.Imm(asm.R9, 40),
	)
}

// ipv6ExtHeaders walks the extension headers to the upper-layer header
// (ipv6_find_hdr) and stores the protocol, the fragment offset and the
// flags of the walk; r8 and r9 end at the transport header.
func (c *compiler) ipv6ExtHeaders() {
	b := c.b
	b.Mark("ipv6_ext_headers")
	b.Note("walk the extension headers to the upper-layer header (ipv6_find_hdr)")
	b.Emit(insn.St(asm.R7, pkt.Bytes, asm.R9, asm.Word))
	c.loopState()
	b.Emit(
		insn.Movr(asm.R1, asm.R8),
		asm.Add.Imm(asm.R1, 40),
		insn.St(asm.R0, extStart, asm.R1, asm.DWord),
		insn.Movr(asm.R1, asm.R8),
		asm.Add.Reg(asm.R1, asm.R9),
		insn.St(asm.R0, extEnd, asm.R1, asm.DWord),
		insn.Ld(asm.R1, asm.R10, parseBuf+6, asm.Byte),
		insn.St(asm.R0, extNext, asm.R1, asm.DWord),
		insn.StImm(asm.R0, extResult, loopRunning, asm.DWord),
		insn.StImm(asm.R0, extFragOff, 0, asm.DWord),
		insn.StImm(asm.R0, extAuth, 0, asm.DWord),
	)
	if c.fragFlag() {
		b.Emit(insn.StImm(asm.R0, extFrag, 0, asm.DWord))
	}
	c.bpfLoop(maxExtHeaders, symExtHdrs)
	c.loopResult()
	b.Emit(insn.Ld(asm.R1, asm.R3, extAuth, asm.DWord))
	if c.fragFlag() {
		b.Emit(
			insn.Ld(asm.R2, asm.R3, extFrag, asm.DWord),
			asm.Or.Reg(asm.R1, asm.R2),
		)
	}
	if c.marksClassU() {
		// Keep pkt.FlagVLAN (and an accelerator's FlagUnnamedIface).
		b.Emit(
			insn.Ld(asm.R2, asm.R7, pkt.Flags, asm.Byte),
			asm.Or.Reg(asm.R1, asm.R2),
		)
	}
	b.Emit(
		insn.St(asm.R7, pkt.Flags, asm.R1, asm.Byte),
		insn.Ld(asm.R1, asm.R3, extResult, asm.DWord),
		asm.JEq.Imm(asm.R1, loopDone, "ipv6_upper"),
		// ipv6_find_hdr failed: a rule testing the protocol drops the
		// packet.
		insn.Ld(asm.R1, asm.R7, pkt.Flags, asm.Byte),
		asm.Or.Imm(asm.R1, pkt.FlagBadExtHeaders),
		insn.St(asm.R7, pkt.Flags, asm.R1, asm.Byte),
		insn.Ja("parse_ok"),
	)
	b.Mark("ipv6_upper")
	b.Emit(
		insn.Ld(asm.R1, asm.R3, extNext, asm.DWord),
		insn.St(asm.R7, pkt.Proto, asm.R1, asm.Byte),
		insn.Ld(asm.R1, asm.R3, extFragOff, asm.DWord),
		insn.St(asm.R7, pkt.FragOff, asm.R1, asm.Word),
		// A non-first fragment: nft's transport offset stays 0, its loads
		// read the IPv6 header (r8, r9 still describe it).
		asm.JNE.Imm(asm.R1, 0, "parse_l4"),
		insn.Ld(asm.R1, asm.R3, extStart, asm.DWord),
		insn.Ld(asm.R2, asm.R3, extEnd, asm.DWord),
		asm.JGT.Reg(asm.R1, asm.R2, "parse_ok"),
		insn.Movr(asm.R8, asm.R1),
		insn.Movr(asm.R9, asm.R2),
		asm.Sub.Reg(asm.R9, asm.R1),
	)
}

// ipv6Loopback jumps to yes when the address at pkt+off is ::1.
func (c *compiler) ipv6Loopback(off int16, yes string) {
	b := c.b
	no := b.Fresh("not_loopback")
	b.Emit(
		insn.Ld(asm.R1, asm.R7, off, asm.Word),
		asm.JNE.Imm(asm.R1, 0, no),
		insn.Ld(asm.R1, asm.R7, off+4, asm.Word),
		asm.JNE.Imm(asm.R1, 0, no),
		insn.Ld(asm.R1, asm.R7, off+8, asm.Word),
		asm.JNE.Imm(asm.R1, 0, no),
		insn.Ld(asm.R1, asm.R7, off+12, asm.Word),
		asm.JEq.Imm(asm.R1, 1, yes),
	)
	b.Mark(no)
}

// ipv6Multicast jumps to yes when the address at pkt+off is in ff00::/8.
func (c *compiler) ipv6Multicast(off int16, yes string) {
	b := c.b
	b.Emit(
		insn.Ld(asm.R1, asm.R7, off, asm.Word),
		asm.RSh.Imm(asm.R1, 24),
		asm.JEq.Imm(asm.R1, 0xff, yes),
	)
}

// parseL4 is ir's decodeL4, with the transport header at r8 and r9 bytes
// from there to the end of the packet. A non-first fragment's fields are
// what nft's loads read there; xtables' matches never read them (their
// L4Header guard fails first).
func (c *compiler) parseL4() {
	b := c.b
	b.Mark("parse_l4")
	b.Note("transport header: ports, tcp flags and options, icmp type and code")
	if c.ct {
		b.Emit(insn.St(asm.R7, pkt.L4Off, asm.R8, asm.Half))
	}
	b.Emit(
		insn.St(asm.R7, pkt.L4Len, asm.R9, asm.Word),
		asm.JEq.Imm(asm.R9, 0, "parse_ok"),
		insn.Movr(asm.R4, asm.R9),
	)
	if !c.hook.nf() {
		// The first 20 bytes, as almost every packet has them, read in
		// place. Of a shorter one, the first 8 are read in place: all
		// that parse reads of any header but TCP's, whose flags and
		// data offset come after them through the helper.
		b.Emit(
			asm.JLT.Imm(asm.R4, 20, "l4_short"),
			insn.Movr(asm.R1, asm.R6),
			insn.Movr(asm.R2, asm.R8),
		)
		c.load(asm.R10, parseBuf, 20, "parse_ok")
		b.Emit(insn.Ja("l4_loaded"))
		b.Mark("l4_short")
		b.Emit(
			asm.JLT.Imm(asm.R4, 8, "l4_load"),
			insn.Movr(asm.R1, asm.R6),
			insn.Movr(asm.R2, asm.R8),
		)
		c.load(asm.R10, parseBuf, 8, "parse_ok")
		b.Emit(
			insn.Ld(asm.R1, asm.R7, pkt.Proto, asm.Byte),
			asm.JNE.Imm(asm.R1, uapi.ProtoTCP, "l4_loaded"),
			insn.Movr(asm.R4, asm.R9),
		)
	} else {
		b.Emit(
			asm.JLE.Imm(asm.R4, 20, "l4_load"),
			insn.Mov(asm.R4, 20),
		)
	}
	b.Mark("l4_load")
	b.Emit(insn.Movr(asm.R1, asm.R6), insn.Movr(asm.R2, asm.R8))
	c.load(asm.R10, parseBuf, 0, "parse_ok")
	b.Mark("l4_loaded")
	b.Emit(insn.Ld(asm.R1, asm.R7, pkt.Proto, asm.Byte))
	for _, p := range []int32{uapi.ProtoTCP, uapi.ProtoUDP, uapi.ProtoUDPLite, uapi.ProtoSCTP, uapi.ProtoDCCP} {
		b.Emit(asm.JEq.Imm(asm.R1, p, "l4_ports"))
	}
	b.Emit(insn.Ja("l4_icmp"))
	b.Mark("l4_ports")
	b.Emit(
		// Each port as far as the packet holds it (nft loads the source
		// port of a header cut after it).
		asm.JLT.Imm(asm.R9, 2, "l4_tcp"),
		insn.Ld(asm.R2, asm.R10, parseBuf, asm.Half),
		insn.Ntoh(asm.R2, asm.Half),
		insn.St(asm.R7, pkt.Sport, asm.R2, asm.Word),
		asm.JLT.Imm(asm.R9, 4, "l4_tcp"),
		insn.Ld(asm.R2, asm.R10, parseBuf+2, asm.Half),
		insn.Ntoh(asm.R2, asm.Half),
		insn.St(asm.R7, pkt.Dport, asm.R2, asm.Word),
	)
	b.Mark("l4_tcp")
	b.Emit(
		asm.JNE.Imm(asm.R1, uapi.ProtoTCP, "l4_icmp"),
		asm.JLT.Imm(asm.R9, 14, "parse_ok"),
		insn.Ld(asm.R2, asm.R10, parseBuf+13, asm.Byte),
		insn.St(asm.R7, pkt.TCPFlags, asm.R2, asm.Byte),
		asm.JLT.Imm(asm.R9, 20, "parse_ok"),
		// A fragment's data has no options.
		insn.Ld(asm.R2, asm.R7, pkt.FragOff, asm.Word),
		asm.JNE.Imm(asm.R2, 0, "parse_ok"),
		insn.Ld(asm.R2, asm.R10, parseBuf+12, asm.Byte),
		asm.RSh.Imm(asm.R2, 4),
		asm.LSh.Imm(asm.R2, 2),
		asm.JLT.Imm(asm.R2, 20, "tcp_options_truncated"),
		asm.JGT.Reg(asm.R2, asm.R9, "tcp_options_truncated"),
	)
	if len(c.optKinds) > 0 {
		b.Note("tcp options (tcp_find_option)")
		b.Emit(
			asm.JLE.Imm(asm.R2, 20, "parse_ok"),
			asm.Sub.Imm(asm.R2, 20),
			insn.St(asm.R10, parseSave, asm.R2, asm.DWord),
		)
		c.loopState()
		b.Emit(
			insn.Ld(asm.R4, asm.R10, parseSave, asm.DWord),
			insn.St(asm.R0, optLen, asm.R4, asm.DWord),
			insn.StImm(asm.R0, optIndex, 0, asm.DWord),
			insn.StImm(asm.R0, optFound, 0, asm.DWord),
			insn.Movr(asm.R3, asm.R0),
			asm.Add.Imm(asm.R3, stOptions),
			insn.Movr(asm.R2, asm.R8),
			asm.Add.Imm(asm.R2, 20),
			insn.Movr(asm.R1, asm.R6),
		)
		c.loadCall()
		b.Emit(
			asm.JNE.Imm(asm.R0, 0, "parse_ok"),
		)
		c.bpfLoop(maxTCPOptionSteps, symTCPOpts)
		c.loopResult()
		b.Emit(
			insn.Ld(asm.R1, asm.R3, optFound, asm.DWord),
			insn.St(asm.R7, pkt.TCPOpts, asm.R1, asm.DWord),
		)
	}
	b.Emit(insn.Ja("parse_ok"))
	b.Mark("tcp_options_truncated")
	b.Emit(
		insn.Ld(asm.R1, asm.R7, pkt.Flags, asm.Byte),
		asm.Or.Imm(asm.R1, pkt.FlagTCPOptsTruncated),
		insn.St(asm.R7, pkt.Flags, asm.R1, asm.Byte),
		insn.Ja("parse_ok"),
	)
	icmp := int32(uapi.ProtoICMP)
	if c.p.Family == rules.IPv6 {
		icmp = uapi.ProtoICMPv6
	}
	b.Mark("l4_icmp")
	b.Emit(
		asm.JNE.Imm(asm.R1, icmp, "parse_ok"),
		// nft's "icmp type" loads the type byte alone.
		insn.Ld(asm.R2, asm.R10, parseBuf, asm.Byte),
		insn.St(asm.R7, pkt.ICMPType, asm.R2, asm.Byte),
		asm.JLT.Imm(asm.R9, 2, "parse_ok"),
		insn.Ld(asm.R2, asm.R10, parseBuf+1, asm.Byte),
		insn.St(asm.R7, pkt.ICMPCode, asm.R2, asm.Byte),
	)
}

// A loop's result field: still running, done, or failed.
const (
	loopRunning = 0
	loopDone    = 1
	loopFailed  = 2
)

// The loop state of the hop-by-hop options.
const (
	hbhOff      = st0 // offset of the current option
	hbhRem      = st1 // bytes left in the header
	hbhResult   = st2
	hbhPad      = st3 // padding bytes in a row
	hbhCount    = st4 // options other than padding
	hbhAlign    = st5 // the option's offset from the IPv6 header, modulo 4
	hbhJumbo    = st6 // the last jumbo payload length
	hbhMaxJumbo = st7 // the largest jumbo payload length; 0 without one
)

// The loop state of the extension header walk.
const (
	extStart   = st0 // offset of the current header
	extEnd     = st1 // where the packet ends
	extNext    = st2 // the current header's type; the result's protocol
	extResult  = st3
	extFragOff = st4 // fragment offset of a non-first fragment
	extAuth    = st5 // pkt.FlagAuthHeader once the walk meets an authentication header
	extFrag    = st6 // pkt.FlagFragment once it meets a fragment header (conntrack)
)

// The loop state of the TCP option walk; the options are at stOptions.
const (
	optIndex = st0
	optLen   = st1
	optFound = st2 // bit i: kind optKinds[i] is there
)

// Hop-by-hop option types ip6_parse_tlv knows.
const (
	tlvPad1        = 0
	tlvPadN        = 1
	tlvRouterAlert = 5
	tlvCALIPSO     = 7
	tlvIOAM        = 49
	tlvJumbo       = 0xc2
)

// hopByHopCallback emits one step of ip6_parse_tlv over the hop-by-hop
// header, with the default sysctls (at most 8 options, IOAM disabled, no
// CALIPSO domain), as ir's parseHopByHop. The jumbo payload lengths are
// checked against the packet after the loop.
//
//	r6 loop state, r7 option type, r8 offset, r9 bytes left
func (c *compiler) hopByHopCallback() {
	b := c.b
	b.Function(insn.Callback(symHopByHop), "one hop-by-hop option")
	// Loads have constant lengths: the verifier can prove little about
	// lengths computed from the option bytes.
	c.callbackPrologue()
	b.Emit(
		insn.Ld(asm.R1, asm.R6, hbhResult, asm.DWord),
		asm.JNE.Imm(asm.R1, loopRunning, "hbh_stop"),
		insn.Ld(asm.R8, asm.R6, hbhOff, asm.DWord),
		insn.Ld(asm.R9, asm.R6, hbhRem, asm.DWord),
		asm.JEq.Imm(asm.R9, 0, "hbh_done"),
		insn.StImm(asm.R10, insn.CallbackBuf, 0, asm.DWord),
		insn.Ld(asm.R1, asm.R10, insn.CallbackCtx, asm.DWord),
		insn.Movr(asm.R2, asm.R8),
	)
	c.load(asm.R10, insn.CallbackBuf, 1, "hbh_fail")
	b.Emit(
		insn.Ld(asm.R7, asm.R10, insn.CallbackBuf, asm.Byte),
		asm.JNE.Imm(asm.R7, tlvPad1, "hbh_option"),
		insn.Ld(asm.R1, asm.R6, hbhPad, asm.DWord),
		asm.Add.Imm(asm.R1, 1),
		asm.JGT.Imm(asm.R1, 7, "hbh_fail"),
		insn.St(asm.R6, hbhPad, asm.R1, asm.DWord),
		insn.Mov(asm.R5, 1),
		insn.Ja("hbh_advance"),
	)
	b.Mark("hbh_option")
	b.Emit(
		asm.JLT.Imm(asm.R9, 2, "hbh_fail"),
		insn.Ld(asm.R1, asm.R10, insn.CallbackCtx, asm.DWord),
		insn.Movr(asm.R2, asm.R8),
		asm.Add.Imm(asm.R2, 1),
	)
	c.load(asm.R10, insn.CallbackBuf+1, 1, "hbh_fail")
	b.Emit(
		insn.Ld(asm.R5, asm.R10, insn.CallbackBuf+1, asm.Byte),
		asm.Add.Imm(asm.R5, 2),
		asm.JGT.Reg(asm.R5, asm.R9, "hbh_fail"),
		insn.St(asm.R10, insn.CallbackBuf+4, asm.R5, asm.Word),
		asm.JNE.Imm(asm.R7, tlvPadN, "hbh_counted"),
		insn.Ld(asm.R1, asm.R6, hbhPad, asm.DWord),
		asm.Add.Reg(asm.R1, asm.R5),
		asm.JGT.Imm(asm.R1, 7, "hbh_fail"),
		insn.St(asm.R6, hbhPad, asm.R1, asm.DWord),
	)
	// PadN's bytes must be zero; it is at most 7 bytes long here.
	for i := int32(2); i < 7; i++ {
		b.Emit(
			insn.Ld(asm.R5, asm.R10, insn.CallbackBuf+4, asm.Word),
			asm.JLE.Imm(asm.R5, i, "hbh_advance"),
			insn.Ld(asm.R1, asm.R10, insn.CallbackCtx, asm.DWord),
			insn.Movr(asm.R2, asm.R8),
			asm.Add.Imm(asm.R2, i),
		)
		c.load(asm.R10, insn.CallbackBuf, 1, "hbh_fail")
		b.Emit(
			insn.Ld(asm.R1, asm.R10, insn.CallbackBuf, asm.Byte),
			asm.JNE.Imm(asm.R1, 0, "hbh_fail"),
		)
	}
	b.Emit(
		insn.Ld(asm.R5, asm.R10, insn.CallbackBuf+4, asm.Word),
		insn.Ja("hbh_advance"),
	)
	b.Mark("hbh_counted")
	b.Emit(
		insn.Ld(asm.R1, asm.R6, hbhCount, asm.DWord),
		asm.Add.Imm(asm.R1, 1),
		asm.JGT.Imm(asm.R1, 8, "hbh_fail"),
		insn.St(asm.R6, hbhCount, asm.R1, asm.DWord),
		insn.StImm(asm.R6, hbhPad, 0, asm.DWord),
		asm.JEq.Imm(asm.R7, tlvRouterAlert, "hbh_router_alert"),
		asm.JEq.Imm(asm.R7, tlvIOAM, "hbh_ioam"),
		asm.JEq.Imm(asm.R7, tlvJumbo, "hbh_jumbo"),
		asm.JEq.Imm(asm.R7, tlvCALIPSO, "hbh_fail"),
		// ip6_tlvopt_unknown: only the action bits 00 skip the option.
		asm.RSh.Imm(asm.R7, 6),
		asm.JNE.Imm(asm.R7, 0, "hbh_fail"),
		insn.Ja("hbh_option_done"),
	)
	b.Mark("hbh_router_alert")
	b.Emit(
		insn.Ld(asm.R1, asm.R10, insn.CallbackBuf+1, asm.Byte),
		asm.JNE.Imm(asm.R1, 2, "hbh_fail"),
		insn.Ja("hbh_option_done"),
	)
	b.Mark("hbh_ioam")
	b.Emit(
		insn.Ld(asm.R1, asm.R6, hbhAlign, asm.DWord),
		asm.JNE.Imm(asm.R1, 0, "hbh_fail"),
		insn.Ja("hbh_option_done"),
	)
	b.Mark("hbh_jumbo")
	b.Emit(
		insn.Ld(asm.R1, asm.R10, insn.CallbackBuf+1, asm.Byte),
		asm.JNE.Imm(asm.R1, 4, "hbh_fail"),
		insn.Ld(asm.R1, asm.R6, hbhAlign, asm.DWord),
		asm.JNE.Imm(asm.R1, 2, "hbh_fail"),
		insn.Ld(asm.R1, asm.R10, insn.CallbackCtx, asm.DWord),
		insn.Movr(asm.R2, asm.R8),
		asm.Add.Imm(asm.R2, 2),
	)
	c.load(asm.R10, insn.CallbackBuf, 4, "hbh_fail")
	b.Emit(
		insn.Ld(asm.R1, asm.R10, insn.CallbackBuf, asm.Word),
		insn.Ntoh(asm.R1, asm.Word),
		asm.JLE.Imm(asm.R1, 0xffff, "hbh_fail"),
		insn.St(asm.R6, hbhJumbo, asm.R1, asm.DWord),
		insn.Ld(asm.R2, asm.R6, hbhMaxJumbo, asm.DWord),
		asm.JLE.Reg(asm.R1, asm.R2, "hbh_option_done"),
		insn.St(asm.R6, hbhMaxJumbo, asm.R1, asm.DWord),
	)
	b.Mark("hbh_option_done")
	b.Emit(insn.Ld(asm.R5, asm.R10, insn.CallbackBuf+4, asm.Word))
	// r5 is the option's length.
	b.Mark("hbh_advance")
	b.Emit(
		asm.Add.Reg(asm.R8, asm.R5),
		asm.Sub.Reg(asm.R9, asm.R5),
		insn.St(asm.R6, hbhOff, asm.R8, asm.DWord),
		insn.St(asm.R6, hbhRem, asm.R9, asm.DWord),
		insn.Ld(asm.R1, asm.R6, hbhAlign, asm.DWord),
		asm.Add.Reg(asm.R1, asm.R5),
		asm.And.Imm(asm.R1, 3),
		insn.St(asm.R6, hbhAlign, asm.R1, asm.DWord),
		insn.Mov(asm.R0, 0),
		asm.Return(),
	)
	b.Mark("hbh_done")
	b.Emit(insn.StImm(asm.R6, hbhResult, loopDone, asm.DWord))
	b.Mark("hbh_stop")
	b.Emit(insn.Mov(asm.R0, 1), asm.Return())
	b.Mark("hbh_fail")
	b.Emit(insn.StImm(asm.R6, hbhResult, loopFailed, asm.DWord), insn.Mov(asm.R0, 1), asm.Return())
}

// extHeadersCallback emits one step of ipv6_find_hdr (target -1), as ir's
// findUpperHeader.
//
//	r6 loop state, r7 header type, r8 offset, r9 end of the packet
func (c *compiler) extHeadersCallback() {
	b := c.b
	b.Function(insn.Callback(symExtHdrs), "one extension header")
	c.callbackPrologue()
	b.Emit(
		insn.Ld(asm.R1, asm.R6, extResult, asm.DWord),
		asm.JNE.Imm(asm.R1, loopRunning, "ext_stop"),
		insn.Ld(asm.R7, asm.R6, extNext, asm.DWord),
	)
	c.jumpIfExtHeader(asm.R7, "ext_header")
	b.Emit(
		// The upper-layer header, or "no next header".
		insn.StImm(asm.R6, extResult, loopDone, asm.DWord),
		insn.Mov(asm.R0, 1),
		asm.Return(),
	)
	b.Mark("ext_header")
	b.Emit(
		insn.Ld(asm.R8, asm.R6, extStart, asm.DWord),
		insn.Ld(asm.R9, asm.R6, extEnd, asm.DWord),
		insn.Movr(asm.R1, asm.R8),
		asm.Add.Imm(asm.R1, 2),
		asm.JGT.Reg(asm.R1, asm.R9, "ext_fail"),
		insn.StImm(asm.R10, insn.CallbackBuf, 0, asm.DWord),
		insn.Ld(asm.R1, asm.R10, insn.CallbackCtx, asm.DWord),
		insn.Movr(asm.R2, asm.R8),
	)
	c.load(asm.R10, insn.CallbackBuf, 2, "ext_fail")
	// reachesAuth: nft's walk stops at an authentication header whose
	// first two bytes it could read (ipv6_find_hdr reads them first).
	noAuth := b.Fresh("ext_no_auth")
	b.Emit(
		asm.JNE.Imm(asm.R7, nextAuth, noAuth),
		insn.StImm(asm.R6, extAuth, pkt.FlagAuthHeader, asm.DWord),
	)
	b.Mark(noAuth)
	b.Emit(
		asm.JEq.Imm(asm.R7, nextRouting, "ext_need4"),
		asm.JNE.Imm(asm.R7, nextFragment, "ext_length"),
	)
	// struct ipv6_rt_hdr, and frag_off of struct frag_hdr.
	b.Mark("ext_need4")
	b.Emit(
		insn.Movr(asm.R1, asm.R8),
		asm.Add.Imm(asm.R1, 4),
		asm.JGT.Reg(asm.R1, asm.R9, "ext_fail"),
		insn.Ld(asm.R1, asm.R10, insn.CallbackCtx, asm.DWord),
		insn.Movr(asm.R2, asm.R8),
		asm.Add.Imm(asm.R2, 2),
	)
	c.load(asm.R10, insn.CallbackBuf+2, 2, "ext_fail")
	b.Mark("ext_length")
	b.Emit(
		insn.Ld(asm.R2, asm.R10, insn.CallbackBuf, asm.Byte),
		insn.Ld(asm.R3, asm.R10, insn.CallbackBuf+1, asm.Byte),
		asm.JEq.Imm(asm.R7, nextFragment, "ext_fragment"),
		asm.JEq.Imm(asm.R7, nextAuth, "ext_auth"),
		asm.Add.Imm(asm.R3, 1),
		asm.LSh.Imm(asm.R3, 3),
		insn.Ja("ext_advance"),
	)
	b.Mark("ext_auth")
	b.Emit(
		asm.Add.Imm(asm.R3, 2),
		asm.LSh.Imm(asm.R3, 2),
		insn.Ja("ext_advance"),
	)
	b.Mark("ext_fragment")
	if c.fragFlag() {
		b.Emit(
			insn.StImm(asm.R6, extFrag, pkt.FlagFragment, asm.DWord),
		)
	}
	b.Emit(
		insn.Mov(asm.R3, 8),
		insn.Ld(asm.R4, asm.R10, insn.CallbackBuf+2, asm.Half),
		insn.Ntoh(asm.R4, asm.Half),
		asm.And.Imm(asm.R4, 0xfff8),
		asm.JEq.Imm(asm.R4, 0, "ext_advance"),
	)
	// A non-first fragment: its next header is the answer, unless it is
	// another extension header.
	c.jumpIfExtHeader(asm.R2, "ext_fail")
	b.Emit(
		insn.St(asm.R6, extNext, asm.R2, asm.DWord),
		insn.St(asm.R6, extFragOff, asm.R4, asm.DWord),
		insn.StImm(asm.R6, extResult, loopDone, asm.DWord),
		insn.Mov(asm.R0, 1),
		asm.Return(),
	)
	b.Mark("ext_advance")
	b.Emit(
		insn.St(asm.R6, extNext, asm.R2, asm.DWord),
		asm.Add.Reg(asm.R8, asm.R3),
		insn.St(asm.R6, extStart, asm.R8, asm.DWord),
		insn.Mov(asm.R0, 0),
		asm.Return(),
	)
	b.Mark("ext_fail")
	b.Emit(insn.StImm(asm.R6, extResult, loopFailed, asm.DWord))
	b.Mark("ext_stop")
	b.Emit(insn.Mov(asm.R0, 1), asm.Return())
}

// IPv6 next-header values ipv6_ext_hdr knows.
const (
	nextHopByHop = 0
	nextRouting  = 43
	nextFragment = 44
	nextAuth     = 51
	nextNone     = 59
	nextDestOpts = 60
)

// jumpIfExtHeader jumps to label when reg holds an extension header type
// that ipv6_find_hdr walks over: ipv6_ext_hdr, except "no next header".
func (c *compiler) jumpIfExtHeader(reg asm.Register, label string) {
	for _, t := range []int32{nextHopByHop, nextRouting, nextFragment, nextAuth, nextDestOpts} {
		c.b.Emit(asm.JEq.Imm(reg, t, label))
	}
}

// tcpOptionsCallback emits one step of tcp_find_option's walk over the
// options in parseBuf, setting the bits of the kinds rules test.
//
//	r6 loop state, r1 index, r2 length of the options
func (c *compiler) tcpOptionsCallback() {
	b := c.b
	b.Function(insn.Callback(symTCPOpts), "one tcp option")
	c.callbackPrologue()
	b.Emit(
		insn.Ld(asm.R1, asm.R6, optIndex, asm.DWord),
		insn.Ld(asm.R2, asm.R6, optLen, asm.DWord),
		asm.JGE.Reg(asm.R1, asm.R2, "opt_done"),
		asm.JGT.Imm(asm.R1, maxTCPOptionSteps-1, "opt_done"),
		insn.Movr(asm.R3, asm.R6),
		asm.Add.Reg(asm.R3, asm.R1),
		insn.Ld(asm.R4, asm.R3, stOptions, asm.Byte),
		insn.Ld(asm.R5, asm.R6, optFound, asm.DWord),
	)
	for i, kind := range c.optKinds {
		other := b.Fresh("opt_other")
		b.Emit(
			asm.JNE.Imm(asm.R4, int32(kind), other),
			insn.Mov(asm.R0, 1),
			asm.LSh.Imm(asm.R0, int32(i)),
			asm.Or.Reg(asm.R5, asm.R0),
		)
		b.Mark(other)
	}
	b.Emit(
		insn.St(asm.R6, optFound, asm.R5, asm.DWord),
		// Kinds 0 and 1 are one byte long; the others say their length,
		// and a length byte past the end ends the walk.
		asm.JLT.Imm(asm.R4, 2, "opt_one"),
		insn.Movr(asm.R5, asm.R1),
		asm.Add.Imm(asm.R5, 1),
		asm.JGE.Reg(asm.R5, asm.R2, "opt_one"),
		insn.Movr(asm.R3, asm.R6),
		asm.Add.Reg(asm.R3, asm.R5),
		insn.Ld(asm.R4, asm.R3, stOptions, asm.Byte),
		asm.JNE.Imm(asm.R4, 0, "opt_step"),
		insn.Mov(asm.R4, 1),
	)
	b.Mark("opt_step")
	b.Emit(
		asm.Add.Reg(asm.R1, asm.R4),
		insn.Ja("opt_store"),
	)
	b.Mark("opt_one")
	b.Emit(asm.Add.Imm(asm.R1, 1))
	b.Mark("opt_store")
	b.Emit(
		insn.St(asm.R6, optIndex, asm.R1, asm.DWord),
		insn.Mov(asm.R0, 0),
		asm.Return(),
	)
	b.Mark("opt_done")
	b.Emit(insn.Mov(asm.R0, 1), asm.Return())
}

// setFlag sets flag in the parsed packet at r7.
func (c *compiler) setFlag(flag int32) {
	c.b.Emit(
		insn.Ld(asm.R1, asm.R7, pkt.Flags, asm.Byte),
		asm.Or.Imm(asm.R1, flag),
		insn.St(asm.R7, pkt.Flags, asm.R1, asm.Byte),
	)
}

// fragFlag reports whether parse sets pkt.FlagFragment: conntrack and the
// reassembled view (ir.Program.Reassembled) need it.
// forwardedTTL turns the TTL (hop limit) in r1 into the one the packet
// arrived with, where it left already forwarded: a FORWARD program at
// tc-egress sees it after ip_forward's decrement, and lowering wrote its
// TTL matches for the TTL as the packet arrives (ir.Program.Forward).
func (c *compiler) forwardedTTL() {
	if c.hook != HookTCEgress && c.hook != HookNetfilter || !c.p.Forward {
		return
	}
	done := c.b.Fresh("ttl_as_arrived")
	c.b.Note("FORWARD saw one more than the TTL that leaves")
	c.b.Emit(
		asm.JEq.Imm(asm.R1, 255, done),
		asm.Add.Imm(asm.R1, 1),
	)
	c.b.Mark(done)
}

func (c *compiler) fragFlag() bool { return c.ct || c.p.Reassembled || c.accel }

// ifaceSlots reports whether the program reads the packet's interface
// bits from abi.IfaceSlotsMap first: where parse looks them up by the
// ifindex the packet arrived on.
func (c *compiler) ifaceSlots() bool {
	return (len(c.ifaces) > 0 || c.accel) && (c.hook == HookXDP || c.hook.tc())
}
