package codegen_test

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"slices"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"

	"bpfwall/ir"
	"bpfwall/rules"
)

// generator makes Ethernet frames for a program: valid ones biased toward
// the values its rules test and the edges of their ranges, and malformed
// ones. Half of the frames aim at one rule: they take the values of that
// rule's matches, so that rules deep in a chain see packets too.
type generator struct {
	rng     *rand.Rand
	family  rules.Family
	all     values   // every rule's values, and common ones
	targets []values // each rule's values
	cur     *values  // the target of the frame being made, or nil
	devMACs []net.HardwareAddr
}

// values are what a frame's fields are drawn from.
type values struct {
	src, dst     []netip.Addr
	sport, dport []uint16
	protos       []uint8
	icmp         [][2]uint8 // type, code
	ttls         []uint8
	lens         []int
	flags        []uint8
	opts         []uint8
	macs         []net.HardwareAddr
	marks        []uint32
}

// newGenerator returns a generator for p's rules; devMACs are the
// addresses of the devices frames are sent to, by frame.iface.
func newGenerator(p *ir.Program, seed uint64, devMACs []net.HardwareAddr) *generator {
	g := &generator{rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), family: p.Family, devMACs: devMACs}
	v := &g.all
	if p.Family == rules.IPv4 {
		v.protos = []uint8{1, 6, 17, 132, 136, 33, 47}
		for _, s := range []string{"10.0.0.1", "192.168.1.1", "127.0.0.1", "224.0.0.1", "255.255.255.255", "0.0.0.0"} {
			v.src = append(v.src, netip.MustParseAddr(s))
		}
	} else {
		v.protos = []uint8{58, 6, 17, 132, 136, 33, 59}
		for _, s := range []string{"2001:db8::1", "fe80::1", "::1", "ff02::1", "ff01::1", "ff00::1", "ff05::2",
			"::ffff:127.0.0.1", "::ffff:224.0.0.1", "::ffff:10.0.0.1", "::"} {
			v.src = append(v.src, netip.MustParseAddr(s))
		}
	}
	v.dst = slices.Clone(v.src)
	v.sport = []uint16{0, 1, 22, 53, 80, 443, 1024, 65535}
	v.dport = slices.Clone(v.sport)
	v.ttls = []uint8{0, 1, 2, 63, 64, 65, 128, 255}
	v.lens = []int{20, 28, 40, 48, 60, 64, 100, 576, 1280}
	v.flags = []uint8{0x02, 0x12, 0x10, 0x11, 0x04, 0x3f, 0x00, 0xff}
	v.opts = []uint8{2, 3, 4, 8, 30}
	for _, r := range p.Rules {
		var t values
		for _, m := range r.Matches {
			g.collect(&t, m)
		}
		g.targets = append(g.targets, t)
		v.add(t)
	}
	return g
}

// add appends u's values to v's.
func (v *values) add(u values) {
	v.src = append(v.src, u.src...)
	v.dst = append(v.dst, u.dst...)
	v.sport = append(v.sport, u.sport...)
	v.dport = append(v.dport, u.dport...)
	v.protos = append(v.protos, u.protos...)
	v.icmp = append(v.icmp, u.icmp...)
	v.ttls = append(v.ttls, u.ttls...)
	v.lens = append(v.lens, u.lens...)
	v.flags = append(v.flags, u.flags...)
	v.opts = append(v.opts, u.opts...)
	v.macs = append(v.macs, u.macs...)
	v.marks = append(v.marks, u.marks...)
}

