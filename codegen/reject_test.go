package codegen_test

import (
	"bytes"
	"fmt"
	"net"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"

	"bpfwall/codegen"
	"bpfwall/internal/testenv"
	"bpfwall/ir"
	"bpfwall/parser/iptables"
	"bpfwall/rules"
)

// rejectRules reject by destination port, one --reject-with per port.
const rejectRules4 = `*filter
:INPUT ACCEPT [0:0]
-A INPUT -f -j REJECT
-A INPUT -p tcp --dport 23 -j REJECT --reject-with tcp-reset
-A INPUT -p udp --dport 100 -j REJECT --reject-with icmp-net-unreachable
-A INPUT -p udp --dport 101 -j REJECT --reject-with icmp-host-unreachable
-A INPUT -p udp --dport 102 -j REJECT --reject-with icmp-proto-unreachable
-A INPUT -p udp --dport 103 -j REJECT
-A INPUT -p udp --dport 109 -j REJECT --reject-with icmp-net-prohibited
-A INPUT -p udp --dport 110 -j REJECT --reject-with icmp-host-prohibited
-A INPUT -p udp --dport 113 -j REJECT --reject-with icmp-admin-prohibited
-A INPUT -p tcp --dport 103 -j REJECT
-A INPUT -p icmp -j REJECT
-A INPUT -p 253 -j REJECT
COMMIT
`

const rejectRules6 = `*filter
:INPUT ACCEPT [0:0]
-A INPUT -p tcp --dport 23 -j REJECT --reject-with tcp-reset
-A INPUT -p udp --dport 100 -j REJECT --reject-with icmp6-no-route
-A INPUT -p udp --dport 101 -j REJECT --reject-with icmp6-adm-prohibited
-A INPUT -p udp --dport 103 -j REJECT --reject-with icmp6-addr-unreachable
-A INPUT -p udp --dport 104 -j REJECT
-A INPUT -p udp --dport 105 -j REJECT --reject-with icmp6-policy-fail
-A INPUT -p udp --dport 106 -j REJECT --reject-with icmp6-reject-route
-A INPUT -p tcp --dport 104 -j REJECT
-A INPUT -p icmpv6 -j REJECT
COMMIT
`

var (
	rjOurMAC  = net.HardwareAddr{0x02, 0, 0, 0, 0, 1} // eth0 of newNetns
	rjPeerMAC = net.HardwareAddr{0x02, 0, 0, 0, 0, 9}
)

// rejectProbe is a frame sent to the program and the reply the kernel
// would send, as rejectReply builds it; nil for none.
type rejectProbe struct {
	name  string
	frame []byte
	want  []byte
	// pass: the program lets the probe through (a later fragment where
	// netfilter sees reassembled datagrams).
	pass bool
}

