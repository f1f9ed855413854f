package codegen

import (
	"encoding/binary"
	"fmt"
	"strings"

	"github.com/cilium/ebpf/asm"

	"bpfwall/codegen/abi"
	"bpfwall/codegen/classify"
	"bpfwall/codegen/insn"
	"bpfwall/codegen/pkt"
	"bpfwall/ir"
	"bpfwall/rules"
)

// classified emits a classified segment: its tables in order, then the
// decision of the earliest rule found, or a jump to next when none.
//
//	r6 pkt, r7 earliest rule found (all ones: none), r8 its kind
func (c *compiler) classified(s *classify.Segment, next string) {
	b := c.b
	first, last := s.Rules[0], s.Rules[len(s.Rules)-1]
	b.Note("%s-%d -A %s: rules r%d-r%d (%d) classified by %d tables", linePos(first.Pos), last.Pos.Line,
		c.p.Chains[first.Chain].Name, first.ID, last.ID, len(s.Rules), len(s.Tables))
	for _, t := range s.Tables {
		b.Note("  %s", c.describeTable(t))
	}
	done := b.Fresh("classified")
	b.Emit(insn.Mov(asm.R7, -1), insn.Mov(asm.R8, 0))
	for k, t := range s.Tables {
		skip := b.Fresh("table_end")
		if k > 0 {
			// No later table holds an earlier rule than the one found.
			b.Emit(asm.JLT.Imm(asm.R7, int32(t.First), done))
		}
		c.tableGuard(t.Guard, skip)
		if proto, ok := t.Proto(); ok && (!t.Inline || t.Guard.Residual != "") {
			// Cheaper than a lookup, or a residual, that cannot hit.
			b.Emit(
				insn.Ld(asm.R1, asm.R6, pkt.Proto, asm.Byte),
				asm.JNE.Imm(asm.R1, int32(proto), skip),
			)
		}
		for _, m := range c.cls.Residual(t.Guard.Residual) {
			if c.match(nil, m, skip, "") {
				panic(fmt.Sprintf("codegen: residual match %T drops packets", m))
			}
		}
		if t.Residuals != nil {
			c.residualBits(t)
		}
		if t.Inline {
			c.inlineTable(t, skip)
		} else {
			c.lookupTable(t, skip)
		}
		t.Release()
		b.Mark(skip)
	}
	b.Mark(done)
	hot, ret := b.Fresh("classified_hotdrop"), b.Fresh("classified_return")
	b.Emit(
		asm.JEq.Imm(asm.R7, -1, next),
		asm.JEq.Imm(asm.R8, classify.KindHotdrop, hot),
	)
	if c.accel {
		// It counts the rules of a packet it drops when it drops it
		// (accelDrop).
		pushed := b.Fresh("path_noted")
		b.Emit(asm.JNE.Imm(asm.R8, classify.KindReturn, pushed))
		c.accelPushReg(asm.R7)
		b.Mark(pushed)
	} else {
		c.countReg(asm.R7)
	}
	if jumps := segmentJumps(s); len(jumps) > 0 {
		verdict := b.Fresh("classified_verdict")
		b.Emit(asm.JNE.Imm(asm.R8, classify.KindJump, verdict))
		c.dispatchJumps(jumps, next)
		b.Mark(verdict)
	}
	if c.hook == HookStage {
		// The stage cannot send a REJECT's reply: it drops and counts.
		counted := b.Fresh("reject_counted")
		b.Emit(asm.JNE.Imm(asm.R8, classify.KindReject, counted))
		c.stageCount(abi.StageRejectDropped, chainKey)
		b.Emit(insn.Mov(asm.R8, classify.KindDrop))
		b.Mark(counted)
	}
	b.Emit(
		asm.JEq.Imm(asm.R8, classify.KindReturn, ret),
		insn.Movr(asm.R0, asm.R7),
		asm.LSh.Imm(asm.R0, codeShift),
		asm.Or.Reg(asm.R0, asm.R8),
		asm.Return(),
	)
	b.Mark(ret)
	c.chainReturn()
	b.Mark(hot)
	b.Emit(
		insn.Movr(asm.R0, asm.R7),
		asm.LSh.Imm(asm.R0, codeShift),
		asm.Or.Imm(asm.R0, codeHotdrop),
		asm.Return(),
	)
}

