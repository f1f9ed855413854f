package codegen_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"net"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"golang.org/x/sys/unix"

	"bpfwall/codegen"
	"bpfwall/codegen/abi"
	"bpfwall/internal/testenv"
	"bpfwall/ir"
	"bpfwall/loader"
	"bpfwall/parser/iptables"
	"bpfwall/rules"
)

// family is a rule set that grows with n, and a packet none of its rules
// matches: the worst case, which walks every rule at -O0.
type family struct {
	name   string
	rules  func(n int) string
	packet func(tb testing.TB) []byte
}

var families = []family{
	{"linear", func(n int) string { return linearRules(n, rules.IPv4) }, func(tb testing.TB) []byte {
		return frame4(tb, layers.IPProtocolTCP, "192.0.2.1", "192.0.2.2", 40000, 65000)
	}},
	{"bpfilter", bpfilterRules, func(tb testing.TB) []byte {
		return frame4(tb, layers.IPProtocolUDP, "192.0.2.1", "192.0.2.2", 40000, 65000)
	}},
	{"blocklist", blocklistRules, func(tb testing.TB) []byte {
		return frame4(tb, layers.IPProtocolTCP, "192.0.2.1", "192.0.2.2", 40000, 80)
	}},
	{"allowlist", allowlistRules, func(tb testing.TB) []byte {
		return frame4(tb, layers.IPProtocolTCP, "192.0.2.1", "10.0.0.1", 40000, 65000)
	}},
}

// bpfilterRules is the bpfilter benchmark's rule set: n rules
// "-s X/32 -p udp --dport P -j DROP", then "-p udp --dport 1500 -j DROP".
func bpfilterRules(n int) string {
	var b strings.Builder
	b.WriteString("*filter\n:INPUT ACCEPT [0:0]\n:FORWARD ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n")
	for i := range n {
		fmt.Fprintf(&b, "-A INPUT -s 10.%d.%d.%d/32 -p udp -m udp --dport %d -j DROP\n", i>>16&0xff, i>>8&0xff, i&0xff, 2000+i%50000)
	}
	b.WriteString("-A INPUT -p udp -m udp --dport 1500 -j DROP\nCOMMIT\n")
	return b.String()
}

// blocklistRules drops n source prefixes of lengths 12 to 32 in
// 11.0.0.0-99.255.255.255.
func blocklistRules(n int) string {
	var b strings.Builder
	b.WriteString("*filter\n:INPUT ACCEPT [0:0]\n:FORWARD ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n")
	x := uint32(2463534242)
	for i := range n {
		x ^= x << 13
		x ^= x >> 17
		x ^= x << 5
		a := (11+x%89)<<24 | x>>8&0xffffff
		fmt.Fprintf(&b, "-A INPUT -s %d.%d.%d.%d/%d -j DROP\n", a>>24, a>>16&0xff, a>>8&0xff, a&0xff, 12+i%21)
	}
	b.WriteString("COMMIT\n")
	return b.String()
}

// allowlistRules allows, per server 10.x.y.z, a TCP or UDP port or range
// of ports below 60000; the policy drops the rest.
func allowlistRules(n int) string {
	var b strings.Builder
	b.WriteString("*filter\n:INPUT DROP [0:0]\n:FORWARD ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n")
	for i := range n {
		proto := []string{"tcp", "udp"}[i%2]
		lo := 1000 + (i*37)%50000
		ports := fmt.Sprint(lo)
		if i%3 != 0 {
			ports = fmt.Sprintf("%d:%d", lo, lo+1+i%200)
		}
		fmt.Fprintf(&b, "-A INPUT -d 10.%d.%d.%d/32 -p %s -m %s --dport %s -j ACCEPT\n", i>>16&0xff, i>>8&0xff, i&0xff, proto, proto, ports)
	}
	b.WriteString("COMMIT\n")
	return b.String()
}

