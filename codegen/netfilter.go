package codegen

import (
	"encoding/binary"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"

	"bpfwall/codegen/abi"
	"bpfwall/codegen/conntrack"
	"bpfwall/codegen/insn"
	"bpfwall/codegen/kernel"
	"bpfwall/codegen/pkt"
	"bpfwall/codegen/uapi"
	"bpfwall/ir"
	"bpfwall/rules"
)

// The netfilter stage. An xdp or tc-ingress program runs before conntrack
// and can look up TCP and UDP connections only (the conntrack kfuncs
// refuse other protocols). A program that tests the conntrack state
// therefore defers the packets whose state it cannot know, "class U":
// protocols other than TCP and UDP (ICMP and ICMPv6 included), fragments
// (conntrack sees the reassembled datagram) and IPv6 packets whose
// extension headers cannot be walked. It passes them untouched, before
// any rule runs, and counts them (abi.StageMap).
//
// Program.Netfilter, compiled from the same ir.Program, is a
// BPF_PROG_TYPE_NETFILTER program that the loader attaches at PRE_ROUTING
// just after conntrack (NetfilterPriority). It sees every packet after
// defragmentation; it evaluates the chains for the packets of class U
// that came in on an interface the ingress program is attached to
// (abi.NetfilterIfacesMap), with the state conntrack gave them (skb->_nfct,
// read as conntrack_mt reads it), and accepts everything else. Class U
// depends only on the packet's bytes, and on the reassembly of the
// datagram, which the stage reads from IPCB(skb)->frag_max_size: both
// programs agree on it without tagging packets. The stage shares the
// ingress program's maps (counters, LOG ring, token buckets, sets), so
// that one filter counts, logs and limits.
//
// REJECT cannot send its reply from a netfilter program (no helper
// transmits): the stage drops the packet and counts it (abi.StageMap).

// NetfilterPriority is the stage's priority at PRE_ROUTING: just after
// conntrack (NF_IP_PRI_CONNTRACK, -200), which runs after defragmentation
// (NF_IP_PRI_CONNTRACK_DEFRAG, -400), and before the raw (-300 is
// before), mangle (-150) and nat (-100) tables.
const NetfilterPriority = -199

// Kernel fields the stage uses.
var (
	nfCtxState    = kernel.Field{Struct: "bpf_nf_ctx", Field: "state"}
	hookStateIn   = kernel.Field{Struct: "nf_hook_state", Field: "in"}
	netdevIfindex = kernel.Field{Struct: "net_device", Field: "ifindex"}
	skbMarkField  = kernel.Field{Struct: "sk_buff", Field: "mark"}
	skbHead       = kernel.Field{Struct: "sk_buff", Field: "head"}
	skbMACHeader  = kernel.Field{Struct: "sk_buff", Field: "mac_header"}
	skbNetHeader  = kernel.Field{Struct: "sk_buff", Field: "network_header"}
	netdevHHLen   = kernel.Field{Struct: "net_device", Field: "hard_header_len"}
	netdevType    = kernel.Field{Struct: "net_device", Field: "type"}
	skbDev        = kernel.Field{Struct: "sk_buff", Field: "dev"}
	skbData       = kernel.Field{Struct: "sk_buff", Field: "data"}
	skbCB         = kernel.Field{Struct: "sk_buff", Field: "cb"}
	skbPktTypeBF  = kernel.Field{Struct: "sk_buff", Field: "pkt_type"}
	ipcbFragMax   = kernel.Field{Struct: "inet_skb_parm", Field: "frag_max_size"}
	ip6cbFragMax  = kernel.Field{Struct: "inet6_skb_parm", Field: "frag_max_size"}
)

// ethHeaderLen is the MAC header the stage logs: ETH_HLEN, the
// hard_header_len of the Ethernet devices bpfwall attaches to.
const ethHeaderLen = 14

// Stack slots of the stage: the bpf_dynptr over the skb of each function
// that reads packet bytes, and the main function's header buffer.
const (
	parseDynptr = -136
	cbDynptr    = -32
	chainDynptr = -144
)

