package codegen

import (
	"encoding/binary"
	"slices"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/btf"

	"bpfwall/codegen/abi"
	"bpfwall/codegen/insn"
	"bpfwall/codegen/kernel"
	"bpfwall/codegen/pkt"
	"bpfwall/codegen/reject"
	"bpfwall/ir"
	"bpfwall/rules"
)

// A chain at its own netfilter hook (HookNetfilter). The program is a
// BPF_PROG_TYPE_NETFILTER program that the loader attaches where
// netfilter runs the entry chain: the chain's hook (PREROUTING, INPUT,
// FORWARD, OUTPUT, POSTROUTING) at its table's priority (raw -300,
// mangle -150, filter 0). It sees what the table's chain would see there,
// by construction: the packet after routing, after DNAT, reassembled where
// the kernel reassembles, with the conntrack entry conntrack gave it
// (skb->_nfct), and both devices netfilter knows. It evaluates every
// packet of its family that reaches the hook and returns NF_ACCEPT or
// NF_DROP; its code is the stage's (netfilter.go) without the stage's
// gate:
//
//   - the packet starts at the network header, read through a dynptr;
//   - the IP layer has checked the headers (no checksum, no address
//     checks of ip6_rcv_core);
//   - -i and -o compare the names of the hook state's devices with the
//     patterns, as ifname_compare_aligned does, so that interfaces
//     created or renamed after the load match as the kernel matches them;
//   - at FORWARD the TTL has been decremented: lowering wrote the TTL
//     matches for the TTL as the packet arrived (ir.Program.Forward), so
//     the program adds one back, as at tc-egress.
//
// A BPF netfilter program cannot send packets: REJECT is refused.

// Kernel fields the chain's program reads besides the stage's.
var (
	hookStateOut = kernel.Field{Struct: "nf_hook_state", Field: "out"}
	netdevName0  = kernel.Field{Struct: "net_device", Field: "name"}
	netdevName8  = kernel.Field{Struct: "net_device", Field: "name[8]"}
)

// ifNameSize is IFNAMSIZ.
const ifNameSize = 16

// netfilterIfaces sets the packet's interface bits (pkt.Ifaces) from the
// names of the hook state's devices: bit i when the device of pattern
// i's direction matches it. A device netfilter does not give the chain
// (NULL) has the empty name, which no collected pattern matches ("+" is
// constant). r6 is the context, r7 the packet; r8 stays 0.
func (c *compiler) netfilterIfaces() {
	b := c.b
	b.Note("-i and -o: the devices' names against the patterns, as ifname_compare_aligned")
	b.Emit(insn.Mov(asm.R5, 0))
	for _, dir := range []ir.IfaceDir{ir.IfaceIn, ir.IfaceOut} {
		var pats []int
		for i, p := range c.ifaces {
			if p.Dir == dir {
				pats = append(pats, i)
			}
		}
		if len(pats) == 0 {
			continue
		}
		dev, field := "in", hookStateIn
		if dir == ir.IfaceOut {
			dev, field = "out", hookStateOut
		}
		none := b.Fresh("no_" + dev + "_dev")
		b.Emit(
			kernel.Load(asm.R1, asm.R6, asm.DWord, nfCtxState),
			kernel.Load(asm.R1, asm.R1, asm.DWord, field),
			asm.JEq.Imm(asm.R1, 0, none),
			kernel.Load(asm.R2, asm.R1, asm.DWord, netdevName0),
			kernel.Load(asm.R3, asm.R1, asm.DWord, netdevName8),
		)
		for _, i := range pats {
			c.ifaceNameTest(i, c.ifaces[i])
		}
		b.Mark(none)
	}
	b.Emit(insn.St(asm.R7, pkt.Ifaces, asm.R5, asm.DWord))
}