// collect adds to v the values a match tests, and their neighbours.
func (g *generator) collect(v *values, m ir.Match) {
	addrs := func(d ir.Dir, as ...netip.Addr) {
		as = slices.DeleteFunc(as, func(a netip.Addr) bool { return !a.IsValid() })
		if d == ir.Dst {
			v.dst = append(v.dst, as...)
		} else {
			v.src = append(v.src, as...)
		}
	}
	switch m := m.(type) {
	case ir.Addr:
		addrs(m.Dir, m.Addr, g.inside(m.Addr, m.Mask), g.inside(m.Addr, m.Mask), g.outside(m.Addr, m.Mask))
	case ir.AddrRange:
		addrs(m.Dir, m.From, m.To, m.From.Prev(), m.To.Next())
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
	case ir.Length:
		v.lens = append(v.lens, int(m.Min), int(m.Max), int(m.Min)-1, int(m.Max)+1)
	case ir.TCPFlags:
		v.flags = append(v.flags, m.Comp, m.Comp^(m.Mask&-m.Mask), m.Comp|^m.Mask)
	case ir.TCPOption:
		v.opts = append(v.opts, m.Kind)
	case ir.SrcMAC:
		near := slices.Clone(m.Addr[:])
		near[5] ^= 1
		v.macs = append(v.macs, net.HardwareAddr(m.Addr[:]), net.HardwareAddr(near))
	case ir.Mark:
		v.marks = append(v.marks, m.Value, m.Value^(m.Mask&-m.Mask), m.Value|^m.Mask)
	}
}

// draw picks from the target's values when it has some, mostly, and from
// everyone's otherwise.
func draw[T any](g *generator, field func(*values) []T) T {
	if g.cur != nil {
		if xs := field(g.cur); len(xs) > 0 && g.chance(0.85) {
			return pick(g, xs)
		}
	}
	return pick(g, field(&g.all))
}

// inside returns a random address that a/mask contains; outside one that
// differs from a in the mask's last bit.
func (g *generator) inside(a, mask netip.Addr) netip.Addr {
	b, m := a.AsSlice(), mask.AsSlice()
	for i := range b {
		b[i] |= byte(g.rng.UintN(256)) &^ m[i]
	}
	out, _ := netip.AddrFromSlice(b)
	return out
}

func (g *generator) outside(a, mask netip.Addr) netip.Addr {
	b, m := a.AsSlice(), mask.AsSlice()
	for i := len(m) - 1; i >= 0; i-- {
		if m[i] != 0 {
			b[i] ^= m[i] & -m[i]
			break
		}
	}
	out, _ := netip.AddrFromSlice(b)
	return out
}

func pick[T any](g *generator, xs []T) T { return xs[g.rng.IntN(len(xs))] }

func (g *generator) chance(p float64) bool { return g.rng.Float64() < p }

// frame is a generated packet and the metadata the test gives it.
type frame struct {
	data  []byte
	mark  uint32
	desc  string
	iface int // index into the test's interfaces
	// linear, when not 0, is how many bytes an XDP test run puts in the
	// frame's linear data; the rest goes to fragments.
	linear int
}

// frame returns a random frame: usually valid, sometimes of another kind
// or family, sometimes damaged.
func (g *generator) frame() frame {
	g.cur = nil
	if len(g.targets) > 0 && g.chance(0.5) {
		g.cur = &g.targets[g.rng.IntN(len(g.targets))]
	}
	f := frame{mark: g.mark(), iface: g.rng.IntN(len(g.devMACs))}
	switch n := g.rng.IntN(100); {
	case n < 3:
		f.data, _ = g.serialize(append(g.ethernet(layers.EthernetTypeARP, f.iface), &layers.ARP{
			AddrType: layers.LinkTypeEthernet, Protocol: layers.EthernetTypeIPv4, HwAddressSize: 6, ProtAddressSize: 4,
			Operation: 1, SourceHwAddress: make([]byte, 6), SourceProtAddress: make([]byte, 4),
			DstHwAddress: make([]byte, 6), DstProtAddress: make([]byte, 4),
		})...)
		f.desc = "arp"
	case n < 7:
		other := rules.IPv6
		if g.family == rules.IPv6 {
			other = rules.IPv4
		}
		f.data, f.desc = g.ip(other, f.iface)
	default:
		f.data, f.desc = g.ip(g.family, f.iface)
	}
	if g.chance(0.25) {
		f.data, f.desc = g.damage(f.data), f.desc+" damaged"
	}
	return f
}

