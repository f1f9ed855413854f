package packets

import (
	"encoding/binary"
	"math/big"
	"net"
	"net/netip"
	"slices"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"

	"bpfwall/ir"
	"bpfwall/model"
	"bpfwall/rules"
)

// Aimed is a frame aimed at a rule, with what its receiver knows of it
// besides its bytes.
type Aimed struct {
	Frame []byte
	Meta  model.Meta
}

// AimOptions describe where aimed frames are received.
type AimOptions struct {
	// Meta is what the receiver knows of every frame. An empty InIface or
	// OutIface is chosen per frame to satisfy the rule's interface
	// conditions; the other fields are taken as they are.
	Meta model.Meta
	// Usable, when not nil, reports whether a frame reaches the program
	// at all (a router may stop it first). Aim looks for a usable base
	// frame.
	Usable func(frame []byte, pkt *model.Packet) bool
}

// aimTries bounds the random completions Aim tries for a base frame that
// reaches its rule, and aimDetours the rules it steers each one around.
const (
	aimTries   = 8
	aimDetours = 6
)

// Aim returns frames aimed at rule r of the generator's program. The first
// satisfies every condition of r and of the jumps and gotos that lead to
// r's chain, and reaches r when Aim finds such a frame: it tries random
// completions of the other fields, and steers each around the rules that
// decide or divert it before r by breaking one of their conditions. Each
// of the others moves one field of the first to an edge of one of r's
// conditions: the first or last value of a prefix, range or list, or one
// outside it.
func (g *Generator) Aim(r *ir.Rule, opts AimOptions) []Aimed {
	conds, path := g.conditions(r)
	var base fields
	usable, found := false, false
	for try := 0; try < aimTries && !found; try++ {
		f := g.randomFields(opts.Meta)
		g.satisfyAll(&f, conds)
		for detour := 0; detour <= aimDetours; detour++ {
			frame := g.build(f)
			pkt, err := model.Decode(frame, f.meta)
			if err != nil || (opts.Usable != nil && !opts.Usable(frame, pkt)) {
				break
			}
			base, usable = f, true
			var diverter *ir.Rule
			res := g.prog.Trace(pkt, func(x *ir.Rule) {
				switch {
				case x == r:
					found = true
				case found || diverter != nil || path[x]:
				default:
					if _, ok := x.Action.(ir.None); !ok {
						diverter = x // a jump, goto or verdict that is not on the way
					}
				}
			})
			if found = found || res.Rule == r; found {
				break
			}
			if diverter == nil {
				diverter = res.Rule // a match of it dropped the packet
			}
			if diverter == nil || !g.breakRule(&f, diverter) {
				break
			}
			g.satisfyAll(&f, conds)
		}
		if !usable && try == 0 {
			base = f
		}
	}
	out := []Aimed{{Frame: g.build(base), Meta: base.meta}}
	for _, m := range r.Matches {
		for _, f := range g.edges(base, m) {
			out = append(out, Aimed{Frame: g.build(f), Meta: f.meta})
		}
	}
	return out
}

func (g *Generator) satisfyAll(f *fields, conds []ir.Match) {
	for _, m := range conds {
		g.satisfy(f, m)
	}
}

// breakRule makes one of x's conditions, picked at random, fail for f;
// it reports false when x has none that can.
func (g *Generator) breakRule(f *fields, x *ir.Rule) bool {
	var ms []ir.Match
	for _, m := range x.Matches {
		if n, ok := negate(m); ok {
			ms = append(ms, n)
		}
	}
	if len(ms) == 0 {
		return false
	}
	g.satisfy(f, ms[g.rng.IntN(len(ms))])
	return true
}

