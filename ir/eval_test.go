package ir_test

import (
	"encoding/binary"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"

	"bpfwall/ir"
	"bpfwall/model"
	"bpfwall/parser/iptables"
	"bpfwall/rules"
)

const addressRules = `*filter
:INPUT DROP [0:0]
:FORWARD ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
-A INPUT -s 192.0.2.1/32 -p tcp -m tcp --dport 0 -j ACCEPT
-A INPUT -s 192.0.2.1/32 -p tcp -m tcp --dport 65535 -j REJECT
-A INPUT ! -s 10.0.0.0/8 -p udp -m udp --sport 53 -j ACCEPT
-A INPUT -d 198.51.100.0/24 -p tcp -m tcp ! --dport 1:65534 -j DROP
-A INPUT -s 10.0.0.1/255.0.0.255 -j ACCEPT
-A INPUT -s 0.0.0.0/0 -p tcp -m multiport --ports 8080 -j ACCEPT
-A INPUT -i eth+ -p udp -j DROP
-A INPUT ! -s 0.0.0.0/0 -j ACCEPT
-A INPUT -d 0.0.0.0/0 -p tcp -j REJECT
COMMIT
`

func TestEvalAddressesPortsInterfaces(t *testing.T) {
	p := lowerText(t, rules.IPv4, "INPUT", addressRules)
	runEval(t, p, []evalCase{
		{"port 0 from a /32", tcp4(t, "192.0.2.1", "198.51.100.1", 1234, 0), model.Meta{}, "ACCEPT r0"},
		{"port 65535 from a /32", tcp4(t, "192.0.2.1", "198.51.100.1", 1234, 65535), model.Meta{}, "REJECT r1"},
		{"negated port range leaves 0", tcp4(t, "192.0.2.2", "198.51.100.1", 1234, 0), model.Meta{}, "DROP r3"},
		{"negated port range leaves 65535", tcp4(t, "192.0.2.2", "198.51.100.1", 1234, 65535), model.Meta{}, "DROP r3"},
		{"/0 matches every address, negated none", tcp4(t, "192.0.2.2", "198.51.100.1", 1234, 80), model.Meta{}, "REJECT r8"},
		{"negated source excludes 10/8", udp4(t, "10.1.1.1", "198.51.100.1", 53, 9), model.Meta{}, "ACCEPT r4"},
		{"negated source", udp4(t, "172.16.0.1", "198.51.100.1", 53, 9), model.Meta{}, "ACCEPT r2"},
		{"non-contiguous mask misses", udp4(t, "10.1.1.2", "198.51.100.1", 53, 9), model.Meta{InIface: "eth1"}, "DROP r6"},
		{"wildcard interface matches the bare prefix", udp4(t, "10.1.1.2", "198.51.100.1", 53, 9), model.Meta{InIface: "eth"}, "DROP r6"},
		{"wildcard interface misses", udp4(t, "10.1.1.2", "198.51.100.1", 53, 9), model.Meta{InIface: "veth0"}, "DROP policy"},
		{"multiport either: source", tcp4(t, "203.0.113.9", "203.0.113.1", 8080, 1000), model.Meta{}, "ACCEPT r5"},
		{"multiport either: destination", tcp4(t, "203.0.113.9", "203.0.113.1", 1000, 8080), model.Meta{}, "ACCEPT r5"},
	})
}

const controlFlowRules = `*filter
:INPUT DROP [0:0]
:FORWARD ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
:A - [0:0]
:B - [0:0]
:EMPTY - [0:0]
-A INPUT -j EMPTY
-A INPUT -s 10.0.0.0/8 -j A
-A INPUT -s 10.0.0.0/8 -j ACCEPT
-A INPUT -s 192.0.2.0/24 -g B
-A INPUT -s 198.51.100.0/24 -j RETURN
-A INPUT -j LOG
-A INPUT -s 203.0.113.0/24
-A INPUT -s 203.0.113.0/24 -j ACCEPT
-A A -s 10.1.0.0/16 -j RETURN
-A A -s 10.2.0.0/16 -g B
-A A -s 10.3.0.0/16 -j DROP
-A B -s 10.2.2.0/24 -j RETURN
-A B -s 192.0.2.1/32 -j RETURN
-A B -s 192.0.2.2/32 -j ACCEPT
COMMIT
`