func frame4(tb testing.TB, proto layers.IPProtocol, src, dst string, sport, dport uint16) []byte {
	eth := &layers.Ethernet{SrcMAC: net.HardwareAddr{2, 0, 0, 0, 0, 2}, DstMAC: make(net.HardwareAddr, 6), EthernetType: layers.EthernetTypeIPv4}
	ip := &layers.IPv4{Version: 4, TTL: 64, Protocol: proto, SrcIP: net.ParseIP(src).To4(), DstIP: net.ParseIP(dst).To4()}
	var l4 gopacket.SerializableLayer
	switch proto {
	case layers.IPProtocolUDP:
		u := &layers.UDP{SrcPort: layers.UDPPort(sport), DstPort: layers.UDPPort(dport)}
		u.SetNetworkLayerForChecksum(ip)
		l4 = u
	default:
		t := &layers.TCP{SrcPort: layers.TCPPort(sport), DstPort: layers.TCPPort(dport), SYN: true}
		t.SetNetworkLayerForChecksum(ip)
		l4 = t
	}
	buf := gopacket.NewSerializeBuffer()
	if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true}, eth, ip, l4); err != nil {
		tb.Fatal(err)
	}
	return buf.Bytes()
}

// maxO0Rules is about the most rules a -O0 program can have and load.
const maxO0Rules = 8000

// BenchmarkRun measures the kernel's time per packet with
// BPF_PROG_TEST_RUN on xdp, for a packet no rule matches, for every family
// of rule sets at N = 1 to 100,000 rules, -O0 (up to 8,000 rules, what
// loads) and -O1. It also reports the verifier's processed instructions
// and the time to compile and to load.
func BenchmarkRun(b *testing.B) {
	testenv.RequireRoot(b)
	for _, fam := range families {
		frame := fam.packet(b)
		for _, n := range []int{1, 32, 1000, 10_000, 100_000} {
			src := fam.rules(n)
			for _, level := range codegen.Levels {
				if level == codegen.O0 && n > maxO0Rules {
					continue
				}
				b.Run(fmt.Sprintf("%s/%v/rules=%d", fam.name, level, n), func(b *testing.B) {
					start := time.Now()
					p := compileLevel(b, src, level)
					compiled := time.Now()
					coll, err := ebpf.NewCollection(p.Spec)
					if err != nil {
						b.Fatal(err)
					}
					loaded := time.Now()
					defer coll.Close()
					prog := coll.Programs[abi.ProgramName]
					// The packet must be one no rule decides.
					ret, _, err := prog.Benchmark(frame, 1, nil)
					if err != nil {
						b.Fatal(err)
					}
					want := uint32(2) // XDP_PASS: policy ACCEPT
					if strings.Contains(src, ":INPUT DROP") {
						want = 1
					}
					if ret != want {
						b.Fatalf("the worst-case packet got %d, want the policy's %d", ret, want)
					}
					b.ResetTimer()
					_, d, err := prog.Benchmark(frame, b.N, nil)
					if err != nil {
						b.Fatal(err)
					}
					b.ReportMetric(float64(d.Nanoseconds()), "ns/packet")
					// After the timer's last reset, which drops metrics.
					if info, err := prog.Info(); err == nil {
						if v, ok := info.VerifiedInstructions(); ok {
							b.ReportMetric(float64(v), "verified")
						}
					}
					b.ReportMetric(float64(compiled.Sub(start).Milliseconds()), "compile-ms")
					b.ReportMetric(float64(loaded.Sub(compiled).Milliseconds()), "load-ms")
				})
			}
		}
	}
}

// lowerInput parses IPv4 iptables-restore text and lowers its INPUT chain.
func lowerInput(tb testing.TB, src string) *ir.Program {
	tb.Helper()
	rs, err := iptables.Parse("rules", []byte(src), iptables.Options{Family: rules.IPv4, ForceFamily: true})
	if err != nil {
		tb.Fatal(err)
	}
	p, err := ir.Lower(rs, ir.LowerOptions{Chain: "INPUT"})
	if err != nil {
		tb.Fatal(err)
	}
	return p
}

// compileLevel parses, lowers and compiles an INPUT chain for xdp.
func compileLevel(tb testing.TB, src string, level codegen.Level) *codegen.Program {
	tb.Helper()
	prog, err := codegen.Compile(lowerInput(tb, src), codegen.Options{Hook: codegen.HookXDP, Level: level})
	if err != nil {
		tb.Fatal(err)
	}
	return prog
}