// negate returns the match that holds where m does not (for the packets
// m does not drop), when there is one that satisfy can aim at.
func negate(m ir.Match) (ir.Match, bool) {
	switch m := m.(type) {
	case ir.AddrSet, ir.CTState, ir.HashLimit, ir.L4Header, ir.L4Proto, ir.Limit, ir.Mark, ir.Owner, ir.PktType, ir.RateLimit, ir.Recent, ir.Route, ir.TProxyTo, ir.Transport:
		// no complement that satisfy aims at.
	case ir.Addr:
		m.Neg = !m.Neg
		return m, true
	case ir.AddrRange:
		m.Neg = !m.Neg
		return m, true
	case ir.Proto:
		m.Neg = !m.Neg
		return m, m.Proto != 0
	case ir.Fragment:
		m.Neg = !m.Neg
		return m, true
	case ir.Iface:
		m.Neg = !m.Neg
		return m, true
	case ir.Ports:
		m.Neg = !m.Neg
		return m, true
	case ir.TCPFlags:
		m.Neg = !m.Neg
		return m, true
	case ir.TCPOption:
		m.Neg = !m.Neg
		return m, true
	case ir.ICMP:
		m.Neg = !m.Neg
		return m, !m.Any || m.CodeMin != 0 || m.CodeMax != 0xff
	case ir.Length:
		m.Neg = !m.Neg
		return m, true
	case ir.DSCP:
		m.Neg = !m.Neg
		return m, true
	case ir.TTL:
		switch m.Op {
		case ir.CmpEq:
			m.Op = ir.CmpNe
		case ir.CmpNe:
			m.Op = ir.CmpEq
		case ir.CmpLt: // >= v
			m.Op, m.Value = ir.CmpGt, m.Value-1
			return m, m.Value != 255
		case ir.CmpGt: // <= v
			m.Op, m.Value = ir.CmpLt, m.Value+1
			return m, m.Value != 0
		}
		return m, true
	case ir.SrcMAC:
		m.Neg = !m.Neg
		return m, true
	}
	return nil, false
}

// conditions returns the matches of the jumps and gotos that lead from the
// entry chain to r's chain, by the fewest of them, and then r's; and the
// set of those jumps and gotos.
func (g *Generator) conditions(r *ir.Rule) ([]ir.Match, map[*ir.Rule]bool) {
	if g.via == nil {
		g.via = viaRules(g.prog)
	}
	var conds []ir.Match
	path := make(map[*ir.Rule]bool)
	for ci := r.Chain; g.via[ci] != nil; ci = g.via[ci].Chain {
		path[g.via[ci]] = true
		conds = append(g.via[ci].Matches[:len(g.via[ci].Matches):len(g.via[ci].Matches)], conds...)
	}
	return append(conds, r.Matches...), path
}

// viaRules returns, for each chain of p, the jump or goto that enters it
// on a shortest path from the entry chain (nil for the entry chain and
// chains never entered).
func viaRules(p *ir.Program) []*ir.Rule {
	via := make([]*ir.Rule, len(p.Chains))
	seen := make([]bool, len(p.Chains))
	seen[0] = true
	for queue := []int{0}; len(queue) > 0; queue = queue[1:] {
		for _, r := range p.Chains[queue[0]].Rules {
			if to, ok := ir.JumpTarget(r.Action); ok && !seen[to] {
				seen[to], via[to] = true, r
				queue = append(queue, to)
			}
		}
	}
	return via
}

// fields are the values of a well-formed frame that rules test.
type fields struct {
	src, dst           netip.Addr
	proto              uint8
	sport, dport       uint16
	flags              uint8
	option             int // kind of the one TCP option; -1 for none
	icmpType, icmpCode uint8
	ttl                uint8
	dscp               uint8
	length             int    // the IP length xt_length sees; 0 for the least
	fragOffset         uint16 // IPv4, in 8-byte units
	l4Cut              int    // when > 0, the transport header is cut to l4Cut bytes
	srcMAC             net.HardwareAddr
	meta               model.Meta
	// freeIn and freeOut say that the frame's interfaces are Aim's to
	// choose.
	freeIn, freeOut bool
}

// maxLength keeps frames within the Ethernet MTU.
const maxLength = 1500

// randomFields starts a frame aimed at a rule: each field one the rules
// test, mostly, or a random one.
func (g *Generator) randomFields(meta model.Meta) fields {
	common := []uint8{6, 17, 1, 58, 132, 47}
	v := &g.ruled
	f := fields{
		src:     g.aimAddr(v.src),
		dst:     g.aimAddr(v.dst),
		proto:   pick(g, v.protos, func() uint8 { return oneOf(g, common) }),
		sport:   g.aimPort(v.sport),
		dport:   g.aimPort(v.dport),
		flags:   pick(g, v.flags, func() uint8 { return uint8(g.rng.IntN(256)) }),
		option:  -1,
		ttl:     64,
		srcMAC:  srcMAC,
		meta:    meta,
		freeIn:  meta.InIface == "",
		freeOut: meta.OutIface == "",
	}
	f.icmpType, f.icmpCode = uint8(g.rng.IntN(256)), uint8(g.rng.IntN(16))
	if len(v.icmp) > 0 {
		tc := oneOf(g, v.icmp)
		f.icmpType, f.icmpCode = tc[0], tc[1]
	}
	if g.rng.IntN(4) == 0 && len(v.opts) > 0 {
		f.option = int(oneOf(g, v.opts))
	}
	if f.meta.InIface == "" {
		f.meta.InIface = g.devs[g.rng.IntN(len(g.devs))].Name
	}
	f.fixFamily(g.family)
	return f
}

