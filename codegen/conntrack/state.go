package conntrack

import (
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/btf"

	"bpfwall/codegen/insn"
	"bpfwall/codegen/kernel"
	"bpfwall/codegen/pkt"
	"bpfwall/codegen/uapi"
	"bpfwall/model"
)

// Kfuncs and kernel fields ct_state uses.
const (
	kfuncXDPLookup = "bpf_xdp_ct_lookup"
	kfuncSkbLookup = "bpf_skb_ct_lookup"
	kfuncRelease   = "bpf_ct_release"
)

var (
	nfConnStatus = kernel.Field{Struct: "nf_conn", Field: "status"}
	skbNfct      = kernel.Field{Struct: "sk_buff", Field: "_nfct"}
)

// enum ip_conntrack_info, the low bits of skb->_nfct.
const (
	ipCTEstablished      = 0
	ipCTRelated          = 1
	ipCTNew              = 2
	ipCTEstablishedReply = 3
	ipCTRelatedReply     = 4
	ipCTUntracked        = 7
	nfctInfoMask         = 7
)

// Bits of nf_conn.status (enum ip_conntrack_status).
const (
	ipsExpected  = 1 << 0
	ipsSeenReply = 1 << 1
)

// bpf_ct_opts and bpf_sock_tuple.
const (
	ctOptsSize       = 12 // NF_BPF_CT_OPTS_SZ
	ctOptsNetns      = 0  // s32 netns_id
	ctOptsL4Proto    = 8  // u8
	ctOptsDir        = 9  // u8, set by the lookup
	currentNetns     = -1 // BPF_F_CURRENT_NETNS
	sockTuple4Size   = 12
	sockTuple6Size   = 36
	ipCTDirReply     = 1
	ctStateUnknown   = int32(model.ConnUnknown)
	ctStateInvalid   = int32(model.ConnInvalid)
	ctStateNew       = int32(model.ConnNew)
	ctStateEstab     = int32(model.ConnEstablished)
	ctStateRelated   = int32(model.ConnRelated)
	ctStateUntracked = int32(model.ConnUntracked)
)

// ct_state's stack frame.
const (
	ctTuple = -40  // bpf_sock_tuple, 36 bytes at most
	ctOpts  = -56  // bpf_ct_opts
	ctBuf   = -104 // 48 bytes: the IP header inside an ICMP error
	ctPorts = -112 // 8 bytes: the inner transport header's ports, a UDP header
)