// TestRejectReplies runs probes through programs that reject them, with
// BPF_PROG_TEST_RUN, and compares the frame each program transmits with
// the reply rejectReply builds after the kernel's nf_reject_ipv4.c,
// nf_reject_ipv6.c, icmp.c and icmp6 code; probes the kernel sends
// nothing to must be dropped without a reply.
func TestRejectReplies(t *testing.T) {
	testenv.RequireRoot(t)
	ns := newNetns(t)
	for _, fam := range []rules.Family{rules.IPv4, rules.IPv6} {
		src := rejectRules4
		if fam == rules.IPv6 {
			src = rejectRules6
		}
		rs, err := iptables.Parse("reject.rules", []byte(src), iptables.Options{Family: fam, ForceFamily: true})
		if err != nil {
			t.Fatal(err)
		}
		p, err := ir.Lower(rs, ir.LowerOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, hook := range []codegen.Hook{codegen.HookXDP, codegen.HookTCIngress} {
			for _, level := range codegen.Levels {
				t.Run(fmt.Sprintf("%s/%s/%v", fam, hook, level), func(t *testing.T) {
					prog, err := codegen.Compile(p, codegen.Options{Trace: true, Hook: hook, Level: level})
					if err != nil {
						t.Fatal(err)
					}
					l := load(t, prog, ns)
					for _, pr := range rejectProbes(t, fam) {
						got, ret, err := l.runReply(pr.frame, ns.devs[1])
						if err != nil {
							t.Fatalf("%s: %v", pr.name, err)
						}
						checkReply(t, pr, hook, got, ret)
					}
				})
			}
		}
	}
}

// runReply runs frame and returns the frame the program left and its
// return code.
func (l *loaded) runReply(frame []byte, dev device) ([]byte, uint32, error) {
	opts := &ebpf.RunOptions{Data: frame, DataOut: make([]byte, len(frame)+256)}
	if l.p.Hook == codegen.HookXDP {
		opts.Context = [4]uint32{0, uint32(len(frame)), 0, dev.index}
	} else {
		var skb [11]uint32
		skb[10] = dev.index
		opts.Context = skb
	}
	var ret uint32
	var err error
	l.ns.do(func() { ret, err = l.prog.Run(opts) })
	return opts.DataOut, ret, err
}

func checkReply(t *testing.T, pr rejectProbe, hook codegen.Hook, got []byte, ret uint32) {
	t.Helper()
	sent := ret == 3 && hook == codegen.HookXDP || ret == 7 && hook != codegen.HookXDP
	dropped := ret == 1 && hook == codegen.HookXDP || ret == 2 && hook != codegen.HookXDP
	passed := ret == 2 && hook == codegen.HookXDP || ret == 0 && hook != codegen.HookXDP
	switch {
	case pr.pass && !passed:
		t.Errorf("%s: return code %d, want it passed", pr.name, ret)
	case pr.pass:
	case pr.want == nil && !dropped:
		t.Errorf("%s: return code %d, want a drop without reply", pr.name, ret)
	case pr.want == nil:
	case !sent:
		t.Errorf("%s: return code %d, want the reply sent", pr.name, ret)
	default:
		want := bytes.Clone(pr.want)
		// An ICMP error's IP ID is ip_select_ident's; the program's is
		// random. Take it over, and fix the header checksum.
		if off, ok := ipv4ICMP(want); ok && len(got) >= off+20 {
			copy(want[off+4:off+6], got[off+4:off+6])
			fixIPv4Checksum(want[off : off+20])
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s: reply differs\n got %s\nwant %s", pr.name, describeFrame(got), describeFrame(want))
		}
	}
}

// ipv4ICMP returns the offset of frame's IPv4 header when it carries
// ICMP.
func ipv4ICMP(frame []byte) (int, bool) {
	off := 14
	if len(frame) >= 18 && frame[12] == 0x81 && frame[13] == 0 {
		off += 4
	}
	return off, len(frame) >= off+20 && frame[off-2] == 0x08 && frame[off-1] == 0 && frame[off+9] == 1
}

func fixIPv4Checksum(h []byte) {
	h[10], h[11] = 0, 0
	var sum uint32
	for i := 0; i < len(h); i += 2 {
		sum += uint32(h[i])<<8 | uint32(h[i+1])
	}
	for sum > 0xffff {
		sum = sum&0xffff + sum>>16
	}
	h[10], h[11] = byte(^sum>>8), byte(^sum)
}

func describeFrame(b []byte) string {
	p := gopacket.NewPacket(b, layers.LayerTypeEthernet, gopacket.Default)
	return fmt.Sprintf("%d bytes %x\n%s", len(b), b, p.Dump())
}

// rejectProbes are the probes for the rules of family fam.
func rejectProbes(t testing.TB, fam rules.Family) []rejectProbe {
	v6 := fam == rules.IPv6
	src, dst := net.IP{192, 0, 2, 2}, net.IP{192, 0, 2, 1}
	if v6 {
		src, dst = net.ParseIP("2001:db8::2"), net.ParseIP("2001:db8::1")
	}
	eth := func() *layers.Ethernet {
		typ := layers.EthernetTypeIPv4
		if v6 {
			typ = layers.EthernetTypeIPv6
		}
		return &layers.Ethernet{SrcMAC: rjPeerMAC, DstMAC: rjOurMAC, EthernetType: typ}
	}
	ip := func(proto layers.IPProtocol) gopacket.NetworkLayer {
		if v6 {
			return &layers.IPv6{Version: 6, TrafficClass: 0x28, FlowLabel: 0x12345, NextHeader: proto, HopLimit: 63, SrcIP: src, DstIP: dst}
		}
		return &layers.IPv4{Version: 4, IHL: 5, TOS: 0x2e, Id: 0x1234, TTL: 63, Protocol: proto, SrcIP: src, DstIP: dst}
	}
	udp := func(dport uint16, n int) []gopacket.SerializableLayer {
		n4 := ip(layers.IPProtocolUDP)
		u := &layers.UDP{SrcPort: 5555, DstPort: layers.UDPPort(dport)}
		u.SetNetworkLayerForChecksum(n4)
		return []gopacket.SerializableLayer{eth(), n4.(gopacket.SerializableLayer), u, gopacket.Payload(bytes.Repeat([]byte{0xa5}, n))}
	}
	tcp := func(dport uint16, syn, ack bool, n int) []gopacket.SerializableLayer {
		n4 := ip(layers.IPProtocolTCP)
		tc := &layers.TCP{SrcPort: 40000, DstPort: layers.TCPPort(dport), Seq: 0xfffffff0, Ack: 0x01020304, SYN: syn, ACK: ack, PSH: n > 0, Window: 512, DataOffset: 5}
		if syn {
			tc.Options = []layers.TCPOption{{OptionType: layers.TCPOptionKindMSS, OptionLength: 4, OptionData: []byte{5, 0xb4}}}
		}
		tc.SetNetworkLayerForChecksum(n4)
		return []gopacket.SerializableLayer{eth(), n4.(gopacket.SerializableLayer), tc, gopacket.Payload(bytes.Repeat([]byte{0x5a}, n))}
	}
	ser := func(ls []gopacket.SerializableLayer) []byte {
		buf := gopacket.NewSerializeBuffer()
		if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true}, ls...); err != nil {
			t.Fatal(err)
		}
		return bytes.Clone(buf.Bytes())
	}
	var out []rejectProbe
	add := func(name string, frame []byte, r *rejectSpec) {
		var want []byte
		if r != nil {
			want = rejectReply(t, frame, *r)
		}
		out = append(out, rejectProbe{name: name, frame: frame, want: want})
	}
	tagged := func(ls []gopacket.SerializableLayer) []byte {
		e := ls[0].(*layers.Ethernet)
		tag := &layers.Dot1Q{VLANIdentifier: 42, Type: e.EthernetType}
		e.EthernetType = layers.EthernetTypeDot1Q
		return ser(append([]gopacket.SerializableLayer{e, tag}, ls[1:]...))
	}
	rst := &rejectSpec{tcpReset: true}
	add("syn", ser(tcp(23, true, false, 0)), rst)
	add("syn on a vlan", tagged(tcp(23, true, false, 0)), rst)
	add("ack with data", ser(tcp(23, false, true, 100)), rst)
	add("data without ack", ser(tcp(23, false, false, 33)), rst)
	fin := ser(tcp(23, false, false, 0))
	setTCPFlags(fin, v6, 0x01) // FIN
	add("fin", fin, rst)
	r := ser(tcp(23, false, true, 0))
	setTCPFlags(r, v6, 0x14) // RST, ACK
	add("rst gets nothing", r, nil)
	bad := ser(tcp(23, true, false, 0))
	bad[len(ipPacketFrame(bad))-1] ^= 0xff // the MSS option's last byte
	add("bad tcp checksum", bad, nil)
	// A sender that leaves its checksum to the device (CHECKSUM_PARTIAL)
	// puts the pseudo-header's sum in the field: the kernel answers.
	partial := ser(tcp(23, true, false, 0))
	partialChecksum(partial, v6)
	add("partial tcp checksum", partial, rst)
	port, code := uint16(103), uint8(3) // port unreachable
	if v6 {
		port, code = 104, 4
	}
	partial = ser(udp(port, 10))
	partialChecksum(partial, v6)
	add("partial udp checksum", partial, &rejectSpec{code: code})
	if v6 {
		for _, c := range []struct {
			port uint16
			code uint8
		}{{100, 0}, {101, 1}, {103, 3}, {104, 4}, {105, 5}, {106, 6}} {
			add(fmt.Sprintf("udp code %d", c.code), ser(udp(c.port, 10)), &rejectSpec{code: c.code})
		}
		add("tcp port unreachable", ser(tcp(104, true, false, 0)), &rejectSpec{code: 4})
		add("large udp quoted to 1232 bytes", ser(udp(104, 1400)), &rejectSpec{code: 4})
		add("udp on a vlan", tagged(udp(104, 10)), &rejectSpec{code: 4})
	} else {
		for _, c := range []struct {
			port uint16
			code uint8
		}{{100, 0}, {101, 1}, {102, 2}, {103, 3}, {109, 9}, {110, 10}, {113, 13}} {
			add(fmt.Sprintf("udp code %d", c.code), ser(udp(c.port, 10)), &rejectSpec{code: c.code})
		}
		add("tcp port unreachable", ser(tcp(103, false, true, 20)), &rejectSpec{code: 3})
		add("large udp quoted to 548 bytes", ser(udp(103, 1400)), &rejectSpec{code: 3})
		add("udp on a vlan", tagged(udp(103, 10)), &rejectSpec{code: 3})
		zero := ser(udp(103, 10))
		zero[14+20+6], zero[14+20+7] = 0, 0
		add("udp without checksum", zero, &rejectSpec{code: 3})
		echo := ser([]gopacket.SerializableLayer{eth(), ip(layers.IPProtocolICMPv4).(gopacket.SerializableLayer),
			&layers.ICMPv4{TypeCode: layers.CreateICMPv4TypeCode(8, 0), Id: 1, Seq: 2}, gopacket.Payload("ping")})
		add("echo request", echo, &rejectSpec{code: 3})
		unreach := ser([]gopacket.SerializableLayer{eth(), ip(layers.IPProtocolICMPv4).(gopacket.SerializableLayer),
			&layers.ICMPv4{TypeCode: layers.CreateICMPv4TypeCode(3, 3)}, gopacket.Payload(make([]byte, 28))})
		add("icmp error gets nothing", unreach, nil)
		add("unknown protocol, empty", ser([]gopacket.SerializableLayer{eth(), ip(253).(gopacket.SerializableLayer)}), &rejectSpec{code: 3})
		frag := ser(udp(103, 10))
		frag[14+6] = 0x00
		frag[14+7] = 0x10 // offset 128
		fixIPv4Checksum(frag[14:34])
		// INPUT sees the reassembled datagram: a later fragment passes,
		// the first decides.
		out = append(out, rejectProbe{name: "non-first fragment passes", frame: frag, pass: true})
		first := ser(udp(103, 10))
		first[14+6], first[14+7] = 0x20, 0 // MF, offset 0
		fixIPv4Checksum(first[14:34])
		// The kernel answers the reassembled datagram, which the program
		// never holds: nothing.
		add("first fragment gets nothing", first, nil)
		bcast := ser(udp(103, 10))
		copy(bcast, []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff})
		add("link-layer broadcast gets nothing", bcast, nil)
		badUDP := ser(udp(103, 10))
		badUDP[len(ipPacketFrame(badUDP))-1] ^= 1
		add("bad udp checksum", badUDP, nil)
		badICMP := bytes.Clone(echo)
		badICMP[len(ipPacketFrame(badICMP))-1] ^= 1
		add("bad icmp checksum", badICMP, nil)
		mcast := ser(udp(103, 10))
		copy(mcast[14+16:], []byte{224, 0, 0, 9})
		fixIPv4Checksum(mcast[14:34])
		add("multicast destination gets nothing", mcast, nil)
	}
	if v6 {
		echo := ser([]gopacket.SerializableLayer{eth(), ip(layers.IPProtocolICMPv6).(gopacket.SerializableLayer),
			icmp6(ip(layers.IPProtocolICMPv6), 128), gopacket.Payload("ping")})
		add("echo request", echo, &rejectSpec{code: 4})
		unreach := ser([]gopacket.SerializableLayer{eth(), ip(layers.IPProtocolICMPv6).(gopacket.SerializableLayer),
			icmp6(ip(layers.IPProtocolICMPv6), 1), gopacket.Payload(make([]byte, 48))})
		add("icmpv6 error gets nothing", unreach, nil)
		bad := ser(udp(104, 10))
		bad[len(ipPacketFrame(bad))-1] ^= 1
		add("bad udp checksum", bad, nil)
	}
	return out
}