// pick returns one of the interesting values, mostly, or a random one.
func pick[T any](g *Generator, interesting []T, random func() T) T {
	if len(interesting) > 0 && g.rng.IntN(4) != 0 {
		return oneOf(g, interesting)
	}
	return random()
}

// aimAddr returns one of the addresses, mostly, or a random one of the
// family.
func (g *Generator) aimAddr(as []netip.Addr) netip.Addr {
	a := pick(g, as, g.randomAddr)
	if !a.IsValid() || (a.Is4() != (g.family == rules.IPv4)) {
		return g.randomAddr()
	}
	return a
}

func (g *Generator) aimPort(ps []uint16) uint16 {
	return pick(g, ps, func() uint16 { return uint16(g.rng.IntN(65536)) })
}

// fixFamily makes the ICMP protocol the family's.
func (f *fields) fixFamily(fam rules.Family) {
	switch {
	case fam == rules.IPv4 && f.proto == 58:
		f.proto = 1
	case fam == rules.IPv6 && f.proto == 1:
		f.proto = 58
	}
}

// collect adds to v the values a match tests, and their neighbours.
func (g *Generator) collect(v *values, m ir.Match) {
	addrs := func(d ir.Dir, as ...netip.Addr) {
		as = slices.DeleteFunc(as, func(a netip.Addr) bool { return !a.IsValid() })
		if d == ir.Dst {
			v.dst = append(v.dst, as...)
		} else {
			v.src = append(v.src, as...)
		}
	}
	switch m := m.(type) {
	case ir.CTState, ir.Fragment, ir.HashLimit, ir.L4Header, ir.Limit, ir.Owner, ir.PktType, ir.RateLimit, ir.Recent, ir.Route, ir.TProxyTo, ir.Transport:
		// nothing to collect.
	case ir.Addr:
		last := lastUnder(m.Addr, m.Mask)
		addrs(m.Dir, m.Addr, last, m.Addr.Prev(), last.Next(), g.inside(m.Addr, m.Mask), g.outside(m.Addr, m.Mask))
	case ir.AddrRange:
		addrs(m.Dir, m.From, m.To, m.From.Prev(), m.To.Next())
	case ir.AddrSet:
		for _, e := range m.Entries {
			p := e.Prefix.Masked()
			last := lastUnder(p.Addr(), rules.MaskOf(p.Addr().BitLen(), p.Bits()))
			addrs(m.Dir, p.Addr(), last, p.Addr().Prev(), last.Next())
		}
	case ir.Proto:
		v.protos = append(v.protos, m.Proto)
	case ir.L4Proto:
		v.protos = append(v.protos, m.Proto)
	case ir.Ports:
		var ps []uint16
		for _, r := range m.Ranges {
			ps = append(ps, r.Lo, r.Hi, r.Lo-1, r.Hi+1, r.Lo+uint16(g.rng.IntN(int(r.Hi-r.Lo)+1)))
		}
		if m.Dir != ir.Dst {
			v.sport = append(v.sport, ps...)
		}
		if m.Dir != ir.Src {
			v.dport = append(v.dport, ps...)
		}
	case ir.ICMP:
		v.icmp = append(v.icmp, [2]uint8{m.Type, m.CodeMin}, [2]uint8{m.Type, m.CodeMax},
			[2]uint8{m.Type, m.CodeMax + 1}, [2]uint8{m.Type, m.CodeMin - 1}, [2]uint8{m.Type + 1, m.CodeMin})
	case ir.TTL:
		v.ttls = append(v.ttls, m.Value, m.Value-1, m.Value+1)
	case ir.DSCP:
		v.dscps = append(v.dscps, (m.Value-1)&0x3f, m.Value, (m.Value+1)&0x3f)
	case ir.Length:
		// Edges past the MTU cannot be sent: "ip length > 88" would
		// otherwise make frames of 64 KiB.
		for _, n := range []int{int(m.Min) - 1, int(m.Min), int(m.Max), int(m.Max) + 1} {
			if n <= maxLength {
				v.lens = append(v.lens, n)
			}
		}
	case ir.TCPFlags:
		v.flags = append(v.flags, m.Comp, m.Comp^m.Mask, m.Comp^(m.Mask&-m.Mask), m.Comp|^m.Mask)
	case ir.TCPOption:
		v.opts = append(v.opts, m.Kind)
	case ir.SrcMAC:
		near := slices.Clone(m.Addr[:])
		near[5] ^= 1
		v.macs = append(v.macs, net.HardwareAddr(m.Addr[:]), net.HardwareAddr(near))
	case ir.Mark:
		v.marks = append(v.marks, m.Value, m.Value^(m.Mask&-m.Mask), m.Value|^m.Mask)
	case ir.Iface:
		v.ifaces = append(v.ifaces, m.Name, m.Name+"0")
		if m.Prefix {
			v.ifaces = append(v.ifaces, m.Name+"x1")
			if m.Name != "" {
				v.ifaces = append(v.ifaces, m.Name[:len(m.Name)-1])
			}
		}
	}
}