// BenchmarkConntrack measures, side by side, the time per packet of a
// rule set without and with a conntrack state match in front (xdp,
// BPF_PROG_TEST_RUN, in a namespace where loader.HoldConntrack keeps
// conntrack on): a TCP SYN with no entry (a lookup that misses, then
// tcp_new's model), and a UDP reply whose connection has an entry (a
// lookup that hits, the nf_conn read and released).
func BenchmarkConntrack(b *testing.B) {
	testenv.RequireRoot(b)
	ns, err := startNetns()
	if err != nil {
		b.Fatal(err)
	}
	defer ns.Close()
	var setupErr error
	var tcpAck *tcpConn
	ns.do(func() {
		if out, err := exec.Command("ip", "link", "set", "lo", "up").CombinedOutput(); err != nil {
			setupErr = fmt.Errorf("%v: %s", err, out)
			return
		}
		if _, setupErr = loader.HoldConntrack(); setupErr != nil {
			return
		}
		// One datagram 127.0.0.1:6000 → 127.0.0.1:5000 makes the entry.
		srv, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 5000})
		if err != nil {
			setupErr = err
			return
		}
		defer srv.Close()
		cl, err := net.DialUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 6000}, &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 5000})
		if err != nil {
			setupErr = err
			return
		}
		defer cl.Close()
		if _, err := cl.Write([]byte("x")); err != nil {
			setupErr = err
			return
		}
		srv.SetReadDeadline(time.Now().Add(time.Second))
		if _, setupErr = srv.Read(make([]byte, 8)); setupErr != nil {
			return
		}
		tcpAck, setupErr = establishedTCP()
	})
	if setupErr != nil {
		b.Fatal(setupErr)
	}
	defer tcpAck.close()
	head := "*filter\n:INPUT DROP [0:0]\n:FORWARD ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n"
	tail := "-A INPUT -p tcp -m tcp --dport 22 -j ACCEPT\n-A INPUT -p udp -m udp --dport 53 -j ACCEPT\nCOMMIT\n"
	sets := []struct{ name, src string }{
		{"no-ct", head + tail},
		{"ct", head + "-A INPUT -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT\n-A INPUT -m conntrack --ctstate INVALID -j DROP\n" + tail},
	}
	pkts := []struct {
		name  string
		frame []byte
	}{
		{"tcp-syn-no-entry", frame4(b, layers.IPProtocolTCP, "192.0.2.1", "192.0.2.2", 40000, 80)},
		{"udp-reply-entry", frame4(b, layers.IPProtocolUDP, "127.0.0.1", "127.0.0.1", 5000, 6000)},
		// The handshake's last ACK of an open connection: its entry's
		// TCP tracking is replayed (tcp_in_window, no SACK walk).
		{"tcp-ack-entry", tcpAck.frame},
		// The same with a SACK block for its timestamps: the option walk.
		{"tcp-sack-entry", tcpAck.withSACK(b)},
	}
	for _, pk := range pkts {
		for _, set := range sets {
			b.Run(pk.name+"/"+set.name, func(b *testing.B) {
				// The reply and the ACK are ESTABLISHED: accepted by the
				// ct rule set, dropped by the other; the SYN is dropped
				// by both.
				runCT(b, ns, compileLevel(b, set.src, 1), pk.frame, set.name == "ct" && pk.name != "tcp-syn-no-entry")
			})
		}
	}
	// An ICMP echo is of class U: the xdp program passes it untouched to
	// its netfilter stage, which decides it after conntrack (a test run
	// has no conntrack: INVALID, dropped by the ct rule set). The stage
	// runs for every packet the program lets through on its interfaces:
	// it accepts a TCP segment at once.
	echo := echoFrame(b)
	b.Run("icmp-echo/no-ct", func(b *testing.B) { runCT(b, ns, compileLevel(b, sets[0].src, 1), echo, false) })
	ct := compileLevel(b, sets[1].src, 1)
	b.Run("icmp-echo/ct", func(b *testing.B) { runCT(b, ns, ct, echo, true) })
	b.Run("icmp-echo/ct-netfilter-stage", func(b *testing.B) { runStage(b, ns, ct, echo, 0) })
	b.Run("tcp-ack-entry/ct-netfilter-stage", func(b *testing.B) { runStage(b, ns, ct, tcpAck.frame, 1) })
	// tc-egress reads skb->_nfct instead of looking the packet up (a test
	// run's skb has none: INVALID, dropped).
	for _, set := range sets {
		b.Run("tc-egress/tcp-syn/"+set.name, func(b *testing.B) {
			src := strings.ReplaceAll(set.src, "-A INPUT", "-A OUTPUT")
			src = strings.Replace(strings.Replace(src, ":INPUT DROP", ":INPUT ACCEPT", 1), ":OUTPUT ACCEPT", ":OUTPUT DROP", 1)
			rs, err := iptables.Parse("rules", []byte(src), iptables.Options{Family: rules.IPv4, ForceFamily: true})
			if err != nil {
				b.Fatal(err)
			}
			prog, err := ir.Lower(rs, ir.LowerOptions{Chain: "OUTPUT"})
			if err != nil {
				b.Fatal(err)
			}
			p, err := codegen.Compile(prog, codegen.Options{Hook: codegen.HookTCEgress, Level: codegen.O1})
			if err != nil {
				b.Fatal(err)
			}
			runCT(b, ns, p, pkts[0].frame, false)
		})
	}
}