// ifaceNameTest sets bit i of r5 when the name in r2 (bytes 0-7) and r3
// (bytes 8-15) matches pattern p: the pattern's bytes, and for an exact
// name the NUL after it, as iptables' mask compares them.
func (c *compiler) ifaceNameTest(i int, p ir.Iface) {
	b := c.b
	var val, mask [ifNameSize]byte
	n := len(p.Name)
	copy(val[:], p.Name)
	if !p.Prefix {
		n++ // the NUL that ends the name
	}
	for k := 0; k < n && k < ifNameSize; k++ {
		mask[k] = 0xff
	}
	no := b.Fresh("iface_no_match")
	for w, reg := range []asm.Register{asm.R2, asm.R3} {
		m := binary.NativeEndian.Uint64(mask[8*w:])
		if m == 0 {
			continue
		}
		v := binary.NativeEndian.Uint64(val[8*w:])
		b.Emit(insn.Movr(asm.R0, reg))
		if m != ^uint64(0) {
			b.Emit(asm.LoadImm(asm.R1, int64(m), asm.DWord), asm.And.Reg(asm.R0, asm.R1))
		}
		b.Emit(asm.LoadImm(asm.R1, int64(v), asm.DWord), asm.JNE.Reg(asm.R0, asm.R1, no))
	}
	b.Emit(asm.LoadImm(asm.R1, int64(1)<<i, asm.DWord), asm.Or.Reg(asm.R5, asm.R1))
	b.Mark(no)
}

// REJECT at a chain's own netfilter hook. A BPF netfilter program cannot
// send packets, so the kernel's own REJECT target answers, by
// construction as iptables would: the program decides the REJECT, notes
// the packet in abi.RejectPendingMap (its --reject-with, its length and its
// first network-header bytes) and accepts it; the chain's own table in
// the kernel, which the restore writes (cmd/bpfwall delegate.go) and which
// runs just after the program (the loader attaches it below the table's
// priority), holds for each --reject-with a rule
//
//	-A CHAIN -m bpf --object-pinned ANSWER -j REJECT --reject-with WITH
//
// whose socket filter ANSWER (RejectAnswer) matches the packet noted with
// that --reject-with. The note is per CPU: netfilter runs a packet's hook
// functions one after the other on one CPU. A packet whose note is left
// from an earlier, identical packet (same length and header bytes) clears
// it first, so that only a packet the program rejects now finds one;
// two identical packets interleaved on a CPU (a preempted OUTPUT) both
// find it, and the program gives identical packets one verdict.

// The pendingReject record: the --reject-with's code (rejectCode, 0:
// none), the packet's length, and its first pendingHdr bytes (an IPv4
// packet's first 20, zeros after).
const (
	pendingKind   = 0
	pendingLen    = 4
	pendingBytes  = 8
	pendingHdr    = 40
	pendingRecord = pendingBytes + pendingHdr
)

// rejectNames are the --reject-with values, by code - 1.
var rejectNames = reject.Names()

// rejectCode is the code of --reject-with with in pendingReject records.
func rejectCode(with string) int32 { return int32(slices.Index(rejectNames, with) + 1) }

// headerBytes is how many header bytes a pendingReject record holds.
func headerBytes(fam rules.Family) int32 {
	if fam == rules.IPv6 {
		return 40
	}
	return 20
}

// Transmits reports whether the program sends packets of its own: the
// replies of REJECT rules, at xdp (XDP_TX) and tc (a redirect to the
// device's egress). At a netfilter hook the kernel's REJECT answers.
func (p *Program) Transmits() bool {
	return p.Hook != HookNetfilter && p.Spec.Maps[abi.RejectRulesMap] != nil
}

// Rejects are the --reject-with values of the program's REJECT rules,
// which the kernel answers for a program at a chain's netfilter hook.
func (p *Program) Rejects() []string {
	if p.Hook != HookNetfilter {
		return nil
	}
	var out []string
	for _, r := range p.IR.Rules {
		if a, ok := r.Action.(ir.Reject); ok && !slices.Contains(out, a.With) {
			out = append(out, a.With)
		}
	}
	slices.Sort(out)
	return out
}

// btfPending is the pendingReject record, for bpftool map dump.
var btfPending = &btf.Struct{
	Name: "bpfwall_pending_reject",
	Size: pendingRecord,
	Members: []btf.Member{
		{Name: "reject_with", Type: btfU32, Offset: pendingKind * 8},
		{Name: "len", Type: btfU32, Offset: pendingLen * 8},
		{Name: "header", Type: &btf.Array{Index: btfInt, Type: &btf.Int{Name: "unsigned char", Size: 1}, Nelems: pendingHdr}, Offset: pendingBytes * 8},
	},
}