// segmentJumps are the rules of a segment that jump or go to a chain
// (classify.KindJump), in ID order.
func segmentJumps(s *classify.Segment) []*ir.Rule {
	var out []*ir.Rule
	for _, r := range s.Rules {
		if _, ok := ir.JumpTarget(r.Action); ok {
			out = append(out, r)
		}
	}
	return out
}

// dispatchJumps emits the jump of the rule in r7, one of rs (in ID
// order), found by a segment's lookups: a binary search over the IDs, so
// that a segment of many jumps costs a few compares. The called chains
// never return (classify.KindJump); a continue would go on at next.
func (c *compiler) dispatchJumps(rs []*ir.Rule, next string) {
	if len(rs) == 1 {
		c.b.Note("r%d: %s", rs[0].ID, c.p.TextOf(rs[0]))
		c.jump(rs[0], next)
		return
	}
	mid := len(rs) / 2
	upper := c.b.Fresh("jumps_from")
	c.b.Emit(asm.JGE.Imm(asm.R7, int32(rs[mid].ID), upper))
	c.dispatchJumps(rs[:mid], next)
	c.b.Mark(upper)
	c.dispatchJumps(rs[mid:], next)
}

// describeTable is a table's line in a dump.
func (c *compiler) describeTable(t *classify.Table) string {
	var fields []string
	for f := range ir.NumFields {
		switch {
		case int(f) == t.LPM && t.Varies():
			fields = append(fields, f.String()+"/*")
		case t.Lens[f] == 0:
		case int(t.Lens[f]) == 8*f.Width(c.p.Family):
			fields = append(fields, f.String())
		default:
			fields = append(fields, fmt.Sprintf("%s/%d", f, t.Lens[f]))
		}
	}
	if len(fields) == 0 {
		fields = append(fields, "any")
	}
	var when []string
	switch t.Guard.Mode {
	case classify.ModePreL4:
		when = append(when, fmt.Sprintf("drops: transport header under %d bytes", t.Guard.L4Len))
		if t.Guard.Tiny && c.p.Family == rules.IPv4 {
			when = append(when, "or fragment at offset 8")
		}
	case classify.ModePreProto:
		when = append(when, "drops: extension headers cannot be walked")
	default:
		if t.Guard.L4Len > 0 {
			when = append(when, fmt.Sprintf("transport header of %d bytes", t.Guard.L4Len))
		}
	}
	if ms := c.cls.Residual(t.Guard.Residual); len(ms) > 0 {
		when = append(when, "if "+c.residualText(ms))
	}
	if len(t.Residuals) > 0 {
		var each []string
		for _, k := range t.Residuals {
			each = append(each, c.residualText(c.cls.Residual(k)))
		}
		if len(when) > 0 {
			when[len(when)-1] += ";"
		}
		when = append(when, "candidates if "+strings.Join(each, " | "))
	}
	how := "inline"
	switch {
	case t.Inline:
	case t.Residuals != nil:
		how = "candidates " + t.Name
		if t.Buckets != nil {
			how += " in buckets"
		}
	case t.Array:
		how = "array " + t.Name
	case t.Ranges != nil:
		how = fmt.Sprintf("ranges %s", t.Name)
		if t.Ranges.KeyBits > 0 {
			how += fmt.Sprintf(" by %s/%d", ir.Field(t.LPM), t.Ranges.KeyBits)
		}
		if t.Ranges.Indexed {
			how += " in " + t.IndexName()
		}
		if t.Buckets != nil {
			how += " in buckets"
		}
	case t.LPM >= 0:
		how = "lpm " + t.Name
	case t.Buckets != nil:
		how = "buckets " + t.Name
	default:
		how = "hash " + t.Name
	}
	s := fmt.Sprintf("from r%d: %s, %d tuples, %s", t.First, strings.Join(fields, " "), len(t.Entries), how)
	if len(when) > 0 {
		s += " (" + strings.Join(when, " ") + ")"
	}
	return s
}

// residualText is a residual's matches as iptables writes them.
func (c *compiler) residualText(ms []ir.Match) string {
	texts := make([]string, len(ms))
	for i, m := range ms {
		texts[i] = ir.MatchString(c.p.Family, m)
	}
	return strings.Join(texts, ", ")
}

