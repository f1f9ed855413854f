package packets

import (
	"encoding/binary"
	"math/rand/v2"
	"net/netip"
	"slices"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"

	"bpfwall/ir"
	"bpfwall/rules"
)

// Generator makes frames for a program's rules. Frame picks each field on
// its own among the values at the edges of the rules' conditions (first
// and last value, and one outside) and random ones, well-formed and
// malformed (truncated at every header boundary, bad IHL, bad checksums,
// fragments, IPv6 extension header chains, VLAN tags). Aim builds frames
// that satisfy all the conditions of one rule at once, and their edges.
type Generator struct {
	prog   *ir.Program
	via    []*ir.Rule // see viaRules; computed by the first Aim
	rng    *rand.Rand
	family rules.Family
	addrs  []netip.Addr
	ports  []uint16
	protos []uint8
	icmp   [][2]uint8
	ttls   []uint8
	dscps  []uint8
	lens   []int
	flags  []uint8
	opts   []uint8
	ifaces []string
}

// NewGenerator collects the interesting values of p's matches.
func NewGenerator(p *ir.Program, seed uint64) *Generator {
	g := &Generator{prog: p, rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), family: p.Family}
	g.ifaces = []string{"eth0", "lo"}
	for _, r := range p.Rules {
		for _, m := range r.Matches {
			g.collect(m)
		}
	}
	if len(g.addrs) == 0 {
		g.addrs = append(g.addrs, g.randomAddr())
	}
	return g
}