func TestEvalControlFlow(t *testing.T) {
	p := lowerText(t, rules.IPv4, "INPUT", controlFlowRules)
	// Chains are numbered INPUT, EMPTY, A, B: r0-r7 are INPUT's, r8-r10
	// A's, r11-r13 B's.
	udp := func(src string) []byte { return udp4(t, src, "192.0.2.200", 1000, 2000) }
	runEval(t, p, []evalCase{
		{"RETURN from a jumped-to chain", udp("10.1.1.1"), model.Meta{}, "ACCEPT r2"},
		{"RETURN after a goto returns to the jumping chain's caller", udp("10.2.2.2"), model.Meta{}, "ACCEPT r2"},
		{"end of a goto target returns to the jumping chain's caller", udp("10.2.3.3"), model.Meta{}, "ACCEPT r2"},
		{"verdict inside a user chain", udp("10.3.0.1"), model.Meta{}, "DROP r10"},
		{"end of a user chain returns", udp("10.4.0.1"), model.Meta{}, "ACCEPT r2"},
		{"RETURN after a goto from the base chain is the policy", udp("192.0.2.1"), model.Meta{}, "DROP policy"},
		{"verdict in a goto target", udp("192.0.2.2"), model.Meta{}, "ACCEPT r13"},
		{"end of a goto target from the base chain is the policy", udp("192.0.2.3"), model.Meta{}, "DROP policy"},
		{"RETURN in the base chain is the policy", udp("198.51.100.1"), model.Meta{}, "DROP policy"},
		{"LOG and counting rules continue", udp("203.0.113.1"), model.Meta{}, "ACCEPT r7"},
		{"end of the base chain is the policy", udp("8.8.8.8"), model.Meta{}, "DROP policy"},
	})
}

func TestTraceCountsMatchingRules(t *testing.T) {
	p := lowerText(t, rules.IPv4, "INPUT", controlFlowRules)
	for _, tc := range []struct {
		src  string
		want []int
	}{
		{"203.0.113.1", []int{0, 5, 6, 7}},
		{"10.2.3.3", []int{0, 1, 9, 2}},
		{"8.8.8.8", []int{0, 5}},
	} {
		pkt, err := model.Decode(udp4(t, tc.src, "192.0.2.200", 1, 2), model.Meta{})
		if err != nil {
			t.Fatal(err)
		}
		var got []int
		p.Trace(pkt, func(r *ir.Rule) { got = append(got, r.ID) })
		if !slices.Equal(got, tc.want) {
			t.Errorf("%s: counted rules %v, want %v", tc.src, got, tc.want)
		}
	}
}

func TestEvalAcceptPolicy(t *testing.T) {
	p := lowerText(t, rules.IPv4, "FORWARD", `*filter
:INPUT DROP [0:0]
:FORWARD ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
-A FORWARD -s 10.0.0.0/8 -j RETURN
-A FORWARD -j DROP
COMMIT
`)
	runEval(t, p, []evalCase{
		{"RETURN in the base chain", udp4(t, "10.0.0.1", "192.0.2.1", 1, 2), model.Meta{}, "ACCEPT policy"},
		{"DROP rule", udp4(t, "192.0.2.9", "192.0.2.1", 1, 2), model.Meta{}, "DROP r1"},
	})
}

func mustDecode(t *testing.T, frame []byte) *model.Packet {
	t.Helper()
	pkt, err := model.Decode(frame, model.Meta{})
	if err != nil {
		t.Fatalf("decode: %v", err)
	}
	return pkt
}

// fragmentRules test fragments in FORWARD, where netfilter sees each
// fragment without conntrack, and in INPUT, where IPv4 reassembles first.
const fragmentRules = `*filter
:INPUT ACCEPT [0:0]
:FORWARD ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
-A FORWARD -s 10.0.0.0/8 -p tcp -m tcp --dport 22 -j ACCEPT
-A FORWARD -p udp -m udp --dport 53 -j ACCEPT
-A FORWARD -p icmp -m icmp --icmp-type any -j ACCEPT
-A FORWARD -p icmp -m icmp --icmp-type 3/1:3 -j DROP
-A FORWARD -f -j REJECT
-A FORWARD -p tcp -m tcp --dport 22 -j ACCEPT
-A FORWARD -p tcp -j DROP
COMMIT
`

