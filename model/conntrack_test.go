package model_test

import (
	"testing"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"

	"bpfwall/model"
)

// TestConntrackWithoutEntry: the state conntrack gives packets it has no
// entry for, as its per-protocol checks decide (the programs' side is
// tested by codegen's kernel test, netfilter's by TestConntrackFlows).
func TestConntrackWithoutEntry(t *testing.T) {
	seg := func(mod func(*layers.TCP)) []byte {
		s := tcp(1000, 22)
		mod(s)
		return build(t, ether(layers.EthernetTypeIPv4), ip4("10.0.0.1", "198.51.100.1", layers.IPProtocolTCP), s)
	}
	icmp := func(typ uint8, inner ...gopacket.SerializableLayer) []byte {
		ls := []gopacket.SerializableLayer{ether(layers.EthernetTypeIPv4), ip4("198.51.100.1", "10.0.0.1", layers.IPProtocolICMPv4),
			&layers.ICMPv4{TypeCode: layers.CreateICMPv4TypeCode(typ, 3)}}
		return build(t, append(ls, inner...)...)
	}
	unreachableAbout := func(proto layers.IPProtocol, l4 []byte) []byte {
		in := ip4("10.0.0.1", "198.51.100.1", proto)
		in.Length, in.IHL = uint16(20+len(l4)), 5
		b := gopacket.NewSerializeBuffer()
		if err := in.SerializeTo(b, gopacket.SerializeOptions{}); err != nil {
			t.Fatal(err)
		}
		return icmp(3, gopacket.Payload(append(b.Bytes(), l4...)))
	}
	v6 := func(typ uint8) []byte {
		return build(t, ether(layers.EthernetTypeIPv6), ip6("2001:db8::1", "2001:db8::2", layers.IPProtocolICMPv6),
			&layers.ICMPv6{TypeCode: layers.CreateICMPv6TypeCode(typ, 0)}, gopacket.Payload(make([]byte, 8)))
	}
	frag := build(t, ether(layers.EthernetTypeIPv4), &layers.IPv4{Version: 4, TTL: 64, Protocol: layers.IPProtocolUDP,
		SrcIP: []byte{10, 0, 0, 1}, DstIP: []byte{198, 51, 100, 1}, Flags: layers.IPv4MoreFragments}, udp(1, 2), gopacket.Payload("x"))
	later := build(t, ether(layers.EthernetTypeIPv4), &layers.IPv4{Version: 4, TTL: 64, Protocol: layers.IPProtocolUDP,
		SrcIP: []byte{10, 0, 0, 1}, DstIP: []byte{198, 51, 100, 1}, FragOffset: 100}, gopacket.Payload("later fragment data"))
	icmpFrag := build(t, ether(layers.EthernetTypeIPv4), &layers.IPv4{Version: 4, TTL: 64, Protocol: layers.IPProtocolICMPv4,
		SrcIP: []byte{10, 0, 0, 1}, DstIP: []byte{198, 51, 100, 1}, Flags: layers.IPv4MoreFragments},
		&layers.ICMPv4{TypeCode: layers.CreateICMPv4TypeCode(3, 3)}, gopacket.Payload("inner header and more"))
	for _, c := range []struct {
		name  string
		frame []byte
		want  model.ConnState
	}{
		{"tcp syn starts a connection", seg(func(s *layers.TCP) {}), model.ConnNew},
		{"tcp syn with urg", seg(func(s *layers.TCP) { s.URG = true }), model.ConnNew},
		{"tcp ack is picked up (tcp_loose)", seg(func(s *layers.TCP) { s.SYN, s.ACK = false, true }), model.ConnNew},
		{"tcp ack with psh, ece and cwr", seg(func(s *layers.TCP) { s.SYN, s.ACK, s.PSH, s.ECE, s.CWR = false, true, true, true, true }), model.ConnNew},
		{"tcp syn-ack", seg(func(s *layers.TCP) { s.ACK = true }), model.ConnInvalid},
		{"tcp rst", seg(func(s *layers.TCP) { s.SYN, s.RST = false, true }), model.ConnInvalid},
		{"tcp fin-ack", seg(func(s *layers.TCP) { s.SYN, s.FIN, s.ACK = false, true, true }), model.ConnInvalid},
		{"tcp without flags", seg(func(s *layers.TCP) { s.SYN = false }), model.ConnInvalid},
		{"tcp syn-fin (tcp_valid_flags)", seg(func(s *layers.TCP) { s.FIN = true }), model.ConnInvalid},
		{"udp", udp4(t, "10.0.0.1", "198.51.100.1", 1, 2), model.ConnNew},
		// Class U: the netfilter stage decides with conntrack's state.
		{"first udp fragment: conntrack sees the datagram", frag, model.ConnUnknown},
		{"later fragment: conntrack sees the datagram", later, model.ConnUnknown},
		{"first icmp fragment", icmpFrag, model.ConnUnknown},
		{"icmp echo request: no icmp lookup", icmp(8), model.ConnUnknown},
		{"icmp type 19", icmp(19), model.ConnUnknown},
		{"icmp echo reply: no icmp lookup", icmp(0), model.ConnUnknown},
		{"icmp router advertisement", icmp(9), model.ConnUnknown},
		{"icmpv6 echo reply: no icmpv6 lookup", v6(129), model.ConnUnknown},
		{"icmpv6 type 200", v6(200), model.ConnUnknown},
		{"icmp unreachable about udp", unreachableAbout(layers.IPProtocolUDP, []byte{0, 1, 0, 2, 0, 8, 0, 0}), model.ConnUnknown},
		{"icmp unreachable about gre", unreachableAbout(layers.IPProtocolGRE, []byte{0, 1, 0, 2}), model.ConnUnknown},
		{"icmpv6 neighbour solicitation", v6(135), model.ConnUnknown},
		{"icmpv6 echo request: no icmpv6 lookup", v6(128), model.ConnUnknown},
	} {
		t.Run(c.name, func(t *testing.T) {
			pkt, err := model.Decode(c.frame, model.Meta{})
			if err != nil {
				t.Fatal(err)
			}
			if got := pkt.ConntrackWithoutEntry(true); got != c.want {
				t.Errorf("state %s, want %s", got, c.want)
			}
		})
	}
	// nf_conntrack_tcp_loose=0: tcp_new refuses to pick a connection up.
	for _, c := range []struct {
		name  string
		frame []byte
		want  model.ConnState
	}{
		{"tcp syn starts a connection without tcp_loose", seg(func(s *layers.TCP) {}), model.ConnNew},
		{"tcp syn with urg without tcp_loose", seg(func(s *layers.TCP) { s.URG = true }), model.ConnNew},
		{"tcp ack without tcp_loose", seg(func(s *layers.TCP) { s.SYN, s.ACK = false, true }), model.ConnInvalid},
		{"tcp ack with urg without tcp_loose", seg(func(s *layers.TCP) { s.SYN, s.ACK, s.URG = false, true, true }), model.ConnInvalid},
		{"tcp syn-ack without tcp_loose", seg(func(s *layers.TCP) { s.ACK = true }), model.ConnInvalid},
		{"udp without tcp_loose", udp4(t, "10.0.0.1", "198.51.100.1", 1, 2), model.ConnNew},
	} {
		t.Run(c.name, func(t *testing.T) {
			pkt, err := model.Decode(c.frame, model.Meta{})
			if err != nil {
				t.Fatal(err)
			}
			if got := pkt.ConntrackWithoutEntry(false); got != c.want {
				t.Errorf("state %s, want %s", got, c.want)
			}
		})
	}
}