// tableGuard jumps to skip unless the table applies to the packet.
func (c *compiler) tableGuard(g classify.Guard, skip string) {
	b := c.b
	if g.V6Proto {
		b.Emit(
			insn.Ld(asm.R1, asm.R6, pkt.Flags, asm.Byte),
			asm.And.Imm(asm.R1, pkt.FlagBadExtHeaders),
		)
		if g.Mode == classify.ModePreProto {
			b.Emit(asm.JEq.Imm(asm.R1, 0, skip))
			return
		}
		b.Emit(asm.JNE.Imm(asm.R1, 0, skip))
	}
	if g.L4Len == 0 {
		return
	}
	b.Emit(insn.Ld(asm.R1, asm.R6, pkt.FragOff, asm.Word))
	switch g.Mode {
	case classify.ModeFull:
		b.Emit(
			asm.JNE.Imm(asm.R1, 0, skip),
			insn.Ld(asm.R1, asm.R6, pkt.L4Len, asm.Word),
			asm.JLT.Imm(asm.R1, int32(g.L4Len), skip),
		)
	case classify.ModePreL4:
		short := b.Fresh("short")
		if g.Tiny && c.p.Family == rules.IPv4 {
			b.Emit(asm.JEq.Imm(asm.R1, 8, short))
		}
		b.Emit(
			asm.JNE.Imm(asm.R1, 0, skip),
			insn.Ld(asm.R1, asm.R6, pkt.L4Len, asm.Word),
			asm.JGE.Imm(asm.R1, int32(g.L4Len), skip),
		)
		b.Mark(short)
	}
}

// found records rule id of kind as the earliest found unless an earlier
// one was, then goes to skip.
func (c *compiler) found(id, kind uint32, skip string) {
	c.b.Emit(
		asm.JLE.Imm(asm.R7, int32(id), skip),
		insn.Mov(asm.R7, int32(id)),
		insn.Mov(asm.R8, int32(kind)),
		insn.Ja(skip),
	)
}

// inlineTable tests a few tuples in code, earliest rule first.
func (c *compiler) inlineTable(t *classify.Table, skip string) {
	b := c.b
	for _, e := range t.Entries {
		miss := b.Fresh("miss")
		for f := range ir.NumFields {
			if e.T.Len[f] > 0 {
				c.compareField(f, e.T.Field(f)[:f.Width(c.p.Family)], int(e.T.Len[f]), miss)
			}
		}
		c.found(e.ID, e.Kind, skip)
		b.Mark(miss)
	}
}

// fieldOff is where parse stores a field in the packet.
func fieldOff(f ir.Field) int16 {
	switch f {
	case ir.FieldSrc:
		return pkt.Src
	case ir.FieldDst:
		return pkt.Dst
	case ir.FieldSport:
		return pkt.Sport
	case ir.FieldDport:
		return pkt.Dport
	}
	return pkt.Proto
}

// wordMask is the host-order mask of the first bits of a 32-bit word.
func wordMask(bits int) uint32 {
	if bits >= 32 {
		return 0xffffffff
	}
	return ^uint32(0) << (32 - bits)
}

// compareField jumps to miss unless the first bits of field f equal
// those of the big-endian value.
func (c *compiler) compareField(f ir.Field, value []byte, bits int, miss string) {
	b := c.b
	switch f {
	case ir.FieldSrc, ir.FieldDst:
		for i := 0; i < len(value)/4 && bits > 32*i; i++ {
			wb := bits - 32*i
			b.Emit(insn.Ld(asm.R1, asm.R6, fieldOff(f)+int16(4*i), asm.Word))
			if wb < 32 {
				b.Emit(asm.And.Imm32(asm.R1, insn.U32(wordMask(wb))))
			}
			b.Emit(asm.JNE.Imm32(asm.R1, insn.U32(binary.BigEndian.Uint32(value[4*i:])&wordMask(wb)), miss))
		}
	case ir.FieldSport, ir.FieldDport:
		b.Emit(insn.Ld(asm.R1, asm.R6, fieldOff(f), asm.Word))
		mask := wordMask(16+bits) & 0xffff
		if bits < 16 {
			b.Emit(asm.And.Imm(asm.R1, int32(mask)))
		}
		b.Emit(asm.JNE.Imm(asm.R1, int32(uint32(binary.BigEndian.Uint16(value))&mask), miss))
	case ir.FieldProto:
		b.Emit(
			insn.Ld(asm.R1, asm.R6, pkt.Proto, asm.Byte),
			asm.JNE.Imm(asm.R1, int32(value[0]), miss),
		)
	case ir.FieldIn, ir.FieldOut:
		// The bit of the name numbered value[0].
		nums := c.ifaceNumbersOf(f)
		if !nums.known || int(value[0]) > nums.n {
			b.Emit(insn.Ja(miss))
			return
		}
		c.bit(pkt.Ifaces, nums.base+int(value[0])-1, false, miss)
	}
}

