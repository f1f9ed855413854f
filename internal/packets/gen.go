package packets

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

// Generator makes frames for a program's rules, for every test that
// compares bpfwall with a reference on random traffic.
//
// Random draws each field from the values at the edges of the rules'
// conditions (first and last value, and one outside), common values and
// random ones; half of its frames take the values of one rule, so that
// rules deep in a chain see packets too. Most are IP packets of the
// program's family, with VLAN tags, IPv4 options and fragments, IPv6
// extension header chains and TCP options now and then; some are ARP or
// of the other family; a quarter are damaged (damage.go). CutFrames,
// FullFrames and LargeFrames add the truncations of complete packets and
// frames larger than a page. Aim (aim.go) builds frames that satisfy all
// the conditions of one rule at once, and their edges.
//
// What the generator knows of each kind of match (the values it collects,
// how it satisfies, breaks and steps to the edges of a condition) is in
// aim.go, one switch per concern, which go-check-sumtype keeps
// exhaustive; this file makes frames and names no kind.
type Generator struct {
	prog    *ir.Program
	via     []*ir.Rule // see viaRules; computed by the first Aim
	rng     *rand.Rand
	family  rules.Family
	ruled   values   // every rule's values
	all     values   // ruled and common values
	targets []values // each rule's values
	cur     *values  // the target of the frame being made, or nil
	devs    []Device
}

// Device is an interface frames arrive on.
type Device struct {
	Name string
	MAC  net.HardwareAddr // the frames' usual destination
}

// Frame is a frame Random made, with what its receiver knows of it.
type Frame struct {
	Data  []byte
	Dev   int    // the device it arrives on, an index into the devices
	Iface string // that device's name
	Mark  uint32
	Desc  string // what the frame is, for failure messages
}

// values are what a frame's fields are drawn from.
type values struct {
	src, dst     []netip.Addr
	sport, dport []uint16
	protos       []uint8
	icmp         [][2]uint8 // type, code
	ttls         []uint8
	dscps        []uint8
	lens         []int // IP lengths
	flags        []uint8
	opts         []uint8
	macs         []net.HardwareAddr
	marks        []uint32
	ifaces       []string
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
	v.dscps = append(v.dscps, u.dscps...)
	v.lens = append(v.lens, u.lens...)
	v.flags = append(v.flags, u.flags...)
	v.opts = append(v.opts, u.opts...)
	v.macs = append(v.macs, u.macs...)
	v.marks = append(v.marks, u.marks...)
	v.ifaces = append(v.ifaces, u.ifaces...)
}

// NewGenerator collects the interesting values of p's matches. Frames
// arrive on devs; without any, on eth0, lo and the interfaces the rules
// name.
func NewGenerator(p *ir.Program, seed uint64, devs ...Device) *Generator {
	g := &Generator{prog: p, rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), family: p.Family}
	for _, r := range p.Rules {
		var t values
		for _, m := range r.Matches {
			g.collect(&t, m)
		}
		g.targets = append(g.targets, t)
		g.ruled.add(t)
	}
	g.all = g.ruled
	g.all.add(commonValues(p.Family))
	g.devs = devs
	if len(devs) == 0 {
		for _, name := range append([]string{"eth0", "lo"}, g.ruled.ifaces...) {
			g.devs = append(g.devs, Device{Name: name, MAC: dstMAC})
		}
	}
	return g
}

// commonValues are the values worth trying whatever the rules test:
// special addresses, well-known ports, TTLs at the edges.
func commonValues(fam rules.Family) values {
	var v values
	addrs := []string{"10.0.0.1", "192.168.1.1", "127.0.0.1", "224.0.0.1", "255.255.255.255", "0.0.0.0"}
	v.protos = []uint8{1, 6, 17, 132, 136, 33, 47}
	if fam == rules.IPv6 {
		addrs = []string{"2001:db8::1", "fe80::1", "::1", "ff02::1", "ff01::1", "ff00::1", "ff05::2",
			"::ffff:127.0.0.1", "::ffff:224.0.0.1", "::ffff:10.0.0.1", "::"}
		v.protos = []uint8{58, 6, 17, 132, 136, 33, 59}
	}
	for _, s := range addrs {
		v.src = append(v.src, netip.MustParseAddr(s))
	}
	v.dst = slices.Clone(v.src)
	v.sport = []uint16{0, 1, 22, 53, 80, 443, 1024, 65535}
	v.dport = slices.Clone(v.sport)
	v.ttls = []uint8{0, 1, 2, 63, 64, 65, 128, 255}
	v.lens = []int{20, 28, 40, 48, 60, 64, 100, 576, 1280}
	v.flags = []uint8{0x02, 0x12, 0x10, 0x11, 0x04, 0x3f, 0x00, 0xff}
	v.opts = []uint8{2, 3, 4, 8, 30}
	return v
}