// state emits the function that returns the conntrack state of the
// parsed packet at r2 (model.ConnState) at the ingress hooks: the entry's,
// or, without one, what ConntrackWithoutEntry describes.
//
//	r6 ctx, r7 pkt, r8 L4Len then the state, r9 the nf_conn
func (g *gen) state() {
	b := g.b
	b.Function(&btf.Func{Name: Sym, Linkage: btf.GlobalFunc, Type: g.Proto}, "conntrack state of the packet at r2: the kernel's conntrack table, or what nf_conntrack_in makes of a packet it has no entry for")
	b.Emit(
		insn.Movr(asm.R6, asm.R1),
		insn.Movr(asm.R7, asm.R2),
		asm.JNE.Imm(asm.R7, 0, "ct_pkt"),
	)
	b.Mark("ct_unknown")
	b.Emit(insn.Mov(asm.R0, ctStateUnknown), asm.Return())
	b.Mark("ct_invalid")
	b.Emit(insn.Mov(asm.R0, ctStateInvalid), asm.Return())
	b.Mark("ct_new")
	b.Emit(insn.Mov(asm.R0, ctStateNew), asm.Return())
	b.Mark("ct_pkt")
	for off := int16(ctPorts); off < 0; off += 8 {
		b.Emit(insn.StImm(asm.R10, off, 0, asm.DWord))
	}
	b.Note("class U, which the netfilter stage decides: broken extension headers, fragments, protocols other than TCP and UDP")
	b.Emit(
		insn.Ld(asm.R1, asm.R7, pkt.Flags, asm.Byte),
		asm.JSet.Imm(asm.R1, pkt.FlagBadExtHeaders|pkt.FlagFragment, "ct_unknown"),
		insn.Ld(asm.R8, asm.R7, pkt.L4Len, asm.Word),
		insn.Ld(asm.R1, asm.R7, pkt.Proto, asm.Byte),
		asm.JEq.Imm(asm.R1, uapi.ProtoTCP, "ct_tcp"),
		asm.JEq.Imm(asm.R1, uapi.ProtoUDP, "ct_udp"),
		insn.Ja("ct_unknown"),
	)

	b.Mark("ct_tcp")
	b.Note("tcp_error: header length and tcp_valid_flags")
	b.Emit(
		asm.JLT.Imm(asm.R8, 20, "ct_invalid"),
		insn.Ld(asm.R1, asm.R7, pkt.Flags, asm.Byte),
		asm.JSet.Imm(asm.R1, pkt.FlagTCPOptsTruncated, "ct_invalid"),
		insn.Ld(asm.R8, asm.R7, pkt.TCPFlags, asm.Byte),
		asm.And.Imm(asm.R8, 0x37), // FIN SYN RST ACK URG
	)
	for _, f := range []int32{0x02, 0x22, 0x12, 0x04, 0x14, 0x11, 0x31, 0x10, 0x30} {
		b.Emit(asm.JEq.Imm(asm.R8, f, "ct_tcp_valid"))
	}
	b.Emit(insn.Ja("ct_invalid"))
	b.Mark("ct_tcp_valid")
	g.packetTuple()
	g.lookup(uapi.ProtoTCP, "ct_tcp_found")
	b.Note("no entry: tcp_new starts a connection with a SYN, picks one up with an ACK when nf_conntrack_tcp_loose")
	for _, f := range []int32{0x02, 0x22} {
		b.Emit(asm.JEq.Imm(asm.R8, f, "ct_new"))
	}
	for _, f := range []int32{0x10, 0x30} {
		b.Emit(asm.JEq.Imm(asm.R8, f, "ct_tcp_pickup"))
	}
	b.Emit(insn.Ja("ct_invalid"))
	b.Mark("ct_tcp_pickup")
	g.tcpLoose()
	b.Emit(
		asm.JNE.Imm(asm.R1, 0, "ct_new"),
		insn.Ja("ct_invalid"),
	)

	b.Mark("ct_udp")
	b.Note("udp_error: the length field")
	b.Emit(
		asm.JLT.Imm(asm.R8, 8, "ct_invalid"),
		insn.Movr(asm.R1, asm.R6),
		insn.Ld(asm.R2, asm.R7, pkt.L4Off, asm.Half),
	)
	g.Load(asm.R10, ctPorts, 8, "ct_invalid")
	b.Emit(
		insn.Ld(asm.R1, asm.R10, ctPorts+4, asm.Half),
		insn.Ntoh(asm.R1, asm.Half),
		asm.JLT.Imm(asm.R1, 8, "ct_invalid"),
		asm.JGT.Reg(asm.R1, asm.R8, "ct_invalid"),
	)
	g.packetTuple()
	g.lookup(uapi.ProtoUDP, "ct_found")
	b.Emit(insn.Ja("ct_new"))

	b.Mark("ct_found")
	b.Note("an entry (resolve_normal_ct): a reply, or seen a reply, is established; expected is related; else new")
	b.Emit(insn.Movr(asm.R9, asm.R0))
	g.entryUnknown()
	b.Emit(
		insn.Mov(asm.R8, ctStateEstab),
		insn.Ld(asm.R1, asm.R10, ctOpts+ctOptsDir, asm.Byte),
		asm.JEq.Imm(asm.R1, ipCTDirReply, "ct_release"),
		kernel.Load(asm.R1, asm.R9, asm.DWord, nfConnStatus),
		asm.JSet.Imm(asm.R1, ipsSeenReply, "ct_release"),
		insn.Mov(asm.R8, ctStateRelated),
		asm.JSet.Imm(asm.R1, ipsExpected, "ct_release"),
		insn.Mov(asm.R8, ctStateNew),
	)
	b.Emit(insn.Ja("ct_release"))
	g.tcpFound()

	b.Mark("ct_release")
	b.Emit(
		insn.Movr(asm.R1, asm.R9),
		kernel.Call(kfuncRelease),
		insn.Movr(asm.R0, asm.R8),
		asm.Return(),
	)
	g.sackCallback()
}

// entryUnknown, with EntryUnknown, ends at ct_release with the state
// unknown: the lookup found the entry in r9.
func (g *gen) entryUnknown() {
	if g.EntryUnknown {
		g.b.Emit(
			insn.Mov(asm.R8, ctStateUnknown),
			insn.Ja("ct_release"),
		)
	}
}

