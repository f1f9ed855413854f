package ir_test

import (
	"bpfwall/model"
	"net"
	"testing"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
)

// TestIPv6MappedAddressesAreNotLoopbackOrMulticast: ip6_rcv_core drops ::1
// and ff00::/8 sources, not the IPv4-mapped forms of 127/8 and 224/4.
func TestIPv6MappedAddressesAreNotLoopbackOrMulticast(t *testing.T) {
	tests := []struct {
		src, dst string
		invalid  bool
	}{
		{"::ffff:127.0.0.1", "2001:db8::2", false},
		{"2001:db8::1", "::ffff:127.0.0.1", false},
		{"::ffff:224.0.0.1", "2001:db8::2", false},
		{"::1", "2001:db8::2", true},
		{"ff02::1", "2001:db8::2", true},
	}
	for _, tc := range tests {
		eth := &layers.Ethernet{SrcMAC: net.HardwareAddr{2, 0, 0, 0, 0, 1}, DstMAC: net.HardwareAddr{2, 0, 0, 0, 0, 2}, EthernetType: layers.EthernetTypeIPv6}
		ip := &layers.IPv6{Version: 6, HopLimit: 64, NextHeader: layers.IPProtocolUDP, SrcIP: net.ParseIP(tc.src), DstIP: net.ParseIP(tc.dst)}
		udp := &layers.UDP{SrcPort: 1, DstPort: 2}
		if err := udp.SetNetworkLayerForChecksum(ip); err != nil {
			t.Fatal(err)
		}
		buf := gopacket.NewSerializeBuffer()
		if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true}, eth, ip, udp); err != nil {
			t.Fatal(err)
		}
		pkt, err := model.Decode(buf.Bytes(), model.Meta{InIface: "eth0"})
		if err != nil {
			t.Fatal(err)
		}
		if (pkt.Invalid != "") != tc.invalid {
			t.Errorf("%s -> %s: invalid %q, want invalid %v", tc.src, tc.dst, pkt.Invalid, tc.invalid)
		}
	}
}