func (g *generator) mark() uint32 {
	if len(g.all.marks) > 0 && g.chance(0.7) {
		return draw(g, func(v *values) []uint32 { return v.marks })
	}
	return g.rng.Uint32() & 0xff
}

// ethernet returns the Ethernet header, mostly to the device's own
// address, and 0 to 3 VLAN tags.
func (g *generator) ethernet(t layers.EthernetType, dev int) []gopacket.SerializableLayer {
	src := net.HardwareAddr{0x02, 0, 0, 0, 0, byte(g.rng.IntN(4))}
	if len(g.all.macs) > 0 && g.chance(0.6) {
		src = draw(g, func(v *values) []net.HardwareAddr { return v.macs })
	}
	dst := g.devMACs[dev]
	if g.chance(0.2) {
		dst = pick(g, []net.HardwareAddr{{0x02, 0, 0, 0, 0, 9}, {0x01, 0, 0x5e, 0, 0, 1}, {0xff, 0xff, 0xff, 0xff, 0xff, 0xff}})
	}
	eth := &layers.Ethernet{SrcMAC: src, DstMAC: dst, EthernetType: t}
	out := []gopacket.SerializableLayer{eth}
	if g.chance(0.1) {
		tags := 1 + g.rng.IntN(3)
		outer := pick(g, []layers.EthernetType{layers.EthernetTypeDot1Q, layers.EthernetTypeQinQ})
		eth.EthernetType = outer
		for i := range tags {
			tag := &layers.Dot1Q{VLANIdentifier: uint16(g.rng.IntN(4096)), Type: layers.EthernetTypeDot1Q}
			if i == tags-1 {
				tag.Type = t
			}
			out = append(out, tag)
		}
	}
	return out
}

func (g *generator) addr(fam rules.Family, d ir.Dir) net.IP {
	for range 8 {
		a := draw(g, func(v *values) []netip.Addr { return v.src })
		if d == ir.Dst {
			a = draw(g, func(v *values) []netip.Addr { return v.dst })
		}
		if g.chance(0.15) {
			b := a.AsSlice()
			b[len(b)-1] ^= byte(g.rng.UintN(256))
			a, _ = netip.AddrFromSlice(b)
		}
		if (fam == rules.IPv4) == a.Is4() {
			return net.IP(a.AsSlice())
		}
	}
	if fam == rules.IPv4 {
		return net.IP{10, 0, 0, byte(g.rng.IntN(256))}
	}
	return net.ParseIP("2001:db8::2")
}

// ip returns an IPv4 or IPv6 packet.
func (g *generator) ip(fam rules.Family, dev int) ([]byte, string) {
	proto := draw(g, func(v *values) []uint8 { return v.protos })
	if g.chance(0.05) {
		proto = uint8(g.rng.IntN(256))
	}
	var ls []gopacket.SerializableLayer
	var net gopacket.NetworkLayer
	desc := fmt.Sprintf("%s proto %d", fam, proto)
	if fam == rules.IPv4 {
		ip4 := &layers.IPv4{Version: 4, TTL: draw(g, func(v *values) []uint8 { return v.ttls }), Protocol: layers.IPProtocol(proto), SrcIP: g.addr(fam, ir.Src), DstIP: g.addr(fam, ir.Dst)}
		if g.chance(0.15) {
			ip4.Flags = layers.IPv4MoreFragments
			if g.chance(0.6) {
				ip4.FragOffset = pick(g, []uint16{1, 2, 100, 0x1fff})
				desc += fmt.Sprintf(" fragment %d", ip4.FragOffset)
			}
		}
		if g.chance(0.1) {
			n := 1 + g.rng.IntN(38)
			ip4.Options = []layers.IPv4Option{{OptionType: 1}}
			for range n {
				ip4.Options = append(ip4.Options, layers.IPv4Option{OptionType: 1})
			}
			desc += " ip options"
		}
		ls = append(g.ethernet(layers.EthernetTypeIPv4, dev), ip4)
		net = ip4
	} else {
		ip6 := &layers.IPv6{Version: 6, HopLimit: draw(g, func(v *values) []uint8 { return v.ttls }), SrcIP: g.addr(fam, ir.Src), DstIP: g.addr(fam, ir.Dst)}
		ls = append(g.ethernet(layers.EthernetTypeIPv6, dev), ip6)
		net = ip6
		var exts []gopacket.SerializableLayer
		next := &ip6.NextHeader
		if g.chance(0.3) {
			exts, next = g.extHeaders(next)
			desc += fmt.Sprintf(" %d ext headers", len(exts))
		}
		*next = layers.IPProtocol(proto)
		ls = append(ls, exts...)
	}
	l4, more := g.transport(proto, fam, net)
	ls = append(ls, l4...)
	desc += more
	// Pad to one of the interesting lengths now and then.
	data, _ := g.serialize(ls...)
	if g.chance(0.3) {
		want := draw(g, func(v *values) []int { return v.lens })
		ipLen := len(data) - 14
		if pad := want - ipLen; pad > 0 && pad < 1400 {
			ls = append(ls, gopacket.Payload(make([]byte, pad)))
		}
	} else if g.chance(0.3) {
		ls = append(ls, gopacket.Payload(make([]byte, g.rng.IntN(64))))
	}
	data, _ = g.serialize(ls...)
	return data, desc
}

