package codegen

import (
	"encoding/binary"
	"fmt"
	"net/netip"

	"github.com/cilium/ebpf/asm"

	"bpfwall/ir"
	"bpfwall/rules"
)

// match emits the test of one match of rule r: it jumps to next when the
// match fails and to hotdrop when it drops the packet, and falls through
// when it holds. It reports whether it uses hotdrop. The parsed packet is
// in r6; r1-r5 are free.
func (c *compiler) match(r *ir.Rule, m ir.Match, next, hotdrop string) bool {
	b := c.b
	switch m := m.(type) {
	case ir.Addr:
		c.addr(m, next)

	case ir.TProxyTo:
		c.tproxyStatement(r, next)

	case ir.AddrRange:
		c.addrRange(m, next)

	case ir.AddrSet:
		c.addrSet(m, next)

	case ir.Proto:
		// ip6_packet_match drops the packet when ipv6_find_hdr fails,
		// whatever the protocol tested.
		if c.p.Family == rules.IPv6 {
			b.emit(
				ld(asm.R1, asm.R6, pktFlags, asm.Byte),
				asm.And.Imm(asm.R1, flagBadExtHeaders),
				asm.JNE.Imm(asm.R1, 0, hotdrop),
			)
		}
		// An IPv6 "-p all" is that walk and nothing else.
		if m.Proto != 0 || c.p.Family != rules.IPv6 {
			b.emit(ld(asm.R1, asm.R6, pktProto, asm.Byte))
			c.equal(asm.R1, uint32(m.Proto), m.Neg, next)
		}
		return c.p.Family == rules.IPv6

	case ir.Fragment:
		b.emit(ld(asm.R1, asm.R6, pktFragOff, asm.Word))
		// -f holds for a non-zero offset: fails when it equals 0.
		c.equal(asm.R1, 0, !m.Neg, next)

	case ir.Iface:
		c.iface(m, next)

	case ir.L4Header:
		b.emit(ld(asm.R1, asm.R6, pktFragOff, asm.Word))
		tiny := m.TinyFragDrop && c.p.Family == rules.IPv4
		if tiny {
			b.emit(asm.JEq.Imm(asm.R1, 8, hotdrop))
		}
		b.emit(
			asm.JNE.Imm(asm.R1, 0, next),
			ld(asm.R1, asm.R6, pktL4Len, asm.Word),
			asm.JLT.Imm(asm.R1, int32(m.Len), hotdrop),
		)
		return true

	case ir.L4Proto:
		c.l4Proto(m, next)

	case ir.Transport:
		// Never a drop: a load past the packet fails to no match.
		b.emit(
			ld(asm.R1, asm.R6, pktL4Len, asm.Word),
			asm.JLT.Imm(asm.R1, int32(m.Len), next),
		)

	case ir.Ports:
		var offs []int16
		switch m.Dir {
		case ir.Src:
			offs = []int16{pktSport}
		case ir.Dst:
			offs = []int16{pktDport}
		default:
			offs = []int16{pktSport, pktDport}
		}
		ranges := make([]valueRange, len(m.Ranges))
		for i, pr := range m.Ranges {
			ranges[i] = valueRange{uint32(pr.Lo), uint32(pr.Hi)}
		}
		c.inRanges(offs, asm.Word, ranges, 0xffff, m.Neg, next)

	case ir.TCPFlags:
		if m.Mask == 0 {
			c.constant((m.Comp == 0) != m.Neg, next)
			break
		}
		b.emit(ld(asm.R1, asm.R6, pktTCPFlags, asm.Byte))
		if m.Mask != 0xff {
			b.emit(asm.And.Imm(asm.R1, int32(m.Mask)))
		}
		c.equal(asm.R1, uint32(m.Comp), m.Neg, next)

	case ir.TCPOption:
		b.emit(
			ld(asm.R1, asm.R6, pktFlags, asm.Byte),
			asm.And.Imm(asm.R1, flagTCPOptsTruncated),
			asm.JNE.Imm(asm.R1, 0, hotdrop),
		)
		c.bit(pktTCPOpts, c.optBit(m.Kind), m.Neg, next)
		return true

	case ir.ICMP:
		c.icmp(m, next)

	case ir.Length:
		c.inRanges([]int16{pktLength}, asm.Word, []valueRange{{uint32(m.Min), uint32(m.Max)}}, 0xffffffff, m.Neg, next)

	case ir.TTL:
		b.emit(ld(asm.R1, asm.R6, pktTTL, asm.Byte))
		v := int32(m.Value)
		switch m.Op {
		case ir.CmpEq:
			b.emit(asm.JNE.Imm(asm.R1, v, next))
		case ir.CmpNe:
			b.emit(asm.JEq.Imm(asm.R1, v, next))
		case ir.CmpLt:
			b.emit(asm.JGE.Imm(asm.R1, v, next))
		case ir.CmpGt:
			b.emit(asm.JLE.Imm(asm.R1, v, next))
		}

	case ir.SrcMAC:
		hi := uint32(binary.BigEndian.Uint16(m.Addr[0:2]))
		lo := binary.BigEndian.Uint32(m.Addr[2:6])
		c.words([]int16{pktMACHi, pktMACLo}, []uint32{hi, lo}, []uint32{0xffffffff, 0xffffffff}, m.Neg, next)

	case ir.Mark:
		c.words([]int16{pktMark}, []uint32{m.Value}, []uint32{m.Mask}, m.Neg, next)

	case ir.PktType:
		b.emit(ld(asm.R1, asm.R6, pktPktType, asm.Byte))
		c.equal(asm.R1, uint32(m.Type), m.Neg, next)

	case ir.Limit:
		c.limit(m, next)

	case ir.RateLimit:
		c.rateLimit(m, next)
	case ir.CTState:
		return c.ctMatch(m, next, hotdrop)

	case ir.HashLimit:
		c.hashlimit(m, next, hotdrop)
		return true

	case ir.Recent:
		c.recent(m, next)

	default:
		panic(fmt.Sprintf("codegen: match %T survived check", m))
	}
	return false
}

