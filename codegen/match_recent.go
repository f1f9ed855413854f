package codegen

import (
	"encoding/binary"
	"fmt"
	"net/netip"
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

// -m recent.
var recentCode = &kind[ir.Recent]{
	emit: func(c *compiler, _ *ir.Rule, m ir.Recent, next, _ string) bool {
		c.recent(m, next)
		return false
	},
	lookup:  refuse[ir.Recent]("recent match"),
	jiffies: true,
}

// recentNone is a slot number no slot has.
const recentNone = ir.RecentListTot

// recentTables returns the ring size of each recent table and the number
// of recent matches.
func (c *compiler) recentTables() (stamps []int, slots int) {
	for _, r := range c.p.Rules {
		for _, m := range r.Matches {
			if m, ok := m.(ir.Recent); ok {
				for len(stamps) <= m.Table {
					stamps = append(stamps, 0)
				}
				stamps[m.Table] = m.Stamps
				slots = max(slots, m.Slot+1)
			}
		}
	}
	return stamps, slots
}

// recentMaps are the abi.RecentMap specs.
func (c *compiler) recentMaps() []*ebpf.MapSpec {
	stamps, slots := c.recentTables()
	if slots == 0 {
		return nil
	}
	var out []*ebpf.MapSpec
	for i, n := range stamps {
		size := uint32(abi.RecentValueSize(n))
		out = append(out, &ebpf.MapSpec{
			Name:       abi.RecentMap(i),
			Type:       ebpf.Array,
			KeySize:    4,
			ValueSize:  size,
			MaxEntries: 1,
			Key:        btfU32,
			Value: &btf.Struct{
				Name: fmt.Sprintf("bpfwall_recent_table_%d", n),
				Size: size,
				Members: []btf.Member{
					{Name: "lock", Type: &btf.Struct{Name: "bpf_spin_lock", Size: 4, Members: []btf.Member{{Name: "val", Type: btfU32}}}, Offset: abi.RecentLock * 8},
					{Name: "rest", Type: &btf.Array{Index: btfInt, Type: &btf.Int{Name: "unsigned char", Size: 1}, Nelems: size - 8}, Offset: 8 * 8},
				},
			},
		})
	}
	return out
}

// Stack slots of a chain function a recent match uses, in the area a
// hashlimit match uses for its key: the masked address, the TTL, and a
// slot.
const (
	chainRecentKey = chainHashKey      // [4]u32
	chainRecentTTL = chainHashKey + 16 // u64
	// chainRecentMoved is where remove found the slot it moved.
	chainRecentMoved = chainHashKey + 24
)

// recent emits recent_mt (see ir.Recent). r7 is the clock, r8 the table,
// r9 the outcome (the kernel's ret); under the lock r5 is the entry and r4
// the start of the --seconds window.
func (c *compiler) recent(m ir.Recent, next string) {
	r := &recentEmitter{c: c, b: c.b, m: m, n: int32(ir.RecentListTot), slotSize: int32(abi.RecentSlotSize(m.Stamps)), words: 1}
	if c.p.Family == rules.IPv6 {
		r.words = 4
	}
	found, out, update := r.label("found"), r.label("out"), r.label("update")
	r.lock(next)
	r.lookup(found, out)
	r.b.Mark(found)
	r.slot(out)
	r.command(update, out)
	if m.Command == rules.RecentSet || m.Command == rules.RecentUpdate {
		r.b.Mark(update)
		r.update()
	}
	r.b.Mark(out)
	r.b.Emit(
		insn.Movr(asm.R1, asm.R8),
		asm.FnSpinUnlock.Call(),
		asm.JEq.Imm(asm.R9, 0, next),
	)
}

// recentEmitter emits one recent match: the table's slots, and the parts
// of recent_mt over them.
type recentEmitter struct {
	c        *compiler
	b        *insn.Builder
	m        ir.Recent
	n        int32 // slots
	slotSize int32
	words    int // of an address
}

func (r *recentEmitter) label(s string) string { return r.b.Fresh("recent_" + s) }

// lock writes the key, reads the packet's tick, takes the table's lock
// (or goes to next without a table) and sets the table's clock; r9 is
// the outcome before the command, 1 for --rcheck's inversion.
func (r *recentEmitter) lock(next string) {
	b, c := r.b, r.c
	name := abi.RecentMap(r.m.Table)
	field := pkt.Src
	if r.m.Dest {
		field = pkt.Dst
	}
	mask := r.m.Mask.AsSlice()
	b.Note("recent key: the %s address masked with %s, and the TTL", map[bool]string{false: "source", true: "destination"}[r.m.Dest], r.m.Mask)
	for w := range r.words {
		mw := binary.BigEndian.Uint32(mask[4*w:])
		b.Emit(insn.Ld(asm.R1, asm.R6, int16(field+4*w), asm.Word))
		if mw != 0xffffffff {
			b.Emit(asm.And.Imm32(asm.R1, insn.U32(mw)))
		}
		b.Emit(insn.St(asm.R10, chainRecentKey+int16(4*w), asm.R1, asm.Word))
	}
	// One tick per packet, read by its first recent match: the kernel
	// reads jiffies at each match, and a packet's matches seeing the same
	// tick is one of the orderings it allows.
	recorded, fresh := r.label("ticked"), r.label("fresh")
	b.Emit(
		insn.Ld(asm.R1, asm.R6, pkt.TTL, asm.Byte),
		insn.St(asm.R10, chainRecentTTL, asm.R1, asm.DWord),
		insn.Ld(asm.R7, asm.R6, c.pktRecentNow(), asm.DWord),
		asm.JNE.Imm(asm.R7, 0, recorded),
		asm.FnJiffies64.Call(),
		insn.Movr(asm.R7, asm.R0),
		insn.St(asm.R6, c.pktRecentNow(), asm.R7, asm.DWord),
	)
	b.Mark(recorded)
	b.Emit(
		insn.StImm(asm.R10, chainKey, 0, asm.Word),
		insn.Movr(asm.R2, asm.R10),
		asm.Add.Imm(asm.R2, chainKey),
		insn.MapRef(asm.R1, name),
		asm.FnMapLookupElem.Call(),
		asm.JEq.Imm(asm.R0, 0, next),
		insn.Movr(asm.R8, asm.R0),
		insn.Movr(asm.R1, asm.R8),
		asm.FnSpinLock.Call(),
	)
	// The kernel reads jiffies under recent_lock; the program reads them
	// before taking the lock, and another CPU may have taken it in
	// between with a later tick: the table's time does not go back, as if
	// this match had read the clock after that one.
	b.Note("the table's clock: the later of the tick read and the table's last")
	b.Emit(
		insn.Ld(asm.R1, asm.R8, abi.RecentTime, asm.DWord),
		asm.JGE.Reg(asm.R7, asm.R1, fresh),
		insn.Movr(asm.R7, asm.R1),
	)
	b.Mark(fresh)
	b.Emit(insn.St(asm.R8, abi.RecentTime, asm.R7, asm.DWord))
	inv := int32(0)
	if r.m.Invert {
		inv = 1
	}
	b.Emit(insn.Mov(asm.R9, inv))
}

// loop emits a loop over the slots in use, which are the first
// recentEntries: r1 the slot number, r2 the slot, r3 the number of
// slots in use; body jumps to cont for the next slot, and may use r0
// and r4. The loop's exits must leave r1, r2 and r3 dead, so that
// the verifier checks what follows once.
func (r *recentEmitter) loop(body func(cont string)) {
	b := r.b
	top, cont, done := r.label("loop"), r.label("next"), r.label("done")
	b.Emit(
		insn.Mov(asm.R1, 0),
		insn.Movr(asm.R2, asm.R8),
		asm.Add.Imm(asm.R2, abi.RecentSlotsOff),
		insn.Ld(asm.R3, asm.R8, abi.RecentEntries, asm.Word),
	)
	b.Mark(top)
	b.Emit(asm.JGE.Reg(asm.R1, asm.R3, done))
	body(cont)
	b.Mark(cont)
	b.Emit(
		asm.Add.Imm(asm.R1, 1),
		asm.Add.Imm(asm.R2, r.slotSize),
		asm.JLT.Imm(asm.R1, r.n, top),
	)
	b.Mark(done)
}

// slotInto points dst at slot r1 (below recentNone), or fails to
// none; r1 is lost.
func (r *recentEmitter) slotInto(dst asm.Register, none string) {
	b := r.b
	b.Emit(
		asm.JGE.Imm(asm.R1, r.n, none),
		asm.Mul.Imm(asm.R1, r.slotSize),
		insn.Movr(dst, asm.R8),
		asm.Add.Reg(dst, asm.R1),
		asm.Add.Imm(dst, abi.RecentSlotsOff),
	)
}

func (r *recentEmitter) slot(none string) { r.slotInto(asm.R5, none) }

// head finds the least recently updated slot (the head of lru_list)
// into abi.RecentMinSlot, recentNone for an empty table. It keeps r5.
func (r *recentEmitter) head() {
	b := r.b
	b.Emit(
		insn.StImm(asm.R8, abi.RecentMinSeq, -1, asm.DWord),
		insn.StImm(asm.R8, abi.RecentMinSlot, recentNone, asm.Word),
	)
	r.loop(func(cont string) {
		b.Emit(
			insn.Ld(asm.R4, asm.R2, abi.RecentSlotSeq, asm.DWord),
			insn.Ld(asm.R0, asm.R8, abi.RecentMinSeq, asm.DWord),
			asm.JGE.Reg(asm.R4, asm.R0, cont),
			insn.St(asm.R8, abi.RecentMinSeq, asm.R4, asm.DWord),
			insn.St(asm.R8, abi.RecentMinSlot, asm.R1, asm.Word),
		)
	})
}

// remove frees slot r5 (recent_entry_remove): the last slot in use
// moves into it, so that the slots in use stay the first ones; where
// it was is left in chainRecentMoved. Only the stamps in use move
// (the ring's first nstamps: no match reads the others). It keeps r4
// and r5.
func (r *recentEmitter) remove() {
	b := r.b
	cleared, gone, copyTop, copied := r.label("cleared"), r.label("gone"), r.label("copy"), r.label("copied")
	b.Emit(
		insn.St(asm.R10, chainRecentMoved, asm.R5, asm.DWord),
		insn.Ld(asm.R1, asm.R8, abi.RecentEntries, asm.Word),
		asm.Sub.Imm(asm.R1, 1),
		insn.St(asm.R8, abi.RecentEntries, asm.R1, asm.Word),
	)
	r.slotInto(asm.R2, gone)
	b.Emit(
		insn.St(asm.R10, chainRecentMoved, asm.R2, asm.DWord),
		asm.JEq.Reg(asm.R2, asm.R5, cleared),
	)
	for off := int16(0); off < abi.RecentSlotStamps; off += 8 {
		b.Emit(
			insn.Ld(asm.R0, asm.R2, off, asm.DWord),
			insn.St(asm.R5, off, asm.R0, asm.DWord),
		)
	}
	// The moved slot's nstamps, now r5's, bounds the copy.
	b.Emit(
		insn.Movr(asm.R1, asm.R5),
		asm.Add.Imm(asm.R1, abi.RecentSlotStamps),
		asm.Add.Imm(asm.R2, abi.RecentSlotStamps),
		insn.Mov(asm.R3, 0),
	)
	b.Mark(copyTop)
	b.Emit(
		insn.Ld(asm.R0, asm.R5, abi.RecentSlotNstamps, asm.Half),
		asm.JGE.Reg(asm.R3, asm.R0, copied),
		insn.Ld(asm.R0, asm.R2, 0, asm.DWord),
		insn.St(asm.R1, 0, asm.R0, asm.DWord),
		asm.Add.Imm(asm.R1, 8),
		asm.Add.Imm(asm.R2, 8),
		asm.Add.Imm(asm.R3, 1),
		asm.JLT.Imm(asm.R3, int32(r.m.Stamps), copyTop),
	)
	b.Mark(copied)
	b.Emit(insn.Ld(asm.R2, asm.R10, chainRecentMoved, asm.DWord))
	b.Mark(cleared)
	b.Emit(insn.StImm(asm.R2, abi.RecentSlotSeq, 0, asm.DWord))
	b.Mark(gone)
}

// lookup finds the packet's slot (recent_entry_lookup) into abi.RecentFound,
// and goes to found with it; without one, --set makes one
// (recent_entry_init) and the others go to out.
func (r *recentEmitter) lookup(found, out string) {
	b := r.b
	b.Note("recent_entry_lookup: the slot with the address%s", map[bool]string{false: "", true: " and a TTL that is the packet's, or either 0"}[r.m.TTL])
	b.Emit(insn.StImm(asm.R8, abi.RecentFound, recentNone, asm.Word))
	searched := r.label("searched")
	r.loop(func(cont string) {
		for w := range r.words {
			b.Emit(
				insn.Ld(asm.R0, asm.R2, abi.RecentSlotAddr+int16(4*w), asm.Word),
				insn.Ld(asm.R4, asm.R10, chainRecentKey+int16(4*w), asm.Word),
				asm.JNE.Reg(asm.R0, asm.R4, cont),
			)
		}
		if r.m.TTL {
			hit := r.label("ttl_ok")
			b.Emit(
				insn.Ld(asm.R0, asm.R10, chainRecentTTL, asm.DWord),
				asm.JEq.Imm(asm.R0, 0, hit),
				insn.Ld(asm.R4, asm.R2, abi.RecentSlotTTL, asm.Byte),
				asm.JEq.Imm(asm.R4, 0, hit),
				asm.JNE.Reg(asm.R0, asm.R4, cont),
			)
			b.Mark(hit)
		}
		b.Emit(
			insn.St(asm.R8, abi.RecentFound, asm.R1, asm.Word),
			insn.Ja(searched),
		)
	})
	b.Mark(searched)
	b.Emit(insn.Ld(asm.R1, asm.R8, abi.RecentFound, asm.Word))
	b.Emit(asm.JLT.Imm(asm.R1, r.n, found))
	if r.m.Command != rules.RecentSet {
		b.Emit(insn.Ja(out))
	} else {
		b.Note("recent_entry_init: a full table loses its least recently updated entry first")
		room := r.label("room")
		b.Emit(
			insn.Ld(asm.R1, asm.R8, abi.RecentEntries, asm.Word),
			asm.JLT.Imm(asm.R1, r.n, room),
		)
		r.head()
		b.Emit(insn.Ld(asm.R1, asm.R8, abi.RecentMinSlot, asm.Word))
		r.slot(room)
		r.remove()
		b.Mark(room)
		b.Emit(insn.Ld(asm.R1, asm.R8, abi.RecentEntries, asm.Word))
		r.slot(out) // a table with no free slot cannot happen
		for w := range r.words {
			b.Emit(
				insn.Ld(asm.R1, asm.R10, chainRecentKey+int16(4*w), asm.Word),
				insn.St(asm.R5, abi.RecentSlotAddr+int16(4*w), asm.R1, asm.Word),
			)
		}
		for w := r.words; w < 4; w++ {
			b.Emit(insn.StImm(asm.R5, abi.RecentSlotAddr+int16(4*w), 0, asm.Word))
		}
		b.Emit(
			insn.Ld(asm.R1, asm.R10, chainRecentTTL, asm.DWord),
			insn.St(asm.R5, abi.RecentSlotTTL, asm.R1, asm.Byte),
			insn.St(asm.R5, abi.RecentSlotStamps, asm.R7, asm.DWord),
			insn.StImm(asm.R5, abi.RecentSlotIndex, 1, asm.Half),
			insn.StImm(asm.R5, abi.RecentSlotNstamps, 1, asm.Half),
			insn.Ld(asm.R1, asm.R8, abi.RecentSeq, asm.DWord),
			asm.Add.Imm(asm.R1, 1),
			insn.St(asm.R8, abi.RecentSeq, asm.R1, asm.DWord),
			insn.St(asm.R5, abi.RecentSlotSeq, asm.R1, asm.DWord),
			insn.Ld(asm.R1, asm.R8, abi.RecentEntries, asm.Word),
			asm.Add.Imm(asm.R1, 1),
			insn.St(asm.R8, abi.RecentEntries, asm.R1, asm.Word),
			asm.Xor.Imm(asm.R9, 1),
			insn.Ja(out),
		)
	}
}

// command emits what the command does with the slot r5 found: --set and
// --update go to update, --remove frees it, --rcheck and --update count
// the stamps within the window.
func (r *recentEmitter) command(update, out string) {
	b := r.b
	switch r.m.Command {
	case rules.RecentSet:
		b.Emit(asm.Xor.Imm(asm.R9, 1), insn.Ja(update))
	case rules.RecentRemove:
		r.remove()
		b.Emit(asm.Xor.Imm(asm.R9, 1), insn.Ja(out))
	case rules.RecentCheck, rules.RecentUpdate:
		// The window starts at now - seconds*HZ, the product in u32.
		window := uint64(r.m.Seconds * uint32(ir.DefaultHZ))
		b.Note("count the stamps within %d s (%d jiffies): %d or more flip the outcome", r.m.Seconds, window, max(r.m.HitCount, 1))
		// The kernel stops counting at --hitcount (any stamp without
		// it); counting every stamp in the window and comparing the
		// count with max(hitcount, 1) flips the same outcomes. The count
		// and the flip are branch-free: the verifier walks the ring once,
		// and what follows once.
		counted := r.label("counted")
		b.Emit(
			insn.Movr(asm.R4, asm.R7),
			asm.LoadImm(asm.R3, int64(window), asm.DWord),
			asm.Sub.Reg(asm.R4, asm.R3),
		)
		if r.m.Seconds == 0 {
			b.Emit(insn.Ld(asm.R3, asm.R5, abi.RecentSlotNstamps, asm.Half))
		} else {
			top := r.label("stamp")
			b.Emit(
				insn.Mov(asm.R3, 0),
				insn.Mov(asm.R1, 0),
				insn.Movr(asm.R2, asm.R5),
			)
			b.Mark(top)
			b.Emit(
				insn.Ld(asm.R0, asm.R5, abi.RecentSlotNstamps, asm.Half),
				asm.JGE.Reg(asm.R1, asm.R0, counted),
				// time_after(time, stamp): (long)(stamp - time) < 0, the
				// sign bit; a stamp counts when it is clear.
				insn.Ld(asm.R0, asm.R2, abi.RecentSlotStamps, asm.DWord),
				asm.Sub.Reg(asm.R0, asm.R4),
				asm.RSh.Imm(asm.R0, 63),
				asm.Add.Imm(asm.R3, 1),
				asm.Sub.Reg(asm.R3, asm.R0),
				asm.Add.Imm(asm.R1, 1),
				asm.Add.Imm(asm.R2, 8),
				asm.JLT.Imm(asm.R1, int32(r.m.Stamps), top),
			)
		}
		b.Mark(counted)
		// r9 ^= (hits >= max(hitcount, 1)): the sign of hits - that,
		// both at most 65535.
		b.Emit(
			insn.Movr(asm.R0, asm.R3),
			asm.Sub.Imm(asm.R0, int32(max(r.m.HitCount, 1))),
			asm.RSh.Imm(asm.R0, 63),
			asm.Xor.Imm(asm.R0, 1),
			asm.Xor.Reg(asm.R9, asm.R0),
		)
		if r.m.Reap {
			b.Note("recent_entry_reap: the least recently updated entry goes when its last stamp is out of the window")
			reaped, reap := r.label("reaped"), r.label("reap")
			// r5 becomes the head; the entry waits on the stack (the
			// key's place: the key is no longer needed).
			b.Emit(insn.St(asm.R10, chainRecentKey, asm.R5, asm.DWord))
			r.head()
			b.Emit(
				insn.Movr(asm.R4, asm.R7), // the window's start again: head used r4
				asm.LoadImm(asm.R3, int64(window), asm.DWord),
				asm.Sub.Reg(asm.R4, asm.R3),
				insn.Ld(asm.R1, asm.R8, abi.RecentMinSlot, asm.Word),
			)
			r.slot(reaped)
			if r.m.Command == rules.RecentUpdate {
				b.Emit(
					insn.Ld(asm.R3, asm.R10, chainRecentKey, asm.DWord),
					asm.JNE.Reg(asm.R5, asm.R3, reap),
					asm.JNE.Imm(asm.R9, 0, reaped),
				)
			}
			b.Mark(reap)
			b.Emit(
				insn.Ld(asm.R0, asm.R5, abi.RecentSlotIndex, asm.Half),
				asm.Sub.Imm(asm.R0, 1),
				asm.And.Imm(asm.R0, int32(r.m.Stamps-1)),
				asm.LSh.Imm(asm.R0, 3),
				insn.Movr(asm.R3, asm.R5),
				asm.Add.Reg(asm.R3, asm.R0),
				insn.Ld(asm.R3, asm.R3, abi.RecentSlotStamps, asm.DWord),
				asm.Sub.Reg(asm.R3, asm.R4),
				asm.JSGE.Imm(asm.R3, 0, reaped),
			)
			r.remove()
			// The entry may have been the slot that moved into the
			// head's place.
			b.Emit(
				insn.Ld(asm.R3, asm.R10, chainRecentMoved, asm.DWord),
				insn.Ld(asm.R0, asm.R10, chainRecentKey, asm.DWord),
				asm.JNE.Reg(asm.R0, asm.R3, reaped),
				insn.St(asm.R10, chainRecentKey, asm.R5, asm.DWord),
			)
			b.Mark(reaped)
			b.Emit(insn.Ld(asm.R5, asm.R10, chainRecentKey, asm.DWord))
		}
		if r.m.Command == rules.RecentUpdate {
			b.Emit(asm.JNE.Imm(asm.R9, 0, update))
		}
		b.Emit(insn.Ja(out))
	}
}

// update stamps the slot r5 (recent_entry_update).
func (r *recentEmitter) update() {
	b := r.b
	b.Note("recent_entry_update: the next stamp of the ring, the end of the lru list, the TTL")
	grown := r.label("grown")
	b.Emit(
		insn.Ld(asm.R0, asm.R5, abi.RecentSlotIndex, asm.Half),
		asm.And.Imm(asm.R0, int32(r.m.Stamps-1)),
		insn.Movr(asm.R1, asm.R0),
		asm.LSh.Imm(asm.R1, 3),
		insn.Movr(asm.R2, asm.R5),
		asm.Add.Reg(asm.R2, asm.R1),
		insn.St(asm.R2, abi.RecentSlotStamps, asm.R7, asm.DWord),
		asm.Add.Imm(asm.R0, 1),
		insn.St(asm.R5, abi.RecentSlotIndex, asm.R0, asm.Half),
		insn.Ld(asm.R1, asm.R5, abi.RecentSlotNstamps, asm.Half),
		asm.JLE.Reg(asm.R0, asm.R1, grown),
		insn.St(asm.R5, abi.RecentSlotNstamps, asm.R0, asm.Half),
	)
	b.Mark(grown)
	b.Emit(
		insn.Ld(asm.R1, asm.R8, abi.RecentSeq, asm.DWord),
		asm.Add.Imm(asm.R1, 1),
		insn.St(asm.R8, abi.RecentSeq, asm.R1, asm.DWord),
		insn.St(asm.R5, abi.RecentSlotSeq, asm.R1, asm.DWord),
		insn.Ld(asm.R1, asm.R10, chainRecentTTL, asm.DWord),
		insn.St(asm.R5, abi.RecentSlotTTL, asm.R1, asm.Byte),
	)
}

// RecentVerifierSteps estimates how many instructions the verifier
// processes for recent match m: its loops are bounded, and the verifier
// walks every step of the ring's (counting the stamps in the window, and
// moving a slot's stamps on a removal) and of the slots' (the search, the
// lru head). The numbers are what the verifier reported on 6.18.
func RecentVerifierSteps(m ir.Recent) int {
	steps := 2000 + 10*ir.RecentListTot
	if (m.Command == rules.RecentCheck || m.Command == rules.RecentUpdate) && m.Seconds != 0 {
		steps += 11 * m.Stamps
	}
	switch {
	case m.Command == rules.RecentSet, m.Command == rules.RecentRemove:
		steps += 10 * m.Stamps
	case m.Reap && m.Command == rules.RecentUpdate:
		steps += 20 * m.Stamps
	case m.Reap:
		steps += 10 * m.Stamps
	}
	return steps
}

// HeaviestRecent returns the recent match of p whose code costs the
// verifier most, with RecentVerifierSteps, and the sum over all of p's
// recent matches; ok is false when p has none.
func HeaviestRecent(p *Program) (m ir.Recent, steps, total int, ok bool) {
	for _, r := range p.IR.Rules {
		for _, x := range r.Matches {
			if rm, is := x.(ir.Recent); is {
				s := RecentVerifierSteps(rm)
				total += s
				if !ok || s > steps {
					m, steps, ok = rm, s, true
				}
			}
		}
	}
	return m, steps, total, ok
}

// RecentTable describes a recent table of a program: its --name, the
// abi.RecentMap holding it, its ring size and mask.
type RecentTable struct {
	Name   string
	Map    string
	Stamps int
	Mask   netip.Addr
}

// RecentTables lists p's recent tables by index.
func RecentTables(p *Program) []RecentTable {
	return slices.Clone(p.uses.recent)
}

// UsesRecent reports whether p has recent tables, whose sizes are
// xt_recent's default module parameters: the loader checks the kernel's.
func UsesRecent(p *Program) bool {
	return len(p.uses.recent) > 0
}