// runCT test-runs p on frame in ns b.N times and reports the kernel's
// time per packet; accept says whether the rules accept the frame.
func runCT(b *testing.B, ns *netns, p *codegen.Program, frame []byte, accept bool) {
	spec, err := p.KernelSpec(kernelBTF(b))
	if err != nil {
		b.Fatal(err)
	}
	coll, err := ebpf.NewCollection(spec)
	if err != nil {
		b.Fatal(err)
	}
	defer coll.Close()
	prog := coll.Programs[abi.ProgramName]
	var ret uint32
	var d time.Duration
	b.ResetTimer()
	ns.do(func() { ret, d, err = prog.Benchmark(frame, b.N, nil) })
	if err != nil {
		b.Fatal(err)
	}
	want := map[bool]uint32{false: 1, true: 2} // XDP_DROP, XDP_PASS
	if p.Hook != codegen.HookXDP {
		want = map[bool]uint32{false: 2, true: 0} // TC_ACT_SHOT, TC_ACT_OK
	}
	if ret != want[accept] {
		b.Fatalf("verdict %d, want %d", ret, want[accept])
	}
	b.ReportMetric(float64(d.Nanoseconds()), "ns/packet")
}

// echoFrame is an ICMP echo request.
func echoFrame(tb testing.TB) []byte {
	eth := &layers.Ethernet{SrcMAC: net.HardwareAddr{2, 0, 0, 0, 0, 2}, DstMAC: make(net.HardwareAddr, 6), EthernetType: layers.EthernetTypeIPv4}
	ip := &layers.IPv4{Version: 4, TTL: 64, Protocol: layers.IPProtocolICMPv4, SrcIP: net.IPv4(192, 0, 2, 1).To4(), DstIP: net.IPv4(192, 0, 2, 2).To4()}
	icmp := &layers.ICMPv4{TypeCode: layers.CreateICMPv4TypeCode(layers.ICMPv4TypeEchoRequest, 0), Id: 1, Seq: 1}
	buf := gopacket.NewSerializeBuffer()
	if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true}, eth, ip, icmp, gopacket.Payload("ping")); err != nil {
		tb.Fatal(err)
	}
	return buf.Bytes()
}