func (g *Generator) collect(m ir.Match) {
	switch m := m.(type) {
	case ir.CTState, ir.Fragment, ir.HashLimit, ir.L4Header, ir.L4Proto, ir.Limit, ir.Mark, ir.Owner, ir.PktType, ir.RateLimit, ir.Recent, ir.Route, ir.SrcMAC, ir.TProxyTo, ir.Transport:
		// nothing to collect.
	case ir.Addr:
		first := m.Addr
		last := lastUnder(m.Addr, m.Mask)
		g.addrs = append(g.addrs, first, last, first.Prev(), last.Next())
	case ir.AddrRange:
		g.addrs = append(g.addrs, m.From, m.To, m.From.Prev(), m.To.Next())
	case ir.AddrSet:
		for _, e := range m.Entries {
			p := e.Prefix.Masked()
			g.addrs = append(g.addrs, p.Addr(), lastUnder(p.Addr(), rules.MaskOf(p.Addr().BitLen(), p.Bits())))
		}
	case ir.Proto:
		g.protos = append(g.protos, m.Proto)
	case ir.Ports:
		for _, r := range m.Ranges {
			g.ports = append(g.ports, r.Lo, r.Hi, r.Lo-1, r.Hi+1)
		}
	case ir.ICMP:
		g.icmp = append(g.icmp, [2]uint8{m.Type, m.CodeMin}, [2]uint8{m.Type, m.CodeMax}, [2]uint8{m.Type, m.CodeMax + 1}, [2]uint8{m.Type + 1, m.CodeMin})
	case ir.TTL:
		g.ttls = append(g.ttls, m.Value-1, m.Value, m.Value+1)
	case ir.DSCP:
		g.dscps = append(g.dscps, (m.Value-1)&0x3f, m.Value, (m.Value+1)&0x3f)
	case ir.Length:
		// Edges past the MTU cannot be sent: "ip length > 88" would
		// otherwise make frames of 64 KiB.
		for _, n := range []int{int(m.Min) - 1, int(m.Min), int(m.Max), int(m.Max) + 1} {
			if n <= maxLength {
				g.lens = append(g.lens, n)
			}
		}
	case ir.TCPFlags:
		g.flags = append(g.flags, m.Comp, m.Comp^m.Mask, m.Comp|^m.Mask)
	case ir.TCPOption:
		g.opts = append(g.opts, m.Kind)
	case ir.Iface:
		if m.Prefix {
			g.ifaces = append(g.ifaces, m.Name, m.Name+"0", m.Name+"x1")
			if m.Name != "" {
				g.ifaces = append(g.ifaces, m.Name[:len(m.Name)-1])
			}
		} else {
			g.ifaces = append(g.ifaces, m.Name, m.Name+"0")
		}
	}
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

func pick[T any](g *Generator, interesting []T, random func() T) T {
	if len(interesting) > 0 && g.rng.IntN(4) != 0 {
		return interesting[g.rng.IntN(len(interesting))]
	}
	return random()
}

func (g *Generator) addr() netip.Addr {
	a := pick(g, g.addrs, g.randomAddr)
	if !a.IsValid() || (a.Is4() != (g.family == rules.IPv4)) {
		return g.randomAddr()
	}
	return a
}

// Frame returns a new frame and the interface it arrives on.
func (g *Generator) Frame() ([]byte, string) {
	iface := g.ifaces[g.rng.IntN(len(g.ifaces))]
	frame := g.wellFormed()
	if g.rng.IntN(4) == 0 {
		frame = g.malform(frame)
	}
	return frame, iface
}

func (g *Generator) wellFormed() []byte {
	common := []uint8{6, 17, 1, 58, 132, 47, 0, 255}
	proto := pick(g, g.protos, func() uint8 {
		if g.rng.IntN(2) == 0 {
			return uint8(g.rng.IntN(256))
		}
		return common[g.rng.IntN(len(common))]
	})
	if g.family == rules.IPv4 && proto == 58 {
		proto = 1
	}
	if g.family == rules.IPv6 && proto == 1 {
		proto = 58
	}
	ttl := pick(g, g.ttls, func() uint8 { return uint8(g.rng.IntN(256)) })
	// The DSCP and, below it, the ECN bits, which no match tests; drawn
	// only for rules that test it, so that other rules' seeds keep their
	// frames.
	var tos uint8
	if len(g.dscps) > 0 {
		tos = pick(g, g.dscps, func() uint8 { return uint8(g.rng.IntN(64)) })<<2 | uint8(g.rng.IntN(4))
	}
	eth := &layers.Ethernet{SrcMAC: srcMAC, DstMAC: dstMAC}
	layerStack := []gopacket.SerializableLayer{eth}
	next := &eth.EthernetType
	for range g.rng.IntN(3) / 2 * (1 + g.rng.IntN(2)) {
		tag := &layers.Dot1Q{VLANIdentifier: uint16(g.rng.IntN(4095))}
		*next = layers.EthernetTypeDot1Q
		layerStack = append(layerStack, tag)
		next = &tag.Type
	}
	var netLayer gopacket.NetworkLayer
	if g.family == rules.IPv4 {
		*next = layers.EthernetTypeIPv4
		ip := &layers.IPv4{Version: 4, TOS: tos, TTL: ttl, Protocol: layers.IPProtocol(proto), SrcIP: g.addr().AsSlice(), DstIP: g.addr().AsSlice()}
		switch g.rng.IntN(8) {
		case 0:
			ip.Options = []layers.IPv4Option{{OptionType: 1}, {OptionType: 1}, {OptionType: 1}, {OptionType: 0}}
		case 1:
			ip.FragOffset = uint16(g.rng.IntN(3))
		case 2:
			ip.Flags = layers.IPv4MoreFragments
		}
		netLayer = ip
		layerStack = append(layerStack, ip)
	} else {
		*next = layers.EthernetTypeIPv6
		ip := &layers.IPv6{Version: 6, TrafficClass: tos, HopLimit: ttl, SrcIP: g.addr().AsSlice(), DstIP: g.addr().AsSlice()}
		netLayer = ip
		layerStack = append(layerStack, ip)
		layerStack = append(layerStack, g.ipv6ExtHeaders(ip, proto)...)
	}
	layerStack = append(layerStack, g.transport(proto, netLayer)...)
	buf := gopacket.NewSerializeBuffer()
	if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true}, layerStack...); err != nil {
		panic(err) // the layers above always serialize
	}
	return slices.Clone(buf.Bytes())
}

// ipv6ExtHeaders sometimes puts a chain of extension headers between the
// IPv6 header and proto. Each is 8 bytes: next header, length 0, and six
// bytes of PadN (or a fragment header's fields).
func (g *Generator) ipv6ExtHeaders(ip *layers.IPv6, proto uint8) []gopacket.SerializableLayer {
	kinds := []uint8{0, 60, 43, 44}
	var chain []uint8
	if g.rng.IntN(3) == 0 {
		for range 1 + g.rng.IntN(3) {
			chain = append(chain, kinds[g.rng.IntN(len(kinds))])
		}
	}
	if len(chain) == 0 {
		ip.NextHeader = layers.IPProtocol(proto)
		return nil
	}
	ip.NextHeader = layers.IPProtocol(chain[0])
	var out []gopacket.SerializableLayer
	for i, k := range chain {
		nh := proto
		if i+1 < len(chain) {
			nh = chain[i+1]
		}
		h := make([]byte, 8)
		h[0] = nh
		switch k {
		case 44: // fragment: offset 0 or 1 (8 bytes), M flag sometimes
			off := uint16(g.rng.IntN(2)) << 3
			if g.rng.IntN(2) == 0 {
				off |= 1
			}
			binary.BigEndian.PutUint16(h[2:], off)
			binary.BigEndian.PutUint32(h[4:], g.rng.Uint32())
		case 43: // routing type 0, segments left 0
		default: // PadN option filling the header
			h[2], h[3] = 1, 4
		}
		out = append(out, gopacket.Payload(h))
	}
	return out
}