// The path from the context to the namespace of the device a packet came
// in on, the namespace the lookups search (BPF_F_CURRENT_NETNS), and its
// nf_conntrack_tcp_loose.
var (
	xdpBuffRxq   = kernel.Field{Struct: "xdp_buff", Field: "rxq"}
	xdpRxqDev    = kernel.Field{Struct: "xdp_rxq_info", Field: "dev"}
	skbDev       = kernel.Field{Struct: "sk_buff", Field: "dev"}
	netDeviceNet = kernel.Field{Struct: "net_device", Field: "nd_net.net"}
	netTCPLoose  = kernel.Field{Struct: "net", Field: "ct.nf_ct_proto.tcp.tcp_loose"}
)

// tcpLoose loads the namespace's nf_conntrack_tcp_loose into r1,
// reached from the context in r6 (bpf_cast_to_kern_ctx: the xdp_buff's
// rxq->dev, the sk_buff's dev), as tcp_new reads it when the packet
// comes: without an entry there is no nf_conn to find the namespace from.
func (g *gen) tcpLoose() {
	b := g.b
	b.Emit(insn.Movr(asm.R1, asm.R6), kernel.Call(kernel.CastToKernCtx))
	if g.TC {
		b.Emit(kernel.Load(asm.R1, asm.R0, asm.DWord, skbDev))
	} else {
		b.Emit(
			kernel.Load(asm.R1, asm.R0, asm.DWord, xdpBuffRxq),
			kernel.Load(asm.R1, asm.R1, asm.DWord, xdpRxqDev),
		)
	}
	b.Emit(
		kernel.Load(asm.R1, asm.R1, asm.DWord, netDeviceNet),
		kernel.Load(asm.R1, asm.R1, asm.Byte, netTCPLoose),
	)
}

// FromSkb emits the end of a ct_state function that returns the state
// conntrack_mt reads from skb->_nfct, with the sk_buff in r0: at
// tc-egress and at the netfilter hooks, which run after conntrack. With
// nat (at a chain's own netfilter hook, when the rules test them), it adds
// SNAT and DNAT from the entry's status.
func FromSkb(b *insn.Builder, nat bool) {
	g := &gen{b: b}
	b.Emit(kernel.Load(asm.R1, asm.R0, asm.DWord, skbNfct))
	if nat {
		b.Emit(insn.St(asm.R10, ctNfct, asm.R1, asm.DWord))
	}
	b.Emit(
		insn.Mov(asm.R0, ctStateInvalid),
		asm.JEq.Imm(asm.R1, 0, "ct_egress_done"),
		asm.And.Imm(asm.R1, nfctInfoMask),
		insn.Mov(asm.R0, ctStateEstab),
		asm.JEq.Imm(asm.R1, ipCTEstablished, "ct_egress_done"),
		asm.JEq.Imm(asm.R1, ipCTEstablishedReply, "ct_egress_done"),
		insn.Mov(asm.R0, ctStateRelated),
		asm.JEq.Imm(asm.R1, ipCTRelated, "ct_egress_done"),
		asm.JEq.Imm(asm.R1, ipCTRelatedReply, "ct_egress_done"),
		insn.Mov(asm.R0, ctStateNew),
		asm.JEq.Imm(asm.R1, ipCTNew, "ct_egress_done"),
		insn.Mov(asm.R0, ctStateUntracked),
		asm.JEq.Imm(asm.R1, ipCTUntracked, "ct_egress_done"),
		insn.Mov(asm.R0, ctStateInvalid),
	)
	b.Mark("ct_egress_done")
	if nat {
		g.nat()
	}
	b.Emit(asm.Return())
}

// Bits of nf_conn.status that conntrack_mt reports as the states SNAT and
// DNAT (IPS_SRC_NAT, IPS_DST_NAT).
const (
	ipsSrcNAT = 1 << 4
	ipsDstNAT = 1 << 5
)

// ct_state's frame at a chain's netfilter hook.
const (
	ctNfct   = -8  // skb->_nfct
	ctSaved  = -16 // the state, across the read
	ctStatus = -24 // nf_conn.status
)