// runStage test-runs p's netfilter stage (bpf_prog_test_run_nf, as
// PRE_ROUTING) on frame b.N times and reports the time per packet; the
// run must return want (NF_DROP 0, NF_ACCEPT 1). The kernel does not
// report the duration of netfilter test runs: this is the wall time of
// one repeated run, whose setup b.N amortizes.
func runStage(b *testing.B, ns *netns, p *codegen.Program, frame []byte, want uint32) {
	kernel := kernelBTF(b)
	spec, err := p.KernelSpec(kernel)
	if err != nil {
		b.Fatal(err)
	}
	coll, err := ebpf.NewCollection(spec)
	if err != nil {
		b.Fatal(err)
	}
	defer coll.Close()
	nfSpec, err := p.Netfilter.KernelSpec(kernel)
	if err != nil {
		b.Fatal(err)
	}
	repl := make(map[string]*ebpf.Map)
	for name := range nfSpec.Maps {
		if m := coll.Maps[name]; m != nil {
			repl[name] = m
		}
	}
	nf, err := ebpf.NewCollectionWithOptions(nfSpec, ebpf.CollectionOptions{MapReplacements: repl})
	if err != nil {
		b.Fatal(err)
	}
	defer nf.Close()
	// The test run's hook state has no input device: ifindex 0.
	if err := nf.Maps[abi.NetfilterIfacesMap].Put(uint32(0), uint32(1)); err != nil {
		b.Fatal(err)
	}
	prog := nf.Programs[abi.ProgramName]
	var ret uint32
	b.ResetTimer()
	start := time.Now()
	ns.do(func() {
		ret, err = prog.Run(&ebpf.RunOptions{Data: frame, Context: []byte{0, 2}, Repeat: uint32(b.N)}) // PRE_ROUTING, NFPROTO_IPV4
	})
	elapsed := time.Since(start)
	if err != nil {
		b.Fatal(err)
	}
	if ret != want {
		b.Fatalf("verdict %d, want %d", ret, want)
	}
	b.ReportMetric(float64(elapsed.Nanoseconds())/float64(b.N), "ns/packet")
}

// tcpConn is an open TCP connection on the loopback and a copy of the
// frame that completed its handshake.
type tcpConn struct {
	ln    net.Listener
	c, s  net.Conn
	frame []byte
}

func (t *tcpConn) close() {
	t.c.Close()
	t.s.Close()
	t.ln.Close()
}

// establishedTCP opens a connection 127.0.0.1:6022 → 127.0.0.1:5022 in
// the calling thread's namespace and captures, on lo, the client's ACK
// that completed the handshake.
func establishedTCP() (*tcpConn, error) {
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, int(htons(unix.ETH_P_ALL)))
	if err != nil {
		return nil, err
	}
	defer unix.Close(fd)
	lo, err := net.InterfaceByName("lo")
	if err != nil {
		return nil, err
	}
	if err := unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_ALL), Ifindex: lo.Index}); err != nil {
		return nil, err
	}
	lc := net.ListenConfig{}
	lc.SetMultipathTCP(false)
	ln, err := lc.Listen(context.Background(), "tcp4", "127.0.0.1:5022")
	if err != nil {
		return nil, err
	}
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 6022}}
	d.SetMultipathTCP(false)
	c, err := d.Dial("tcp4", "127.0.0.1:5022")
	if err != nil {
		ln.Close()
		return nil, err
	}
	s, err := ln.Accept()
	if err != nil {
		c.Close()
		ln.Close()
		return nil, err
	}
	t := &tcpConn{ln: ln, c: c, s: s}
	if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &unix.Timeval{Sec: 1}); err != nil {
		t.close()
		return nil, err
	}
	buf := make([]byte, 1<<16)
	for {
		n, _, err := unix.Recvfrom(fd, buf, 0)
		if err != nil {
			t.close()
			return nil, fmt.Errorf("capture the handshake's ack: %w", err)
		}
		p := gopacket.NewPacket(buf[:n], layers.LayerTypeEthernet, gopacket.Default)
		if l, ok := p.Layer(layers.LayerTypeTCP).(*layers.TCP); ok && l.SrcPort == 6022 && l.ACK && !l.SYN {
			t.frame = append([]byte(nil), buf[:n]...)
			return t, nil
		}
	}
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

// withSACK is the captured ACK with its 12 bytes of options (no-ops and
// timestamps) replaced by no-ops and a SACK block whose right edge is the
// ACK's acknowledgement number: in window, but walked.
func (t *tcpConn) withSACK(tb testing.TB) []byte {
	f := append([]byte(nil), t.frame...)
	const l4 = 14 + 20
	if len(f) < l4+32 || f[l4+12]>>4 != 8 {
		tb.Fatalf("the captured ack has no 12 bytes of options: % x", f)
	}
	ack := binary.BigEndian.Uint32(f[l4+8:])
	copy(f[l4+20:], []byte{1, 1, 5, 10})
	binary.BigEndian.PutUint32(f[l4+24:], ack-100)
	binary.BigEndian.PutUint32(f[l4+28:], ack)
	return f
}