// satisfy changes f so that m holds, when it can and m does not already.
func (g *Generator) satisfy(f *fields, m ir.Match) {
	if f.holds(m) {
		return
	}
	switch m := m.(type) {
	case ir.CTState, ir.HashLimit, ir.L4Proto, ir.Limit, ir.Mark, ir.Owner, ir.PktType, ir.RateLimit, ir.Recent, ir.Route, ir.TProxyTo, ir.Transport:
		// not aimed at: their fields are left to chance.
	case ir.Addr:
		a := g.inMask(m.Addr, m.Mask)
		if m.Neg {
			a = g.outOfMask(m.Addr, m.Mask)
		}
		f.setAddr(m.Dir, a)
	case ir.AddrRange:
		a := g.between(m.From, m.To)
		if m.Neg {
			a = outOfRange(m.From, m.To)
		}
		f.setAddr(m.Dir, a)
	case ir.AddrSet:
		var in []netip.Prefix
		for _, e := range m.Entries {
			if !e.NoMatch {
				in = append(in, e.Prefix.Masked())
			}
		}
		if !m.Neg && len(in) > 0 {
			p := in[g.rng.IntN(len(in))]
			f.setAddr(m.Dir, g.inMask(p.Addr(), rules.MaskOf(p.Addr().BitLen(), p.Bits())))
		}
	case ir.Proto:
		switch {
		case m.Neg:
			f.proto = g.otherProto(m.Proto)
		case m.Proto != 0:
			f.proto = m.Proto
		}
		f.fixFamily(g.family)
	case ir.Fragment:
		f.fragOffset = 0
		if !m.Neg {
			f.fragOffset = uint16(1 + g.rng.IntN(3))
		}
	case ir.Iface:
		g.satisfyIface(f, m)
	case ir.L4Header:
		f.fragOffset, f.l4Cut = 0, 0
	case ir.Ports:
		g.satisfyPorts(f, m)
	case ir.TCPFlags:
		f.flags = m.Comp | uint8(g.rng.IntN(256))&^m.Mask
		if m.Neg && m.Mask != 0 {
			f.flags ^= g.bitOf(m.Mask)
		}
	case ir.TCPOption:
		f.option = int(m.Kind)
		if m.Neg {
			f.option = -1
		}
	case ir.ICMP:
		switch {
		case m.Any && m.Neg:
			f.icmpCode = m.CodeMax + 1 + uint8(g.rng.IntN(255))
		case m.Any:
			f.icmpCode = m.CodeMin + uint8(g.rng.IntN(int(m.CodeMax-m.CodeMin)+1))
		case !m.Neg:
			f.icmpType = m.Type
			f.icmpCode = m.CodeMin + uint8(g.rng.IntN(int(m.CodeMax-m.CodeMin)+1))
		default:
			f.icmpType = m.Type + 1 + uint8(g.rng.IntN(255))
		}
	case ir.Length:
		lo, hi := int(m.Min), min(int(m.Max), maxLength)
		switch {
		case !m.Neg && lo <= hi:
			f.length = lo + g.rng.IntN(hi-lo+1)
		case m.Neg && m.Min > 0:
			f.length = int(m.Min) - 1
		case m.Neg:
			f.length = int(m.Max) + 1
		}
	case ir.TTL:
		f.ttl = g.ttlFor(m)
	case ir.DSCP:
		f.dscp = m.Value
		if m.Neg {
			f.dscp = (m.Value + 1 + uint8(g.rng.IntN(63))) & 0x3f
		}
	case ir.SrcMAC:
		f.srcMAC = net.HardwareAddr(slices.Clone(m.Addr[:]))
		if m.Neg {
			f.srcMAC[5] ^= 1
		}
	}
	// Mark, CTState and PktType are the receiver's; Meta fixes them.
}

