package packets

import (
	"net"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
)

// Layers of test frames, for tests that build a frame header by header.

// Test frames go from TestSrcMAC to TestDstMAC.
var (
	TestSrcMAC = net.HardwareAddr{0x02, 0, 0, 0, 0, 0x01}
	TestDstMAC = net.HardwareAddr{0x02, 0, 0, 0, 0, 0x02}
)

// Serialize returns the frame of ls with lengths and checksums fixed up;
// TCP, UDP and ICMPv6 checksums cover the closest IP layer before them.
func Serialize(ls ...gopacket.SerializableLayer) ([]byte, error) {
	var nl gopacket.NetworkLayer
	for _, l := range ls {
		var err error
		switch l := l.(type) {
		case *layers.IPv4:
			nl = l
		case *layers.IPv6:
			nl = l
		case *layers.TCP:
			err = l.SetNetworkLayerForChecksum(nl)
		case *layers.UDP:
			err = l.SetNetworkLayerForChecksum(nl)
		case *layers.ICMPv6:
			err = l.SetNetworkLayerForChecksum(nl)
		}
		if err != nil {
			return nil, err
		}
	}
	buf := gopacket.NewSerializeBuffer()
	if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true}, ls...); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// Ether is an Ethernet header of type typ.
func Ether(typ layers.EthernetType) *layers.Ethernet {
	return &layers.Ethernet{SrcMAC: TestSrcMAC, DstMAC: TestDstMAC, EthernetType: typ}
}

// IPv4 is an IPv4 header with TTL 64.
func IPv4(src, dst string, proto layers.IPProtocol) *layers.IPv4 {
	return &layers.IPv4{Version: 4, TTL: 64, Protocol: proto, SrcIP: net.ParseIP(src).To4(), DstIP: net.ParseIP(dst).To4()}
}

// IPv6 is an IPv6 header with hop limit 64.
func IPv6(src, dst string, next layers.IPProtocol) *layers.IPv6 {
	return &layers.IPv6{Version: 6, HopLimit: 64, NextHeader: next, SrcIP: net.ParseIP(src), DstIP: net.ParseIP(dst)}
}

// TCPSyn is a TCP SYN's header.
func TCPSyn(sport, dport uint16) *layers.TCP {
	return &layers.TCP{SrcPort: layers.TCPPort(sport), DstPort: layers.TCPPort(dport), SYN: true, Window: 1024}
}

// UDP is a UDP header.
func UDP(sport, dport uint16) *layers.UDP {
	return &layers.UDP{SrcPort: layers.UDPPort(sport), DstPort: layers.UDPPort(dport)}
}
