package bench

import (
	"net/netip"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"

	"bpfwall/internal/topology"
)

// frameLen is the length of every frame: the shortest Ethernet frame
// without its FCS.
const frameLen = 60

// udpFrame is a UDP datagram from the sender to the firewall's ingress.
func udpFrame(src, dst netip.Addr, sport, dport uint16) []byte {
	ip := ipv4(src, dst, layers.IPProtocolUDP)
	udp := &layers.UDP{SrcPort: layers.UDPPort(sport), DstPort: layers.UDPPort(dport)}
	udp.SetNetworkLayerForChecksum(ip)
	return serialize(ip, udp)
}

// tcpFrame is a TCP SYN from the sender to the firewall's ingress.
func tcpFrame(src, dst netip.Addr, sport, dport uint16) []byte {
	ip := ipv4(src, dst, layers.IPProtocolTCP)
	tcp := &layers.TCP{SrcPort: layers.TCPPort(sport), DstPort: layers.TCPPort(dport), SYN: true, Window: 1024}
	tcp.SetNetworkLayerForChecksum(ip)
	return serialize(ip, tcp)
}

func ipv4(src, dst netip.Addr, proto layers.IPProtocol) *layers.IPv4 {
	return &layers.IPv4{Version: 4, TTL: 64, Protocol: proto, SrcIP: src.AsSlice(), DstIP: dst.AsSlice()}
}

func serialize(ip *layers.IPv4, l4 gopacket.SerializableLayer) []byte {
	eth := &layers.Ethernet{SrcMAC: topology.SenderMAC, DstMAC: topology.FirewallInMAC, EthernetType: layers.EthernetTypeIPv4}
	buf := gopacket.NewSerializeBuffer()
	opts := gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true}
	if err := gopacket.SerializeLayers(buf, opts, eth, ip, l4); err != nil {
		panic(err) // fixed, valid layers always serialize
	}
	f := buf.Bytes()
	if len(f) < frameLen {
		f = append(f, make([]byte, frameLen-len(f))...)
	}
	return f
}