// holds reports whether f surely satisfies m, for the kinds whose fields
// f has.
func (f *fields) holds(m ir.Match) bool {
	switch m := m.(type) {
	case ir.AddrSet, ir.CTState, ir.Fragment, ir.HashLimit, ir.Iface, ir.L4Header, ir.L4Proto, ir.Length, ir.Limit, ir.Mark, ir.Owner, ir.PktType, ir.Proto, ir.RateLimit, ir.Recent, ir.Route, ir.SrcMAC, ir.TCPOption, ir.TProxyTo, ir.Transport:
		// f has none of their fields.
	case ir.Addr:
		a, mask := f.addr(m.Dir).AsSlice(), m.Mask.AsSlice()
		if len(a) != len(mask) {
			return false
		}
		for i := range a {
			a[i] &= mask[i]
		}
		return (string(a) == string(m.Addr.AsSlice())) != m.Neg
	case ir.AddrRange:
		a := f.addr(m.Dir)
		return (m.From.Compare(a) <= 0 && a.Compare(m.To) <= 0) != m.Neg
	case ir.Ports:
		in := inRanges(m.Ranges, f.sport)
		switch m.Dir {
		case ir.Dst:
			in = inRanges(m.Ranges, f.dport)
		case ir.SrcOrDst:
			in = in || inRanges(m.Ranges, f.dport)
		}
		return in != m.Neg
	case ir.TCPFlags:
		return (f.flags&m.Mask == m.Comp) != m.Neg
	case ir.DSCP:
		return (f.dscp == m.Value) != m.Neg
	case ir.TTL:
		switch m.Op {
		case ir.CmpEq:
			return f.ttl == m.Value
		case ir.CmpNe:
			return f.ttl != m.Value
		case ir.CmpLt:
			return f.ttl < m.Value
		case ir.CmpGt:
			return f.ttl > m.Value
		}
	case ir.ICMP:
		return ((m.Any || f.icmpType == m.Type) && m.CodeMin <= f.icmpCode && f.icmpCode <= m.CodeMax) != m.Neg
	}
	return false
}

func (f *fields) setAddr(d ir.Dir, a netip.Addr) {
	if !a.IsValid() {
		return
	}
	if d == ir.Dst {
		f.dst = a
	} else {
		f.src = a
	}
}

func (f *fields) addr(d ir.Dir) netip.Addr {
	if d == ir.Dst {
		return f.dst
	}
	return f.src
}

// otherProto returns a common protocol other than p.
func (g *Generator) otherProto(p uint8) uint8 {
	for {
		q := []uint8{6, 17, 1, 58, 132, 47, 0, 255}[g.rng.IntN(8)]
		if q != p && !(g.family == rules.IPv4 && q == 58) && !(g.family == rules.IPv6 && q == 1) {
			return q
		}
	}
}

func (g *Generator) satisfyIface(f *fields, m ir.Iface) {
	name := &f.meta.InIface
	if m.Dir == ir.IfaceOut {
		name = &f.meta.OutIface
	}
	if m.Dir == ir.IfaceIn && !f.freeIn || m.Dir == ir.IfaceOut && !f.freeOut {
		return
	}
	switch {
	case !m.Neg && m.Prefix:
		*name = m.Name + "0"
	case !m.Neg:
		*name = m.Name
	case m.Prefix:
		*name = "zz" + m.Name + "0"
	default:
		*name = m.Name + "x"
	}
}

func (g *Generator) satisfyPorts(f *fields, m ir.Ports) {
	in := func() uint16 {
		r := m.Ranges[g.rng.IntN(len(m.Ranges))]
		return r.Lo + uint16(g.rng.IntN(int(r.Hi-r.Lo)+1))
	}
	out := func() uint16 {
		var cands []uint16
		for _, r := range m.Ranges {
			if r.Lo > 0 {
				cands = append(cands, r.Lo-1)
			}
			if r.Hi < 65535 {
				cands = append(cands, r.Hi+1)
			}
		}
		for range 8 {
			cands = append(cands, uint16(g.rng.IntN(65536)))
		}
		g.rng.Shuffle(len(cands), func(i, j int) { cands[i], cands[j] = cands[j], cands[i] })
		for _, p := range cands {
			if !inRanges(m.Ranges, p) {
				return p
			}
		}
		return cands[0]
	}
	switch {
	case len(m.Ranges) == 0:
	case m.Dir == ir.Src && !m.Neg:
		f.sport = in()
	case m.Dir == ir.Src:
		f.sport = out()
	case m.Dir == ir.Dst && !m.Neg:
		f.dport = in()
	case m.Dir == ir.Dst:
		f.dport = out()
	case !m.Neg && g.rng.IntN(2) == 0:
		f.sport = in()
	case !m.Neg:
		f.dport = in()
	default:
		f.sport, f.dport = out(), out()
	}
}

