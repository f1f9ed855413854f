package codegen

import (
	"fmt"

	"github.com/cilium/ebpf/asm"

	"bpfwall/codegen/insn"
	"bpfwall/ir"
)

// The code generator's knowledge of a kind of match is one row of a
// table: its emitter, the hooks that can test it, whether the classifier
// may test it apart from its rule, and what it needs numbered. Each
// kind's row is in match_<name>.go, beside its emitter; codeOf is the
// table's one switch, which go-check-sumtype keeps exhaustive, so that a
// new kind of ir.Match fails `make lint` until it has a row.

// matchCode is one kind's row, over ir.Match.
type matchCode interface {
	emitMatch(c *compiler, r *ir.Rule, m ir.Match, next, hotdrop string) bool
	unsupportedAt(c *compiler, m ir.Match) string
	pureMatch(c *compiler, m ir.Match) bool
	collectMatch(c *compiler, m ir.Match)
	countsJiffies() bool
}

// kind is the row of the match kind M. Rows are pointers: codeOf returns
// one per match of every rule, and a row as a value would be copied to
// the heap each time.
type kind[M ir.Match] struct {
	// emit emits the test of m, of rule r: it jumps to next when m
	// fails and to hotdrop when m drops the packet, and falls through
	// when m holds. It reports whether it uses hotdrop. The parsed
	// packet is in r6; r1-r5 are free.
	emit func(c *compiler, r *ir.Rule, m M, next, hotdrop string) bool
	// hooks names m when c's hook cannot test it, "" when it can; nil:
	// every hook can. At sk-lookup, lookup decides instead.
	hooks func(c *compiler, m M) string
	// lookup names m when it has no meaning at sk-lookup, where only
	// addresses, ports, protocol and the input interface are known, ""
	// when it has; nil: it has.
	lookup func(m M) string
	// pure reports whether m can be tested apart from the rest of its
	// rule, as a classifier table's guard: it has no effect (no state,
	// no hotdrop) and reads only the parsed packet, so that testing it
	// for a packet whose other fields fail the rule, or that an earlier
	// rule decides, changes nothing. nil: it cannot.
	pure func(c *compiler, m M) bool
	// collect numbers what m needs a bit or a key for; nil: nothing.
	collect func(c *compiler, m M)
	// jiffies: m keeps time in jiffies, whose arithmetic is for a kernel
	// ticking at ir.DefaultHZ.
	jiffies bool
}

func (k kind[M]) emitMatch(c *compiler, r *ir.Rule, m ir.Match, next, hotdrop string) bool {
	return k.emit(c, r, m.(M), next, hotdrop)
}

func (k kind[M]) unsupportedAt(c *compiler, m ir.Match) string {
	if c.hook == HookSkLookup {
		if k.lookup == nil {
			return ""
		}
		return k.lookup(m.(M))
	}
	if k.hooks == nil {
		return ""
	}
	return k.hooks(c, m.(M))
}

func (k kind[M]) pureMatch(c *compiler, m ir.Match) bool {
	return k.pure != nil && k.pure(c, m.(M))
}

func (k kind[M]) collectMatch(c *compiler, m ir.Match) {
	if k.collect != nil {
		k.collect(c, m.(M))
	}
}

func (k kind[M]) countsJiffies() bool { return k.jiffies }

// codeOf is the table of rows.
func codeOf(m ir.Match) matchCode {
	switch m.(type) {
	case ir.Addr:
		return addrCode
	case ir.AddrRange:
		return addrRangeCode
	case ir.AddrSet:
		return addrSetCode
	case ir.CTState:
		return ctStateCode
	case ir.DSCP:
		return dscpCode
	case ir.Fragment:
		return fragmentCode
	case ir.HashLimit:
		return hashLimitCode
	case ir.ICMP:
		return icmpCode
	case ir.Iface:
		return ifaceCode
	case ir.L4Header:
		return l4HeaderCode
	case ir.L4Proto:
		return l4ProtoCode
	case ir.Length:
		return lengthCode
	case ir.Limit:
		return limitCode
	case ir.Mark:
		return markCode
	case ir.Owner:
		return ownerCode
	case ir.PktType:
		return pktTypeCode
	case ir.Ports:
		return portsCode
	case ir.Proto:
		return protoCode
	case ir.RateLimit:
		return rateLimitCode
	case ir.Recent:
		return recentCode
	case ir.Route:
		return routeCode
	case ir.SrcMAC:
		return macCode
	case ir.TCPFlags:
		return tcpFlagsCode
	case ir.TCPOption:
		return tcpOptionCode
	case ir.TProxyTo:
		return tproxyToCode
	case ir.TTL:
		return ttlCode
	case ir.Transport:
		return transportCode
	}
	panic(fmt.Sprintf("codegen: no row for match %T", m))
}

// match emits the test of one match of rule r (kind.emit).
func (c *compiler) match(r *ir.Rule, m ir.Match, next, hotdrop string) bool {
	return codeOf(m).emitMatch(c, r, m, next, hotdrop)
}

// pureMatch reports whether the classifier may test m apart from its
// rule (kind.pure).
func (c *compiler) pureMatch(m ir.Match) bool { return codeOf(m).pureMatch(c, m) }