// nfMainDynptr and nfMainHdr are the main function's dynptr and the
// buffer of the first bytes of the IP header, below its map key.
func (c *compiler) nfMainDynptr() int16 { return c.mainKey() - 16 }
func (c *compiler) nfMainHdr() int16    { return c.mainKey() - 32 }

// defers reports whether the program passes the packets of class U to
// the netfilter stage.
func (c *compiler) defers() bool {
	return c.ct && (c.hook == HookXDP || c.hook == HookTCIngress) && !c.accel
}

// marksClassU reports whether parse marks what makes a packet of class U
// (pkt.FlagVLAN): for the stage, or for an accelerator, which passes it.
func (c *compiler) marksClassU() bool { return c.defers() || c.accel }

// stageMaps are the maps of the stage the program needs.
func (c *compiler) stageMaps() []*ebpf.MapSpec {
	var out []*ebpf.MapSpec
	if c.defers() || c.hook == HookStage {
		out = append(out, &ebpf.MapSpec{Name: abi.StageMap, Type: ebpf.PerCPUArray, KeySize: 4, ValueSize: 8, MaxEntries: abi.StageCounters, Key: btfU32, Value: btfU64})
	}
	if c.hook == HookStage {
		out = append(out, &ebpf.MapSpec{Name: abi.NetfilterIfacesMap, Type: ebpf.Hash, KeySize: 4, ValueSize: 4, MaxEntries: ifacesMapSize, Key: btfU32, Value: btfU32})
	}
	return out
}

// stageCount adds one to abi.StageMap[i]; key is a free stack slot.
func (c *compiler) stageCount(i int32, key int16) {
	done := c.b.Fresh("stage_counted")
	c.b.Emit(
		insn.StImm(asm.R10, key, i, asm.Word),
		insn.Movr(asm.R2, asm.R10),
		asm.Add.Imm(asm.R2, int32(key)),
		insn.MapRef(asm.R1, abi.StageMap),
		asm.FnMapLookupElem.Call(),
		asm.JEq.Imm(asm.R0, 0, done),
		insn.Ld(asm.R1, asm.R0, 0, asm.DWord),
		asm.Add.Imm(asm.R1, 1),
		insn.St(asm.R0, 0, asm.R1, asm.DWord),
	)
	c.b.Mark(done)
}

// deferred emits main's label symDeferred: count the packet, record the
// decision and pass it to the netfilter stage. r8 is 0.
func (c *compiler) deferred() {
	b := c.b
	b.Mark(symDeferred)
	b.Note("class U: conntrack decides the state, the netfilter stage the verdict")
	c.stageCount(abi.StageDeferred, c.mainKey())
	b.Emit(
		insn.Mov(asm.R7, int32(abi.Deferred)),
		insn.Mov(asm.R9, c.hook.pass()),
		insn.Ja(symMainEnd),
	)
}

const symDeferred = "deferred"

// deferClassU sends the packets of class U (model.Packet.DeferredClass) to
// symDeferred: broken extension headers, fragments, protocols other than
// TCP and UDP. It decides by the packet's bytes alone, as the stage does.
// A VLAN-tagged frame stays: netfilter sees it on the VLAN's device, where
// the stage does not run; ct_state finds its state unknown, and a state
// match drops it.
func (c *compiler) deferClassU() {
	b := c.b
	tracked := b.Fresh("tcp_or_udp")
	base := c.mainPkt()
	b.Emit(
		insn.Ld(asm.R1, asm.R10, base+pkt.Flags, asm.Byte),
		asm.JSet.Imm(asm.R1, pkt.FlagVLAN, tracked),
		asm.JSet.Imm(asm.R1, pkt.FlagBadExtHeaders|pkt.FlagFragment, symDeferred),
		insn.Ld(asm.R1, asm.R10, base+pkt.Proto, asm.Byte),
		asm.JEq.Imm(asm.R1, uapi.ProtoTCP, tracked),
		asm.JNE.Imm(asm.R1, uapi.ProtoUDP, symDeferred),
	)
	b.Mark(tracked)
}