// lookupTable builds the table's key from the packet in the key area and
// looks it up.
func (c *compiler) lookupTable(t *classify.Table, skip string) {
	b := c.b
	switch {
	case t.Array:
		c.arrayLookup(t, skip)
		return
	case t.Ranges != nil:
		c.rangesLookup(t, skip)
		return
	case t.Residuals != nil:
		c.candidatesLookup(t, skip)
		return
	}
	c.find(t, skip)
	b.Emit(
		insn.Ld(asm.R1, asm.R0, 0, asm.Word),
		asm.JGE.Reg(asm.R1, asm.R7, skip),
		insn.Movr(asm.R7, asm.R1),
		insn.Ld(asm.R8, asm.R0, 4, asm.Word),
	)
	c.maps = append(c.maps, c.cls.MapSpec(t))
}

// find finds the packet's key in a table with exact keys, a hash or a
// bucket table: r0 is its value, or find goes to skip.
func (c *compiler) find(t *classify.Table, skip string) {
	if t.Buckets != nil {
		c.bucketFind(t, skip)
		return
	}
	c.lookupKey(classify.KeyTable(t), skip)
}

// lookupKey builds the key of table k from the packet in the key area and
// looks it up in the map k.name: r0 is the value, or the lookup goes to
// skip.
func (c *compiler) lookupKey(k *classify.Table, skip string) {
	c.storeKey(k)
	c.b.Emit(insn.Lookup(k.Name, asm.R6, pktLookupKey)...)
	c.b.Emit(asm.JEq.Imm(asm.R0, 0, skip))
}

// storeKey builds the key of a hash or LPM table from the packet in the
// key area.
func (c *compiler) storeKey(t *classify.Table) {
	b := c.b
	l := c.cls.Layout(t)
	base := int16(pktLookupKey)
	covered := make([]bool, l.Size)
	if t.LPM >= 0 {
		b.Emit(insn.StImm(asm.R6, base, int32(8*(l.Size-4)), asm.Word))
		for i := range 4 {
			covered[i] = true
		}
	}
	for _, s := range l.Slots {
		c.keyField(s, int(t.Lens[s.Field]), base)
		for i := s.Off; i < s.Off+s.Size; i++ {
			covered[i] = true
		}
	}
	for i, ok := range covered {
		if !ok {
			b.Emit(insn.StImm(asm.R6, base+int16(i), 0, asm.Byte))
		}
	}
}

// rangesLookup looks the packet's key up in a ranges table and finds the
// run that holds the low 16 bits of its field: runs are in order and the
// last ends at 65535.
func (c *compiler) rangesLookup(t *classify.Table, skip string) {
	b := c.b
	if t.Ranges.Indexed {
		c.indexLookup(t, skip)
	} else {
		c.find(t, skip)
	}
	got := b.Fresh("run_found")
	b.Emit(insn.Ld(asm.R1, asm.R6, fieldOff(ir.Field(t.LPM)), asm.Word))
	if t.Ranges.KeyBits > 0 {
		b.Emit(asm.And.Imm(asm.R1, 1<<classify.RunBits-1))
	}
	c.searchRuns(0, t.Ranges.Width(), got)
	b.Mark(got)
	b.Emit(
		asm.JEq.Imm(asm.R2, 0, skip),
		asm.JGE.Reg(asm.R1, asm.R7, skip),
		insn.Movr(asm.R7, asm.R1),
		insn.Movr(asm.R8, asm.R2),
	)
	c.maps = append(c.maps, c.cls.MapSpec(t))
}

