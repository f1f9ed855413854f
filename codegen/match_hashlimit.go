package codegen

import (
	"math/bits"
	"slices"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/btf"

	"bpfwall/codegen/abi"
	"bpfwall/codegen/insn"
	"bpfwall/codegen/pkt"
	"bpfwall/ir"
	"bpfwall/rules"
)

// -m hashlimit.
var hashLimitCode = &kind[ir.HashLimit]{
	emit: func(c *compiler, _ *ir.Rule, m ir.HashLimit, next, hotdrop string) bool {
		c.hashlimit(m, next, hotdrop)
		return true
	},
	lookup:  refuse[ir.HashLimit](rateLimitAtLookup),
	jiffies: true,
}

var btfHashEntry = &btf.Struct{
	Name: "bpfwall_hashlimit_entry",
	Size: abi.HashEntrySize,
	Members: []btf.Member{
		{Name: "lock", Type: &btf.Struct{Name: "bpf_spin_lock", Size: 4, Members: []btf.Member{{Name: "val", Type: btfU32}}}, Offset: abi.HashEntryLock * 8},
		{Name: "pad", Type: btfU32, Offset: 4 * 8},
		{Name: "expires", Type: btfU64, Offset: abi.HashEntryExpires * 8},
		{Name: "prev", Type: btfU64, Offset: abi.HashEntryPrev * 8},
		{Name: "credit", Type: btfU64, Offset: abi.HashEntryCredit * 8},
		{Name: "cap_left", Type: btfU64, Offset: abi.HashEntryCapLeft * 8},
	},
}

var btfHashKey = &btf.Struct{
	Name: "bpfwall_hashlimit_key",
	Size: abi.HashKeySize,
	Members: []btf.Member{{
		Name: "bytes",
		Type: &btf.Array{Index: btfInt, Type: &btf.Int{Name: "unsigned char", Size: 1}, Nelems: abi.HashKeySize},
	}},
}

// A chain function's stack below chainCtx: a hashlimit match's key, the
// value it inserts, and the clock for the sweep.
const (
	chainHashKey   = -80
	chainHashEntry = -120
	chainHashNow   = -128
)

// symHashSweep is the bpf_for_each_map_elem callback that deletes expired
// entries.
const symHashSweep = "hashlimit_sweep"

// Error codes of bpf_map_update_elem.
const (
	errEEXIST = -17
)

// hashTables returns the max entries of each hashlimit table.
func (c *compiler) hashTables() []uint32 {
	var max []uint32
	for _, r := range c.p.Rules {
		for _, m := range r.Matches {
			if m, ok := m.(ir.HashLimit); ok {
				for len(max) <= m.Table {
					max = append(max, 0)
				}
				max[m.Table] = m.Max
			}
		}
	}
	return max
}

// hashLimitMaps are the abi.HashLimitMap specs.
func (c *compiler) hashLimitMaps() []*ebpf.MapSpec {
	var out []*ebpf.MapSpec
	for i, max := range c.hashTables() {
		out = append(out, &ebpf.MapSpec{
			Name:       abi.HashLimitMap(i),
			Type:       ebpf.Hash,
			KeySize:    abi.HashKeySize,
			ValueSize:  abi.HashEntrySize,
			MaxEntries: max,
			Key:        btfHashKey,
			Value:      btfHashEntry,
		})
	}
	if len(out) > 0 {
		out = append(out, &ebpf.MapSpec{
			Name:       abi.HashGCMap,
			Type:       ebpf.Array,
			KeySize:    4,
			ValueSize:  8,
			MaxEntries: uint32(len(out)),
		})
	}
	return out
}

// maskWords returns the masks of the address words of a prefix length.
func maskWords(bits uint8, words int) []uint32 {
	out := make([]uint32, words)
	for i := range out {
		n := int(bits) - 32*i
		switch {
		case n >= 32:
			out[i] = 0xffffffff
		case n > 0:
			out[i] = ^uint32(0) << (32 - n)
		}
	}
	return out
}