func TestEvalFragmentsAndHotdrop(t *testing.T) {
	p := lowerText(t, rules.IPv4, "FORWARD", fragmentRules)
	if p.Reassembled {
		t.Fatal("FORWARD without conntrack sees fragments, not reassembled datagrams")
	}
	tcpHdr := tcpHeader(t, 1000, 22)
	udpHdr := udp4(t, "192.0.2.1", "192.0.2.2", 1000, 53)[34:42]
	echo := []byte{8, 0, 0, 0, 0, 1, 0, 1}
	runEval(t, p, []evalCase{
		{"first fragment is matched as a packet", frag4(t, layers.IPProtocolTCP, 0, true, tcpHdr), model.Meta{}, "ACCEPT r0"},
		{"non-first fragment never matches ports", frag4(t, layers.IPProtocolTCP, 100, true, tcpHdr), model.Meta{}, "REJECT r4"},
		{"last fragment is a fragment too", frag4(t, layers.IPProtocolTCP, 100, false, tcpHdr), model.Meta{}, "REJECT r4"},
		{"tcp fragment at offset 8 is dropped", frag4(t, layers.IPProtocolTCP, 1, true, tcpHdr), model.Meta{}, "DROP hotdrop r0"},
		{"udp fragment at offset 8 is not", frag4(t, layers.IPProtocolUDP, 1, true, udpHdr), model.Meta{}, "REJECT r4"},
		{"truncated tcp header in a first fragment", frag4(t, layers.IPProtocolTCP, 0, true, tcpHdr[:10]), model.Meta{}, "DROP hotdrop r0"},
		{"truncated tcp header at the first tcp match", raw4(t, ip4("10.0.0.1", "192.0.2.2", layers.IPProtocolTCP), tcpHdr[:19]), model.Meta{}, "DROP hotdrop r0"},
		{"a failed source test before the tcp match avoids its hotdrop", raw4(t, ip4("192.0.2.1", "192.0.2.2", layers.IPProtocolTCP), tcpHdr[:19]), model.Meta{}, "DROP hotdrop r5"},
		{"udp header of exactly 8 bytes", raw4(t, ip4("192.0.2.1", "192.0.2.2", layers.IPProtocolUDP), udpHdr), model.Meta{}, "ACCEPT r1"},
		{"truncated udp header", raw4(t, ip4("192.0.2.1", "192.0.2.2", layers.IPProtocolUDP), udpHdr[:6]), model.Meta{}, "DROP hotdrop r1"},
		{"icmp type any", raw4(t, ip4("192.0.2.1", "192.0.2.2", layers.IPProtocolICMPv4), echo), model.Meta{}, "ACCEPT r2"},
		{"truncated icmp header", raw4(t, ip4("192.0.2.1", "192.0.2.2", layers.IPProtocolICMPv4), echo[:4]), model.Meta{}, "DROP hotdrop r2"},
		{"non-first icmp fragment", frag4(t, layers.IPProtocolICMPv4, 3, false, echo), model.Meta{}, "REJECT r4"},
	})
}

// In INPUT, IPv4 reassembles before netfilter (ip_local_deliver): the
// first fragment stands for the datagram, later fragments pass, -f never
// matches and a first fragment too short for the transport header is
// dropped.
func TestEvalReassembledFragments(t *testing.T) {
	p := lowerText(t, rules.IPv4, "INPUT", strings.ReplaceAll(fragmentRules, "-A FORWARD", "-A INPUT"))
	if !p.Reassembled {
		t.Fatal("IPv4 INPUT sees reassembled datagrams")
	}
	tcpHdr := tcpHeader(t, 1000, 22)
	udpHdr := udp4(t, "192.0.2.1", "192.0.2.2", 1000, 53)[34:42]
	echo := []byte{8, 0, 0, 0, 0, 1, 0, 1}
	runEval(t, p, []evalCase{
		{"first fragment stands for the datagram", frag4(t, layers.IPProtocolTCP, 0, true, tcpHdr), model.Meta{}, "ACCEPT r0"},
		{"first udp fragment", frag4(t, layers.IPProtocolUDP, 0, true, udpHdr), model.Meta{}, "ACCEPT r1"},
		{"non-first fragment passes", frag4(t, layers.IPProtocolTCP, 100, true, tcpHdr), model.Meta{}, "ACCEPT skipped"},
		{"last fragment passes", frag4(t, layers.IPProtocolTCP, 100, false, tcpHdr), model.Meta{}, "ACCEPT skipped"},
		{"tcp fragment at offset 8 passes", frag4(t, layers.IPProtocolTCP, 1, true, tcpHdr), model.Meta{}, "ACCEPT skipped"},
		{"tiny first tcp fragment", frag4(t, layers.IPProtocolTCP, 0, true, tcpHdr[:16]), model.Meta{}, "DROP skipped"},
		{"tiny first udp fragment", frag4(t, layers.IPProtocolUDP, 0, true, udpHdr[:6]), model.Meta{}, "DROP skipped"},
		{"first icmp fragment is not -f", frag4(t, layers.IPProtocolICMPv4, 0, true, echo), model.Meta{}, "ACCEPT r2"},
		{"unfragmented packets are unchanged", raw4(t, ip4("192.0.2.1", "192.0.2.2", layers.IPProtocolTCP), tcpHdr[:19]), model.Meta{}, "DROP hotdrop r5"},
	})
	tiny := p.Eval(mustDecode(t, frag4(t, layers.IPProtocolTCP, 0, true, tcpHdr[:16])))
	if tiny.Skipped != ir.SkipTinyFragment {
		t.Errorf("tiny first fragment: got %v, want %q", tiny, ir.SkipTinyFragment)
	}
	later := p.Eval(mustDecode(t, frag4(t, layers.IPProtocolUDP, 3, false, udpHdr)))
	if later.Skipped != ir.SkipLaterFragment {
		t.Errorf("later fragment: got %v, want %q", later, ir.SkipLaterFragment)
	}

	// A program that reads no transport header needs nothing of it.
	addrOnly := lowerText(t, rules.IPv4, "INPUT", `*filter
:INPUT DROP [0:0]
:FORWARD ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
-A INPUT -s 10.0.0.0/8 -j ACCEPT
COMMIT
`)
	runEval(t, addrOnly, []evalCase{
		{"tiny first fragment without transport matches", frag4(t, layers.IPProtocolTCP, 0, true, tcpHdr[:4]), model.Meta{}, "ACCEPT r0"},
	})
}

