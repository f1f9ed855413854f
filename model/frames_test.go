package model_test

import (
	"testing"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"

	"bpfwall/internal/packets"
)

// Helpers that build test frames (internal/packets).

var (
	ether              = packets.Ether
	ip4, ip6, tcp, udp = packets.IPv4, packets.IPv6, packets.TCPSyn, packets.UDP
)

func build(t testing.TB, ls ...gopacket.SerializableLayer) []byte {
	t.Helper()
	b, err := packets.Serialize(ls...)
	if err != nil {
		t.Fatalf("serialize: %v", err)
	}
	return b
}

func udp4(t testing.TB, src, dst string, sport, dport uint16) []byte {
	return build(t, ether(layers.EthernetTypeIPv4), ip4(src, dst, layers.IPProtocolUDP), udp(sport, dport), gopacket.Payload("data"))
}