// hashlimit emits hashlimit_mt_common (see ir.HashLimit). r7 is the clock,
// r8 the entry, r9 the outcome. It uses hotdrop.
func (c *compiler) hashlimit(m ir.HashLimit, next, hotdrop string) {
	b := c.b
	l := hashlimitLabels{found: b.Fresh("hl_found"), relookup: b.Fresh("hl_relookup"), live: b.Fresh("hl_live"),
		recalced: b.Fresh("hl_recalced"), capped: b.Fresh("hl_capped"), short: b.Fresh("hl_short")}
	c.hashlimitKey(m)
	b.Emit(
		asm.FnJiffies64.Call(),
		insn.Movr(asm.R7, asm.R0),
	)
	c.hashlimitEntry(m, l, hotdrop)
	b.Mark(l.found)
	b.Emit(
		insn.Movr(asm.R8, asm.R0),
		insn.Movr(asm.R1, asm.R8),
		asm.FnSpinLock.Call(),
	)
	c.hashlimitRecalc(m, l)
	c.hashlimitPay(m, l)
	b.Mark(l.short)
	b.Emit(
		insn.Movr(asm.R1, asm.R8),
		asm.FnSpinUnlock.Call(),
	)
	if m.Above {
		b.Emit(asm.Xor.Imm(asm.R9, 1))
	}
	b.Emit(asm.JEq.Imm(asm.R9, 0, next))
}

// hashlimitLabels are the labels of one hashlimit match.
type hashlimitLabels struct{ found, relookup, live, recalced, capped, short string }

// hashlimitKey writes the packet's key of m's table at chainHashKey.
func (c *compiler) hashlimitKey(m ir.HashLimit) {
	b := c.b
	b.Note("hashlimit key: the masked addresses and ports of mode %#x", m.Mode)
	for off := int16(0); off < abi.HashKeySize; off += 4 {
		b.Emit(insn.StImm(asm.R10, chainHashKey+off, 0, asm.Word))
	}
	words := 1
	if c.p.Family == rules.IPv6 {
		words = 4
	}
	addr := func(field, keyOff int16, prefix uint8) {
		for i, mask := range maskWords(prefix, words) {
			if mask == 0 {
				continue
			}
			b.Emit(insn.Ld(asm.R1, asm.R6, field+int16(4*i), asm.Word))
			if mask != 0xffffffff {
				b.Emit(asm.And.Imm32(asm.R1, insn.U32(mask)))
			}
			b.Emit(insn.St(asm.R10, chainHashKey+keyOff+int16(4*i), asm.R1, asm.Word))
		}
	}
	if m.Mode&rules.HashSrcIP != 0 {
		addr(pkt.Src, abi.HashKeySrc, m.SrcMask)
	}
	if m.Mode&rules.HashDstIP != 0 {
		addr(pkt.Dst, abi.HashKeyDst, m.DstMask)
	}
	if m.Mode&rules.HashSrcPort != 0 {
		b.Emit(insn.Ld(asm.R1, asm.R6, pkt.Sport, asm.Word), insn.St(asm.R10, chainHashKey+abi.HashKeySport, asm.R1, asm.Half))
	}
	if m.Mode&rules.HashDstPort != 0 {
		b.Emit(insn.Ld(asm.R1, asm.R6, pkt.Dport, asm.Word), insn.St(asm.R10, chainHashKey+abi.HashKeyDport, asm.R1, asm.Half))
	}
}