// emitSkb loads the sk_buff of the netfilter context at ctx into dst.
func (c *compiler) emitSkb(dst, ctx asm.Register) { c.b.Emit(kernel.NFSkb(dst, ctx)) }

// dynptrFromSkb makes the bpf_dynptr at r10+slot cover the packet of the
// netfilter context at ctx, from its network header; it jumps to fail if
// it cannot.
func (c *compiler) dynptrFromSkb(ctx asm.Register, slot int16, fail string) {
	c.b.Emit(kernel.NFDynptr(ctx, slot, fail)...)
}

// loadCall emits the load helper's call, with the context in r1, the
// packet offset in r2, the destination in r3 and the length in r4: in the
// netfilter stage, bpf_dynptr_read from the dynptr of the current
// function (c.dynptr). r0 is 0 when the bytes were copied.
func (c *compiler) loadCall() {
	if !c.hook.nf() {
		c.b.Emit(c.loadHelper().Call())
		return
	}
	c.b.Emit(
		insn.Movr(asm.R5, asm.R2),
		insn.Movr(asm.R1, asm.R3),
		insn.Movr(asm.R2, asm.R4),
		insn.Movr(asm.R4, asm.R5),
		insn.Movr(asm.R3, asm.R10),
		asm.Add.Imm(asm.R3, int32(c.dynptr)),
		insn.Mov(asm.R5, 0),
		asm.FnDynptrRead.Call(),
	)
}

// emitIfindex loads the index of the packet's input device into dst; r6
// is the context.
func (c *compiler) emitIfindex(dst asm.Register) {
	if !c.hook.nf() {
		c.b.Emit(c.ifindex(dst))
		return
	}
	c.b.Emit(
		kernel.Load(dst, asm.R6, asm.DWord, nfCtxState),
		kernel.Load(dst, dst, asm.DWord, hookStateIn),
		kernel.Load(dst, dst, asm.Word, netdevIfindex),
	)
}

// fragMaxSize loads IPCB(skb)->frag_max_size (IP6CB for IPv6), which
// defragmentation sets on a reassembled datagram, into dst from the skb
// in dst.
func (c *compiler) fragMaxSize(dst asm.Register) {
	f := ipcbFragMax
	if c.p.Family == rules.IPv6 {
		f = ip6cbFragMax
	}
	c.b.Emit(kernel.Load(dst, dst, asm.Half, skbCB, f))
}