func pendingMapSpec() *ebpf.MapSpec {
	return &ebpf.MapSpec{Name: abi.RejectPendingMap, Type: ebpf.PerCPUArray, KeySize: 4, ValueSize: pendingRecord, MaxEntries: 1, Key: btfU32, Value: btfPending}
}

const (
	symRejectNote   = "reject_note"
	symRejectForget = "reject_forget"
)

// funcCtxCode describes a global function int name(ctx, int code).
func (c *compiler) funcCtxCode(name string) *btf.Func {
	return &btf.Func{
		Name:    name,
		Linkage: btf.GlobalFunc,
		Type: &btf.FuncProto{
			Return: btfInt,
			Params: []btf.FuncParam{{Name: "ctx", Type: c.ctxType()}, {Name: "code", Type: btfInt}},
		},
	}
}

// rejectForgetCall emits main's call of reject_forget, before the chains.
func (c *compiler) rejectForgetCall() {
	if c.hook != HookNetfilter || len(c.rejects) == 0 {
		return
	}
	c.b.Emit(insn.Movr(asm.R1, asm.R6), insn.Mov(asm.R2, 0), insn.Call(symRejectForget))
}

// nfRejectFunctions emits reject_note and reject_forget.
func (c *compiler) nfRejectFunctions() {
	b := c.b
	const dp, buf = -16, -16 - pendingHdr
	hdr := headerBytes(c.p.Family)
	lookup := func(none string) {
		b.Emit(
			insn.StImm(asm.R10, dp-4-pendingHdr, 0, asm.Word),
			insn.Movr(asm.R2, asm.R10),
			asm.Add.Imm(asm.R2, dp-4-pendingHdr),
			insn.MapRef(asm.R1, abi.RejectPendingMap),
			asm.FnMapLookupElem.Call(),
			asm.JEq.Imm(asm.R0, 0, none),
			insn.Movr(asm.R8, asm.R0),
		)
	}

	// readHeader zeroes pendingHdr bytes at base+off and copies the
	// packet's first hdr bytes there, through a dynptr at dp; it jumps to
	// fail if it cannot. r6 is the context.
	readHeader := func(base asm.Register, off int16, fail string) {
		for o := int16(0); o < pendingHdr; o += 8 {
			b.Emit(insn.StImm(base, off+o, 0, asm.DWord))
		}
		c.dynptrFromSkb(asm.R6, dp, fail)
		b.Emit(
			insn.Movr(asm.R1, base),
			asm.Add.Imm(asm.R1, int32(off)),
			insn.Mov(asm.R2, hdr),
			insn.Movr(asm.R3, asm.R10),
			asm.Add.Imm(asm.R3, dp),
			insn.Mov(asm.R4, 0),
			insn.Mov(asm.R5, 0),
			asm.FnDynptrRead.Call(),
			asm.JNE.Imm(asm.R0, 0, fail),
		)
	}

	b.Function(c.funcCtxCode(symRejectNote), "note the packet a REJECT rule decided, for the kernel's REJECT rule to answer")
	b.Emit(insn.Movr(asm.R6, asm.R1), insn.Movr(asm.R7, asm.R2))
	lookup("note_done")
	b.Emit(insn.St(asm.R8, pendingKind, asm.R7, asm.Word))
	c.emitSkb(asm.R1, asm.R6)
	b.Emit(kernel.Load(asm.R1, asm.R1, asm.Word, skbLenField), insn.St(asm.R8, pendingLen, asm.R1, asm.Word))
	readHeader(asm.R8, pendingBytes, "note_failed")
	b.Emit(insn.Ja("note_done"))
	b.Mark("note_failed")
	b.Emit(insn.StImm(asm.R8, pendingKind, 0, asm.Word))
	b.Mark("note_done")
	b.Emit(insn.Mov(asm.R0, 0), asm.Return())

	b.Function(c.funcCtxCode(symRejectForget), "clear a note an identical earlier packet left")
	b.Emit(insn.Movr(asm.R6, asm.R1))
	lookup("forget_done")
	b.Emit(
		insn.Ld(asm.R1, asm.R8, pendingKind, asm.Word),
		asm.JEq.Imm(asm.R1, 0, "forget_done"),
	)
	c.emitSkb(asm.R1, asm.R6)
	b.Emit(
		kernel.Load(asm.R1, asm.R1, asm.Word, skbLenField),
		insn.Ld(asm.R2, asm.R8, pendingLen, asm.Word),
		asm.JNE.Reg(asm.R1, asm.R2, "forget_done"),
	)
	readHeader(asm.R10, buf, "forget_done")
	for off := int16(0); off < pendingHdr; off += 8 {
		b.Emit(
			insn.Ld(asm.R1, asm.R10, buf+off, asm.DWord),
			insn.Ld(asm.R2, asm.R8, pendingBytes+off, asm.DWord),
			asm.JNE.Reg(asm.R1, asm.R2, "forget_done"),
		)
	}
	b.Emit(insn.StImm(asm.R8, pendingKind, 0, asm.Word))
	b.Mark("forget_done")
	b.Emit(insn.Mov(asm.R0, 0), asm.Return())
}

