package ir_test

import (
	"strings"
	"testing"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"

	"bpfwall/ir"
	"bpfwall/model"
	"bpfwall/rules"
)

// fuzzRules4 is in FORWARD, which sees fragments (and a length match),
// and without the length rule in INPUT, which sees reassembled datagrams.
const fuzzRules4 = `*filter
:INPUT ACCEPT [0:0]
:FORWARD DROP [0:0]
:OUTPUT ACCEPT [0:0]
:L4 - [0:0]
-A FORWARD -f -j ACCEPT
-A FORWARD -s 10.0.0.0/8 -j L4
-A FORWARD -p tcp -m tcp --tcp-option 2 --syn -j ACCEPT
-A FORWARD -p udp -m multiport --ports 53,123 -j ACCEPT
-A FORWARD -p icmp -m icmp --icmp-type 8 -j ACCEPT
-A FORWARD -m length --length 0:64 -g L4
-A L4 -p tcp -m tcp --dport 22 -j RETURN
-A L4 -p udp -m udp --sport 53 -j REJECT
-A L4 -p sctp -m multiport --dports 5060 -j ACCEPT
COMMIT
`

const fuzzRules6 = `*filter
:INPUT DROP [0:0]
:FORWARD ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
-A INPUT -p tcp -m tcp --tcp-option 2 --syn -j ACCEPT
-A INPUT -p udp -m udp --dport 53 -j ACCEPT
-A INPUT -p ipv6-icmp -m icmp6 --icmpv6-type 128 -j ACCEPT
-A INPUT -s 2001:db8::/32 -j REJECT
COMMIT
`

// FuzzDecodeEval feeds arbitrary frames to Decode and both programs: no
// panic, and every Result is one Eval may return.
func FuzzDecodeEval(f *testing.F) {
	p4 := lowerText(f, rules.IPv4, "FORWARD", fuzzRules4)
	p4in := lowerText(f, rules.IPv4, "INPUT", strings.ReplaceAll(strings.ReplaceAll(fuzzRules4, "-A FORWARD -m length --length 0:64 -g L4\n", ""), "-A FORWARD", "-A INPUT"))
	p6 := lowerText(f, rules.IPv6, "INPUT", fuzzRules6)
	f.Add(tcp4(f, "10.0.0.1", "192.0.2.1", 1000, 22))
	f.Add(udp4(f, "192.0.2.1", "192.0.2.2", 53, 9))
	f.Add(frag4(f, layers.IPProtocolTCP, 1, true, make([]byte, 12)))
	f.Add(tcp6(f, "2001:db8::1", "2001:db8::2", 1000, 22))
	f.Add(build(f, ether(layers.EthernetTypeIPv6), ip6("2001:db8::1", "2001:db8::2", 0),
		hopByHop(44, &layers.IPv6HopByHopOption{OptionType: 1, OptionData: []byte{0, 0, 0, 0}}),
		gopacket.Payload(fragment(6, 0, true)), tcp(1, 2)))
	f.Add(build(f, ether(layers.EthernetTypeDot1Q), vlan(7, layers.EthernetTypeIPv4), ip4("10.1.1.1", "10.2.2.2", layers.IPProtocolICMPv4),
		&layers.ICMPv4{TypeCode: layers.CreateICMPv4TypeCode(8, 0)}))
	f.Fuzz(func(t *testing.T, frame []byte) {
		pkt, err := model.Decode(frame, model.Meta{InIface: "eth0"})
		if err != nil {
			if len(frame) >= 14 {
				t.Fatalf("Decode of %d bytes: %v", len(frame), err)
			}
			return
		}
		if pkt.L4Len < 0 || pkt.L4Len > len(frame) {
			t.Fatalf("L4Len %d out of 0..%d", pkt.L4Len, len(frame))
		}
		for _, p := range []*ir.Program{p4, p4in, p6} {
			checkResult(t, p.Eval(pkt))
		}
	})
}

func checkResult(t *testing.T, r ir.Result) {
	t.Helper()
	switch {
	case r.Verdict != ir.VerdictAccept && r.Verdict != ir.VerdictDrop && r.Verdict != ir.VerdictReject:
		t.Fatalf("verdict %s", r.Verdict)
	case r.Skipped != "" && (r.Rule != nil || r.Chain != "" || r.Verdict == ir.VerdictReject):
		t.Fatalf("skipped packet with a rule or chain: %+v", r)
	case r.Hotdrop && (r.Rule == nil || r.Verdict != ir.VerdictDrop):
		t.Fatalf("hotdrop without a rule or not DROP: %+v", r)
	case r.Skipped == "" && r.Chain == "":
		t.Fatalf("evaluated packet without a chain: %+v", r)
	}
}