// nfMain emits the stage's entry point: accept what is not class U or
// came in elsewhere, then parse, read the state, run the chains as main
// does.
//
//	r6 ctx, r7 decision kind, r8 deciding rule, r9 return code
func (c *compiler) nfMain() {
	b := c.b
	b.Function(c.funcMain(), "netfilter stage of the %s program: the packets it deferred, after conntrack; chain %s", c.ingress, c.p.Chains[0].Name)
	b.Emit(insn.Movr(asm.R6, asm.R1))
	b.Note("only packets from the interfaces the %s program is attached to", c.ingress)
	c.emitIfindex(asm.R1)
	b.Emit(
		insn.St(asm.R10, c.mainKey(), asm.R1, asm.Word),
		insn.Movr(asm.R2, asm.R10),
		asm.Add.Imm(asm.R2, int32(c.mainKey())),
		insn.MapRef(asm.R1, abi.NetfilterIfacesMap),
		asm.FnMapLookupElem.Call(),
		asm.JEq.Imm(asm.R0, 0, "nf_accept"),
	)
	b.Note("TCP and UDP, not fragmented nor reassembled: the %s program decided it", c.ingress)
	c.dynptrFromSkb(asm.R6, c.nfMainDynptr(), "nf_accept")
	n, proto := int32(12), int16(9)
	if c.p.Family == rules.IPv6 {
		n, proto = 8, 6
	}
	b.Emit(
		insn.Movr(asm.R1, asm.R10),
		asm.Add.Imm(asm.R1, int32(c.nfMainHdr())),
		insn.Mov(asm.R2, n),
		insn.Movr(asm.R3, asm.R10),
		asm.Add.Imm(asm.R3, int32(c.nfMainDynptr())),
		insn.Mov(asm.R4, 0),
		insn.Mov(asm.R5, 0),
		asm.FnDynptrRead.Call(),
		asm.JNE.Imm(asm.R0, 0, "nf_accept"),
		insn.Ld(asm.R1, asm.R10, c.nfMainHdr()+proto, asm.Byte),
		asm.JEq.Imm(asm.R1, uapi.ProtoTCP, "nf_quick_frag"),
		asm.JNE.Imm(asm.R1, uapi.ProtoUDP, "nf_parse"),
	)
	b.Mark("nf_quick_frag")
	if c.p.Family == rules.IPv4 {
		b.Emit(
			insn.Ld(asm.R1, asm.R10, c.nfMainHdr()+6, asm.Half),
			insn.Ntoh(asm.R1, asm.Half),
			asm.And.Imm(asm.R1, 0x3fff), // MF and the offset
			asm.JNE.Imm(asm.R1, 0, "nf_parse"),
		)
	}
	c.emitSkb(asm.R1, asm.R6)
	c.fragMaxSize(asm.R1)
	b.Emit(asm.JEq.Imm(asm.R1, 0, "nf_accept"))

	b.Mark("nf_parse")
	for off := c.mainPkt(); off < 0; off += 8 {
		b.Emit(insn.StImm(asm.R10, off, 0, asm.DWord))
	}
	b.Emit(
		insn.Movr(asm.R1, asm.R6),
		insn.Movr(asm.R2, asm.R10),
		asm.Add.Imm(asm.R2, int32(c.mainPkt())),
		insn.Call(symParse),
		asm.JNE.Imm(asm.R0, parseOK, "nf_accept"),
	)
	b.Note("class U: fragments, broken extension headers, protocols other than TCP and UDP, reassembled datagrams")
	base := c.mainPkt()
	b.Emit(
		insn.Ld(asm.R1, asm.R10, base+pkt.Flags, asm.Byte),
		asm.JSet.Imm(asm.R1, pkt.FlagBadExtHeaders|pkt.FlagFragment, "nf_class_u"),
		insn.Ld(asm.R1, asm.R10, base+pkt.Proto, asm.Byte),
		asm.JEq.Imm(asm.R1, uapi.ProtoTCP, "nf_reassembled"),
		asm.JNE.Imm(asm.R1, uapi.ProtoUDP, "nf_class_u"),
	)
	b.Mark("nf_reassembled")
	c.emitSkb(asm.R1, asm.R6)
	c.fragMaxSize(asm.R1)
	b.Emit(asm.JNE.Imm(asm.R1, 0, "nf_class_u"))
	b.Mark("nf_accept")
	b.Emit(insn.Mov(asm.R0, uapi.NFAccept), asm.Return())

	b.Mark("nf_class_u")
	c.stageCount(abi.StageEvaluated, c.mainKey())
	b.Emit(insn.Mov(asm.R8, 0))
	c.mainChains()
}

// ctStateNetfilter emits ct_state at the netfilter hooks: skb->_nfct, as
// at tc-egress, and at a chain's own hook SNAT and DNAT from the entry's
// status when the rules test them.
func (c *compiler) ctStateNetfilter() {
	b := c.b
	b.Function(c.funcCtxPkt(conntrack.Sym), "conntrack state of the packet: skb->_nfct, which conntrack has just set")
	c.emitSkb(asm.R0, asm.R1)
	conntrack.FromSkb(b, c.hook == HookNetfilter && c.p.TestsNAT())
}

// compileStage compiles the netfilter stage of the ingress program c
// compiled.
func (c *compiler) compileStage() (*Program, error) {
	s := newCompiler(c.p, c.orig, HookStage, c.level, c.cls.ForceLookups, c.trace)
	s.ingress = c.hook
	s.log = s.hasLog()
	s.check()
	if err := s.errs.Err(); err != nil {
		return nil, err
	}
	insns, err := s.program()
	if err != nil {
		return nil, err
	}
	insns, _, err = eliminateDeadCode(insns)
	if err != nil {
		return nil, err
	}
	return &Program{IR: c.orig, Hook: HookStage, Level: c.level, Ifaces: s.ifaces, Spec: s.spec(insns), removed: origRemovals(c.orig, c.p.Removed), uses: matchesOf(c.orig), flats: s.cls.Flats()}, nil
}