// hashlimitEntry finds the key's entry into r0 and goes to l.found: an
// existing one, or a new one with a full bucket (rateinfo_init), after
// the collector's sweep of a full table; a table that stays full drops
// the packet, as dsthash_alloc_init's failure does.
func (c *compiler) hashlimitEntry(m ir.HashLimit, l hashlimitLabels, hotdrop string) {
	b := c.b
	capacity, _ := m.Credits(ir.DefaultHZ)
	name := abi.HashLimitMap(m.Table)
	lookup := func() {
		b.Emit(
			insn.MapRef(asm.R1, name),
			insn.Movr(asm.R2, asm.R10),
			asm.Add.Imm(asm.R2, chainHashKey),
			asm.FnMapLookupElem.Call(),
		)
	}
	update := func() {
		b.Emit(
			insn.MapRef(asm.R1, name),
			insn.Movr(asm.R2, asm.R10),
			asm.Add.Imm(asm.R2, chainHashKey),
			insn.Movr(asm.R3, asm.R10),
			asm.Add.Imm(asm.R3, chainHashEntry),
			insn.Mov(asm.R4, 1), // BPF_NOEXIST
			asm.FnMapUpdateElem.Call(),
			asm.JEq.Imm(asm.R0, 0, l.relookup),
			asm.JEq.Imm(asm.R0, errEEXIST, l.relookup), // another CPU added it: dsthash_alloc_init's race
		)
	}
	lookup()
	b.Emit(asm.JNE.Imm(asm.R0, 0, l.found))
	b.Note("a new key: a full bucket (rateinfo_init)")
	b.Emit(
		insn.StImm(asm.R10, chainHashEntry+abi.HashEntryLock, 0, asm.DWord),
		insn.Movr(asm.R1, asm.R7),
		asm.Add.Imm(asm.R1, int32(m.Expire)),
		insn.St(asm.R10, chainHashEntry+abi.HashEntryExpires, asm.R1, asm.DWord),
		insn.St(asm.R10, chainHashEntry+abi.HashEntryPrev, asm.R7, asm.DWord),
		asm.LoadImm(asm.R1, int64(capacity), asm.DWord),
		insn.St(asm.R10, chainHashEntry+abi.HashEntryCredit, asm.R1, asm.DWord),
		asm.LoadImm(asm.R1, int64(m.Burst), asm.DWord),
		insn.St(asm.R10, chainHashEntry+abi.HashEntryCapLeft, asm.R1, asm.DWord),
	)
	update()
	b.Note("the table is full: the collector's sweep of the expired entries, at most once per gcinterval")
	b.Emit(
		insn.StImm(asm.R10, chainHashNow, int32(m.Table), asm.DWord),
		insn.MapRef(asm.R1, abi.HashGCMap),
		insn.Movr(asm.R2, asm.R10),
		asm.Add.Imm(asm.R2, chainHashNow),
		asm.FnMapLookupElem.Call(),
		asm.JEq.Imm(asm.R0, 0, hotdrop),
		insn.Ld(asm.R1, asm.R0, 0, asm.DWord),
		insn.Movr(asm.R2, asm.R7),
		asm.Sub.Reg(asm.R2, asm.R1),
		asm.JSLT.Imm(asm.R2, 0, hotdrop),
		insn.Movr(asm.R1, asm.R7),
		asm.Add.Imm(asm.R1, int32(m.GCInterval)),
		// Two CPUs may both sweep: the second finds nothing more to do.
		insn.St(asm.R0, 0, asm.R1, asm.DWord),
		insn.St(asm.R10, chainHashNow, asm.R7, asm.DWord),
		insn.MapRef(asm.R1, name),
		insn.FuncRef(asm.R2, symHashSweep),
		insn.Movr(asm.R3, asm.R10),
		asm.Add.Imm(asm.R3, chainHashNow),
		insn.Mov(asm.R4, 0),
		asm.FnForEachMapElem.Call(),
	)
	update()
	b.Emit(insn.Ja(hotdrop))
	b.Mark(l.relookup)
	lookup()
	b.Emit(asm.JEq.Imm(asm.R0, 0, hotdrop))
}