// extHeaders returns IPv6 extension headers; next is where the last one
// keeps its next-header field.
func (g *generator) extHeaders(first *layers.IPProtocol) ([]gopacket.SerializableLayer, *layers.IPProtocol) {
	var out []gopacket.SerializableLayer
	next := first
	n := 1 + g.rng.IntN(4)
	for i := range n {
		switch k := g.rng.IntN(6); {
		case k == 0 && i == 0: // hop-by-hop comes first only
			*next = layers.IPProtocolIPv6HopByHop
			h := &layers.IPv6HopByHop{Options: g.tlvOptions()}
			out, next = append(out, h), &h.NextHeader
		case k <= 1:
			*next = layers.IPProtocolIPv6Destination
			h := &layers.IPv6Destination{}
			for _, o := range g.tlvOptions() {
				h.Options = append(h.Options, (*layers.IPv6DestinationOption)(o))
			}
			out, next = append(out, h), &h.NextHeader
		case k == 2:
			*next = layers.IPProtocolIPv6Routing
			h := &layers.IPv6Routing{RoutingType: 4, Reserved: make([]byte, 4), Data: make([]byte, 8*g.rng.IntN(3))}
			out, next = append(out, h), &h.NextHeader
		case k == 3:
			*next = layers.IPProtocolIPv6Fragment
			h := &layers.IPv6Fragment{MoreFragments: g.chance(0.5), Identification: g.rng.Uint32()}
			if g.chance(0.4) {
				h.FragmentOffset = pick(g, []uint16{1, 8, 185})
			}
			out, next = append(out, h), &h.NextHeader
		default:
			// An authentication header: next, length in 4-byte units minus 2.
			ah := &rawExt{data: make([]byte, 12+4*g.rng.IntN(3))}
			*next = layers.IPProtocolAH
			ah.data[1] = byte(len(ah.data)/4 - 2)
			out, next = append(out, ah), &ah.next
		}
	}
	return out, next
}

// rawExt is an extension header gopacket cannot serialize.
type rawExt struct {
	next layers.IPProtocol
	data []byte
}

func (r *rawExt) LayerType() gopacket.LayerType { return gopacket.LayerTypePayload }

func (r *rawExt) SerializeTo(b gopacket.SerializeBuffer, _ gopacket.SerializeOptions) error {
	out, err := b.PrependBytes(len(r.data))
	if err != nil {
		return err
	}
	copy(out, r.data)
	out[0] = byte(r.next)
	return nil
}

