package codegen

import (
	"fmt"
	"slices"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"

	"bpfwall/codegen/insn"
	"bpfwall/codegen/pkt"
	"bpfwall/codegen/uapi"
	"bpfwall/ir"
	"bpfwall/rules"
)

// REJECT: a chain function returns a REJECT rule's decision as a DROP;
// main looks the rule up in RejectRulesMap and, for a REJECT rule, calls
// the function that turns the packet into the reply the kernel would send
// (nf_send_unreach and icmp_send, nf_send_reset; their IPv6 counterparts)
// and transmits it: XDP_TX, or on tc a redirect to the device's egress.
// Packets the kernel sends no reply to are dropped as they are.

// Names of the maps a program with REJECT rules has.
const (
	// RejectRulesMap is an ARRAY from a uint32 rule ID to a uint32: 0 for
	// a rule that does not reject, k+1 for one that calls reject function
	// k.
	RejectRulesMap = "reject_rules"
	// RejectScratchMap is a PERCPU_ARRAY with one entry: the state of the
	// checksum loop and a chunk of packet.
	RejectScratchMap = "reject_scratch"
	// RejectConfigMap is an ARRAY with one RejectConfig, which the loader
	// may fill with the namespace's settings.
	RejectConfigMap = "reject_config"
)

// RejectConfig is what a reply takes from the namespace: the TTL of IPv4
// replies (net.ipv4.ip_default_ttl) and the hop limit of IPv6 replies
// (net.ipv6.conf.IFACE.hop_limit). Compile sets both to the kernel's
// default, 64.
type RejectConfig struct {
	TTL, HopLimit uint8
	_             [2]uint8
}

// rejectType is what one --reject-with sends.
type rejectType struct {
	tcpReset bool
	code     uint8 // ICMP or ICMPv6 destination unreachable code
}

// rejectTypes are the --reject-with names ir.Reject carries.
var rejectTypes = map[string]rejectType{
	"icmp-net-unreachable":   {code: 0},
	"icmp-host-unreachable":  {code: 1},
	"icmp-proto-unreachable": {code: 2},
	"icmp-port-unreachable":  {code: 3},
	"icmp-net-prohibited":    {code: 9},
	"icmp-host-prohibited":   {code: 10},
	"icmp-admin-prohibited":  {code: 13},
	"icmp6-no-route":         {code: 0},
	"icmp6-adm-prohibited":   {code: 1},
	"icmp6-addr-unreachable": {code: 3},
	"icmp6-port-unreachable": {code: 4},
	"icmp6-policy-fail":      {code: 5},
	"icmp6-reject-route":     {code: 6},
	"tcp-reset":              {tcpReset: true},
}

// checkReject reports why rule r's REJECT cannot be compiled exactly, or
// "".
func (c *compiler) checkReject(a ir.Reject) string {
	t, ok := rejectTypes[a.With]
	if !ok || strings6(a.With) != (c.p.Family == rules.IPv6) && a.With != "tcp-reset" {
		return fmt.Sprintf("REJECT --reject-with %s is not supported for %s", a.With, c.p.Family)
	}
	if c.hook == HookSkLookup {
		return "REJECT is not supported on sk-lookup: a socket lookup has no packet to answer"
	}
	if c.hook == HookTCEgress {
		return "REJECT is not supported on tc-egress: the kernel delivers the reply to the local sender, which a tc program cannot do as the kernel does"
	}
	switch chain := c.p.Chains[0].Name; {
	case chain == "INPUT":
	case chain == "FORWARD" && t.tcpReset:
		// The reset comes from the packet's destination, whatever the
		// chain.
	case chain == "FORWARD":
		// The error's source address is routing's choice: the program
		// asks bpf_fib_lookup (rejectRoute).
	default:
		return fmt.Sprintf("REJECT is not supported in chain %s on %s: bpfwall answers packets that arrive, in INPUT and FORWARD", chain, c.hook)
	}
	return ""
}

// strings6 reports whether a --reject-with name is IPv6's.
func strings6(with string) bool { return len(with) > 5 && with[:5] == "icmp6" }

// collectRejects numbers the reject functions: one per --reject-with the
// rules use.
func (c *compiler) collectRejects() {
	for _, r := range c.p.Rules {
		if a, ok := r.Action.(ir.Reject); ok && !slices.Contains(c.rejects, a.With) {
			c.rejects = append(c.rejects, a.With)
		}
	}
}