// always and never are a kind's pure when it does not depend on the
// match.
func always[M ir.Match](*compiler, M) bool { return true }

// refuse is a kind's lookup when the kind has no meaning at sk-lookup: it
// names the match.
func refuse[M ir.Match](what string) func(M) string {
	return func(M) string { return what }
}

// refuseAt is a kind's hooks when no hook but sk-lookup can test it.
func refuseAt[M ir.Match](what string) func(*compiler, M) string {
	return func(*compiler, M) string { return what }
}

// skbOnly is a kind's hooks when it reads a field of the sk_buff, which
// only tc programs, netfilter programs and the stage of a tc filter see.
func skbOnly[M ir.Match](what string) func(*compiler, M) string {
	return func(c *compiler, _ M) string {
		if !c.skbHook() {
			return what
		}
		return ""
	}
}

// constant emits a match whose outcome is known: nothing when it holds, a
// jump to next when it fails.
func (c *compiler) constant(holds bool, next string) {
	if !holds {
		c.b.Emit(insn.Ja(next))
	}
}

// equal emits "reg == v" (or, negated, "reg != v"), failing to next.
func (c *compiler) equal(reg asm.Register, v uint32, neg bool, next string) {
	if neg {
		c.b.Emit(asm.JEq.Imm32(reg, insn.U32(v), next))
	} else {
		c.b.Emit(asm.JNE.Imm32(reg, insn.U32(v), next))
	}
}

// bit emits "bit i of the u64 at off is set" (or, negated, clear).
func (c *compiler) bit(off int16, i int, neg bool, next string) {
	c.b.Emit(insn.Ld(asm.R1, asm.R6, off, asm.DWord))
	if i > 0 {
		c.b.Emit(asm.RSh.Imm(asm.R1, int32(i)))
	}
	c.b.Emit(asm.And.Imm(asm.R1, 1))
	c.equal(asm.R1, 1, neg, next)
}

// words emits "(word[i] & mask[i]) == want[i] for every i" over u32 fields
// at offs, or its negation.
func (c *compiler) words(offs []int16, want, mask []uint32, neg bool, next string) {
	b := c.b
	var tested []int
	for i := range offs {
		if mask[i] != 0 {
			tested = append(tested, i)
		}
	}
	if len(tested) == 0 { // (x & 0) == 0 always holds
		c.constant(!neg, next)
		return
	}
	load := func(i int) {
		b.Emit(insn.Ld(asm.R1, asm.R6, offs[i], asm.Word))
		if mask[i] != 0xffffffff {
			b.Emit(asm.And.Imm32(asm.R1, insn.U32(mask[i])))
		}
	}
	if !neg || len(tested) == 1 {
		for _, i := range tested {
			load(i)
			c.equal(asm.R1, want[i], neg, next)
		}
		return
	}
	// Negated over several words: any difference makes it hold.
	holds := b.Fresh("differs")
	for _, i := range tested {
		load(i)
		b.Emit(asm.JNE.Imm32(asm.R1, insn.U32(want[i]), holds))
	}
	b.Emit(insn.Ja(next))
	b.Mark(holds)
}

// valueRange is an inclusive range of values.
type valueRange struct{ lo, hi uint32 }

// inRanges emits "one of the fields at offs is in one of ranges" (or its
// negation); the fields are of size and never above max.
func (c *compiler) inRanges(offs []int16, size asm.Size, ranges []valueRange, max uint32, neg bool, next string) {
	b := c.b
	for _, r := range ranges {
		if r.lo == 0 && r.hi >= max {
			c.constant(!neg, next)
			return
		}
	}
	// The common case: one field, one range, not negated.
	if !neg && len(offs) == 1 && len(ranges) == 1 {
		r := ranges[0]
		b.Emit(insn.Ld(asm.R1, asm.R6, offs[0], size))
		switch {
		case r.lo == r.hi:
			b.Emit(asm.JNE.Imm32(asm.R1, insn.U32(r.lo), next))
		default:
			if r.lo > 0 {
				b.Emit(asm.JLT.Imm32(asm.R1, insn.U32(r.lo), next))
			}
			if r.hi < max {
				b.Emit(asm.JGT.Imm32(asm.R1, insn.U32(r.hi), next))
			}
		}
		return
	}
	in := next
	if !neg {
		in = b.Fresh("in_range")
	}
	for _, off := range offs {
		b.Emit(insn.Ld(asm.R1, asm.R6, off, size))
		for _, r := range ranges {
			switch {
			case r.lo == r.hi:
				b.Emit(asm.JEq.Imm32(asm.R1, insn.U32(r.lo), in))
			case r.lo == 0:
				b.Emit(asm.JLE.Imm32(asm.R1, insn.U32(r.hi), in))
			case r.hi >= max:
				b.Emit(asm.JGE.Imm32(asm.R1, insn.U32(r.lo), in))
			default:
				below := b.Fresh("below")
				b.Emit(
					asm.JLT.Imm32(asm.R1, insn.U32(r.lo), below),
					asm.JLE.Imm32(asm.R1, insn.U32(r.hi), in),
				)
				b.Mark(below)
			}
		}
	}
	if !neg {
		b.Emit(insn.Ja(next))
		b.Mark(in)
	}
}