// skbLenOff is offsetof(struct __sk_buff, len).
const skbLenOff = 0

// RejectAnswer is the socket filter of --reject-with with, for the
// kernel's rule that answers a chain's REJECT (-m bpf --object-pinned):
// it matches the packet its chain's program noted with that
// --reject-with. Its abi.RejectPendingMap is the chain's.
func RejectAnswer(fam rules.Family, with string) *ebpf.CollectionSpec {
	const key, buf = -4, -4 - 4 - pendingHdr
	no := "answer_no"
	insns := asm.Instructions{
		insn.Movr(asm.R6, asm.R1),
		insn.StImm(asm.R10, key, 0, asm.Word),
		insn.Movr(asm.R2, asm.R10),
		asm.Add.Imm(asm.R2, key),
		insn.MapRef(asm.R1, abi.RejectPendingMap),
		asm.FnMapLookupElem.Call(),
		asm.JEq.Imm(asm.R0, 0, no),
		insn.Movr(asm.R7, asm.R0),
		insn.Ld(asm.R1, asm.R7, pendingKind, asm.Word),
		asm.JNE.Imm(asm.R1, rejectCode(with), no),
		insn.Ld(asm.R1, asm.R6, skbLenOff, asm.Word),
		insn.Ld(asm.R2, asm.R7, pendingLen, asm.Word),
		asm.JNE.Reg(asm.R1, asm.R2, no),
	}
	for off := int16(0); off < pendingHdr; off += 8 {
		insns = append(insns, insn.StImm(asm.R10, buf+off, 0, asm.DWord))
	}
	insns = append(insns,
		insn.Movr(asm.R1, asm.R6),
		insn.Mov(asm.R2, 0),
		insn.Movr(asm.R3, asm.R10),
		asm.Add.Imm(asm.R3, buf),
		insn.Mov(asm.R4, headerBytes(fam)),
		asm.FnSkbLoadBytes.Call(),
		asm.JNE.Imm(asm.R0, 0, no),
	)
	for off := int16(0); off < pendingHdr; off += 8 {
		insns = append(insns,
			insn.Ld(asm.R1, asm.R10, buf+off, asm.DWord),
			insn.Ld(asm.R2, asm.R7, pendingBytes+off, asm.DWord),
			asm.JNE.Reg(asm.R1, asm.R2, no),
		)
	}
	insns = append(insns,
		insn.Mov(asm.R0, 1),
		asm.Return(),
		insn.Mov(asm.R0, 0).WithSymbol(no),
		asm.Return(),
	)
	return &ebpf.CollectionSpec{
		Programs: map[string]*ebpf.ProgramSpec{
			abi.ProgramName: {Name: "bpfwall_answer", Type: ebpf.SocketFilter, License: "GPL", Instructions: insns},
		},
		Maps: map[string]*ebpf.MapSpec{abi.RejectPendingMap: pendingMapSpec()},
	}
}