// tlvOptions returns the options of a hop-by-hop or destination options
// header, padded to a multiple of 8 bytes (gopacket's padding is wrong).
func (g *generator) tlvOptions() []*layers.IPv6HopByHopOption {
	var out []*layers.IPv6HopByHopOption
	size := 2
	n := g.rng.IntN(5)
	if g.chance(0.2) {
		n = 7 + g.rng.IntN(4) // around the limit of 8 options
	}
	for range n {
		o := g.tlvOption()
		out = append(out, o)
		if o.OptionType == 0 {
			size++
		} else {
			size += 2 + len(o.OptionData)
		}
	}
	switch pad := (8 - size%8) % 8; pad {
	case 0:
	case 1:
		out = append(out, &layers.IPv6HopByHopOption{OptionType: 0})
	default:
		out = append(out, &layers.IPv6HopByHopOption{OptionType: 1, OptionData: make([]byte, pad-2)})
	}
	return out
}

// tlvOption returns a hop-by-hop or destination option: padding, router
// alert, jumbo, IOAM, CALIPSO or an unknown type with each action.
func (g *generator) tlvOption() *layers.IPv6HopByHopOption {
	switch g.rng.IntN(9) {
	case 0:
		return &layers.IPv6HopByHopOption{OptionType: 0}
	case 1:
		d := make([]byte, g.rng.IntN(7))
		if len(d) > 0 && g.chance(0.2) {
			d[len(d)-1] = 1
		}
		return &layers.IPv6HopByHopOption{OptionType: 1, OptionData: d}
	case 2:
		return &layers.IPv6HopByHopOption{OptionType: 5, OptionData: make([]byte, 2+g.rng.IntN(2))}
	case 3:
		d := make([]byte, 4)
		binary.BigEndian.PutUint32(d, pick(g, []uint32{0, 100, 0x10000, 0x7fffffff}))
		return &layers.IPv6HopByHopOption{OptionType: 0xc2, OptionData: d}
	case 4:
		return &layers.IPv6HopByHopOption{OptionType: 49, OptionData: make([]byte, 2+g.rng.IntN(6))}
	case 5:
		return &layers.IPv6HopByHopOption{OptionType: 7, OptionData: make([]byte, 8)}
	default:
		t := pick(g, []uint8{0x1e, 0x3e, 0x5e, 0x9e, 0xde})
		return &layers.IPv6HopByHopOption{OptionType: t, OptionData: make([]byte, g.rng.IntN(5))}
	}
}

// transport returns the transport header for proto.
func (g *generator) transport(proto uint8, fam rules.Family, nl gopacket.NetworkLayer) ([]gopacket.SerializableLayer, string) {
	sport := draw(g, func(v *values) []uint16 { return v.sport })
	dport := draw(g, func(v *values) []uint16 { return v.dport })
	switch proto {
	case 6:
		t := &layers.TCP{SrcPort: layers.TCPPort(sport), DstPort: layers.TCPPort(dport), Seq: g.rng.Uint32(), Window: 1024}
		fl := draw(g, func(v *values) []uint8 { return v.flags })
		t.FIN, t.SYN, t.RST, t.PSH = fl&1 != 0, fl&2 != 0, fl&4 != 0, fl&8 != 0
		t.ACK, t.URG, t.ECE, t.CWR = fl&16 != 0, fl&32 != 0, fl&64 != 0, fl&128 != 0
		for range g.rng.IntN(4) {
			t.Options = append(t.Options, g.tcpOption())
		}
		t.SetNetworkLayerForChecksum(nl)
		return []gopacket.SerializableLayer{t}, fmt.Sprintf(" tcp %d>%d flags %#x", sport, dport, fl)
	case 17, 136, 33:
		u := &layers.UDP{SrcPort: layers.UDPPort(sport), DstPort: layers.UDPPort(dport)}
		u.SetNetworkLayerForChecksum(nl)
		return []gopacket.SerializableLayer{u}, fmt.Sprintf(" ports %d>%d", sport, dport)
	case 132:
		return []gopacket.SerializableLayer{&layers.SCTP{SrcPort: layers.SCTPPort(sport), DstPort: layers.SCTPPort(dport)}}, fmt.Sprintf(" sctp %d>%d", sport, dport)
	case 1, 58:
		tc := [2]uint8{uint8(g.rng.IntN(20)), uint8(g.rng.IntN(4))}
		if len(g.all.icmp) > 0 && g.chance(0.7) {
			tc = draw(g, func(v *values) [][2]uint8 { return v.icmp })
		}
		desc := fmt.Sprintf(" icmp %d/%d", tc[0], tc[1])
		if fam == rules.IPv6 && proto == 58 {
			i := &layers.ICMPv6{TypeCode: layers.CreateICMPv6TypeCode(tc[0], tc[1])}
			i.SetNetworkLayerForChecksum(nl)
			return []gopacket.SerializableLayer{i, gopacket.Payload(make([]byte, 4))}, desc
		}
		return []gopacket.SerializableLayer{&layers.ICMPv4{TypeCode: layers.CreateICMPv4TypeCode(tc[0], tc[1])}}, desc
	}
	return []gopacket.SerializableLayer{gopacket.Payload(make([]byte, g.rng.IntN(24)))}, ""
}