// indexLookup looks an indexed ranges table up: the high RunBits of the
// packet's field index the block numbers, and the block, unless 0, is
// the runs, in r0; the verifier inlines both array lookups.
func (c *compiler) indexLookup(t *classify.Table, skip string) {
	b := c.b
	b.Emit(
		insn.Ld(asm.R1, asm.R6, fieldOff(ir.Field(t.LPM)), asm.Word),
		asm.RSh.Imm(asm.R1, classify.RunBits),
		insn.St(asm.R6, pktLookupKey, asm.R1, asm.Word),
	)
	b.Emit(insn.Lookup(t.IndexName(), asm.R6, pktLookupKey)...)
	b.Emit(
		asm.JEq.Imm(asm.R0, 0, skip),
		insn.Ld(asm.R1, asm.R0, 0, asm.Word),
		asm.JEq.Imm(asm.R1, 0, skip),
		insn.St(asm.R6, pktLookupKey, asm.R1, asm.Word),
	)
	b.Emit(insn.Lookup(t.Name, asm.R6, pktLookupKey)...)
	b.Emit(asm.JEq.Imm(asm.R0, 0, skip))
	c.maps = append(c.maps, c.cls.IndexSpec(t))
}

// Where a bucket table's lookup keeps the key's hash (u64) and the
// bucket number it looks up (u32), in the key area after the key.
const (
	bucketHashAt = pktLookupKey + classify.MaxBucketKey
	bucketAt     = bucketHashAt + 8
	// The key area holds them.
	_ = uint(pktLookupKey + lookupKeySize - bucketAt - 4)
)

// bucketFind finds the packet's key in a bucket table: it hashes the
// key's words (classify.BucketHash), then tests the slots of the key's
// first bucket and of its second. A slot holds the key when its words
// are the key's and its value's mark is not 0 (classify.Buckets); r0 is
// then the slot's value, as a hash lookup's would be, or the find goes
// to skip.
func (c *compiler) bucketFind(t *classify.Table, skip string) {
	b := c.b
	bk := c.cls.BucketsOf(t)
	k := classify.KeyTable(t)
	c.storeKey(k)
	mark := asm.Word
	if bk.MarkHalf {
		mark = asm.Half
	}
	for i := c.cls.Layout(k).Size; i < 4*bk.Words; i++ {
		b.Emit(insn.StImm(asm.R6, pktLookupKey+int16(i), 0, asm.Byte))
	}
	b.Emit(
		asm.LoadImm(asm.R1, bits64(bk.Seed), asm.DWord),
		asm.LoadImm(asm.R3, bits64(classify.BucketMul), asm.DWord),
	)
	for i := range bk.Words {
		b.Emit(
			insn.Ld(asm.R2, asm.R6, pktLookupKey+int16(4*i), asm.Word),
			asm.Xor.Reg(asm.R1, asm.R2),
			asm.Mul.Reg(asm.R1, asm.R3),
		)
	}
	b.Emit(insn.St(asm.R6, bucketHashAt, asm.R1, asm.DWord))
	hit := b.Fresh("bucket_hit")
	for round := range 2 {
		if round == 1 {
			b.Emit(
				insn.Ld(asm.R1, asm.R6, bucketHashAt, asm.DWord),
				asm.LoadImm(asm.R3, bits64(classify.BucketMul2), asm.DWord),
				asm.Mul.Reg(asm.R1, asm.R3),
			)
		}
		b.Emit(asm.RSh.Imm(asm.R1, int32(64-bk.Bits)))
		if bk.Base != 0 {
			b.Emit(asm.Add.Imm(asm.R1, int32(bk.Base)))
		}
		b.Emit(insn.St(asm.R6, bucketAt, asm.R1, asm.Word))
		b.Emit(insn.Lookup(bk.Map, asm.R6, bucketAt)...)
		b.Emit(asm.JEq.Imm(asm.R0, 0, skip))
		for s := range classify.BucketSlots {
			off := int16(s * bk.SlotSize())
			value := off + int16(4*bk.Words)
			next := b.Fresh("slot_other")
			for i := range bk.Words {
				b.Emit(
					insn.Ld(asm.R1, asm.R0, off+int16(4*i), asm.Word),
					insn.Ld(asm.R2, asm.R6, pktLookupKey+int16(4*i), asm.Word),
					asm.JNE.Reg(asm.R1, asm.R2, next),
				)
			}
			b.Emit(
				insn.Ld(asm.R2, asm.R0, value+int16(bk.Mark), mark),
				asm.JEq.Imm(asm.R2, 0, next),
				asm.Add.Imm(asm.R0, int32(value)),
				insn.Ja(hit),
			)
			b.Mark(next)
		}
	}
	b.Emit(insn.Ja(skip))
	b.Mark(hit)
}