// nat adds to the state in r0 what conntrack_mt adds to it from the
// entry, when there is one (skb->_nfct's pointer, saved at ctNfct): SNAT
// when IPS_SRC_NAT is set, DNAT when IPS_DST_NAT is. The chain's program
// runs where the kernel's chain does, between the same neighbours
// (conntrack, nat), so the status it reads is the one the chain would:
// before nat's hook the first packet of a connection has neither bit.
// skb->_nfct is a number, not a pointer the verifier tracks, so the
// status is read with bpf_probe_read_kernel.
func (g *gen) nat() {
	b := g.b
	b.Note("SNAT and DNAT: nf_conn.status's IPS_SRC_NAT and IPS_DST_NAT, when the packet has an entry")
	add := kernel.AddOffset(asm.R3, nfConnStatus)
	b.Emit(
		insn.Ld(asm.R3, asm.R10, ctNfct, asm.DWord),
		asm.And.Imm(asm.R3, ^int32(nfctInfoMask)), // NFCT_PTRMASK
		asm.JEq.Imm(asm.R3, 0, "ct_nat_done"),
		add,
		insn.St(asm.R10, ctSaved, asm.R0, asm.DWord),
		insn.Movr(asm.R1, asm.R10),
		asm.Add.Imm(asm.R1, ctStatus),
		insn.Mov(asm.R2, 8),
		asm.FnProbeReadKernel.Call(),
		insn.Movr(asm.R1, asm.R0),
		insn.Ld(asm.R0, asm.R10, ctSaved, asm.DWord),
		asm.JNE.Imm(asm.R1, 0, "ct_nat_done"),
		insn.Ld(asm.R1, asm.R10, ctStatus, asm.DWord),
		asm.JSet.Imm(asm.R1, ipsSrcNAT, "ct_nat_src"),
		insn.Ja("ct_nat_dst"),
	)
	b.Mark("ct_nat_src")
	b.Emit(asm.Or.Imm(asm.R0, int32(model.ConnSNAT)))
	b.Mark("ct_nat_dst")
	b.Emit(
		asm.JSet.Imm(asm.R1, ipsDstNAT, "ct_nat_dnat"),
		insn.Ja("ct_nat_done"),
	)
	b.Mark("ct_nat_dnat")
	b.Emit(asm.Or.Imm(asm.R0, int32(model.ConnDNAT)))
	b.Mark("ct_nat_done")
}

// packetTuple fills the bpf_sock_tuple in with the packet's addresses
// and ports, in network order.
func (g *gen) packetTuple() {
	n := int16(1)
	if g.IPv6 {
		n = 4
	}
	for i := int16(0); i < n; i++ {
		g.b.Emit(
			insn.Ld(asm.R1, asm.R7, pkt.Src+4*i, asm.Word),
			insn.Ntoh(asm.R1, asm.Word),
			insn.St(asm.R10, ctTuple+4*i, asm.R1, asm.Word),
			insn.Ld(asm.R1, asm.R7, pkt.Dst+4*i, asm.Word),
			insn.Ntoh(asm.R1, asm.Word),
			insn.St(asm.R10, ctTuple+4*n+4*i, asm.R1, asm.Word),
		)
	}
	g.b.Emit(
		insn.Ld(asm.R1, asm.R7, pkt.Sport, asm.Word),
		insn.Ntoh(asm.R1, asm.Half),
		insn.St(asm.R10, ctTuple+8*n, asm.R1, asm.Half),
		insn.Ld(asm.R1, asm.R7, pkt.Dport, asm.Word),
		insn.Ntoh(asm.R1, asm.Half),
		insn.St(asm.R10, ctTuple+8*n+2, asm.R1, asm.Half),
	)
}

// lookup looks the tuple up for protocol proto (-1: the one already in
// the options) and jumps to found, with the nf_conn in r0, when there is
// an entry.
func (g *gen) lookup(proto int32, found string) {
	b := g.b
	size := int32(sockTuple4Size)
	if g.IPv6 {
		size = sockTuple6Size
	}
	lookup := kfuncXDPLookup
	if g.TC {
		lookup = kfuncSkbLookup
	}
	b.Emit(
		insn.StImm(asm.R10, ctOpts+ctOptsNetns, currentNetns, asm.Word),
		insn.StImm(asm.R10, ctOpts+ctOptsDir, 0, asm.Byte),
	)
	if proto >= 0 {
		b.Emit(insn.StImm(asm.R10, ctOpts+ctOptsL4Proto, proto, asm.Byte))
	}
	b.Emit(
		insn.Movr(asm.R1, asm.R6),
		insn.Movr(asm.R2, asm.R10),
		asm.Add.Imm(asm.R2, ctTuple),
		insn.Mov(asm.R3, size),
		insn.Movr(asm.R4, asm.R10),
		asm.Add.Imm(asm.R4, ctOpts),
		insn.Mov(asm.R5, ctOptsSize),
		kernel.Call(lookup),
		asm.JNE.Imm(asm.R0, 0, found),
	)
}