// Netfilter's INPUT sees the reassembled datagram's length: bpfwall's
// fragments cannot tell it, so a length match there is refused.
func TestLowerRefusesLengthOnReassembledChains(t *testing.T) {
	for _, tc := range []struct {
		name, chain, rule string
		fam               rules.Family
		err               string
	}{
		{"ipv4 input", "INPUT", "-A INPUT -m length --length 0:100 -j DROP", rules.IPv4, "rules:5:11: length match in INPUT"},
		{"output", "OUTPUT", "-A OUTPUT -m length --length 0:100 -j DROP", rules.IPv4, "rules:5:12: length match in OUTPUT"},
		{"forward with conntrack", "FORWARD", "-A FORWARD -m state --state NEW -m length --length 0:100 -j DROP", rules.IPv4, "length match in FORWARD"},
		{"ipv6 input with conntrack", "INPUT", "-A INPUT -m state --state NEW -m length --length 0:100 -j DROP", rules.IPv6, "length match in INPUT"},
		{"ipv6 input", "INPUT", "-A INPUT -m length --length 0:100 -j DROP", rules.IPv6, ""},
		{"forward", "FORWARD", "-A FORWARD -m length --length 0:100 -j DROP", rules.IPv4, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			text := "*filter\n:INPUT ACCEPT [0:0]\n:FORWARD ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n" + tc.rule + "\nCOMMIT\n"
			rs, err := iptables.Parse("rules", []byte(text), iptables.Options{Family: tc.fam, ForceFamily: true})
			if err != nil {
				t.Fatal(err)
			}
			_, err = ir.Lower(rs, ir.LowerOptions{Chain: tc.chain})
			switch {
			case tc.err == "" && err != nil:
				t.Errorf("got %v, want no error", err)
			case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
				t.Errorf("got %v, want an error containing %q", err, tc.err)
			}
		})
	}
}

func TestEvalICMPCodes(t *testing.T) {
	p := lowerText(t, rules.IPv4, "INPUT", `*filter
:INPUT ACCEPT [0:0]
:FORWARD ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
-A INPUT -p icmp -m icmp --icmp-type 3/1:3 -j DROP
-A INPUT -p icmp -m icmp ! --icmp-type 8 -j REJECT
COMMIT
`)
	icmp := func(typ, code uint8) []byte {
		return build(t, ether(layers.EthernetTypeIPv4), ip4("192.0.2.1", "192.0.2.2", layers.IPProtocolICMPv4),
			&layers.ICMPv4{TypeCode: layers.CreateICMPv4TypeCode(typ, code)})
	}
	runEval(t, p, []evalCase{
		{"code at the low end", icmp(3, 1), model.Meta{}, "DROP r0"},
		{"code at the high end", icmp(3, 3), model.Meta{}, "DROP r0"},
		{"code below the range", icmp(3, 0), model.Meta{}, "REJECT r1"},
		{"negated type", icmp(8, 0), model.Meta{}, "ACCEPT policy"},
	})
}

// tcpWithOptions returns a TCP header with opts appended and the data
// offset set to doff words.
func tcpWithOptions(t *testing.T, doff uint8, opts ...byte) []byte {
	h := append(tcpHeader(t, 1000, 80), opts...)
	h[12] = doff << 4
	return h
}

