package ir_test

import (
	"net"
	"testing"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"

	"bpfwall/ir"
	"bpfwall/model"
	"bpfwall/parser/iptables"
	"bpfwall/rules"
)

// TestNonFirstFragmentFields: Decode gives a non-first fragment the
// transport fields nft's payload loads read (the fragment's data in IPv4,
// the IPv6 header in IPv6), and xtables' port matches still never match
// it.
func TestNonFirstFragmentFields(t *testing.T) {
	data := gopacket.Payload([]byte{0, 22, 0, 53, 0, 0, 0, 0})
	eth := &layers.Ethernet{SrcMAC: net.HardwareAddr{2, 0, 0, 0, 0, 1}, DstMAC: net.HardwareAddr{2, 0, 0, 0, 0, 2}}
	serialize := func(ls ...gopacket.SerializableLayer) []byte {
		buf := gopacket.NewSerializeBuffer()
		if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true}, ls...); err != nil {
			t.Fatal(err)
		}
		return buf.Bytes()
	}
	eth4, eth6 := *eth, *eth
	eth4.EthernetType, eth6.EthernetType = layers.EthernetTypeIPv4, layers.EthernetTypeIPv6
	v4 := serialize(&eth4, &layers.IPv4{Version: 4, IHL: 5, TTL: 64, Protocol: layers.IPProtocolUDP, FragOffset: 2,
		SrcIP: net.IP{10, 0, 0, 1}, DstIP: net.IP{10, 0, 0, 2}}, data)
	v6 := serialize(&eth6, &layers.IPv6{Version: 6, HopLimit: 64, NextHeader: layers.IPProtocolIPv6Fragment, FlowLabel: 0x10035,
		SrcIP: net.ParseIP("2001:db8::1"), DstIP: net.ParseIP("2001:db8::2")},
		&layers.IPv6Fragment{NextHeader: layers.IPProtocolUDP, FragmentOffset: 1}, data)
	for _, tc := range []struct {
		name         string
		frame        []byte
		fam          rules.Family
		sport, dport uint16
		l4len        int
	}{
		{"ipv4 fragment data", v4, rules.IPv4, 22, 53, 8},
		// Version 6, traffic class 0 and flow label 0x10035.
		{"ipv6 header", v6, rules.IPv6, 0x6001, 0x0035, 56},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pkt, err := model.Decode(tc.frame, model.Meta{})
			if err != nil {
				t.Fatal(err)
			}
			if pkt.FragOffset == 0 || pkt.SrcPort != tc.sport || pkt.DstPort != tc.dport || pkt.L4Len != tc.l4len {
				t.Errorf("fragment offset %d, ports %d > %d, l4len %d; want ports %d > %d, l4len %d",
					pkt.FragOffset, pkt.SrcPort, pkt.DstPort, pkt.L4Len, tc.sport, tc.dport, tc.l4len)
			}
			rs, err := iptables.Parse("t", []byte("*filter\n:INPUT ACCEPT [0:0]\n-A INPUT -p udp --dport 53 -j DROP\nCOMMIT\n"), iptables.Options{Family: tc.fam, ForceFamily: true})
			if err != nil {
				t.Fatal(err)
			}
			p, err := ir.Lower(rs, ir.LowerOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if res := p.Eval(pkt); res.Verdict != ir.VerdictAccept {
				t.Errorf("xt_udp matched a non-first fragment: %s", res)
			}
		})
	}
}