func inRanges(rs []rules.PortRange, p uint16) bool {
	for _, r := range rs {
		if r.Contains(p) {
			return true
		}
	}
	return false
}

// bitOf returns one random bit of mask, which is not zero.
func (g *Generator) bitOf(mask uint8) uint8 {
	for {
		if b := uint8(1) << g.rng.IntN(8); mask&b != 0 {
			return b
		}
	}
}

// ttlFor returns a TTL that m holds for, above 1 when it can be (a
// router lets only those through).
func (g *Generator) ttlFor(m ir.TTL) uint8 {
	v := int(m.Value)
	between := func(lo, hi int) uint8 {
		if hi < lo {
			return m.Value
		}
		return uint8(lo + g.rng.IntN(hi-lo+1))
	}
	switch m.Op {
	case ir.CmpNe:
		if v == 64 {
			return 65
		}
		return 64
	case ir.CmpLt:
		if v > 2 {
			return between(2, v-1)
		}
		return between(0, v-1)
	case ir.CmpGt:
		return between(max(v+1, 2), 255)
	}
	return m.Value
}

// edges returns copies of f with one field moved to an edge of m.
func (g *Generator) edges(f fields, m ir.Match) []fields {
	var out []fields
	with := func(change func(*fields)) {
		c := f
		change(&c)
		out = append(out, c)
	}
	addrs := func(d ir.Dir, as ...netip.Addr) {
		for _, a := range as {
			if a.IsValid() && a.Is4() == (g.family == rules.IPv4) && a != f.addr(d) {
				with(func(c *fields) { c.setAddr(d, a) })
			}
		}
	}
	switch m := m.(type) {
	case ir.CTState, ir.HashLimit, ir.L4Proto, ir.Limit, ir.Mark, ir.Owner, ir.PktType, ir.RateLimit, ir.Recent, ir.Route, ir.TProxyTo, ir.Transport:
		// no edges to move to.
	case ir.Addr:
		first, last := m.Addr, lastUnder(m.Addr, m.Mask)
		addrs(m.Dir, first, last, first.Prev(), last.Next(), g.outOfMask(m.Addr, m.Mask))
	case ir.AddrRange:
		addrs(m.Dir, m.From, m.To, m.From.Prev(), m.To.Next())
	case ir.AddrSet:
		for _, e := range m.Entries[:min(len(m.Entries), 4)] {
			p := e.Prefix.Masked()
			last := lastUnder(p.Addr(), rules.MaskOf(p.Addr().BitLen(), p.Bits()))
			addrs(m.Dir, p.Addr(), last, p.Addr().Prev(), last.Next())
		}
	case ir.Proto:
		with(func(c *fields) { c.proto = g.otherProto(m.Proto); c.fixFamily(g.family) })
	case ir.Fragment:
		with(func(c *fields) { c.fragOffset = 0 })
		with(func(c *fields) { c.fragOffset = 1 })
		with(func(c *fields) { c.fragOffset = 2 })
	case ir.L4Header:
		if m.Len > 1 {
			with(func(c *fields) { c.l4Cut = m.Len - 1 })
		}
		if g.family == rules.IPv4 {
			with(func(c *fields) { c.fragOffset = 1 })
		}
	case ir.Ports:
		for _, r := range m.Ranges[:min(len(m.Ranges), 4)] {
			ps := []uint16{r.Lo, r.Hi}
			if r.Lo > 0 {
				ps = append(ps, r.Lo-1)
			}
			if r.Hi < 65535 {
				ps = append(ps, r.Hi+1)
			}
			for _, p := range ps {
				switch m.Dir {
				case ir.Src:
					with(func(c *fields) { c.sport = p })
				case ir.Dst:
					with(func(c *fields) { c.dport = p })
				default:
					with(func(c *fields) { c.sport = p })
					with(func(c *fields) { c.dport = p })
				}
			}
		}
	case ir.TCPFlags:
		with(func(c *fields) { c.flags = m.Comp })
		with(func(c *fields) { c.flags = m.Comp | ^m.Mask })
		for b := uint8(1); b != 0; b <<= 1 {
			if m.Mask&b != 0 {
				with(func(c *fields) { c.flags = f.flags ^ b })
			}
		}
	case ir.TCPOption:
		with(func(c *fields) { c.option = -1 })
		with(func(c *fields) { c.option = int(m.Kind) })
		with(func(c *fields) { c.option = int(m.Kind + 1) })
	case ir.ICMP:
		if m.Any {
			for _, code := range []uint8{m.CodeMin, m.CodeMax, m.CodeMax + 1, m.CodeMin - 1} {
				with(func(c *fields) { c.icmpCode = code })
			}
		} else {
			with(func(c *fields) { c.icmpType, c.icmpCode = m.Type, m.CodeMin })
			with(func(c *fields) { c.icmpType, c.icmpCode = m.Type, m.CodeMax })
			with(func(c *fields) { c.icmpType, c.icmpCode = m.Type, m.CodeMax+1 })
			with(func(c *fields) { c.icmpType, c.icmpCode = m.Type, m.CodeMin-1 })
			with(func(c *fields) { c.icmpType = m.Type + 1 })
			with(func(c *fields) { c.icmpType = m.Type - 1 })
		}
	case ir.Length:
		for _, n := range []int{int(m.Min) - 1, int(m.Min), int(m.Max), int(m.Max) + 1} {
			if n >= 0 && n <= maxLength {
				with(func(c *fields) { c.length = n })
			}
		}
	case ir.TTL:
		for _, d := range []int{-1, 0, 1} {
			if v := int(m.Value) + d; v >= 0 && v <= 255 {
				with(func(c *fields) { c.ttl = uint8(v) })
			}
		}
	case ir.SrcMAC:
		with(func(c *fields) { c.srcMAC = srcMAC })
	case ir.DSCP:
		for _, v := range []uint8{m.Value, m.Value - 1, m.Value + 1} {
			with(func(c *fields) { c.dscp = v & 0x3f })
		}
	case ir.Iface:
		if m.Dir == ir.IfaceIn && f.freeIn || m.Dir == ir.IfaceOut && f.freeOut {
			for _, n := range []string{m.Name, m.Name + "0", "eth0", ""} {
				with(func(c *fields) {
					if m.Dir == ir.IfaceIn {
						c.meta.InIface = n
					} else {
						c.meta.OutIface = n
					}
				})
			}
		}
	}
	return out
}