// hashlimitRecalc refills the bucket of the entry at r8 for the time
// since its last packet (rateinfo_recalc); an expired entry starts full.
func (c *compiler) hashlimitRecalc(m ir.HashLimit, l hashlimitLabels) {
	b := c.b
	capacity, _ := m.Credits(ir.DefaultHZ)
	cpj := ir.CreditsPerJiffy64(ir.DefaultHZ)
	if m.Bytes {
		cpj = ir.CreditsPerJiffyBytes(ir.DefaultHZ)
	}
	b.Note("an expired entry is a new one (the collector's work)")
	b.Emit(
		insn.Movr(asm.R1, asm.R7),
		insn.Ld(asm.R2, asm.R8, abi.HashEntryExpires, asm.DWord),
		asm.Sub.Reg(asm.R1, asm.R2),
		asm.JSLT.Imm(asm.R1, 0, l.live),
		insn.St(asm.R8, abi.HashEntryPrev, asm.R7, asm.DWord),
		asm.LoadImm(asm.R1, int64(capacity), asm.DWord),
		insn.St(asm.R8, abi.HashEntryCredit, asm.R1, asm.DWord),
		asm.LoadImm(asm.R1, int64(m.Burst), asm.DWord),
		insn.St(asm.R8, abi.HashEntryCapLeft, asm.R1, asm.DWord),
	)
	b.Mark(l.live)
	b.Note("rateinfo_recalc: credit += (now - prev) * CREDITS_PER_JIFFY, at most the cap")
	b.Emit(
		insn.Movr(asm.R1, asm.R7),
		asm.Add.Imm(asm.R1, int32(m.Expire)),
		insn.St(asm.R8, abi.HashEntryExpires, asm.R1, asm.DWord),
		insn.Movr(asm.R1, asm.R7),
		insn.Ld(asm.R2, asm.R8, abi.HashEntryPrev, asm.DWord),
		asm.Sub.Reg(asm.R1, asm.R2),
		asm.JEq.Imm(asm.R1, 0, l.recalced),
		insn.St(asm.R8, abi.HashEntryPrev, asm.R7, asm.DWord),
		asm.LSh.Imm(asm.R1, int32(bits.TrailingZeros64(cpj))),
		insn.Ld(asm.R2, asm.R8, abi.HashEntryCredit, asm.DWord),
	)
	if m.Bytes {
		// An overflow fills the bucket.
		full := b.Fresh("hl_full")
		b.Emit(
			insn.Movr(asm.R4, asm.R2),
			asm.Add.Reg(asm.R2, asm.R1),
			asm.LoadImm(asm.R3, int64(capacity), asm.DWord),
			asm.JGE.Reg(asm.R4, asm.R2, full),
			asm.JLE.Reg(asm.R2, asm.R3, l.capped),
		)
		b.Mark(full)
		b.Emit(insn.Movr(asm.R2, asm.R3))
	} else {
		b.Emit(
			asm.Add.Reg(asm.R2, asm.R1),
			asm.LoadImm(asm.R3, int64(capacity), asm.DWord),
			asm.JLE.Reg(asm.R2, asm.R3, l.capped),
			insn.Movr(asm.R2, asm.R3),
		)
	}
	b.Mark(l.capped)
	b.Emit(insn.St(asm.R8, abi.HashEntryCredit, asm.R2, asm.DWord))
}