// bits64 is the int64 of the same bits as u, for a 64-bit immediate.
func bits64(u uint64) int64 { return int64(u) }

// chainResidualBits is where a chain function keeps, for a table of
// candidates, the u32 of the residual bits the packet sets.
const chainResidualBits = -12

// residualBits tests each of a table of candidates' residuals and sets its
// bit in chainResidualBits when it holds.
func (c *compiler) residualBits(t *classify.Table) {
	b := c.b
	b.Emit(insn.StImm(asm.R10, chainResidualBits, 0, asm.Word))
	for i, k := range t.Residuals {
		fails := b.Fresh("residual_fails")
		for _, m := range c.cls.Residual(k) {
			if c.match(nil, m, fails, "") {
				panic(fmt.Sprintf("codegen: residual match %T drops packets", m))
			}
		}
		b.Emit(
			insn.Ld(asm.R1, asm.R10, chainResidualBits, asm.Word),
			asm.Or.Imm(asm.R1, 1<<i),
			insn.St(asm.R10, chainResidualBits, asm.R1, asm.Word),
		)
		b.Mark(fails)
	}
}

// candidatesLookup looks the packet's key up in a table of candidates and
// takes the first candidate whose residual bits the packet sets.
func (c *compiler) candidatesLookup(t *classify.Table, skip string) {
	b := c.b
	c.find(t, skip)
	b.Emit(insn.Ld(asm.R3, asm.R10, chainResidualBits, asm.Word))
	for i := range classify.MaxCandidates {
		next := skip
		if i+1 < classify.MaxCandidates {
			next = b.Fresh("candidate_fails")
		}
		off := int16(classify.CandidateSize * i)
		b.Emit(
			insn.Ld(asm.R2, asm.R0, off+6, asm.Half),
			insn.Movr(asm.R4, asm.R3),
			asm.And.Reg(asm.R4, asm.R2),
			asm.JNE.Reg(asm.R4, asm.R2, next),
			insn.Ld(asm.R1, asm.R0, off, asm.Word),
			asm.JGE.Reg(asm.R1, asm.R7, skip),
			insn.Movr(asm.R7, asm.R1),
			insn.Ld(asm.R8, asm.R0, off+4, asm.Half),
			insn.Ja(skip),
		)
		if next != skip {
			b.Mark(next)
		}
	}
	c.maps = append(c.maps, c.cls.MapSpec(t))
}

// searchRuns finds, by binary search, the first of the n runs from run lo
// whose hi is at least the value in r1, and goes to got with its kind in
// r2 and its rule in r1; r0 is the ranges value. Every value of a table
// has its Width runs, the last ending at 65535, so a run is always found:
// in log2 of the width compares, where a scan took up to classify.MaxRuns.
func (c *compiler) searchRuns(lo, n int, got string) {
	b := c.b
	if n == 1 {
		b.Emit(
			insn.Ld(asm.R2, asm.R0, int16(classify.RunSize*lo+2), asm.Half),
			insn.Ld(asm.R1, asm.R0, int16(classify.RunSize*lo+4), asm.Word),
			insn.Ja(got),
		)
		return
	}
	half := n / 2
	right := b.Fresh("runs_above")
	b.Emit(
		insn.Ld(asm.R2, asm.R0, int16(classify.RunSize*(lo+half-1)), asm.Half),
		asm.JGT.Reg(asm.R1, asm.R2, right),
	)
	c.searchRuns(lo, half, got)
	b.Mark(right)
	c.searchRuns(lo+half, n-half, got)
}

