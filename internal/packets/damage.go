package packets

import (
	"encoding/binary"
	"net"
	"slices"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
)

// damage corrupts a frame the way broken or hostile senders do: cut
// short (often at a header boundary), the version and header length
// changed, lengths that lie, a bad IPv4 checksum, a byte of the headers
// changed, bytes after the IP packet.
func (g *Generator) damage(b []byte) []byte {
	b = slices.Clone(b)
	l3 := 14
	for l3+4 <= len(b) && (binary.BigEndian.Uint16(b[l3-2:]) == 0x8100 || binary.BigEndian.Uint16(b[l3-2:]) == 0x88a8) {
		l3 += 4
	}
	switch g.rng.IntN(10) {
	case 0: // cut anywhere after the Ethernet header
		return b[:14+g.rng.IntN(len(b)-13)]
	case 1: // cut at or next to the end of a header
		cuts := []int{l3 - 2, l3, l3 + 1, l3 + 19, l3 + 20, l3 + 39, l3 + 40, l3 + 41, l3 + 47, l3 + 48, l3 + 52, l3 + 59, l3 + 60}
		return b[:min(max(oneOf(g, cuts), 14), len(b))]
	case 2: // version and header length
		if l3 < len(b) {
			b[l3] = byte(g.rng.IntN(256))
		}
	case 3: // IPv4 total length or IPv6 payload length
		if l3+6 <= len(b) {
			binary.BigEndian.PutUint16(b[l3+2+2*g.rng.IntN(2):], uint16(g.rng.IntN(1600)))
		}
	case 4: // IPv4 checksum
		if l3+12 <= len(b) {
			b[l3+10] ^= 1 << g.rng.IntN(8)
		}
	case 5: // IPv6 payload length 0
		if l3+6 <= len(b) {
			b[l3+4], b[l3+5] = 0, 0
		}
	case 6: // bytes after the IP packet
		b = append(b, make([]byte, 1+g.rng.IntN(16))...)
	default: // any byte after the Ethernet header, biased to the first ones
		if len(b) > l3 {
			n := min(len(b)-l3, 80)
			b[l3+g.rng.IntN(n)] = byte(g.rng.IntN(256))
		}
	}
	return b
}

// CutFrames returns a few complete packets of the program's family with
// every header a parser reads, each cut at every length from the end of
// the Ethernet header on.
func (g *Generator) CutFrames() [][]byte {
	var out [][]byte
	for _, f := range g.FullFrames(12) {
		for n := 14; n <= len(f); n++ {
			out = append(out, f[:n])
		}
	}
	return out
}

// FullFrames returns n complete packets of the program's family, each
// shorter than 200 bytes, for the first device.
func (g *Generator) FullFrames(n int) [][]byte {
	g.cur = nil
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

// LargeFrames returns frames larger than a page, which an XDP test run
// spreads over several buffers: IPv6 jumbograms, valid and not, a long
// chain of extension headers, and a large IPv4 datagram.
func (g *Generator) LargeFrames() [][]byte {
	eth := func(t layers.EthernetType) *layers.Ethernet {
		return &layers.Ethernet{SrcMAC: net.HardwareAddr{2, 0, 0, 0, 0, 2}, DstMAC: g.devs[0].MAC, EthernetType: t}
	}
	src, dst := net.ParseIP("2001:db8::1"), net.ParseIP("2001:db8::2")
	udp6 := func(n int) []byte {
		ip6 := &layers.IPv6{Version: 6, HopLimit: 64, NextHeader: layers.IPProtocolUDP, SrcIP: src, DstIP: dst}
		udp := &layers.UDP{SrcPort: 53, DstPort: 53}
		_ = udp.SetNetworkLayerForChecksum(ip6)
		return serialize(eth(layers.EthernetTypeIPv6), ip6, udp, gopacket.Payload(make([]byte, n)))
	}
	var out [][]byte
	// gopacket adds a hop-by-hop jumbo option to a payload over 65535.
	for _, n := range []int{70000, 65536} {
		data := udp6(n)
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
	_ = tcp.SetNetworkLayerForChecksum(ip6)
	out = append(out, serialize(append(ls, tcp)...))
	// A 60000-byte IPv4 datagram with link-layer padding after it.
	ip4 := &layers.IPv4{Version: 4, TTL: 64, Protocol: layers.IPProtocolTCP, SrcIP: net.IP{10, 0, 0, 1}, DstIP: net.IP{10, 0, 0, 2}}
	tcp = &layers.TCP{SrcPort: 1024, DstPort: 80, ACK: true}
	_ = tcp.SetNetworkLayerForChecksum(ip4)
	data := serialize(eth(layers.EthernetTypeIPv4), ip4, tcp, gopacket.Payload(make([]byte, 60000)))
	out = append(out, append(data, make([]byte, 100)...))
	// The same datagram claiming 4000 bytes more than it carries, and an
	// IPv6 packet claiming more than its 60000 bytes.
	bad := slices.Clone(data)
	binary.BigEndian.PutUint16(bad[14+2:], uint16(len(data)-14+4000))
	bad[14+10], bad[14+11] = 0, 0
	binary.BigEndian.PutUint16(bad[14+10:], ^checksum(bad[14:34]))
	out = append(out, bad)
	data = udp6(60000)
	binary.BigEndian.PutUint16(data[14+4:], 64000)
	return append(out, data)
}