// hashlimitPay takes the packet's cost from the bucket: r9 is 1 when it
// could, 0 (going to l.short) when not.
func (c *compiler) hashlimitPay(m ir.HashLimit, l hashlimitLabels) {
	b := c.b
	capacity, cost := m.Credits(ir.DefaultHZ)
	b.Mark(l.recalced)
	if m.Bytes {
		// hashlimit_byte_cost: (len / 16 + 1) chunks, at most a full
		// bucket; an empty bucket takes one of the burst's refills.
		priced, paid := b.Fresh("hl_priced"), b.Fresh("hl_refilled")
		b.Emit(
			insn.Ld(asm.R2, asm.R6, pkt.Length, asm.Word),
			asm.RSh.Imm(asm.R2, 4),
			asm.Add.Imm(asm.R2, 1),
			asm.LoadImm(asm.R1, int64(cost), asm.DWord),
			asm.Mul.Reg(asm.R2, asm.R1),
			asm.LoadImm(asm.R3, int64(capacity), asm.DWord),
			asm.JLE.Reg(asm.R2, asm.R3, priced),
			insn.Movr(asm.R2, asm.R3),
		)
		b.Mark(priced)
		b.Emit(
			insn.Ld(asm.R1, asm.R8, abi.HashEntryCredit, asm.DWord),
			asm.JGE.Reg(asm.R1, asm.R2, paid),
			insn.Ld(asm.R4, asm.R8, abi.HashEntryCapLeft, asm.DWord),
			asm.JEq.Imm(asm.R4, 0, paid),
			asm.Sub.Imm(asm.R4, 1),
			insn.St(asm.R8, abi.HashEntryCapLeft, asm.R4, asm.DWord),
			insn.St(asm.R8, abi.HashEntryCredit, asm.R3, asm.DWord),
		)
		b.Mark(paid)
		b.Emit(
			insn.Ld(asm.R1, asm.R8, abi.HashEntryCredit, asm.DWord),
			insn.Mov(asm.R9, 0),
			asm.JLT.Reg(asm.R1, asm.R2, l.short),
		)
	} else {
		b.Emit(
			insn.Ld(asm.R1, asm.R8, abi.HashEntryCredit, asm.DWord),
			insn.Mov(asm.R9, 0),
			asm.LoadImm(asm.R2, int64(cost), asm.DWord),
			asm.JLT.Reg(asm.R1, asm.R2, l.short),
		)
	}
	b.Emit(
		asm.Sub.Reg(asm.R1, asm.R2),
		insn.St(asm.R8, abi.HashEntryCredit, asm.R1, asm.DWord),
		insn.Mov(asm.R9, 1),
	)
}

// hashSweep emits the sweep callback:
//
//	long hashlimit_sweep(struct bpf_map *map, void *key, struct entry *value, __u64 *now)
//
// deleting the entry when now has reached its expiry (select_gc).
func (c *compiler) hashSweep() {
	b := c.b
	b.Function(funcSweep(), "delete an expired hashlimit entry")
	keep := "hashlimit_sweep_keep"
	b.Emit(
		insn.Movr(asm.R6, asm.R1),
		insn.Movr(asm.R7, asm.R2),
		insn.Ld(asm.R1, asm.R4, 0, asm.DWord),
		insn.Ld(asm.R2, asm.R3, abi.HashEntryExpires, asm.DWord),
		asm.Sub.Reg(asm.R1, asm.R2),
		asm.JSLT.Imm(asm.R1, 0, keep),
		insn.Movr(asm.R1, asm.R6),
		insn.Movr(asm.R2, asm.R7),
		asm.FnMapDeleteElem.Call(),
	)
	b.Mark(keep)
	b.Emit(insn.Mov(asm.R0, 0), asm.Return())
}

// funcSweep describes the sweep callback, static as
// bpf_for_each_map_elem requires.
func funcSweep() *btf.Func {
	ptr := &btf.Pointer{Target: &btf.Void{}}
	return &btf.Func{
		Name:    symHashSweep,
		Linkage: btf.StaticFunc,
		Type: &btf.FuncProto{
			Return: btfLong,
			Params: []btf.FuncParam{{Name: "map", Type: ptr}, {Name: "key", Type: ptr}, {Name: "value", Type: ptr}, {Name: "ctx", Type: ptr}},
		},
	}
}

// SizedByMemory reports whether a hashlimit table of p takes its size
// from the kernel's default, which assumes more than 1 GiB of memory
// (ir.HashLimit.MemorySized): the loader checks the machine's.
func SizedByMemory(p *Program) bool {
	for _, r := range p.IR.Rules {
		for _, m := range r.Matches {
			if m, ok := m.(ir.HashLimit); ok && m.MemorySized {
				return true
			}
		}
	}
	return false
}

// HashLimitTable describes a hashlimit table of a program: its
// --hashlimit-name, the abi.HashLimitMap holding it, and the configuration
// the kernel keeps with a table (hinfo->cfg: everything of the match but
// the program's index, name, position and the per-rule upto/above).
type HashLimitTable struct {
	Name   string
	Map    string
	Config ir.HashLimit
	// Pos is where the first match naming the table is written.
	Pos rules.Pos
}

// HashLimitTables lists p's hashlimit tables by index.
func HashLimitTables(p *Program) []HashLimitTable {
	return slices.Clone(p.uses.hashLimit)
}