func (g *generator) tcpOption() layers.TCPOption {
	kind := draw(g, func(v *values) []uint8 { return v.opts })
	switch {
	case g.chance(0.2):
		return layers.TCPOption{OptionType: layers.TCPOptionKindNop}
	case g.chance(0.05):
		return layers.TCPOption{OptionType: layers.TCPOptionKindEndList}
	}
	return layers.TCPOption{OptionType: layers.TCPOptionKind(kind), OptionLength: 2 + uint8(g.rng.IntN(3)), OptionData: make([]byte, g.rng.IntN(3))}
}

func (g *generator) serialize(ls ...gopacket.SerializableLayer) ([]byte, string) {
	buf := gopacket.NewSerializeBuffer()
	if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true}, ls...); err != nil {
		panic(fmt.Sprintf("serialize %v: %v", ls, err))
	}
	return slices.Clone(buf.Bytes()), ""
}

// damage corrupts a frame the way broken or hostile senders do: cut
// short, a byte of a header changed, lengths that lie.
func (g *generator) damage(b []byte) []byte {
	b = slices.Clone(b)
	l3 := 14
	for l3+4 <= len(b) && (binary.BigEndian.Uint16(b[l3-2:]) == 0x8100 || binary.BigEndian.Uint16(b[l3-2:]) == 0x88a8) {
		l3 += 4
	}
	switch g.rng.IntN(8) {
	case 0: // cut short
		return b[:14+g.rng.IntN(len(b)-13)]
	case 1: // version and header length
		if l3 < len(b) {
			b[l3] = byte(g.rng.IntN(256))
		}
	case 2: // IPv4 total length or IPv6 payload length
		if l3+6 <= len(b) {
			binary.BigEndian.PutUint16(b[l3+2+2*g.rng.IntN(2):], uint16(g.rng.IntN(1600)))
		}
	case 3: // IPv4 checksum
		if l3+12 <= len(b) {
			b[l3+10] ^= 1 << g.rng.IntN(8)
		}
	case 4: // IPv6 payload length 0
		if l3+6 <= len(b) {
			b[l3+4], b[l3+5] = 0, 0
		}
	default: // any byte after the Ethernet header, biased to the first ones
		if len(b) > l3 {
			n := min(len(b)-l3, 80)
			b[l3+g.rng.IntN(n)] = byte(g.rng.IntN(256))
		}
	}
	return b
}

// boundaryFrames returns a few complete packets of the program's family
// with every header the parser reads, each cut at every length from the
// end of the Ethernet header on.
func (g *generator) boundaryFrames() [][]byte {
	var out [][]byte
	for _, f := range g.fullFrames(12) {
		for n := 14; n <= len(f); n++ {
			out = append(out, f[:n])
		}
	}
	return out
}

// fullFrames returns n complete packets of the program's family, each
// shorter than 200 bytes.
func (g *generator) fullFrames(n int) [][]byte {
	var full [][]byte
	for range n {
		for {
			data, _ := g.ip(g.family, 0)
			if len(data) < 200 {
				full = append(full, data)
				break
			}
		}
	}
	return full
}