// stageRejectWarnings names the REJECT rules a packet of class U can
// reach: the netfilter stage drops it without the reply.
func stageRejectWarnings(p *ir.Program) []*rules.Error {
	var out []*rules.Error
	for _, r := range p.Rules {
		if a, ok := r.Action.(ir.Reject); ok {
			out = append(out, rules.Errorf(r.Pos, "REJECT --reject-with %s: a packet whose conntrack state only conntrack knows "+
				"(ICMP, protocols other than TCP and UDP, fragments) is decided in the netfilter stage, which cannot send the reply: it is dropped without one", a.With))
		}
	}
	return out
}

// parseNetfilterL2 fills in the source MAC address from the MAC header
// the device's driver left before the network header, where the stage's
// packet starts (r8 = 0).
func (c *compiler) parseNetfilterL2() {
	b := c.b
	b.Note("the packet starts at the network header; the MAC header is at skb->head + skb->mac_header")
	c.macHeader(asm.R3)
	b.Emit(
		insn.Movr(asm.R1, asm.R10),
		asm.Add.Imm(asm.R1, parseBuf),
		insn.Mov(asm.R2, ethHeaderLen),
		asm.FnProbeReadKernel.Call(),
		asm.JNE.Imm(asm.R0, 0, "parse_not_ip"),
		insn.Ld(asm.R1, asm.R10, parseBuf+6, asm.Half),
		insn.Ntoh(asm.R1, asm.Half),
		insn.St(asm.R7, pkt.MACHi, asm.R1, asm.Word),
		insn.Ld(asm.R1, asm.R10, parseBuf+8, asm.Word),
		insn.Ntoh(asm.R1, asm.Word),
		insn.St(asm.R7, pkt.MACLo, asm.R1, asm.Word),
		insn.Mov(asm.R8, 0),
		insn.Ja("parse_meta"),
	)
}

// macPresent is set in pkt.MACHi, above the address's first two bytes,
// at a netfilter hook when the packet has the MAC header xt_mac reads;
// pkt.MACHi is 0 when it has none.
const macPresent = 0x10000

// arphrdEther is ARPHRD_ETHER, the only device type xt_mac reads.
const arphrdEther = 1

// parseNetfilterMAC fills in the source MAC address at a netfilter hook
// as mac_mt finds it: only from an Ethernet device (skb->dev->type), and
// only when the MAC header ends at or before skb->data (not set, its
// offset is 0xffff). Without one, pkt.MACHi is 0, and no mac match holds
// (see macCode).
func (c *compiler) parseNetfilterMAC() {
	b := c.b
	done := b.Fresh("mac_done")
	b.Note("the source MAC address, as xt_mac reads it")
	b.Emit(insn.StImm(asm.R7, pkt.MACHi, 0, asm.Word))
	c.macHeader(asm.R3) // r4 is the skb
	b.Emit(
		kernel.Load(asm.R2, asm.R4, asm.DWord, skbDev),
		asm.JEq.Imm(asm.R2, 0, done),
		kernel.Load(asm.R2, asm.R2, asm.Half, netdevType),
		asm.JNE.Imm(asm.R2, arphrdEther, done),
		kernel.Load(asm.R1, asm.R4, asm.DWord, skbData),
		insn.Movr(asm.R2, asm.R3),
		asm.Add.Imm(asm.R2, ethHeaderLen),
		asm.JGT.Reg(asm.R2, asm.R1, done),
		// h_source (at 6) and the two bytes before it, for aligned loads
		asm.Add.Imm(asm.R3, 4),
		insn.Movr(asm.R1, asm.R10),
		asm.Add.Imm(asm.R1, parseBuf),
		insn.Mov(asm.R2, 8),
		asm.FnProbeReadKernel.Call(),
		asm.JNE.Imm(asm.R0, 0, done),
		insn.Ld(asm.R1, asm.R10, parseBuf+2, asm.Half),
		insn.Ntoh(asm.R1, asm.Half),
		asm.Or.Imm(asm.R1, macPresent),
		insn.St(asm.R7, pkt.MACHi, asm.R1, asm.Word),
		insn.Ld(asm.R1, asm.R10, parseBuf+4, asm.Word),
		insn.Ntoh(asm.R1, asm.Word),
		insn.St(asm.R7, pkt.MACLo, asm.R1, asm.Word),
	)
	b.Mark(done)
}