// inMask returns a random address that a with mask covers.
func (g *Generator) inMask(a, mask netip.Addr) netip.Addr {
	b, m, r := a.AsSlice(), mask.AsSlice(), g.randomAddr().AsSlice()
	if len(b) != len(r) {
		return a
	}
	for i := range b {
		b[i] = b[i]&m[i] | r[i]&^m[i]
	}
	out, _ := netip.AddrFromSlice(b)
	return out
}

// outOfMask returns a random address that a with mask does not cover, or
// the zero Addr when mask is zero.
func (g *Generator) outOfMask(a, mask netip.Addr) netip.Addr {
	in, m := g.inMask(a, mask).AsSlice(), mask.AsSlice()
	var bits []int
	for i := range len(m) * 8 {
		if m[i/8]&(0x80>>(i%8)) != 0 {
			bits = append(bits, i)
		}
	}
	if len(bits) == 0 {
		return netip.Addr{}
	}
	i := bits[g.rng.IntN(len(bits))]
	in[i/8] ^= 0x80 >> (i % 8)
	out, _ := netip.AddrFromSlice(in)
	return out
}

// between returns a random address from lo to hi.
func (g *Generator) between(lo, hi netip.Addr) netip.Addr {
	a, b := new(big.Int).SetBytes(lo.AsSlice()), new(big.Int).SetBytes(hi.AsSlice())
	span := new(big.Int).Sub(b, a)
	if span.Sign() < 0 {
		return lo
	}
	span.Add(span, big.NewInt(1))
	r := new(big.Int).SetBytes(g.randomAddr().AsSlice())
	r.Mod(r, span).Add(r, a)
	out, _ := netip.AddrFromSlice(r.FillBytes(make([]byte, lo.BitLen()/8)))
	return out
}

// outOfRange returns an address just outside lo..hi, or the zero Addr
// when the range holds every address.
func outOfRange(lo, hi netip.Addr) netip.Addr {
	if p := lo.Prev(); p.IsValid() {
		return p
	}
	return hi.Next()
}

