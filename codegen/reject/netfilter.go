package reject

import (
	"slices"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/btf"

	"bpfwall/codegen/abi"
	"bpfwall/codegen/insn"
	"bpfwall/codegen/kernel"
	"bpfwall/rules"
)

var (
	btfInt = &btf.Int{Name: "int", Size: 4, Encoding: btf.Signed}
	btfU32 = &btf.Int{Name: "__u32", Size: 4}
)

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
// whose socket filter ANSWER (Answer) matches the packet noted with
// that --reject-with. The note is per CPU: netfilter runs a packet's hook
// functions one after the other on one CPU. A packet whose note is left
// from an earlier, identical packet (same length and header bytes) clears
// it first, so that only a packet the program rejects now finds one;
// two identical packets interleaved on a CPU (a preempted OUTPUT) both
// find it, and the program gives identical packets one verdict.

// The pendingReject record: the --reject-with's code (Code, 0:
// none), the packet's length, and its first pendingHdr bytes (an IPv4
// packet's first 20, zeros after).
const (
	pendingKind   = 0
	pendingLen    = 4
	pendingBytes  = 8
	pendingHdr    = 40
	pendingRecord = pendingBytes + pendingHdr
)

// Code is the code of --reject-with with in pendingReject records: its
// index in Names, plus one.
func Code(with string) int32 { return int32(slices.Index(names, with) + 1) }

// names are Names, computed once.
var names = Names()

// headerBytes is how many header bytes a pendingReject record holds.
func headerBytes(fam rules.Family) int32 {
	if fam == rules.IPv6 {
		return 40
	}
	return 20
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

// PendingMapSpec is the spec of abi.RejectPendingMap.
func PendingMapSpec() *ebpf.MapSpec {
	return &ebpf.MapSpec{Name: abi.RejectPendingMap, Type: ebpf.PerCPUArray, KeySize: 4, ValueSize: pendingRecord, MaxEntries: 1, Key: btfU32, Value: btfPending}
}

// The functions EmitNetfilter emits: main calls SymNote with the
// --reject-with's Code for a packet a REJECT rule decided, and SymForget
// before the chains.
const (
	SymNote   = "reject_note"
	SymForget = "reject_forget"
)

// EmitNetfilter emits SymNote and SymForget, for a program at a chain's
// netfilter hook: int f(struct bpf_nf_ctx *ctx, int code), whose context
// type is ctx.
func EmitNetfilter(b *insn.Builder, fam rules.Family, ctx *btf.Pointer) {
	proto := &btf.FuncProto{
		Return: btfInt,
		Params: []btf.FuncParam{{Name: "ctx", Type: ctx}, {Name: "code", Type: btfInt}},
	}
	fn := func(name string) *btf.Func { return &btf.Func{Name: name, Linkage: btf.GlobalFunc, Type: proto} }
	const dp, buf = -16, -16 - pendingHdr
	hdr := headerBytes(fam)
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
		b.Emit(kernel.NFDynptr(asm.R6, dp, fail)...)
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

	b.Function(fn(SymNote), "note the packet a REJECT rule decided, for the kernel's REJECT rule to answer")
	b.Emit(insn.Movr(asm.R6, asm.R1), insn.Movr(asm.R7, asm.R2))
	lookup("note_done")
	b.Emit(insn.St(asm.R8, pendingKind, asm.R7, asm.Word))
	b.Emit(kernel.NFSkb(asm.R1, asm.R6))
	b.Emit(kernel.Load(asm.R1, asm.R1, asm.Word, kernel.SkbLen), insn.St(asm.R8, pendingLen, asm.R1, asm.Word))
	readHeader(asm.R8, pendingBytes, "note_failed")
	b.Emit(insn.Ja("note_done"))
	b.Mark("note_failed")
	b.Emit(insn.StImm(asm.R8, pendingKind, 0, asm.Word))
	b.Mark("note_done")
	b.Emit(insn.Mov(asm.R0, 0), asm.Return())

	b.Function(fn(SymForget), "clear a note an identical earlier packet left")
	b.Emit(insn.Movr(asm.R6, asm.R1))
	lookup("forget_done")
	b.Emit(
		insn.Ld(asm.R1, asm.R8, pendingKind, asm.Word),
		asm.JEq.Imm(asm.R1, 0, "forget_done"),
	)
	b.Emit(kernel.NFSkb(asm.R1, asm.R6))
	b.Emit(
		kernel.Load(asm.R1, asm.R1, asm.Word, kernel.SkbLen),
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

// Answer is the socket filter of --reject-with with, for the
// kernel's rule that answers a chain's REJECT (-m bpf --object-pinned):
// it matches the packet its chain's program noted with that
// --reject-with. Its abi.RejectPendingMap is the chain's.
func Answer(fam rules.Family, with string) *ebpf.CollectionSpec {
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
		asm.JNE.Imm(asm.R1, Code(with), no),
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
		Maps: map[string]*ebpf.MapSpec{abi.RejectPendingMap: PendingMapSpec()},
	}
}