// macHeader loads skb_mac_header(skb) into dst (not r4 or r5), and the
// skb into r4, with the context in r6.
func (c *compiler) macHeader(dst asm.Register) {
	c.emitSkb(asm.R4, asm.R6)
	c.b.Emit(
		kernel.Load(dst, asm.R4, asm.DWord, skbHead),
		kernel.Load(asm.R5, asm.R4, asm.Half, skbMACHeader),
		asm.Add.Reg(dst, asm.R5),
	)
}

// parseNetfilterMeta stores the skb's mark and packet type, for the
// stage of a tc-ingress program, whose rules may test them.
func (c *compiler) parseNetfilterMeta() {
	if !c.skbHook() {
		return
	}
	b := c.b
	b.Note("skb metadata")
	c.emitSkb(asm.R2, asm.R6)
	b.Emit(
		kernel.Load(asm.R1, asm.R2, asm.Word, skbMarkField),
		insn.St(asm.R7, pkt.Mark, asm.R1, asm.Word),
	)
	b.Emit(kernel.LoadBitfield(asm.R1, asm.R2, skbPktTypeBF)...)
	b.Emit(
		asm.And.Imm(asm.R1, 7),
		insn.St(asm.R10, parseRawType, asm.R1, asm.DWord),
		insn.St(asm.R7, pkt.PktType, asm.R1, asm.Byte),
	)
}

// logNetfilter fills in a LOG record in r7 for the stage: the input
// device, the mark, and the frame as the ingress program would have
// logged it, the MAC header followed by the packet. r1 is the context.
func (c *compiler) logNetfilter(r *ir.Rule, copied string) {
	b := c.b
	c.dynptr = chainDynptr
	b.Emit(insn.Movr(asm.R6, asm.R1))
	c.emitIfindex(asm.R2)
	b.Emit(insn.St(asm.R7, abi.LogIfindex, asm.R2, asm.Word))
	if c.hook == HookNetfilter {
		b.Emit(
			kernel.Load(asm.R2, asm.R6, asm.DWord, nfCtxState),
			kernel.Load(asm.R2, asm.R2, asm.DWord, hookStateOut),
			kernel.Load(asm.R2, asm.R2, asm.Word, netdevIfindex),
			insn.St(asm.R7, abi.LogOut, asm.R2, asm.Word),
		)
	}
	c.emitSkb(asm.R2, asm.R6)
	b.Emit(
		kernel.Load(asm.R1, asm.R2, asm.Word, skbMarkField),
		insn.St(asm.R7, abi.LogMark, asm.R1, asm.Word),
		kernel.Load(asm.R8, asm.R2, asm.Word, kernel.SkbLen),
		insn.Movr(asm.R1, asm.R8),
		asm.Add.Imm(asm.R1, ethHeaderLen),
		insn.St(asm.R7, abi.LogLen, asm.R1, asm.Word),
	)
	capped := ruleLabel(r) + "_log_capped"
	b.Emit(
		asm.JLE.Imm(asm.R8, abi.LogCapture-ethHeaderLen, capped),
		insn.Mov(asm.R8, abi.LogCapture-ethHeaderLen),
	)
	b.Mark(capped)
	c.logNetfilterMAC(r, copied)
	c.dynptrFromSkb(asm.R6, chainDynptr, copied)
	b.Emit(
		insn.Movr(asm.R1, asm.R7),
		asm.Add.Imm(asm.R1, abi.LogData+ethHeaderLen),
		insn.Movr(asm.R2, asm.R8),
		insn.Movr(asm.R3, asm.R10),
		asm.Add.Imm(asm.R3, chainDynptr),
		insn.Mov(asm.R4, 0),
		insn.Mov(asm.R5, 0),
		asm.FnDynptrRead.Call(),
		asm.JNE.Imm(asm.R0, 0, copied),
		asm.Add.Imm(asm.R8, ethHeaderLen),
		insn.St(asm.R7, abi.LogCapLen, asm.R8, asm.Word),
	)
}