func TestEvalTCPFlagsAndOptions(t *testing.T) {
	p := lowerText(t, rules.IPv4, "INPUT", `*filter
:INPUT ACCEPT [0:0]
:FORWARD ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
-A INPUT -p tcp -m tcp --tcp-option 8 -j ACCEPT
-A INPUT -p tcp -m tcp --syn -j DROP
-A INPUT -p tcp -m tcp --tcp-flags ACK,FIN FIN -j REJECT
COMMIT
`)
	withFlags := func(set func(*layers.TCP)) []byte {
		l := tcp(1000, 80)
		l.SYN = false
		set(l)
		return build(t, ether(layers.EthernetTypeIPv4), ip4("192.0.2.1", "192.0.2.2", layers.IPProtocolTCP), l)
	}
	withOptions := func(opts ...layers.TCPOption) []byte {
		l := tcp(1000, 80)
		l.Options = opts
		return build(t, ether(layers.EthernetTypeIPv4), ip4("192.0.2.1", "192.0.2.2", layers.IPProtocolTCP), l)
	}
	raw := func(l4 []byte) []byte {
		return raw4(t, ip4("192.0.2.1", "192.0.2.2", layers.IPProtocolTCP), l4)
	}
	mss := layers.TCPOption{OptionType: layers.TCPOptionKindMSS, OptionLength: 4, OptionData: []byte{5, 0xb4}}
	timestamps := layers.TCPOption{OptionType: layers.TCPOptionKindTimestamps, OptionLength: 10, OptionData: make([]byte, 8)}
	nop := layers.TCPOption{OptionType: layers.TCPOptionKindNop}
	runEval(t, p, []evalCase{
		{"syn with timestamps", withOptions(mss, nop, nop, timestamps), model.Meta{}, "ACCEPT r0"},
		{"syn without timestamps", withOptions(mss), model.Meta{}, "DROP r1"},
		{"syn without options", withOptions(), model.Meta{}, "DROP r1"},
		{"fin without ack", withFlags(func(l *layers.TCP) { l.FIN = true }), model.Meta{}, "REJECT r2"},
		{"fin with ack", withFlags(func(l *layers.TCP) { l.FIN, l.ACK = true, true }), model.Meta{}, "ACCEPT policy"},
		// tcp_find_option steps over kind 0 like a NOP: it does not end the
		// list.
		{"option after end-of-list", raw(tcpWithOptions(t, 8, 0, 8, 10, 0, 0, 0, 0, 0, 0, 0, 0, 0)), model.Meta{}, "ACCEPT r0"},
		{"zero option length steps one byte", raw(tcpWithOptions(t, 6, 5, 0, 8, 0)), model.Meta{}, "ACCEPT r0"},
		{"option length steps to the next option", raw(tcpWithOptions(t, 6, 5, 2, 8, 0)), model.Meta{}, "ACCEPT r0"},
		{"a kind inside another option's data is not an option", raw(tcpWithOptions(t, 6, 5, 3, 8, 0)), model.Meta{}, "DROP r1"},
		{"options beyond the packet", raw(tcpWithOptions(t, 15, 1, 1, 1, 1)), model.Meta{}, "DROP hotdrop r0"},
		{"data offset below 5", raw(tcpWithOptions(t, 4)), model.Meta{}, "DROP hotdrop r0"},
	})
}

func TestEvalMeta(t *testing.T) {
	p := lowerText(t, rules.IPv4, "INPUT", `*filter
:INPUT ACCEPT [0:0]
:FORWARD ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
-A INPUT -m conntrack --ctstate INVALID -j DROP
-A INPUT -m conntrack --ctstate ESTABLISHED -j ACCEPT
-A INPUT -m mark --mark 0x2/0x2 -j REJECT
-A INPUT -m pkttype --pkt-type multicast -j DROP
-A INPUT -m mac ! --mac-source 02:00:00:00:00:01 -j DROP
-A INPUT -m ttl --ttl-lt 64 -j DROP
-A INPUT -m pkttype --pkt-type broadcast -j REJECT
COMMIT
`)
	frame := func(dst string) []byte { return udp4(t, "192.0.2.1", dst, 1, 2) }
	otherMAC := build(t, &layers.Ethernet{SrcMAC: testDstMAC, DstMAC: testSrcMAC, EthernetType: layers.EthernetTypeIPv4},
		ip4("192.0.2.1", "192.0.2.2", layers.IPProtocolUDP), udp(1, 2), gopacket.Payload("data"))
	lowTTL := ip4("192.0.2.1", "192.0.2.2", layers.IPProtocolUDP)
	lowTTL.TTL = 63
	established := model.Meta{CTState: model.ConnEstablished}
	newConn := model.Meta{CTState: model.ConnNew}
	runEval(t, p, []evalCase{
		{"no conntrack entry is INVALID", frame("192.0.2.2"), model.Meta{}, "DROP r0"},
		{"established", frame("192.0.2.2"), established, "ACCEPT r1"},
		{"established and NATed", frame("192.0.2.2"), model.Meta{CTState: model.ConnEstablished | model.ConnDNAT}, "ACCEPT r1"},
		{"mark under mask", frame("192.0.2.2"), model.Meta{CTState: model.ConnNew, Mark: 0x3}, "REJECT r2"},
		{"looped-back ipv4 multicast is multicast", frame("224.0.0.1"), model.Meta{CTState: model.ConnNew, PktType: model.PacketLoopback}, "DROP r3"},
		{"looped-back ipv4 unicast is broadcast", frame("192.0.2.255"), model.Meta{CTState: model.ConnNew, PktType: model.PacketLoopback}, "REJECT r6"},
		{"other source mac", otherMAC, newConn, "DROP r4"},
		{"ttl below 64", build(t, ether(layers.EthernetTypeIPv4), lowTTL, udp(1, 2), gopacket.Payload("data")), newConn, "DROP r5"},
		{"packet for another host", frame("192.0.2.2"), model.Meta{PktType: model.PacketOtherHost}, "DROP skipped"},
	})

	// Without an Ethernet header mac_mt never matches, negated or not.
	pkt := &model.Packet{
		Family: rules.IPv4, Src: netip.MustParseAddr("192.0.2.1"), Dst: netip.MustParseAddr("192.0.2.2"),
		Length: 100, TTL: 64, Meta: newConn,
	}
	if got := outcome(p.Eval(pkt)); got != "ACCEPT policy" {
		t.Errorf("packet without mac: got %s, want ACCEPT policy", got)
	}
}