// build serializes f as an Ethernet frame.
func (g *Generator) build(f fields) []byte {
	frame := g.serialize(f, 0)
	if pad := f.length - (len(frame) - 14); pad > 0 && f.l4Cut == 0 {
		frame = g.serialize(f, pad)
	}
	if f.l4Cut > 0 {
		frame = cutTransport(frame, f.l4Cut)
	}
	return frame
}

func (g *Generator) serialize(f fields, payload int) []byte {
	eth := &layers.Ethernet{SrcMAC: f.srcMAC, DstMAC: dstMAC}
	stack := []gopacket.SerializableLayer{eth}
	var nl gopacket.NetworkLayer
	if g.family == rules.IPv4 {
		eth.EthernetType = layers.EthernetTypeIPv4
		ip := &layers.IPv4{Version: 4, TOS: f.dscp << 2, TTL: f.ttl, Protocol: layers.IPProtocol(f.proto), SrcIP: f.src.AsSlice(), DstIP: f.dst.AsSlice(), FragOffset: f.fragOffset}
		nl = ip
		stack = append(stack, ip)
	} else {
		eth.EthernetType = layers.EthernetTypeIPv6
		ip := &layers.IPv6{Version: 6, TrafficClass: f.dscp << 2, HopLimit: f.ttl, NextHeader: layers.IPProtocol(f.proto), SrcIP: f.src.AsSlice(), DstIP: f.dst.AsSlice()}
		nl = ip
		stack = append(stack, ip)
	}
	data := gopacket.Payload(make([]byte, payload))
	switch f.proto {
	case 6:
		tcp := &layers.TCP{SrcPort: layers.TCPPort(f.sport), DstPort: layers.TCPPort(f.dport), Window: 1024}
		setTCPFlags(tcp, f.flags)
		if f.option >= 0 {
			o := layers.TCPOption{OptionType: layers.TCPOptionKind(f.option), OptionLength: 2}
			if f.option < 2 {
				o.OptionLength = 1
			}
			tcp.Options = []layers.TCPOption{o}
		}
		_ = tcp.SetNetworkLayerForChecksum(nl)
		stack = append(stack, tcp)
	case 17:
		udp := &layers.UDP{SrcPort: layers.UDPPort(f.sport), DstPort: layers.UDPPort(f.dport)}
		_ = udp.SetNetworkLayerForChecksum(nl)
		stack = append(stack, udp)
	case 1:
		if g.family == rules.IPv4 {
			stack = append(stack, &layers.ICMPv4{TypeCode: layers.CreateICMPv4TypeCode(f.icmpType, f.icmpCode)})
			break
		}
		fallthrough
	case 58:
		if g.family == rules.IPv6 {
			icmp := &layers.ICMPv6{TypeCode: layers.CreateICMPv6TypeCode(f.icmpType, f.icmpCode)}
			_ = icmp.SetNetworkLayerForChecksum(nl)
			stack = append(stack, icmp)
			break
		}
		fallthrough
	default:
		// SCTP, DCCP, UDP-Lite and others: the ports are the first four bytes.
		h := make([]byte, 12)
		binary.BigEndian.PutUint16(h, f.sport)
		binary.BigEndian.PutUint16(h[2:], f.dport)
		stack = append(stack, gopacket.Payload(h))
	}
	stack = append(stack, data)
	buf := gopacket.NewSerializeBuffer()
	if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true}, stack...); err != nil {
		panic(err) // the layers above always serialize
	}
	return slices.Clone(buf.Bytes())
}

// cutTransport shortens the transport header of an untagged frame to n
// bytes, with the IP lengths (and the IPv4 header checksum) to match.
func cutTransport(frame []byte, n int) []byte {
	ip := frame[14:]
	if ip[0]>>4 == 4 {
		ihl := int(ip[0]&0x0f) * 4
		n = min(n, len(ip)-ihl)
		binary.BigEndian.PutUint16(ip[2:], uint16(ihl+n))
		ip[10], ip[11] = 0, 0
		binary.BigEndian.PutUint16(ip[10:], ^checksum(ip[:ihl]))
		return frame[:14+ihl+n]
	}
	n = min(n, len(ip)-40)
	binary.BigEndian.PutUint16(ip[4:], uint16(n))
	return frame[:14+40+n]
}

// checksum is the ones' complement sum of b, folded to 16 bits.
func checksum(b []byte) uint16 {
	var s uint32
	for i := 0; i+1 < len(b); i += 2 {
		s += uint32(binary.BigEndian.Uint16(b[i:]))
	}
	for s > 0xffff {
		s = s>>16 + s&0xffff
	}
	return uint16(s)
}