// logNetfilterMAC fills in the record's MAC header as dump_mac_header
// prints it: the device's hard_header_len bytes at skb->mac_header, none
// when that is 0, the MAC header was not set or is empty (mac_header ==
// network_header). The record holds 14 bytes: an Ethernet header exactly
// 14 bytes before the network header is copied; otherwise the record says
// abi.LogNoMAC (the line prints "MAC= ") or abi.LogMACOther (a MAC header of
// another length, which the line cannot show), and its 14 bytes are
// zeros and the family's ethertype. Nothing else is read: no kernel
// memory that is not the packet's MAC header goes into the ring. r6 is
// the context, r7 the record; a failed read jumps to copied.
func (c *compiler) logNetfilterMAC(r *ir.Rule, copied string) {
	b := c.b
	l := ruleLabel(r)
	hhl, noMAC, other, blank, done := l+"_mac_hhl", l+"_mac_none", l+"_mac_other", l+"_mac_blank", l+"_mac_done"
	b.Note("the MAC header dump_mac_header prints")
	b.Emit(
		insn.StImm(asm.R7, abi.LogFlags, 0, asm.Word),
		kernel.Load(asm.R2, asm.R6, asm.DWord, nfCtxState),
		kernel.Load(asm.R2, asm.R2, asm.DWord, hookStateIn),
		// No input device only in a test run, whose skb eth_type_trans
		// made on lo (hard_header_len ETH_HLEN).
		insn.Mov(asm.R3, ethHeaderLen),
		asm.JEq.Imm(asm.R2, 0, hhl),
		kernel.Load(asm.R3, asm.R2, asm.Half, netdevHHLen),
	)
	b.Mark(hhl)
	c.emitSkb(asm.R4, asm.R6)
	b.Emit(
		kernel.Load(asm.R5, asm.R4, asm.Half, skbMACHeader),
		kernel.Load(asm.R1, asm.R4, asm.Half, skbNetHeader),
		asm.JEq.Imm(asm.R5, 0xffff, noMAC),
		asm.JEq.Reg(asm.R5, asm.R1, noMAC),
		asm.JEq.Imm(asm.R3, 0, noMAC),
		asm.JNE.Imm(asm.R3, ethHeaderLen, other),
		asm.Sub.Reg(asm.R1, asm.R5),
		asm.JNE.Imm(asm.R1, ethHeaderLen, other),
		kernel.Load(asm.R3, asm.R4, asm.DWord, skbHead),
		asm.Add.Reg(asm.R3, asm.R5),
		insn.Movr(asm.R1, asm.R7),
		asm.Add.Imm(asm.R1, abi.LogData),
		insn.Mov(asm.R2, ethHeaderLen),
		asm.FnProbeReadKernel.Call(),
		asm.JNE.Imm(asm.R0, 0, copied),
		insn.Ja(done),
	)
	b.Mark(other)
	b.Emit(insn.StImm(asm.R7, abi.LogFlags, abi.LogMACOther, asm.Word), insn.Ja(blank))
	b.Mark(noMAC)
	b.Emit(insn.StImm(asm.R7, abi.LogFlags, abi.LogNoMAC, asm.Word))
	b.Mark(blank)
	et := []byte{0x08, 0x00} // ETH_P_IP, in network byte order
	if c.p.Family == rules.IPv6 {
		et = []byte{0x86, 0xdd}
	}
	b.Emit(
		insn.StImm(asm.R7, abi.LogData, 0, asm.DWord),
		insn.StImm(asm.R7, abi.LogData+8, 0, asm.Word),
		insn.StImm(asm.R7, abi.LogData+12, int32(binary.NativeEndian.Uint16(et)), asm.Half),
	)
	b.Mark(done)
}