// rejectIndex is the number of the reject function of with.
func (c *compiler) rejectIndex(with string) int { return slices.Index(c.rejects, with) }

// rejectMaps are the maps of a program with REJECT rules, with their
// contents.
func (c *compiler) rejectMaps() []*ebpf.MapSpec {
	if len(c.rejects) == 0 {
		return nil
	}
	var contents []ebpf.MapKV
	for _, r := range c.p.Rules {
		if a, ok := r.Action.(ir.Reject); ok {
			contents = append(contents, ebpf.MapKV{Key: uint32(r.ID), Value: uint32(c.rejectIndex(a.With) + 1)})
		}
	}
	rulesMap := &ebpf.MapSpec{
		Name:       RejectRulesMap,
		Type:       ebpf.Array,
		KeySize:    4,
		ValueSize:  4,
		MaxEntries: uint32(len(c.p.Rules)),
		Contents:   contents,
	}
	if c.hook == HookNetfilter {
		// The kernel answers: no reply is built here (nfchain.go).
		return []*ebpf.MapSpec{rulesMap, pendingMapSpec()}
	}
	return []*ebpf.MapSpec{
		rulesMap,
		{
			Name:       RejectScratchMap,
			Type:       ebpf.PerCPUArray,
			KeySize:    4,
			ValueSize:  rsSize,
			MaxEntries: 1,
		},
		{
			Name:       RejectConfigMap,
			Type:       ebpf.Array,
			KeySize:    4,
			ValueSize:  4,
			MaxEntries: 1,
			Contents:   []ebpf.MapKV{{Key: uint32(0), Value: RejectConfig{TTL: 64, HopLimit: 64}}},
		},
	}
}

// RejectScratchMap's value: the checksum loop's state, and buffers the
// stack has no room for (a reject function's frame comes on top of
// main's, within BPF's 512 bytes).
const (
	rsOff    = 0  // u64: next packet offset to sum
	rsEnd    = 8  // u64: where the range ends
	rsSum    = 16 // u64: the 32-bit sum so far
	rsErr    = 24 // u64: set when a load failed
	rsBuf    = 32 // rsChunk bytes of packet, and 4 bytes of padding
	rsChunk  = 512
	rsPseudo = rsBuf + rsChunk + 8 // 40 bytes: a pseudo-header
	rsSize   = rsPseudo + 40
)

// The frame of a reject function.
const (
	rjKey      = -8   // u32 map key
	rjLoop     = -24  // the loop callback's context: lsCtx, lsState
	rjSum      = -32  // u64: checksum being summed
	rjQuote    = -40  // u64: bytes of the original packet the reply quotes
	rjEnd      = -48  // u64: offset where the original datagram ends
	rjTmp      = -56  // u64
	rjTCP      = -80  // 24 bytes: the original TCP header
	rjHdr      = -144 // 64 bytes: the reply's IP and ICMP or TCP headers
	rjL2       = -176 // 32 bytes: the link-layer header
	rjOrig     = -224 // 48 bytes: the original IP header
	rjL3       = -232 // u64: offset of the IP header
	rjL4       = -240 // u64: offset of the transport header
	rjQuoteMax = -248 // u64: the most an ICMP error may quote
	rjPkt      = -256 // the parsed packet's pointer
)

// symRejectStep is the checksum loop's callback.
const symRejectStep = "reject_csum_step"

func rejectSym(k int) string { return fmt.Sprintf("reject%d", k) }