func (g *Generator) port() uint16 {
	return pick(g, g.ports, func() uint16 { return uint16(g.rng.IntN(65536)) })
}

func (g *Generator) transport(proto uint8, ip gopacket.NetworkLayer) []gopacket.SerializableLayer {
	payload := gopacket.Payload(make([]byte, g.payloadLen()))
	switch proto {
	case 6:
		tcp := &layers.TCP{SrcPort: layers.TCPPort(g.port()), DstPort: layers.TCPPort(g.port()), Window: 1024}
		setTCPFlags(tcp, pick(g, g.flags, func() uint8 { return uint8(g.rng.IntN(256)) }))
		if g.rng.IntN(3) == 0 {
			kind := pick(g, g.opts, func() uint8 { return uint8(2 + g.rng.IntN(30)) })
			tcp.Options = []layers.TCPOption{{OptionType: layers.TCPOptionKindNop}, {OptionType: layers.TCPOptionKind(kind), OptionLength: 2}}
		}
		_ = tcp.SetNetworkLayerForChecksum(ip)
		return []gopacket.SerializableLayer{tcp, payload}
	case 17:
		udp := &layers.UDP{SrcPort: layers.UDPPort(g.port()), DstPort: layers.UDPPort(g.port())}
		_ = udp.SetNetworkLayerForChecksum(ip)
		return []gopacket.SerializableLayer{udp, payload}
	case 1:
		tc := pick(g, g.icmp, func() [2]uint8 { return [2]uint8{uint8(g.rng.IntN(256)), uint8(g.rng.IntN(256))} })
		return []gopacket.SerializableLayer{&layers.ICMPv4{TypeCode: layers.CreateICMPv4TypeCode(tc[0], tc[1])}, payload}
	case 58:
		tc := pick(g, g.icmp, func() [2]uint8 { return [2]uint8{uint8(g.rng.IntN(256)), uint8(g.rng.IntN(256))} })
		icmp := &layers.ICMPv6{TypeCode: layers.CreateICMPv6TypeCode(tc[0], tc[1])}
		_ = icmp.SetNetworkLayerForChecksum(ip)
		return []gopacket.SerializableLayer{icmp, payload}
	}
	// SCTP, DCCP, UDP-Lite and others: the ports are the first four bytes.
	h := make([]byte, 12)
	binary.BigEndian.PutUint16(h, g.port())
	binary.BigEndian.PutUint16(h[2:], g.port())
	return []gopacket.SerializableLayer{gopacket.Payload(h), payload}
}

func (g *Generator) payloadLen() int {
	if len(g.lens) > 0 && g.rng.IntN(2) == 0 {
		// Aim the IP length at a length match's edges: headers take 20 to
		// 80 bytes, so land near the edge and let the match decide.
		return max(0, g.lens[g.rng.IntN(len(g.lens))]-40-g.rng.IntN(24))
	}
	return g.rng.IntN(64)
}

// malform damages a well-formed frame the way broken or hostile packets
// are damaged.
func (g *Generator) malform(f []byte) []byte {
	l3 := 14
	for l3+4 <= len(f) && (binary.BigEndian.Uint16(f[l3-2:]) == 0x8100 || binary.BigEndian.Uint16(f[l3-2:]) == 0x88a8) {
		l3 += 4
	}
	switch g.rng.IntN(6) {
	case 0, 1: // truncate anywhere, often at a header boundary
		cuts := []int{l3 - 2, l3, l3 + 1, l3 + 19, l3 + 20, l3 + 39, l3 + 40, l3 + 41, l3 + 47, l3 + 48, l3 + 52, l3 + 59, l3 + 60}
		n := cuts[g.rng.IntN(len(cuts))]
		if g.rng.IntN(3) == 0 {
			n = 14 + g.rng.IntN(len(f))
		}
		return f[:min(max(n, 14), len(f))]
	case 2: // bad IHL or version
		if len(f) > l3 {
			f[l3] = byte(g.rng.IntN(256))
		}
	case 3: // a length field that disagrees with the frame
		if len(f) > l3+5 {
			f[l3+2+g.rng.IntN(3)] ^= byte(1 + g.rng.IntN(255))
		}
	case 4: // flip any byte of the headers
		if n := min(len(f), l3+64); n > l3 {
			f[l3+g.rng.IntN(n-l3)] ^= byte(1 + g.rng.IntN(255))
		}
	case 5: // trailing garbage after the IP packet
		f = append(f, make([]byte, 1+g.rng.IntN(16))...)
	}
	return f
}