// lastUnder returns the highest address that a with mask covers
// (contiguous or not).
func lastUnder(a, mask netip.Addr) netip.Addr {
	b, m := a.AsSlice(), mask.AsSlice()
	for i := range b {
		b[i] |= ^m[i]
	}
	out, _ := netip.AddrFromSlice(b)
	return out
}

// inside returns a random address that a/mask contains; outside one that
// differs from a in the mask's last bit.
func (g *Generator) inside(a, mask netip.Addr) netip.Addr {
	b, m := a.AsSlice(), mask.AsSlice()
	for i := range b {
		b[i] |= byte(g.rng.UintN(256)) &^ m[i]
	}
	out, _ := netip.AddrFromSlice(b)
	return out
}

func (g *Generator) outside(a, mask netip.Addr) netip.Addr {
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

func (g *Generator) randomAddr() netip.Addr {
	if g.family == rules.IPv6 {
		var b [16]byte
		binary.BigEndian.PutUint64(b[:8], g.rng.Uint64())
		binary.BigEndian.PutUint64(b[8:], g.rng.Uint64())
		return netip.AddrFrom16(b)
	}
	var b [4]byte
	binary.BigEndian.PutUint32(b[:], g.rng.Uint32())
	return netip.AddrFrom4(b)
}

// oneOf returns one of xs.
func oneOf[T any](g *Generator, xs []T) T { return xs[g.rng.IntN(len(xs))] }

func (g *Generator) chance(p float64) bool { return g.rng.Float64() < p }

// draw picks from the target's values when it has some, mostly, and from
// everyone's otherwise.
func draw[T any](g *Generator, field func(*values) []T) T {
	if g.cur != nil {
		if xs := field(g.cur); len(xs) > 0 && g.chance(0.85) {
			return oneOf(g, xs)
		}
	}
	return oneOf(g, field(&g.all))
}

// Random returns a random frame: usually a valid IP packet of the
// program's family, sometimes of another kind or family, sometimes
// damaged.
func (g *Generator) Random() Frame {
	g.cur = nil
	if len(g.targets) > 0 && g.chance(0.5) {
		g.cur = &g.targets[g.rng.IntN(len(g.targets))]
	}
	f := Frame{Mark: g.Mark(), Dev: g.rng.IntN(len(g.devs))}
	f.Iface = g.devs[f.Dev].Name
	switch n := g.rng.IntN(100); {
	case n < 3:
		f.Data = serialize(append(g.ethernet(layers.EthernetTypeARP, f.Dev), &layers.ARP{
			AddrType: layers.LinkTypeEthernet, Protocol: layers.EthernetTypeIPv4, HwAddressSize: 6, ProtAddressSize: 4,
			Operation: 1, SourceHwAddress: make([]byte, 6), SourceProtAddress: make([]byte, 4),
			DstHwAddress: make([]byte, 6), DstProtAddress: make([]byte, 4),
		})...)
		f.Desc = "arp"
	case n < 7:
		other := rules.IPv6
		if g.family == rules.IPv6 {
			other = rules.IPv4
		}
		f.Data, f.Desc = g.ip(other, f.Dev)
	default:
		f.Data, f.Desc = g.ip(g.family, f.Dev)
	}
	if g.chance(0.25) {
		f.Data, f.Desc = g.damage(f.Data), f.Desc+" damaged"
	}
	return f
}

// Mark returns a packet mark: one the rules test, mostly, when they test
// some.
func (g *Generator) Mark() uint32 {
	if len(g.all.marks) > 0 && g.chance(0.7) {
		return draw(g, func(v *values) []uint32 { return v.marks })
	}
	return g.rng.Uint32() & 0xff
}

// ethernet returns the Ethernet header, mostly to the device's own
// address, and now and then 1 to 3 VLAN tags.
func (g *Generator) ethernet(t layers.EthernetType, dev int) []gopacket.SerializableLayer {
	src := net.HardwareAddr{0x02, 0, 0, 0, 0, byte(g.rng.IntN(4))}
	if len(g.all.macs) > 0 && g.chance(0.6) {
		src = draw(g, func(v *values) []net.HardwareAddr { return v.macs })
	}
	dst := g.devs[dev].MAC
	if g.chance(0.2) {
		dst = oneOf(g, []net.HardwareAddr{{0x02, 0, 0, 0, 0, 9}, {0x01, 0, 0x5e, 0, 0, 1}, {0xff, 0xff, 0xff, 0xff, 0xff, 0xff}})
	}
	eth := &layers.Ethernet{SrcMAC: src, DstMAC: dst, EthernetType: t}
	out := []gopacket.SerializableLayer{eth}
	if g.chance(0.1) {
		tags := 1 + g.rng.IntN(3)
		eth.EthernetType = oneOf(g, []layers.EthernetType{layers.EthernetTypeDot1Q, layers.EthernetTypeQinQ})
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

// addr returns an address of fam: one the rules test in direction d,
// sometimes with its last byte changed, or a random one.
func (g *Generator) addr(fam rules.Family, d ir.Dir) net.IP {
	if fam == g.family && g.chance(0.05) {
		return net.IP(g.randomAddr().AsSlice())
	}
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

// ip returns an IPv4 or IPv6 packet in an Ethernet frame for device dev.
func (g *Generator) ip(fam rules.Family, dev int) ([]byte, string) {
	proto := draw(g, func(v *values) []uint8 { return v.protos })
	if g.chance(0.05) {
		proto = uint8(g.rng.IntN(256))
	}
	ttl := draw(g, func(v *values) []uint8 { return v.ttls })
	// The DSCP and, below it, the ECN bits, which no match tests; drawn
	// only for rules that test it.
	var tos uint8
	if len(g.all.dscps) > 0 {
		tos = draw(g, func(v *values) []uint8 { return v.dscps })<<2 | uint8(g.rng.IntN(4))
	}
	var ls []gopacket.SerializableLayer
	var net gopacket.NetworkLayer
	desc := fmt.Sprintf("%s proto %d", fam, proto)
	if fam == rules.IPv4 {
		ip4 := &layers.IPv4{Version: 4, TOS: tos, TTL: ttl, Protocol: layers.IPProtocol(proto), SrcIP: g.addr(fam, ir.Src), DstIP: g.addr(fam, ir.Dst)}
		if g.chance(0.15) {
			ip4.Flags = layers.IPv4MoreFragments
			if g.chance(0.6) {
				ip4.FragOffset = oneOf(g, []uint16{1, 2, 100, 0x1fff})
				desc += fmt.Sprintf(" fragment %d", ip4.FragOffset)
			}
		}
		if g.chance(0.1) {
			ip4.Options = g.ipv4Options()
			desc += " ip options"
		}
		ls = append(g.ethernet(layers.EthernetTypeIPv4, dev), ip4)
		net = ip4
	} else {
		ip6 := &layers.IPv6{Version: 6, TrafficClass: tos, HopLimit: ttl, SrcIP: g.addr(fam, ir.Src), DstIP: g.addr(fam, ir.Dst)}
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
	if g.chance(0.3) {
		want := draw(g, func(v *values) []int { return v.lens })
		if pad := want - (len(serialize(ls...)) - 14); pad > 0 && pad < 1400 {
			ls = append(ls, gopacket.Payload(make([]byte, pad)))
		}
	} else if g.chance(0.3) {
		ls = append(ls, gopacket.Payload(make([]byte, g.rng.IntN(64))))
	}
	return serialize(ls...), desc
}

// ipv4Options returns 2 to 39 bytes of NOP options, sometimes ended by an
// end-of-list option.
func (g *Generator) ipv4Options() []layers.IPv4Option {
	out := []layers.IPv4Option{{OptionType: 1}}
	for range g.rng.IntN(38) {
		out = append(out, layers.IPv4Option{OptionType: 1})
	}
	if g.chance(0.5) {
		out = append(out, layers.IPv4Option{OptionType: 0})
	}
	return out
}

// transport returns the transport header for proto.
func (g *Generator) transport(proto uint8, fam rules.Family, nl gopacket.NetworkLayer) ([]gopacket.SerializableLayer, string) {
	sport := draw(g, func(v *values) []uint16 { return v.sport })
	dport := draw(g, func(v *values) []uint16 { return v.dport })
	switch proto {
	case 6:
		t := &layers.TCP{SrcPort: layers.TCPPort(sport), DstPort: layers.TCPPort(dport), Seq: g.rng.Uint32(), Window: 1024}
		fl := draw(g, func(v *values) []uint8 { return v.flags })
		if g.chance(0.05) {
			fl = uint8(g.rng.IntN(256))
		}
		setTCPFlags(t, fl)
		for range g.rng.IntN(4) {
			t.Options = append(t.Options, g.tcpOption())
		}
		_ = t.SetNetworkLayerForChecksum(nl)
		return []gopacket.SerializableLayer{t}, fmt.Sprintf(" tcp %d>%d flags %#x", sport, dport, fl)
	case 17, 136, 33:
		u := &layers.UDP{SrcPort: layers.UDPPort(sport), DstPort: layers.UDPPort(dport)}
		_ = u.SetNetworkLayerForChecksum(nl)
		return []gopacket.SerializableLayer{u}, fmt.Sprintf(" ports %d>%d", sport, dport)
	case 132:
		return []gopacket.SerializableLayer{&layers.SCTP{SrcPort: layers.SCTPPort(sport), DstPort: layers.SCTPPort(dport)}}, fmt.Sprintf(" sctp %d>%d", sport, dport)
	case 1, 58:
		tc := [2]uint8{uint8(g.rng.IntN(20)), uint8(g.rng.IntN(4))}
		switch {
		case len(g.all.icmp) > 0 && g.chance(0.7):
			tc = draw(g, func(v *values) [][2]uint8 { return v.icmp })
		case g.chance(0.2):
			tc = [2]uint8{uint8(g.rng.IntN(256)), uint8(g.rng.IntN(256))}
		}
		desc := fmt.Sprintf(" icmp %d/%d", tc[0], tc[1])
		if fam == rules.IPv6 && proto == 58 {
			i := &layers.ICMPv6{TypeCode: layers.CreateICMPv6TypeCode(tc[0], tc[1])}
			_ = i.SetNetworkLayerForChecksum(nl)
			return []gopacket.SerializableLayer{i, gopacket.Payload(make([]byte, 4))}, desc
		}
		return []gopacket.SerializableLayer{&layers.ICMPv4{TypeCode: layers.CreateICMPv4TypeCode(tc[0], tc[1])}}, desc
	}
	// Others: the ports are the first four bytes, when there are four.
	h := make([]byte, g.rng.IntN(24))
	if len(h) >= 4 {
		binary.BigEndian.PutUint16(h, sport)
		binary.BigEndian.PutUint16(h[2:], dport)
	}
	return []gopacket.SerializableLayer{gopacket.Payload(h)}, ""
}

func (g *Generator) tcpOption() layers.TCPOption {
	kind := draw(g, func(v *values) []uint8 { return v.opts })
	switch {
	case g.chance(0.2):
		return layers.TCPOption{OptionType: layers.TCPOptionKindNop}
	case g.chance(0.05):
		return layers.TCPOption{OptionType: layers.TCPOptionKindEndList}
	}
	return layers.TCPOption{OptionType: layers.TCPOptionKind(kind), OptionLength: 2 + uint8(g.rng.IntN(3)), OptionData: make([]byte, g.rng.IntN(3))}
}

// serialize returns the frame of ls, with lengths and checksums fixed up.
func serialize(ls ...gopacket.SerializableLayer) []byte {
	buf := gopacket.NewSerializeBuffer()
	if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true}, ls...); err != nil {
		panic(fmt.Sprintf("serialize %v: %v", ls, err)) // the generator's layers always serialize
	}
	return slices.Clone(buf.Bytes())
}