// largeFrames returns frames larger than a page, which an XDP test run
// spreads over several buffers: IPv6 jumbograms, valid and not, a long
// chain of extension headers, and a large IPv4 datagram.
func (g *generator) largeFrames() [][]byte {
	eth := func(t layers.EthernetType) *layers.Ethernet {
		return &layers.Ethernet{SrcMAC: net.HardwareAddr{2, 0, 0, 0, 0, 2}, DstMAC: g.devMACs[0], EthernetType: t}
	}
	src, dst := net.ParseIP("2001:db8::1"), net.ParseIP("2001:db8::2")
	var out [][]byte
	// gopacket adds a hop-by-hop jumbo option to a payload over 65535.
	for _, n := range []int{70000, 65536} {
		ip6 := &layers.IPv6{Version: 6, HopLimit: 64, NextHeader: layers.IPProtocolUDP, SrcIP: src, DstIP: dst}
		udp := &layers.UDP{SrcPort: 53, DstPort: 53}
		udp.SetNetworkLayerForChecksum(ip6)
		data, _ := g.serialize(eth(layers.EthernetTypeIPv6), ip6, udp, gopacket.Payload(make([]byte, n)))
		out = append(out, data)
		// The same jumbogram claiming more than it carries, and with a
		// payload length.
		bad := slices.Clone(data)
		binary.BigEndian.PutUint32(bad[14+40+4:], uint32(len(data)))
		out = append(out, bad)
		bad = slices.Clone(data)
		binary.BigEndian.PutUint16(bad[14+4:], 8)
		out = append(out, bad)
	}
	// 600 destination options headers before the transport header.
	ip6 := &layers.IPv6{Version: 6, HopLimit: 64, SrcIP: src, DstIP: dst}
	ls := []gopacket.SerializableLayer{eth(layers.EthernetTypeIPv6), ip6}
	next := &ip6.NextHeader
	for range 600 {
		*next = layers.IPProtocolIPv6Destination
		h := &layers.IPv6Destination{Options: []*layers.IPv6DestinationOption{{OptionType: 1, OptionData: make([]byte, 4)}}}
		ls, next = append(ls, h), &h.NextHeader
	}
	*next = layers.IPProtocolTCP
	tcp := &layers.TCP{SrcPort: 1024, DstPort: 22, SYN: true, Options: []layers.TCPOption{{OptionType: 2, OptionData: []byte{5, 0xb4}}}}
	tcp.SetNetworkLayerForChecksum(ip6)
	data, _ := g.serialize(append(ls, tcp)...)
	out = append(out, data)
	// A 60000-byte IPv4 datagram with link-layer padding after it.
	ip4 := &layers.IPv4{Version: 4, TTL: 64, Protocol: layers.IPProtocolTCP, SrcIP: net.IP{10, 0, 0, 1}, DstIP: net.IP{10, 0, 0, 2}}
	tcp = &layers.TCP{SrcPort: 1024, DstPort: 80, ACK: true}
	tcp.SetNetworkLayerForChecksum(ip4)
	data, _ = g.serialize(eth(layers.EthernetTypeIPv4), ip4, tcp, gopacket.Payload(make([]byte, 60000)))
	out = append(out, append(data, make([]byte, 100)...))
	// The same datagram claiming 4000 bytes more than it carries, and an
	// IPv6 packet claiming more than its 60000 bytes.
	bad := slices.Clone(data)
	binary.BigEndian.PutUint16(bad[14+2:], uint16(len(data)-14+4000))
	fixIPv4Checksum(bad[14:34])
	out = append(out, bad)
	ip6 = &layers.IPv6{Version: 6, HopLimit: 64, NextHeader: layers.IPProtocolUDP, SrcIP: src, DstIP: dst}
	udp := &layers.UDP{SrcPort: 53, DstPort: 53}
	udp.SetNetworkLayerForChecksum(ip6)
	data, _ = g.serialize(eth(layers.EthernetTypeIPv6), ip6, udp, gopacket.Payload(make([]byte, 60000)))
	binary.BigEndian.PutUint16(data[14+4:], 64000)
	out = append(out, data)
	return out
}