func icmp6(n gopacket.NetworkLayer, typ uint8) *layers.ICMPv6 {
	i := &layers.ICMPv6{TypeCode: layers.CreateICMPv6TypeCode(typ, 0)}
	i.SetNetworkLayerForChecksum(n)
	return i
}

// partialChecksum sets the checksum field of an untagged frame's TCP or
// UDP header to the sum of its pseudo-header, as a sender that left the
// checksum to the device does (tcp_v4_send_check, udp4_hwcsum and their
// IPv6 counterparts with CHECKSUM_PARTIAL).
func partialChecksum(frame []byte, v6 bool) {
	pkt := ipPacketFrame(frame)[14:]
	var pseudo []byte
	var l4 []byte
	var proto byte
	if v6 {
		l4, proto = pkt[40:], pkt[6]
		pseudo = append(append(pseudo, pkt[8:40]...), 0, 0, byte(len(l4)>>8), byte(len(l4)), 0, 0, 0, proto)
	} else {
		ihl := int(pkt[0]&0xf) * 4
		l4, proto = pkt[ihl:], pkt[9]
		pseudo = append(append(pseudo, pkt[12:20]...), 0, proto, byte(len(l4)>>8), byte(len(l4)))
	}
	var sum uint32
	for i := 0; i < len(pseudo); i += 2 {
		sum += uint32(pseudo[i])<<8 | uint32(pseudo[i+1])
	}
	for sum > 0xffff {
		sum = sum&0xffff + sum>>16
	}
	at := 6
	if proto == 6 {
		at = 16
	}
	l4[at], l4[at+1] = byte(sum>>8), byte(sum)
}