// rejectDecided emits main's handling of a rule's DROP when the program
// rejects: r8 holds the rule. A REJECT rule's function leaves the return
// code in r9; at a chain's netfilter hook the packet is noted and
// accepted instead, for the kernel's REJECT rule after the program to
// answer (nfchain.go). It goes on to symMainEnd.
func (c *compiler) rejectDecided() {
	b := c.b
	b.Mark("ruled_drop")
	if c.hook == HookNetfilter {
		b.Note("a DROP; a REJECT is noted and accepted, and the kernel's REJECT rule after this program answers it")
	} else {
		b.Note("a DROP: REJECT rules send their reply first")
	}
	b.Emit(
		insn.St(asm.R10, c.mainKey(), asm.R8, asm.Word),
		insn.Movr(asm.R2, asm.R10),
		asm.Add.Imm(asm.R2, int32(c.mainKey())),
		insn.MapRef(asm.R1, RejectRulesMap),
		asm.FnMapLookupElem.Call(),
		asm.JEq.Imm(asm.R0, 0, symMainEnd),
		insn.Ld(asm.R1, asm.R0, 0, asm.Word),
	)
	for k, with := range c.rejects {
		next := b.Fresh("not_reject")
		b.Emit(asm.JNE.Imm(asm.R1, int32(k+1), next), insn.Movr(asm.R1, asm.R6))
		if c.hook == HookNetfilter {
			b.Emit(insn.Mov(asm.R2, rejectCode(with)), insn.Call(symRejectNote), insn.Mov(asm.R9, uapi.NFAccept))
		} else {
			b.Emit(insn.Movr(asm.R2, asm.R10), asm.Add.Imm(asm.R2, int32(c.mainPkt())), insn.Call(rejectSym(k)), insn.Movr(asm.R9, asm.R0))
		}
		b.Emit(insn.Ja(symMainEnd))
		b.Mark(next)
	}
	b.Emit(insn.Ja(symMainEnd))
}

// rejectFunctions emits the reject functions and their loop callback.
func (c *compiler) rejectFunctions() {
	if len(c.rejects) == 0 {
		return
	}
	if c.hook == HookNetfilter {
		c.nfRejectFunctions()
		return
	}
	for k, with := range c.rejects {
		c.rejectFunction(k, with)
	}
	c.rejectStep()
	if c.p.Family == rules.IPv4 {
		c.rejectOptionStep()
	}
}

// rejectFunction emits reject function k, which sends what with names.
// It returns the hook's code: the reply's transmission, or a drop.
//
//	r6 ctx, r7 pkt
func (c *compiler) rejectFunction(k int, with string) {
	b := c.b
	t := rejectTypes[with]
	v6 := c.p.Family == rules.IPv6
	sym := rejectSym(k)
	b.Function(c.funcCtxPkt(rejectSym(k)), "REJECT --reject-with %s: build the reply in place and transmit it", with)
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
		insn.MapRef(asm.R1, RejectScratchMap),
		asm.FnMapLookupElem.Call(),
		asm.JEq.Imm(asm.R0, 0, noReply),
		insn.St(asm.R10, rjLoop+lsCtx, asm.R6, asm.DWord),
		insn.St(asm.R10, rjLoop+lsState, asm.R0, asm.DWord),
		insn.St(asm.R10, rjPkt, asm.R7, asm.DWord),
	)

	c.rejectOffsets(sym, noReply)
	c.rejectSilent(t, noReply)
	if t.tcpReset {
		c.rejectTCPChecks(noReply)
	} else if v6 {
		c.rejectICMPv6Checks(noReply)
	} else {
		c.rejectICMPChecks(noReply)
	}
	c.rejectVerifyChecksum(sym, t.tcpReset, noReply)

	if t.tcpReset {
		c.rejectBuildReset(sym, noReply)
	} else {
		c.rejectBuildUnreach(sym, t.code, noReply)
	}

	b.Mark(noReply)
	b.Emit(insn.Mov(asm.R0, c.hook.drop()), asm.Return())
}