// constant emits a match whose outcome is known: nothing when it holds, a
// jump to next when it fails.
func (c *compiler) constant(holds bool, next string) {
	if !holds {
		c.b.emit(ja(next))
	}
}

// equal emits "reg == v" (or, negated, "reg != v"), failing to next.
func (c *compiler) equal(reg asm.Register, v uint32, neg bool, next string) {
	if neg {
		c.b.emit(asm.JEq.Imm32(reg, u32(v), next))
	} else {
		c.b.emit(asm.JNE.Imm32(reg, u32(v), next))
	}
}

// bit emits "bit i of the u64 at off is set" (or, negated, clear).
func (c *compiler) bit(off int16, i int, neg bool, next string) {
	c.b.emit(ld(asm.R1, asm.R6, off, asm.DWord))
	if i > 0 {
		c.b.emit(asm.RSh.Imm(asm.R1, int32(i)))
	}
	c.b.emit(asm.And.Imm(asm.R1, 1))
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
		b.emit(ld(asm.R1, asm.R6, offs[i], asm.Word))
		if mask[i] != 0xffffffff {
			b.emit(asm.And.Imm32(asm.R1, u32(mask[i])))
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
	holds := b.fresh("differs")
	for _, i := range tested {
		load(i)
		b.emit(asm.JNE.Imm32(asm.R1, u32(want[i]), holds))
	}
	b.emit(ja(next))
	b.mark(holds)
}

// addrWords returns the address as host-order words, as parse stores it.
func addrWords(a netip.Addr) []uint32 {
	if a.Is4() {
		b := a.As4()
		return []uint32{binary.BigEndian.Uint32(b[:])}
	}
	b := a.As16()
	w := make([]uint32, 4)
	for i := range w {
		w[i] = binary.BigEndian.Uint32(b[4*i:])
	}
	return w
}

func addrOff(d ir.Dir) int16 {
	if d == ir.Dst {
		return pktDst
	}
	return pktSrc
}

// addr emits -s / -d: (address & Mask) == Addr.
func (c *compiler) addr(m ir.Addr, next string) {
	want, mask := addrWords(m.Addr), addrWords(m.Mask)
	offs := make([]int16, len(want))
	for i := range offs {
		offs[i] = addrOff(m.Dir) + int16(4*i)
	}
	c.words(offs, want, mask, m.Neg, next)
}

// addrRange emits -m iprange: From <= address <= To, comparing the
// address word by word.
func (c *compiler) addrRange(m ir.AddrRange, next string) {
	b := c.b
	from, to := addrWords(m.From), addrWords(m.To)
	lowest := m.From == netip.IPv4Unspecified() || m.From == netip.IPv6Unspecified()
	highest := m.To == netip.AddrFrom4([4]byte{255, 255, 255, 255}) ||
		m.To == netip.AddrFrom16([16]byte{255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255})
	if lowest && highest {
		c.constant(!m.Neg, next)
		return
	}
	outside := next
	if m.Neg {
		outside = b.fresh("outside")
	}
	off := addrOff(m.Dir)
	if !lowest {
		c.compareWords(off, from, asm.JGT, asm.JLT, outside)
	}
	if !highest {
		c.compareWords(off, to, asm.JLT, asm.JGT, outside)
	}
	if m.Neg {
		b.emit(ja(next))
		b.mark(outside)
	}
}

// compareWords compares the address at off with bound, most significant
// word first: the first word that differs decides. It jumps to fail when
// that word is beyond the bound (beyond is JLT for a lower bound, JGT for
// an upper one) and falls through when the address is within it.
func (c *compiler) compareWords(off int16, bound []uint32, within, beyond asm.JumpOp, fail string) {
	b := c.b
	ok := b.fresh("within")
	for i, w := range bound {
		b.emit(ld(asm.R1, asm.R6, off+int16(4*i), asm.Word))
		if i < len(bound)-1 {
			b.emit(within.Imm32(asm.R1, u32(w), ok))
		}
		b.emit(beyond.Imm32(asm.R1, u32(w), fail))
	}
	b.mark(ok)
}

// iface emits -i / -o. The interface the hook does not know has the empty
// name, which only "+" matches; the one it knows is looked up in
// IfacesMap by parse, and "+" matches every name.
func (c *compiler) iface(m ir.Iface, next string) {
	if !c.knowsIface(m.Dir) {
		c.constant((m.Name == "") != m.Neg, next)
		return
	}
	if m.Name == "" && m.Prefix {
		c.constant(!m.Neg, next)
		return
	}
	c.bit(pktIfaces, c.ifaceBit(m), m.Neg, next)
}

// l4Proto emits nft's IPv6 protocol test: the protocol is 51 where the
// walk meets an authentication header, and no rule matches, whatever Neg,
// where the walk fails.
func (c *compiler) l4Proto(m ir.L4Proto, next string) {
	b := c.b
	auth, cmp := b.fresh("l4proto_auth"), b.fresh("l4proto_cmp")
	b.emit(
		ld(asm.R2, asm.R6, pktFlags, asm.Byte),
		movr(asm.R1, asm.R2),
		asm.And.Imm(asm.R1, flagAuthHeader),
		asm.JNE.Imm(asm.R1, 0, auth),
		asm.And.Imm(asm.R2, flagBadExtHeaders),
		asm.JNE.Imm(asm.R2, 0, next),
		ld(asm.R1, asm.R6, pktProto, asm.Byte),
		ja(cmp),
	)
	b.mark(auth)
	b.emit(mov(asm.R1, nextAuth))
	b.mark(cmp)
	c.equal(asm.R1, uint32(m.Proto), m.Neg, next)
}

// icmp emits -m icmp / icmp6: the type is Type (unless Any) and the code
// in CodeMin..CodeMax.
func (c *compiler) icmp(m ir.ICMP, next string) {
	b := c.b
	if m.Any && m.CodeMin == 0 && m.CodeMax == 0xff {
		c.constant(!m.Neg, next)
		return
	}
	fail := next
	if m.Neg {
		fail = b.fresh("icmp_other")
	}
	if !m.Any {
		b.emit(
			ld(asm.R1, asm.R6, pktICMPType, asm.Byte),
			asm.JNE.Imm(asm.R1, int32(m.Type), fail),
		)
	}
	if m.CodeMin > 0 || m.CodeMax < 0xff {
		b.emit(ld(asm.R1, asm.R6, pktICMPCode, asm.Byte))
		if m.CodeMin > 0 {
			b.emit(asm.JLT.Imm(asm.R1, int32(m.CodeMin), fail))
		}
		if m.CodeMax < 0xff {
			b.emit(asm.JGT.Imm(asm.R1, int32(m.CodeMax), fail))
		}
	}
	if m.Neg {
		b.emit(ja(next))
		b.mark(fail)
	}
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
		b.emit(ld(asm.R1, asm.R6, offs[0], size))
		switch {
		case r.lo == r.hi:
			b.emit(asm.JNE.Imm32(asm.R1, u32(r.lo), next))
		default:
			if r.lo > 0 {
				b.emit(asm.JLT.Imm32(asm.R1, u32(r.lo), next))
			}
			if r.hi < max {
				b.emit(asm.JGT.Imm32(asm.R1, u32(r.hi), next))
			}
		}
		return
	}
	in := next
	if !neg {
		in = b.fresh("in_range")
	}
	for _, off := range offs {
		b.emit(ld(asm.R1, asm.R6, off, size))
		for _, r := range ranges {
			switch {
			case r.lo == r.hi:
				b.emit(asm.JEq.Imm32(asm.R1, u32(r.lo), in))
			case r.lo == 0:
				b.emit(asm.JLE.Imm32(asm.R1, u32(r.hi), in))
			case r.hi >= max:
				b.emit(asm.JGE.Imm32(asm.R1, u32(r.lo), in))
			default:
				below := b.fresh("below")
				b.emit(
					asm.JLT.Imm32(asm.R1, u32(r.lo), below),
					asm.JLE.Imm32(asm.R1, u32(r.hi), in),
				)
				b.mark(below)
			}
		}
	}
	if !neg {
		b.emit(ja(next))
		b.mark(in)
	}
}