// setTCPFlags sets a TCP frame's flags and fixes its checksum.
func setTCPFlags(frame []byte, v6 bool, flags byte) {
	p := gopacket.NewPacket(frame, layers.LayerTypeEthernet, gopacket.Default)
	tc := p.Layer(layers.LayerTypeTCP).(*layers.TCP)
	tc.FIN, tc.SYN, tc.RST, tc.PSH, tc.ACK = flags&1 != 0, flags&2 != 0, flags&4 != 0, flags&8 != 0, flags&0x10 != 0
	tc.SetNetworkLayerForChecksum(p.NetworkLayer())
	buf := gopacket.NewSerializeBuffer()
	ls := []gopacket.SerializableLayer{p.Layer(layers.LayerTypeEthernet).(*layers.Ethernet), p.NetworkLayer().(gopacket.SerializableLayer), tc, gopacket.Payload(tc.Payload)}
	if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true}, ls...); err != nil {
		panic(err)
	}
	copy(frame, buf.Bytes())
}

// rejectSpec is what a REJECT sends.
type rejectSpec struct {
	tcpReset bool
	code     uint8
}

// rejectReply builds the reply the kernel sends to frame, from the
// firewall's interface to the sender: nf_send_reset (nf_reject_iphdr_put:
// TOS 0, ID 0, DF; nf_reject_ip_tcphdr_put) and nf_send_reset6, or
// icmp_send (TOS: RT_TOS and precedence 6; no DF; up to 576 bytes) and
// icmp6_send (traffic class 0, flow label 0 here, up to 1280 bytes), with
// the default TTL and hop limit, 64.
func rejectReply(t testing.TB, frame []byte, r rejectSpec) []byte {
	p := gopacket.NewPacket(frame, layers.LayerTypeEthernet, gopacket.Default)
	in := p.Layer(layers.LayerTypeEthernet).(*layers.Ethernet)
	eth := &layers.Ethernet{SrcMAC: in.DstMAC, DstMAC: in.SrcMAC, EthernetType: in.EthernetType}
	// A VLAN tag stays: the reply leaves on the VLAN the packet came on.
	l2 := []gopacket.SerializableLayer{eth}
	off := 14
	if tag, ok := p.Layer(layers.LayerTypeDot1Q).(*layers.Dot1Q); ok {
		l2 = append(l2, &layers.Dot1Q{Priority: tag.Priority, VLANIdentifier: tag.VLANIdentifier, Type: tag.Type})
		off += 4
	}
	var raw []byte // the IP datagram
	var net4 *layers.IPv4
	var net6 *layers.IPv6
	var ipLayer gopacket.NetworkLayer
	switch n := p.NetworkLayer().(type) {
	case *layers.IPv4:
		raw = frame[off : off+int(n.Length)]
		net4 = &layers.IPv4{Version: 4, IHL: 5, TTL: 64, SrcIP: n.DstIP, DstIP: n.SrcIP}
		ipLayer = net4
	case *layers.IPv6:
		raw = frame[off : off+40+int(n.Length)]
		net6 = &layers.IPv6{Version: 6, HopLimit: 64, SrcIP: n.DstIP, DstIP: n.SrcIP}
		ipLayer = net6
	default:
		t.Fatalf("no IP in %x", frame)
	}
	var ls []gopacket.SerializableLayer
	if r.tcpReset {
		in := p.Layer(layers.LayerTypeTCP).(*layers.TCP)
		out := &layers.TCP{SrcPort: in.DstPort, DstPort: in.SrcPort, RST: true, DataOffset: 5}
		if in.ACK {
			out.Seq = in.Ack
		} else {
			n := uint32(len(in.Payload))
			if in.SYN {
				n++
			}
			if in.FIN {
				n++
			}
			out.Ack, out.ACK = in.Seq+n, true
		}
		out.SetNetworkLayerForChecksum(ipLayer)
		if net4 != nil {
			net4.Flags, net4.Protocol = layers.IPv4DontFragment, layers.IPProtocolTCP
		} else {
			net6.NextHeader = layers.IPProtocolTCP
		}
		ls = append(l2, ipLayer.(gopacket.SerializableLayer), out)
	} else if net4 != nil {
		net4.TOS = raw[1]&0x1e | 0xc0
		net4.Protocol = layers.IPProtocolICMPv4
		quote := raw[:min(len(raw), 576-28)]
		ls = append(l2, net4, &layers.ICMPv4{TypeCode: layers.CreateICMPv4TypeCode(3, r.code)}, gopacket.Payload(quote))
	} else {
		net6.NextHeader = layers.IPProtocolICMPv6
		quote := raw[:min(len(raw), 1280-48)]
		icmp := &layers.ICMPv6{TypeCode: layers.CreateICMPv6TypeCode(1, r.code)}
		icmp.SetNetworkLayerForChecksum(net6)
		// The 4 unused bytes, then the quote.
		ls = append(l2, net6, icmp, gopacket.Payload(append(make([]byte, 4), quote...)))
	}
	buf := gopacket.NewSerializeBuffer()
	if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true}, ls...); err != nil {
		t.Fatal(err)
	}
	// Without the padding to 60 bytes that gopacket adds: nothing pads a
	// frame before the device does.
	return bytes.Clone(ipPacketFrame(buf.Bytes()))
}

// ipPacketFrame is frame cut after its IP datagram.
func ipPacketFrame(frame []byte) []byte {
	off := 14
	if frame[12] == 0x81 && frame[13] == 0x00 {
		off += 4
	}
	if frame[off-2] == 0x08 {
		return frame[:off+(int(frame[off+2])<<8|int(frame[off+3]))]
	}
	return frame[:off+40+(int(frame[off+4])<<8|int(frame[off+5]))]
}