// rejectOffsets stores the offsets of the IP header (after the VLAN tags
// parse skipped) and of the transport header in rjL3 and rjL4; r6 is the
// context and r7 the parsed packet.
func (c *compiler) rejectOffsets(sym, noReply string) {
	b := c.b
	l := func(s string) string { return sym + "_" + s }
	b.Note("the offsets of the IP header (after the VLAN tags parse skipped) and of the transport header")
	done := l("l3_found")
	b.Emit(
		insn.Movr(asm.R1, asm.R6),
		insn.Mov(asm.R2, 12),
		insn.Movr(asm.R3, asm.R10),
		asm.Add.Imm(asm.R3, rjTmp),
		insn.Mov(asm.R4, 2),
		c.loadHelper().Call(),
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
			c.loadHelper().Call(),
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

// rejectSilent goes to noReply for the packets the kernel answers with
// nothing, and loads the original link-layer and IP headers into rjL2
// and rjOrig.
func (c *compiler) rejectSilent(t rejectType, noReply string) {
	b := c.b
	v6 := c.p.Family == rules.IPv6
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
	if c.p.Reassembled {
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
		c.loadHelper().Call(),
		asm.JNE.Imm(asm.R0, 0, noReply),
		insn.Movr(asm.R1, asm.R6),
		insn.Ld(asm.R2, asm.R10, rjL3, asm.DWord),
		insn.Movr(asm.R3, asm.R10),
		asm.Add.Imm(asm.R3, rjOrig),
		insn.Mov(asm.R4, ipLen),
		c.loadHelper().Call(),
		asm.JNE.Imm(asm.R0, 0, noReply),
	)
	if !v6 {
		c.rejectIPOptions(noReply)
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
		c.rejectUnspecified(rjOrig+8, noReply)
		if t.tcpReset {
			c.rejectUnspecified(rjOrig+24, noReply)
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
	c.rejectNotHost(noReply)

}

// rejectIPOptions sends nothing to a packet with a record route or
// timestamp option. ip_options_compile writes into such a packet's header
// (its address, the time) without fixing the header checksum, and
// nf_ip_checksum sums the header with the payload: the checksum check
// fails, and neither nf_send_unreach nor nf_send_reset replies. (When the
// option has no room left, or the device vouched for the checksum, the
// kernel does reply, an ICMP error with the options echoed, which the
// program does not build: it sends nothing; see docs/reject.md.)
func (c *compiler) rejectIPOptions(noReply string) {
	b := c.b
	done := b.Fresh("no_ip_options")
	b.Emit(
		insn.Ld(asm.R4, asm.R10, rjOrig, asm.Byte),
		asm.And.Imm(asm.R4, 0x0f),
		asm.LSh.Imm(asm.R4, 2),
		asm.Sub.Imm(asm.R4, 20),
		asm.JEq.Imm(asm.R4, 0, done),
		asm.JGT.Imm(asm.R4, 40, noReply),
		insn.Ld(asm.R3, asm.R10, rjLoop+lsState, asm.DWord),
		insn.St(asm.R3, rsEnd, asm.R4, asm.DWord),
		insn.StImm(asm.R3, rsOff, 0, asm.DWord),
		insn.StImm(asm.R3, rsErr, 0, asm.DWord),
		asm.Add.Imm(asm.R3, rsBuf),
		insn.Movr(asm.R1, asm.R6),
		insn.Ld(asm.R2, asm.R10, rjL3, asm.DWord),
		asm.Add.Imm(asm.R2, 20),
		c.loadHelper().Call(),
		asm.JNE.Imm(asm.R0, 0, noReply),
		insn.Mov(asm.R1, 40),
	)
	c.rejectLoop(symRejectOption, noReply)
	b.Mark(done)
}

// rejectLoop calls bpf_loop(r1, callback, rjLoop of this frame, 0) and
// goes to fail when the callback set rsErr; it leaves the loop state in
// r3.
func (c *compiler) rejectLoop(callback, fail string) {
	c.b.Emit(
		insn.FuncRef(asm.R2, callback),
		insn.Movr(asm.R3, asm.R10),
		asm.Add.Imm(asm.R3, rjLoop),
		insn.Mov(asm.R4, 0),
		asm.FnLoop.Call(),
		insn.Ld(asm.R3, asm.R10, rjLoop+lsState, asm.DWord),
		insn.Ld(asm.R1, asm.R3, rsErr, asm.DWord),
		asm.JNE.Imm(asm.R1, 0, fail),
	)
}

// symRejectOption is the IPv4 option walk's callback.
const symRejectOption = "reject_ip_option_step"

// IPv4 options (ip_options_compile).
const (
	ipoptEnd       = 0
	ipoptNoop      = 1
	ipoptRR        = 7
	ipoptTimestamp = 68
)

// rejectOptionStep emits the callback that looks at the next IPv4 option
// in the scratch buffer: it sets rsErr at a record route or timestamp.
//
//	r6 state, r7 offset, r8 options' length
func (c *compiler) rejectOptionStep() {
	b := c.b
	b.Function(funcCallback(symRejectOption), "the next IPv4 option: is it one the kernel writes into?")
	stop := symRejectOption + "_stop"
	next := symRejectOption + "_next"
	b.Emit(
		insn.Ld(asm.R6, asm.R2, lsState, asm.DWord),
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
		asm.JEq.Imm(asm.R2, ipoptRR, symRejectOption+"_found"),
		asm.JEq.Imm(asm.R2, ipoptTimestamp, symRejectOption+"_found"),
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
	b.Mark(symRejectOption + "_found")
	b.Emit(insn.StImm(asm.R6, rsErr, 1, asm.DWord))
	b.Mark(stop)
	b.Emit(insn.Mov(asm.R0, 1), asm.Return())
}

// rejectUnspecified jumps to yes when the IPv6 address at r10+off is ::.
func (c *compiler) rejectUnspecified(off int16, yes string) {
	b := c.b
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

// rejectNotHost jumps to yes for a frame that is not PACKET_HOST.
func (c *compiler) rejectNotHost(yes string) {
	b := c.b
	if c.hook.tc() {
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

// rejectTCPChecks: nf_reject_ip_tcphdr_get, nf_reject_ip6_tcphdr_get: a
// whole TCP header, no RST in reply to a RST. The header goes to rjTCP.
func (c *compiler) rejectTCPChecks(noReply string) {
	b := c.b
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
		c.loadHelper().Call(),
		asm.JNE.Imm(asm.R0, 0, noReply),
		insn.Ld(asm.R1, asm.R10, rjTCP+13, asm.Byte),
		asm.And.Imm(asm.R1, 0x04),
		asm.JNE.Imm(asm.R1, 0, noReply),
	)
}

// icmpErrorTypes are the ICMP types icmp_pointers marks as errors.
const icmpErrorTypes = 1<<1 | 1<<2 | 1<<3 | 1<<4 | 1<<5 | 1<<6 | 1<<7 | 1<<9 | 1<<10 | 1<<11 | 1<<12

// rejectICMPChecks: icmp_send sends no error about an ICMP error, nor
// about an ICMP packet too short to have a type.
func (c *compiler) rejectICMPChecks(noReply string) {
	b := c.b
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

// rejectICMPv6Checks: reject6_csum_ok wants a transport header inside
// the packet; is_ineligible: no error about an ICMPv6 error or an ICMPv6
// packet without a type.
func (c *compiler) rejectICMPv6Checks(noReply string) {
	b := c.b
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

// rejectVerifyChecksum: the kernel replies only to a packet whose
// transport checksum is right (nf_reject_verify_csum, nf_ip_checksum,
// nf_ip6_checksum), unless the device vouched for it
// (CHECKSUM_UNNECESSARY, which bpf_csum_level tells on tc).
func (c *compiler) rejectVerifyChecksum(sym string, tcp bool, noReply string) {
	b := c.b
	v6 := c.p.Family == rules.IPv6
	ok := sym + "_csum_ok"
	verify := sym + "_csum_verify"
	b.Note("the transport checksum")
	if c.hook.tc() {
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
			c.loadHelper().Call(),
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
	c.rejectPseudoProto(rjOrig, -1)
	c.rejectPartialChecksum(sym, ok)
	b.Mark(sumL4)
	b.Emit(
		insn.Ld(asm.R1, asm.R10, rjL4, asm.DWord),
		insn.Ld(asm.R2, asm.R10, rjEnd, asm.DWord),
	)
	c.rejectSumRange(noReply)
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

// rejectPartialChecksum goes to ok for a TCP or UDP packet whose checksum
// field holds the sum of its pseudo-header, now in rjSum: the packet of a
// sender that left its checksum to the device (CHECKSUM_PARTIAL), as a
// veth's peer, a bridge port or a local socket sends it. The kernel counts
// such a packet as checked (skb_csum_unnecessary) and replies; a program
// cannot see ip_summed, and a frame from a wire whose wrong checksum
// happens to be that sum gets a reply too (see docs/reject.md).
func (c *compiler) rejectPartialChecksum(sym string, ok string) {
	b := c.b
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
		c.loadHelper().Call(),
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

// rejectPseudoProto adds to rjSum the pseudo-header of the IP header at
// r10+ip, whose transport length is at rjTmp, with protocol proto, or
// the original packet's for -1. The pseudo-header is built at rsPseudo.
func (c *compiler) rejectPseudoProto(ip int16, proto int32) {
	b := c.b
	v6 := c.p.Family == rules.IPv6
	addrs, size := int16(12), int32(12)
	if v6 {
		addrs, size = 8, 40
	}
	b.Emit(insn.Ld(asm.R3, asm.R10, rjLoop+lsState, asm.DWord))
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
	c.rejectSum(size)
}

// rejectSumStack adds n bytes (a multiple of 4) at r10+off to rjSum.
func (c *compiler) rejectSumStack(off int16, n int32) {
	c.b.Emit(
		insn.Movr(asm.R3, asm.R10),
		asm.Add.Imm(asm.R3, int32(off)),
	)
	c.rejectSum(n)
}

// rejectSum adds n bytes (a multiple of 4) at r3 to rjSum.
func (c *compiler) rejectSum(n int32) {
	c.b.Emit(
		insn.Mov(asm.R1, 0),
		insn.Mov(asm.R2, 0),
		insn.Mov(asm.R4, n),
		insn.Ld(asm.R5, asm.R10, rjSum, asm.DWord),
		asm.FnCsumDiff.Call(),
		asm.Mov.Reg32(asm.R0, asm.R0),
		insn.St(asm.R10, rjSum, asm.R0, asm.DWord),
	)
}

// rejectSumRange adds the packet bytes from offset r1 to r2 to rjSum,
// with a bpf_loop over chunks; it jumps to fail when a load fails.
func (c *compiler) rejectSumRange(fail string) {
	b := c.b
	b.Emit(
		insn.Ld(asm.R3, asm.R10, rjLoop+lsState, asm.DWord),
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
	c.rejectLoop(symRejectStep, fail)
	b.Emit(
		insn.Ld(asm.R1, asm.R3, rsSum, asm.DWord),
		insn.St(asm.R10, rjSum, asm.R1, asm.DWord),
	)
}

// rejectStep emits the checksum loop's callback: it sums the next chunk.
//
//	r6 state, r7 offset, r8 end, r9 chunk length
func (c *compiler) rejectStep() {
	b := c.b
	b.Function(funcCallback(symRejectStep), "sum the next %d bytes of the range into the checksum", rsChunk)
	stop := symRejectStep + "_stop"
	b.Emit(
		insn.Ld(asm.R1, asm.R2, lsCtx, asm.DWord),
		insn.St(asm.R10, cbCtx, asm.R1, asm.DWord),
		insn.Ld(asm.R6, asm.R2, lsState, asm.DWord),
		insn.Ld(asm.R7, asm.R6, rsOff, asm.DWord),
		insn.Ld(asm.R8, asm.R6, rsEnd, asm.DWord),
		asm.JGE.Reg(asm.R7, asm.R8, stop),
		insn.Movr(asm.R9, asm.R8),
		asm.Sub.Reg(asm.R9, asm.R7),
		asm.JLE.Imm(asm.R9, rsChunk, symRejectStep+"_len"),
		insn.Mov(asm.R9, rsChunk),
	)
	b.Mark(symRejectStep + "_len")
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
		insn.Ld(asm.R1, asm.R10, cbCtx, asm.DWord),
		insn.Movr(asm.R2, asm.R7),
		insn.Movr(asm.R3, asm.R6),
		asm.Add.Imm(asm.R3, rsBuf),
		insn.Movr(asm.R4, asm.R9),
		c.loadHelper().Call(),
		asm.JEq.Imm(asm.R0, 0, symRejectStep+"_sum"),
		insn.StImm(asm.R6, rsErr, 1, asm.DWord),
		insn.Ja(stop),
	)
	b.Mark(symRejectStep + "_sum")
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

// rejectConfig loads the reply's TTL (IPv4) or hop limit (IPv6) into r1.
func (c *compiler) rejectConfig(noReply string) {
	off := int16(0)
	if c.p.Family == rules.IPv6 {
		off = 1
	}
	c.b.Emit(
		insn.StImm(asm.R10, rjKey, 0, asm.Word),
		insn.Movr(asm.R2, asm.R10),
		asm.Add.Imm(asm.R2, rjKey),
		insn.MapRef(asm.R1, RejectConfigMap),
		asm.FnMapLookupElem.Call(),
		asm.JEq.Imm(asm.R0, 0, noReply),
		insn.Ld(asm.R1, asm.R0, off, asm.Byte),
	)
}

// rejectIPHeader writes the reply's IP header at rjHdr: from the
// original's destination to its source, carrying proto and payload bytes
// of payload after it (the length in r9).
//
//	r9 payload length
func (c *compiler) rejectIPHeader(proto int32, noReply string) {
	b := c.b
	c.rejectConfig(noReply)
	if c.p.Family == rules.IPv6 {
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

// rejectSwapL2 swaps the link-layer header's addresses at rjL2, a half
// word at a time (the stack wants aligned accesses).
func (c *compiler) rejectSwapL2() {
	for i := int16(0); i < 6; i += 2 {
		c.b.Emit(
			insn.Ld(asm.R1, asm.R10, rjL2+i, asm.Half),
			insn.Ld(asm.R2, asm.R10, rjL2+6+i, asm.Half),
			insn.St(asm.R10, rjL2+i, asm.R2, asm.Half),
			insn.St(asm.R10, rjL2+6+i, asm.R1, asm.Half),
		)
	}
}

// rejectL4Checksum sums the n-byte transport header at rjHdr+off into
// rjSum, with the pseudo-header of the reply's IP header for a length at
// rjTmp and proto (not for ICMP over IPv4), and stores the checksum at
// rjHdr+off+at.
func (c *compiler) rejectL4Checksum(off int16, n int32, proto int32, at int16) {
	b := c.b
	if proto != uapi.ProtoICMP {
		c.rejectPseudoProto(rjHdr, proto)
	}
	c.rejectSumStack(rjHdr+off, n)
	b.Emit(insn.Ld(asm.R0, asm.R10, rjSum, asm.DWord))
	b.Emit(fold(asm.R0, asm.R1)...)
	b.Emit(
		asm.Xor.Imm(asm.R0, 0xffff),
		insn.St(asm.R10, rjHdr+off+at, asm.R0, asm.Half),
	)
}

// rejectBuildReset turns the packet into nf_send_reset's (or
// nf_send_reset6's) RST and transmits it.
func (c *compiler) rejectBuildReset(sym, noReply string) {
	b := c.b
	v6 := c.p.Family == rules.IPv6
	ipLen := int16(20)
	if v6 {
		ipLen = 40
	}
	tcp := rjHdr + ipLen
	b.Note("the RST: ports swapped; seq from the ACK, or an ACK of everything the packet carried")
	b.Emit(insn.Mov(asm.R9, 20))
	c.rejectIPHeader(uapi.ProtoTCP, noReply)
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
	c.rejectL4Checksum(ipLen, 20, uapi.ProtoTCP, 16)
	c.rejectSwapL2()

	b.Note("cut the frame to the headers, write them, transmit")
	b.Emit(
		insn.Ld(asm.R9, asm.R10, rjL3, asm.DWord),
		asm.Add.Imm(asm.R9, int32(ipLen)+20),
	)
	c.rejectResize(noReply)
	c.rejectStore(int32(ipLen)+20, noReply)
	c.rejectTransmit()
}

// rejectBuildUnreach turns the packet into icmp_send's (or icmp6_send's)
// destination unreachable error with code, quoting the packet, and
// transmits it.
func (c *compiler) rejectBuildUnreach(sym string, code uint8, noReply string) {
	b := c.b
	v6 := c.p.Family == rules.IPv6
	ipLen, maxQuote, typ, proto := int16(20), int32(maxQuote4), int32(3), int32(uapi.ProtoICMP)
	if v6 {
		ipLen, maxQuote, typ, proto = 40, maxQuote6, 1, uapi.ProtoICMPv6
	}
	icmp := rjHdr + ipLen
	b.Emit(insn.Mov(asm.R1, maxQuote), insn.St(asm.R10, rjQuoteMax, asm.R1, asm.DWord))
	if c.p.Chains[0].Name == "FORWARD" {
		c.rejectRoute(noReply)
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
	if c.p.Chains[0].Name == "FORWARD" {
		c.rejectForwardTTL(noReply)
		b.Emit(insn.Ld(asm.R1, asm.R10, rjQuote, asm.DWord))
	}
	b.Emit(
		insn.StImm(asm.R10, rjSum, 0, asm.DWord),
		insn.Ld(asm.R2, asm.R10, rjL3, asm.DWord),
		asm.Add.Reg(asm.R2, asm.R1),
		insn.Ld(asm.R1, asm.R10, rjL3, asm.DWord),
	)
	c.rejectSumRange(noReply)
	b.Emit(
		insn.Ld(asm.R9, asm.R10, rjQuote, asm.DWord),
		asm.Add.Imm(asm.R9, 8),
		insn.St(asm.R10, rjTmp, asm.R9, asm.DWord),
	)
	c.rejectIPHeader(proto, noReply)
	b.Emit(
		insn.StImm(asm.R10, icmp, typ, asm.Byte),
		insn.StImm(asm.R10, icmp+1, int32(code), asm.Byte),
	)
	c.rejectL4Checksum(ipLen, 8, proto, 2)
	if c.p.Chains[0].Name != "FORWARD" {
		c.rejectSwapL2() // rejectRoute filled in the next hop's
	}

	hdrs := int32(ipLen) + 8
	b.Note("make room for the headers in front of the packet, cut it after the quote, write them, transmit")
	if c.hook.tc() {
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
	c.rejectResize(noReply)
	c.rejectStore(hdrs, noReply)
	c.rejectTransmit()
}

// rejectRoute asks the routing table, as icmp_send does in FORWARD, for
// the route back to the packet's source: the error comes from the
// route's preferred source address (fib_result_prefsrc, which
// BPF_FIB_LOOKUP_SRC returns), goes to its next hop, and quotes at most
// what its MTU leaves of 576 bytes. The address replaces the original
// destination in rjOrig, where rejectIPHeader takes the reply's source
// from; the next hop's MAC addresses stay in rjFib. Without a route, a
// resolved neighbour, or with a route through another device, the
// program sends nothing (see docs/reject.md).
func (c *compiler) rejectRoute(noReply string) {
	b := c.b
	mtuDone := b.Fresh("route_mtu")
	b.Note("the route back to the source: the error's source address, next hop and MTU (icmp_route_lookup)")
	// struct bpf_fib_lookup goes in the scratch buffer, free until the
	// quote is summed: the stack has no room left.
	b.Emit(
		insn.Ld(asm.R7, asm.R10, rjLoop+lsState, asm.DWord),
		asm.Add.Imm(asm.R7, rsBuf),
	)
	for off := int16(0); off < uapi.FibSize; off += 8 {
		b.Emit(insn.StImm(asm.R7, off, 0, asm.DWord))
	}
	v6 := c.p.Family == rules.IPv6
	// The reply goes to the original source; its source address takes
	// the original destination's place in rjOrig.
	family, proto, origSrc, origDst, addrLen := int32(afInet), int32(uapi.ProtoICMP), int16(12), int16(16), int16(4)
	if v6 {
		family, proto, origSrc, origDst, addrLen = afInet6, uapi.ProtoICMPv6, 8, 24, 16
	}
	b.Emit(
		insn.StImm(asm.R7, uapi.FibFamily, family, asm.Byte),
		insn.StImm(asm.R7, uapi.FibProto, proto, asm.Byte),
		c.ifindex(asm.R1),
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
		c.ifindex(asm.R1),
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

// rejectForwardTTL decrements the TTL in the packet as ip_forward does
// before the FORWARD hook (ip_decrease_ttl, its checksum arithmetic
// included): the error quotes the packet as FORWARD saw it. A packet
// whose TTL runs out never gets there.
func (c *compiler) rejectForwardTTL(noReply string) {
	b := c.b
	if c.p.Family == rules.IPv6 {
		// ip6_forward: hop_limit--, nothing else.
		b.Note("the hop limit FORWARD saw (ip6_forward)")
		b.Emit(
			insn.Ld(asm.R1, asm.R10, rjOrig+7, asm.Byte),
			asm.JLE.Imm(asm.R1, 1, noReply),
			asm.Sub.Imm(asm.R1, 1),
			insn.St(asm.R10, rjOrig+7, asm.R1, asm.Byte),
		)
		c.rejectStoreOrig(7, 1, noReply)
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
	c.rejectStoreOrig(8, 4, noReply)
}

// rejectStoreOrig writes back into the packet the n bytes of its IP
// header at offset off, from the copy at rjOrig.
func (c *compiler) rejectStoreOrig(off, n int32, noReply string) {
	b := c.b
	store := asm.FnXdpStoreBytes
	if c.hook.tc() {
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
	if c.hook.tc() {
		b.Emit(insn.Mov(asm.R5, 0))
	}
	b.Emit(store.Call(), asm.JNE.Imm(asm.R0, 0, noReply))
}

// rejectResize makes the frame r9 bytes long.
func (c *compiler) rejectResize(noReply string) {
	b := c.b
	if c.hook.tc() {
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

// rejectStore writes the link-layer header at offset 0 and the n bytes of
// headers at rjHdr after it.
func (c *compiler) rejectStore(n int32, noReply string) {
	b := c.b
	store := asm.FnXdpStoreBytes
	if c.hook.tc() {
		store = asm.FnSkbStoreBytes
	}
	flags := func() {
		if c.hook.tc() {
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

// rejectTransmit sends the reply back where the packet came from.
func (c *compiler) rejectTransmit() {
	b := c.b
	if !c.hook.tc() {
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
