package ir_test

import (
	"fmt"
	"testing"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"

	"bpfwall/internal/packets"
	"bpfwall/ir"
	"bpfwall/model"
	"bpfwall/parser/iptables"
	"bpfwall/rules"
)

// Helpers that build test frames with gopacket and lower rule text.

var (
	ether              = packets.Ether
	ip4, ip6, tcp, udp = packets.IPv4, packets.IPv6, packets.TCPSyn, packets.UDP
	testSrcMAC         = packets.TestSrcMAC
	testDstMAC         = packets.TestDstMAC
)

// build serializes layers (packets.Serialize).
func build(t testing.TB, ls ...gopacket.SerializableLayer) []byte {
	t.Helper()
	b, err := packets.Serialize(ls...)
	if err != nil {
		t.Fatalf("serialize: %v", err)
	}
	return b
}

func vlan(id uint16, typ layers.EthernetType) *layers.Dot1Q {
	return &layers.Dot1Q{VLANIdentifier: id, Type: typ}
}

// tcp4 is an Ethernet frame with a TCP SYN over IPv4.
func tcp4(t testing.TB, src, dst string, sport, dport uint16) []byte {
	return build(t, ether(layers.EthernetTypeIPv4), ip4(src, dst, layers.IPProtocolTCP), tcp(sport, dport))
}

func udp4(t testing.TB, src, dst string, sport, dport uint16) []byte {
	return build(t, ether(layers.EthernetTypeIPv4), ip4(src, dst, layers.IPProtocolUDP), udp(sport, dport), gopacket.Payload("data"))
}

func tcp6(t testing.TB, src, dst string, sport, dport uint16) []byte {
	return build(t, ether(layers.EthernetTypeIPv6), ip6(src, dst, layers.IPProtocolTCP), tcp(sport, dport))
}

// raw4 is an IPv4 packet whose transport bytes are given as they are.
func raw4(t testing.TB, ip *layers.IPv4, l4 []byte) []byte {
	return build(t, ether(layers.EthernetTypeIPv4), ip, gopacket.Payload(l4))
}

// frag4 is a fragment of an IPv4 packet of protocol proto at offset (in
// 8-byte units), with l4 as its payload.
func frag4(t testing.TB, proto layers.IPProtocol, offset uint16, more bool, l4 []byte) []byte {
	ip := ip4("10.0.0.1", "198.51.100.1", proto)
	ip.FragOffset = offset
	if more {
		ip.Flags = layers.IPv4MoreFragments
	}
	return raw4(t, ip, l4)
}

// tcpHeader is a 20-byte TCP header, for packets that need to cut it or
// bend it.
func tcpHeader(t testing.TB, sport, dport uint16) []byte {
	return tcp4(t, "192.0.2.1", "192.0.2.2", sport, dport)[14+20 : 14+20+20]
}

// lowerText parses iptables-save text of family fam and lowers chain of
// the filter table; the program must pass Verify.
func lowerText(t testing.TB, fam rules.Family, chain, text string) *ir.Program {
	t.Helper()
	rs, err := iptables.Parse("rules", []byte(text), iptables.Options{Family: fam, ForceFamily: true})
	if err != nil {
		t.Fatalf("parse: %v", err)
	}
	p, err := ir.Lower(rs, ir.LowerOptions{Chain: chain})
	if err != nil {
		t.Fatalf("lower: %v", err)
	}
	if err := ir.Verify(p); err != nil {
		t.Fatalf("verify: %v", err)
	}
	return p
}

// outcome summarizes a Result for table tests: "ACCEPT r3", "DROP policy",
// "DROP hotdrop r2", "ACCEPT skipped", "DROP skipped".
func outcome(r ir.Result) string {
	switch {
	case r.Skipped != "":
		return r.Verdict.String() + " skipped"
	case r.Rule == nil:
		return r.Verdict.String() + " policy"
	case r.Hotdrop:
		return fmt.Sprintf("%s hotdrop r%d", r.Verdict, r.Rule.ID)
	}
	return fmt.Sprintf("%s r%d", r.Verdict, r.Rule.ID)
}

// evalCase is one packet and the outcome it must have.
type evalCase struct {
	name  string
	frame []byte
	meta  model.Meta
	want  string // as outcome prints it
}

func runEval(t *testing.T, p *ir.Program, cases []evalCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			pkt, err := model.Decode(tc.frame, tc.meta)
			if err != nil {
				t.Fatalf("decode: %v", err)
			}
			res := p.Eval(pkt)
			if got := outcome(res); got != tc.want {
				t.Errorf("got %s (%s), want %s\npacket: %+v", got, res, tc.want, *pkt)
			}
		})
	}
}