// TestSetsRefused: a set whose matches depend on more than its entries
// (an entry that expires, a timeout default, a type other than hash:ip
// and hash:net) is refused, not compiled as it is now.
func TestSetsRefused(t *testing.T) {
	for _, tc := range []struct{ sets, want string }{
		{"create s hash:ip family inet\nadd s 10.0.0.1 timeout 60\n", "entries with a timeout"},
		{"create s hash:ip family inet timeout 60\nadd s 10.0.0.1\n", "create option timeout"},
		{"create s hash:ip,port family inet\nadd s 10.0.0.1,tcp:80\n", "set type hash:ip,port"},
		{"create s hash:ip family inet\nadd s 10.0.0.1 nomatch\n", "nomatch entries"},
	} {
		sets, err := iptables.ParseIPSets("ipset", []byte(tc.sets))
		if err != nil {
			t.Fatal(err)
		}
		rs, err := iptables.Parse("rules", []byte("*filter\n-A INPUT -m set --match-set s src -j DROP\nCOMMIT\n"), iptables.Options{Sets: sets})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := ir.Lower(rs, ir.LowerOptions{}); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: %v, want an error about %s", tc.sets, err, tc.want)
		}
	}
}

func TestEvalSets(t *testing.T) {
	sets, err := iptables.ParseIPSets("ipset", []byte(`create blocklist hash:net family inet hashsize 1024 maxelem 65536
add blocklist 10.0.0.0/8
add blocklist 10.1.0.0/16 nomatch
add blocklist 10.1.2.0/24
`))
	if err != nil {
		t.Fatal(err)
	}
	rs, err := iptables.Parse("rules", []byte(`*filter
:INPUT ACCEPT [0:0]
:FORWARD ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
-A INPUT -m set --match-set blocklist src -j DROP
-A INPUT -m set ! --match-set blocklist dst -j REJECT
COMMIT
`), iptables.Options{Sets: sets})
	if err != nil {
		t.Fatal(err)
	}
	p, err := ir.Lower(rs, ir.LowerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	runEval(t, p, []evalCase{
		{"in the set", udp4(t, "10.200.0.1", "10.0.0.1", 1, 2), model.Meta{}, "DROP r0"},
		{"in a nomatch exception", udp4(t, "10.1.9.1", "10.0.0.1", 1, 2), model.Meta{}, "ACCEPT policy"},
		{"in an entry inside the exception", udp4(t, "10.1.2.3", "10.0.0.1", 1, 2), model.Meta{}, "DROP r0"},
		{"negated destination lookup", udp4(t, "192.0.2.1", "10.1.9.1", 1, 2), model.Meta{}, "REJECT r1"},
	})
}

func TestDecodeIPv4Checks(t *testing.T) {
	p := lowerText(t, rules.IPv4, "FORWARD", `*filter
:INPUT ACCEPT [0:0]
:FORWARD ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
-A FORWARD -p udp -m udp --dport 53 -m length --length 32 -j ACCEPT
-A FORWARD -p udp -m udp --dport 53 -j DROP
-A FORWARD -j REJECT
COMMIT
`)
	valid := udp4(t, "192.0.2.1", "192.0.2.2", 1000, 53) // 32 bytes of IP
	patch := func(f func(ip []byte)) []byte {
		b := slices.Clone(valid)
		f(b[14:])
		return b
	}
	fixChecksum := func(ip []byte) {
		ip[10], ip[11] = 0, 0
		var sum uint32
		for i := 0; i < min(int(ip[0]&0xf)*4, len(ip)); i += 2 {
			sum += uint32(binary.BigEndian.Uint16(ip[i:]))
		}
		for sum > 0xffff {
			sum = sum>>16 + sum&0xffff
		}
		binary.BigEndian.PutUint16(ip[10:], ^uint16(sum))
	}
	withOptions := ip4("192.0.2.1", "192.0.2.2", layers.IPProtocolUDP)
	withOptions.Options = []layers.IPv4Option{{OptionType: 148, OptionLength: 4, OptionData: []byte{0, 0}}} // router alert
	runEval(t, p, []evalCase{
		{"valid", valid, model.Meta{}, "ACCEPT r0"},
		{"ethernet padding is not part of the packet", append(slices.Clone(valid), make([]byte, 100)...), model.Meta{}, "ACCEPT r0"},
		{"ports after ip options", build(t, ether(layers.EthernetTypeIPv4), withOptions, udp(1000, 53), gopacket.Payload("data")), model.Meta{}, "DROP r1"},
		{"header length below 5 words", patch(func(ip []byte) { ip[0] = 0x44; fixChecksum(ip) }), model.Meta{}, "DROP skipped"},
		{"header longer than the packet", patch(func(ip []byte) { ip[0] = 0x4f; fixChecksum(ip) }), model.Meta{}, "DROP skipped"},
		{"bad header checksum", patch(func(ip []byte) { ip[10] ^= 0xff }), model.Meta{}, "DROP skipped"},
		{"total length beyond the frame", patch(func(ip []byte) { ip[2] = 1; fixChecksum(ip) }), model.Meta{}, "DROP skipped"},
		{"total length below the header", patch(func(ip []byte) { ip[3] = 19; fixChecksum(ip) }), model.Meta{}, "DROP skipped"},
		{"version 6 in an ipv4 frame", patch(func(ip []byte) { ip[0] = 0x65; fixChecksum(ip) }), model.Meta{}, "DROP skipped"},
		{"header cut short", valid[:14+12], model.Meta{}, "DROP skipped"},
		{"vlan tag", build(t, ether(layers.EthernetTypeDot1Q), vlan(10, layers.EthernetTypeIPv4),
			ip4("192.0.2.1", "192.0.2.2", layers.IPProtocolUDP), udp(1000, 53), gopacket.Payload("data")), model.Meta{}, "ACCEPT r0"},
		{"802.1ad and 802.1Q tags", build(t, ether(layers.EthernetTypeQinQ), vlan(10, layers.EthernetTypeDot1Q), vlan(20, layers.EthernetTypeIPv4),
			ip4("192.0.2.1", "192.0.2.2", layers.IPProtocolUDP), udp(1000, 53), gopacket.Payload("data")), model.Meta{}, "ACCEPT r0"},
		{"three vlan tags", build(t, ether(layers.EthernetTypeQinQ), vlan(10, layers.EthernetTypeDot1Q), vlan(20, layers.EthernetTypeDot1Q), vlan(30, layers.EthernetTypeIPv4),
			ip4("192.0.2.1", "192.0.2.2", layers.IPProtocolUDP), udp(1000, 53), gopacket.Payload("data")), model.Meta{}, "ACCEPT skipped"},
		{"arp", build(t, ether(layers.EthernetTypeARP), gopacket.Payload(make([]byte, 28))), model.Meta{}, "ACCEPT skipped"},
		{"ipv6 packet, ipv4 rules", tcp6(t, "2001:db8::1", "2001:db8::2", 1, 2), model.Meta{}, "ACCEPT skipped"},
	})
	if _, err := model.Decode(valid[:13], model.Meta{}); err == nil {
		t.Error("Decode of a 13-byte frame: no error")
	}
}

// IPv6 extension headers, written out as bytes.
func destOpts(next uint8) []byte { return []byte{next, 0, 1, 4, 0, 0, 0, 0} } // PadN
func routing(next uint8) []byte  { return []byte{next, 0, 0, 0, 0, 0, 0, 0} } // type 0, no segments left
func fragment(next uint8, offset uint16, more bool) []byte {
	b := []byte{next, 0, 0, 0, 0, 0, 0, 1}
	v := offset << 3
	if more {
		v |= 1
	}
	binary.BigEndian.PutUint16(b[2:], v)
	return b
}

func hopByHop(next uint8, opts ...*layers.IPv6HopByHopOption) *layers.IPv6HopByHop {
	h := &layers.IPv6HopByHop{Options: opts}
	h.NextHeader = layers.IPProtocol(next)
	return h
}

func TestEvalIPv6(t *testing.T) {
	p := lowerText(t, rules.IPv6, "INPUT", `*filter
:INPUT DROP [0:0]
:FORWARD DROP [0:0]
:OUTPUT ACCEPT [0:0]
-A INPUT -s 2001:db8:bad::/48 -j REJECT
-A INPUT -p tcp -m tcp --dport 22 -j ACCEPT
-A INPUT -p udp -j ACCEPT
-A INPUT -p ipv6-icmp -m icmp6 --icmpv6-type 128 -j ACCEPT
-A INPUT -p 59 -j ACCEPT
-A INPUT -p tcp -j REJECT
-A INPUT -m pkttype --pkt-type multicast -j ACCEPT
COMMIT
`)
	const (
		tcpProto  = 6
		destProto = 60
		noNext    = 59
	)
	src, dst := "2001:db8::1", "2001:db8::2"
	// withExt is an IPv6 packet carrying ext (raw extension headers) and
	// then a TCP header to port 22.
	withExt := func(src string, first uint8, ext ...[]byte) []byte {
		var raw []byte
		for _, e := range ext {
			raw = append(raw, e...)
		}
		return build(t, ether(layers.EthernetTypeIPv6), ip6(src, dst, layers.IPProtocol(first)), gopacket.Payload(raw), tcp(1000, 22))
	}
	cut := func(b []byte, n int) []byte {
		b = slices.Clone(b[:n])
		binary.BigEndian.PutUint16(b[14+4:], uint16(n-14-40))
		return b
	}
	padN := &layers.IPv6HopByHopOption{OptionType: 1, OptionData: []byte{0, 0, 0, 0}}
	unknownSkip := &layers.IPv6HopByHopOption{OptionType: 0x3e, OptionData: []byte{0, 0, 0, 0}}
	unknownDrop := &layers.IPv6HopByHopOption{OptionType: 0x7e, OptionData: []byte{0, 0, 0, 0}}
	hbh := func(opt *layers.IPv6HopByHopOption) []byte {
		return build(t, ether(layers.EthernetTypeIPv6), ip6(src, dst, 0), hopByHop(tcpProto, opt), tcp(1000, 22))
	}
	echo := build(t, ether(layers.EthernetTypeIPv6), ip6(src, dst, layers.IPProtocolICMPv6),
		&layers.ICMPv6{TypeCode: layers.CreateICMPv6TypeCode(128, 0)}, gopacket.Payload([]byte{0, 1, 0, 1}))
	runEval(t, p, []evalCase{
		{"tcp", tcp6(t, src, dst, 1000, 22), model.Meta{}, "ACCEPT r1"},
		{"tcp behind destination options, routing and a first fragment", withExt(src, destProto, destOpts(43), routing(44), fragment(tcpProto, 0, true)), model.Meta{}, "ACCEPT r1"},
		{"tcp behind hop-by-hop padding", hbh(padN), model.Meta{}, "ACCEPT r1"},
		{"unknown hop-by-hop option to skip", hbh(unknownSkip), model.Meta{}, "ACCEPT r1"},
		{"unknown hop-by-hop option to drop", hbh(unknownDrop), model.Meta{}, "DROP skipped"},
		{"non-first fragment matches the protocol only", withExt(src, 44, fragment(tcpProto, 100, false)), model.Meta{}, "REJECT r5"},
		{"non-first fragment followed by an extension header", withExt(src, 44, fragment(destProto, 100, false), destOpts(tcpProto)), model.Meta{}, "DROP hotdrop r1"},
		{"bad extension headers do not stop rules without -p", withExt("2001:db8:bad::1", 44, fragment(destProto, 100, false), destOpts(tcpProto)), model.Meta{}, "REJECT r0"},
		{"extension header cut in its first two bytes", cut(withExt(src, destProto, destOpts(tcpProto)), 14+40+1), model.Meta{}, "DROP hotdrop r1"},
		{"extension header longer than the packet", cut(withExt(src, destProto, destOpts(tcpProto)), 14+40+4), model.Meta{}, "DROP hotdrop r1"},
		{"tcp header cut short", cut(tcp6(t, src, dst, 1000, 22), 14+40+19), model.Meta{}, "DROP hotdrop r1"},
		{"icmpv6 echo request", echo, model.Meta{}, "ACCEPT r3"},
		{"no next header", build(t, ether(layers.EthernetTypeIPv6), ip6(src, dst, noNext)), model.Meta{}, "ACCEPT r4"},
		{"payload length beyond the frame", tcp6(t, src, dst, 1000, 22)[:14+40+10], model.Meta{}, "DROP skipped"},
		{"multicast source", tcp6(t, "ff02::1", dst, 1000, 22), model.Meta{}, "DROP skipped"},
		{"loopback source from the wire", tcp6(t, "::1", dst, 1000, 22), model.Meta{InIface: "eth0"}, "DROP skipped"},
		{"loopback source on lo", tcp6(t, "::1", "::1", 1000, 22), model.Meta{InIface: "lo"}, "ACCEPT r1"},
		{"ipv4 packet, ipv6 rules", tcp4(t, "192.0.2.1", "192.0.2.2", 1, 22), model.Meta{}, "ACCEPT skipped"},
	})
}

func TestEvalIPv6PktTypeLoopback(t *testing.T) {
	p := lowerText(t, rules.IPv6, "INPUT", `*filter
:INPUT ACCEPT [0:0]
:FORWARD DROP [0:0]
:OUTPUT ACCEPT [0:0]
-A INPUT -m pkttype --pkt-type multicast -j DROP
COMMIT
`)
	runEval(t, p, []evalCase{
		// pkttype_mt calls every looped-back IPv6 packet multicast.
		{"looped back unicast", tcp6(t, "2001:db8::1", "2001:db8::2", 1, 2), model.Meta{PktType: model.PacketLoopback}, "DROP r0"},
		{"host", tcp6(t, "2001:db8::1", "2001:db8::2", 1, 2), model.Meta{}, "ACCEPT policy"},
	})
}