// arrayLookup looks the packet's port up in a port array, whose empty
// slots have kind 0.
func (c *compiler) arrayLookup(t *classify.Table, skip string) {
	b := c.b
	b.Emit(
		insn.Ld(asm.R1, asm.R6, fieldOff(ir.Field(t.LPM)), asm.Word),
		insn.St(asm.R6, pktLookupKey, asm.R1, asm.Word),
	)
	b.Emit(insn.Lookup(t.Name, asm.R6, pktLookupKey)...)
	b.Emit(
		asm.JEq.Imm(asm.R0, 0, skip),
		insn.Ld(asm.R2, asm.R0, 4, asm.Word),
		asm.JEq.Imm(asm.R2, 0, skip),
		insn.Ld(asm.R1, asm.R0, 0, asm.Word),
		asm.JGE.Reg(asm.R1, asm.R7, skip),
		insn.Movr(asm.R7, asm.R1),
		insn.Movr(asm.R8, asm.R2),
	)
	c.maps = append(c.maps, c.cls.MapSpec(t))
}

// keyField stores the packet's field, cut to bits, big-endian at its slot.
func (c *compiler) keyField(s classify.Slot, bits int, base int16) {
	b := c.b
	at := base + int16(s.Off)
	switch s.Field {
	case ir.FieldSrc, ir.FieldDst:
		for i := range s.Size / 4 {
			wb := bits - 32*i
			if wb <= 0 {
				b.Emit(insn.StImm(asm.R6, at+int16(4*i), 0, asm.Word))
				continue
			}
			b.Emit(insn.Ld(asm.R1, asm.R6, fieldOff(s.Field)+int16(4*i), asm.Word))
			if wb < 32 {
				b.Emit(asm.And.Imm32(asm.R1, insn.U32(wordMask(wb))))
			}
			b.Emit(insn.Ntoh(asm.R1, asm.Word), insn.St(asm.R6, at+int16(4*i), asm.R1, asm.Word))
		}
	case ir.FieldSport, ir.FieldDport:
		b.Emit(insn.Ld(asm.R1, asm.R6, fieldOff(s.Field), asm.Word))
		if bits < 16 {
			b.Emit(asm.And.Imm(asm.R1, int32(wordMask(16+bits)&0xffff)))
		}
		b.Emit(insn.Ntoh(asm.R1, asm.Half), insn.St(asm.R6, at, asm.R1, asm.Half))
	case ir.FieldProto:
		b.Emit(insn.Ld(asm.R1, asm.R6, pkt.Proto, asm.Byte), insn.St(asm.R6, at, asm.R1, asm.Byte))
	case ir.FieldIn, ir.FieldOut:
		c.ifaceNumber(s.Field)
		b.Emit(insn.St(asm.R6, at, asm.R1, asm.Byte))
	}
}

// countReg adds the packet to the counters of the rule whose ID is in
// reg, one that a helper call keeps (r6-r9).
func (c *compiler) countReg(reg asm.Register) {
	if reg < asm.R6 || reg > asm.R9 {
		panic(fmt.Sprintf("codegen: countReg of %s, which the lookup clobbers", reg))
	}
	c.countIDAt(func() { c.b.Emit(insn.Movr(asm.R1, reg)) }, chainKey, asm.R6, pkt.Bytes)
}

// units splits a chain into plain rules and classified segments.
func (c *compiler) units(rs []*ir.Rule) []classify.Unit {
	if c.level == O0 {
		out := make([]classify.Unit, len(rs))
		for i, r := range rs {
			out[i] = classify.Unit{Rule: r}
		}
		return out
	}
	var out []classify.Unit
	// One allocation for every run: a run is the next part of it. The
	// plans read the rules' forms from the program's cache, and copy the
	// tuples they keep, so the forms are let go as each rule is planned,
	// and the rest once the chain is (at 100k rules they are a quarter of
	// the compile's memory), unless the netfilter stage, compiled next,
	// plans the chain again.
	run := make([]*ir.Rule, 0, len(rs))
	c.cls.Forget = !c.defers()
	// An accelerator notes the jumps on a packet's path as it takes them.
	c.cls.Jumps = !c.accel
	flush := func() {
		out = append(out, c.cls.Run(run)...)
		run = run[len(run):]
	}
	for _, r := range rs {
		if !c.cls.Eligible(r) {
			flush()
			out = append(out, classify.Unit{Rule: r})
			continue
		}
		run = append(run, r)
	}
	flush()
	if !c.defers() {
		c.p.ForgetForms(rs)
	}
	return out
}
