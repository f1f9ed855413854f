package main

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"golang.org/x/sys/unix"

	"bpfwall/internal/testenv"
)

// The frame-level differential test of restore without -i: TCP segments
// crafted one by one (any flags, flows of several segments) are sent raw
// from the client, the server and the router itself, to, through and
// from the router, with random rule sets of both families loaded at once
// (randomRouted: every chain of raw, mangle and filter, a nat table the
// kernel runs). What the router does with each segment is what the
// topology sees: the frames the client and the server receive (forwarded,
// NATed, REJECT replies, the stacks' own RSTs) and the segments the
// router's stack is delivered. Every flow must see the same under bpfwall
// as under iptables-legacy and ip6tables-legacy.

// frameFlowBase is the first of the client-side ports that name the
// flows: every segment of a flow carries its port, and no service port is
// as high.
const frameFlowBase = 20000

// frameSeg is one segment of a flow, sent raw (IP_HDRINCL) from namespace
// from (client, server or router) with source address key src to dst
// (keys of routedAddrs).
type frameSeg struct {
	from, src, dst string
	sport, dport   uint16
	flags          string // of "SAFRPU"
	seq, ack       uint32
}

// frameFlows returns random flows of at least n segments in all for
// family fam (the last flow may end past n): a client
// opening to the router, through it to the server or to a DNATed port; a
// server opening to the client; the router opening to either, or to its
// own DNATed port; each with an answer and a third segment sometimes, and
// with flags of every kind, valid or not.
func frameFlows(rng *rand.Rand, fam, n int, nextPort *uint16) []frameSeg {
	services := []uint16{22, 80, 443, 8080, 23}
	flagSets := []string{"S", "S", "S", "A", "SA", "R", "RA", "FA", "PA", "F", "", "SF", "SR", "FPU"}
	var out []frameSeg
	for len(out) < n {
		*nextPort++
		x := *nextPort
		var open frameSeg
		switch rng.IntN(7) {
		case 0, 1:
			open = frameSeg{from: "client", src: "client", dst: "server", dport: services[rng.IntN(len(services))]}
		case 2:
			open = frameSeg{from: "client", src: "client", dst: []string{"rc", "rs"}[rng.IntN(2)], dport: services[rng.IntN(len(services))]}
		case 3:
			open = frameSeg{from: "client", src: "client", dst: "rc", dport: []uint16{8081, 8082}[rng.IntN(2)]}
		case 4:
			open = frameSeg{from: "server", src: "server", dst: "client", dport: services[rng.IntN(len(services))]}
		case 5:
			to := []string{"server", "client"}[rng.IntN(2)]
			src := map[string]string{"server": "rs", "client": "rc"}[to]
			open = frameSeg{from: "router", src: src, dst: to, dport: services[rng.IntN(len(services))]}
		case 6:
			open = frameSeg{from: "router", src: "rc", dst: "rc", dport: 8083}
		}
		open.sport, open.seq = x, rng.Uint32()
		open.flags = "S"
		if rng.IntN(3) == 0 {
			open.flags = flagSets[rng.IntN(len(flagSets))]
		}
		if strings.Contains(open.flags, "A") {
			open.ack = rng.Uint32()
		}
		out = append(out, open)
		if rng.IntN(2) == 0 || open.dst == "rc" && open.dport >= 8081 || open.from == "router" && open.dst == open.src {
			continue // no answer, or one only NAT knows the address of
		}
		// The answer, from where the segment went, and sometimes the
		// opener's next segment.
		from := open.dst
		if from == "rc" || from == "rs" {
			from = "router"
		}
		answer := frameSeg{from: from, src: open.dst, dst: open.src, sport: open.dport, dport: x, flags: "SA", seq: rng.Uint32(), ack: open.seq + 1}
		if rng.IntN(4) == 0 {
			answer.flags = flagSets[rng.IntN(len(flagSets))]
		}
		out = append(out, answer)
		if rng.IntN(2) == 0 {
			next := open
			next.flags, next.seq, next.ack = "A", open.seq+1, answer.seq+1
			if rng.IntN(4) == 0 {
				next.flags = flagSets[rng.IntN(len(flagSets))]
			}
			out = append(out, next)
		}
	}
	return out
}

// frame returns seg as an IP packet of family fam.
func (seg frameSeg) frame(fam int) ([]byte, error) {
	src, dst := netip.MustParseAddr(routedAddrs[seg.src][fam]), netip.MustParseAddr(routedAddrs[seg.dst][fam])
	tcp := &layers.TCP{SrcPort: layers.TCPPort(seg.sport), DstPort: layers.TCPPort(seg.dport), Seq: seg.seq, Ack: seg.ack, Window: 64240,
		SYN: strings.Contains(seg.flags, "S"), ACK: strings.Contains(seg.flags, "A"), FIN: strings.Contains(seg.flags, "F"),
		RST: strings.Contains(seg.flags, "R"), PSH: strings.Contains(seg.flags, "P"), URG: strings.Contains(seg.flags, "U")}
	var ip gopacket.SerializableLayer
	if fam == 0 {
		v4 := &layers.IPv4{Version: 4, IHL: 5, TTL: 64, Protocol: layers.IPProtocolTCP, SrcIP: src.AsSlice(), DstIP: dst.AsSlice(), Flags: layers.IPv4DontFragment}
		tcp.SetNetworkLayerForChecksum(v4)
		ip = v4
	} else {
		v6 := &layers.IPv6{Version: 6, HopLimit: 64, NextHeader: layers.IPProtocolTCP, SrcIP: src.AsSlice(), DstIP: dst.AsSlice()}
		tcp.SetNetworkLayerForChecksum(v6)
		ip = v6
	}
	buf := gopacket.NewSerializeBuffer()
	if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true}, ip, tcp); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// frameSockets are the test's sockets in the routed topology: raw senders
// in each namespace, packet sockets on the client's and the server's
// links, and raw TCP sockets that see what the router's stack is
// delivered.
type frameSockets struct {
	send    map[string][2]int // by namespace key, by family
	capture map[string]int    // "client", "server"
	local   [2]int            // by family
}

func (r *routed) frameSockets() *frameSockets {
	t := r.t
	s := &frameSockets{send: map[string][2]int{}, capture: map[string]int{}}
	socket := func(domain, typ, proto int) int {
		fd, err := unix.Socket(domain, typ|unix.SOCK_CLOEXEC, proto)
		if err != nil {
			t.Fatalf("socket: %v", err)
		}
		t.Cleanup(func() { unix.Close(fd) })
		if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, 8<<20); err != nil {
			t.Fatalf("SO_RCVBUFFORCE: %v", err)
		}
		return fd
	}
	names := map[string]string{"client": r.client, "server": r.server, "router": r.router}
	for key, ns := range names {
		r.in(ns, func() {
			s.send[key] = [2]int{socket(unix.AF_INET, unix.SOCK_RAW, unix.IPPROTO_RAW), socket(unix.AF_INET6, unix.SOCK_RAW, unix.IPPROTO_RAW)}
		})
	}
	for key, dev := range map[string]string{"client": "cli0", "server": "srv0"} {
		r.in(names[key], func() {
			fd := socket(unix.AF_PACKET, unix.SOCK_RAW, int(htons(unix.ETH_P_ALL)))
			ifc, err := netInterfaceIndex(dev)
			if err != nil {
				t.Fatal(err)
			}
			if err := unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_ALL), Ifindex: ifc}); err != nil {
				t.Fatalf("bind %s: %v", dev, err)
			}
			s.capture[key] = fd
		})
	}
	r.in(r.router, func() {
		s.local = [2]int{socket(unix.AF_INET, unix.SOCK_RAW, unix.IPPROTO_TCP), socket(unix.AF_INET6, unix.SOCK_RAW, unix.IPPROTO_TCP)}
	})
	return s
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

// netInterfaceIndex is the index of the calling thread's namespace's
// link called name.
func netInterfaceIndex(name string) (int, error) {
	b, err := os.ReadFile("/sys/class/net/" + name + "/ifindex")
	if err == nil {
		return strconv.Atoi(strings.TrimSpace(string(b)))
	}
	// /sys shows the namespace that mounted it; ask the kernel.
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return 0, err
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq(name)
	if err != nil {
		return 0, err
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFINDEX, ifr); err != nil {
		return 0, fmt.Errorf("interface %s: %w", name, err)
	}
	return int(ifr.Uint32()), nil
}

// drain empties every receiving socket.
func (s *frameSockets) drain() {
	buf := make([]byte, 65536)
	for _, fd := range append([]int{s.capture["client"], s.capture["server"]}, s.local[:]...) {
		for {
			if _, _, err := unix.Recvfrom(fd, buf, unix.MSG_DONTWAIT); err != nil {
				break
			}
		}
	}
}

// run sends the segments of both families, waits for the topology to
// settle, and returns what each flow met, by its port: the frames the
// client and the server received and the segments the router's stack was
// delivered, as text, sorted.
func (s *frameSockets) run(t *testing.T, segs [2][]frameSeg) map[uint16][]string {
	t.Helper()
	s.drain()
	var refused [][2]string
	for fam := range 2 {
		for _, seg := range segs[fam] {
			b, err := seg.frame(fam)
			if err != nil {
				t.Fatal(err)
			}
			var to unix.Sockaddr
			dst := netip.MustParseAddr(routedAddrs[seg.dst][fam])
			if fam == 0 {
				to = &unix.SockaddrInet4{Addr: dst.As4()}
			} else {
				to = &unix.SockaddrInet6{Addr: dst.As16()}
			}
			err = unix.Sendto(s.send[seg.from][fam], b, 0, to)
			if errors.Is(err, unix.EPERM) {
				// Netfilter dropped it at OUTPUT, and said so.
				flow := seg.sport
				if flow < frameFlowBase {
					flow = seg.dport
				}
				refused = append(refused, [2]string{strconv.Itoa(int(flow)), "eperm " + seg.from + " " + seg.flags})
			} else if err != nil {
				t.Fatalf("send %+v: %v", seg, err)
			}
			// In order: a flow's segments follow one another through
			// conntrack.
			time.Sleep(100 * time.Microsecond)
		}
	}
	out := map[uint16][]string{}
	buf := make([]byte, 65536)
	// read takes what fd holds, and reports whether it held anything.
	read := func(fd int, site string, first gopacket.LayerType) bool {
		got := false
		for {
			n, from, err := unix.Recvfrom(fd, buf, unix.MSG_DONTWAIT)
			if errors.Is(err, unix.EAGAIN) {
				return got
			}
			if err != nil {
				t.Fatalf("receive at %s: %v", site, err)
			}
			got = true
			if ll, ok := from.(*unix.SockaddrLinklayer); ok && ll.Pkttype == unix.PACKET_OUTGOING {
				continue
			}
			if flow, text, ok := describeFrame(buf[:n], first); ok {
				out[flow] = append(out[flow], site+" "+text)
			}
		}
	}
	// The topology has settled when nothing arrived for a while (the
	// kernel's replies, the stacks' RSTs and forwarded frames follow each
	// segment within microseconds on an idle machine).
	for start, quiet := time.Now(), time.Now(); time.Since(start) < 200*time.Millisecond || time.Since(quiet) < 150*time.Millisecond; {
		got := read(s.capture["client"], "client", layers.LayerTypeEthernet)
		got = read(s.capture["server"], "server", layers.LayerTypeEthernet) || got
		got = read(s.local[0], "router", layers.LayerTypeIPv4) || got
		got = read(s.local[1], "router", layers.LayerTypeTCP) || got
		if got {
			quiet = time.Now()
		}
		time.Sleep(10 * time.Millisecond)
	}
	for _, r := range refused {
		flow, _ := strconv.Atoi(r[0])
		out[uint16(flow)] = append(out[uint16(flow)], r[1])
	}
	for _, v := range out {
		slices.Sort(v)
	}
	return out
}

// describeFrame names the flow a received frame belongs to and says what
// it is: a TCP segment (addresses where the frame has them, ports,
// flags) or an ICMP error about a segment of the flow.
func describeFrame(b []byte, first gopacket.LayerType) (uint16, string, bool) {
	p := gopacket.NewPacket(b, first, gopacket.DecodeOptions{Lazy: true, NoCopy: true})
	var addrs string
	if ip, ok := p.Layer(layers.LayerTypeIPv4).(*layers.IPv4); ok {
		addrs = ip.SrcIP.String() + ">" + ip.DstIP.String() + " "
	} else if ip, ok := p.Layer(layers.LayerTypeIPv6).(*layers.IPv6); ok {
		addrs = ip.SrcIP.String() + ">" + ip.DstIP.String() + " "
	}
	if icmp, ok := p.Layer(layers.LayerTypeICMPv4).(*layers.ICMPv4); ok && icmp.TypeCode.Type() == layers.ICMPv4TypeDestinationUnreachable {
		inner := gopacket.NewPacket(icmp.Payload, layers.LayerTypeIPv4, gopacket.DecodeOptions{Lazy: true, NoCopy: true})
		if tcp, ok := inner.Layer(layers.LayerTypeTCP).(*layers.TCP); ok {
			if flow, ok := flowOf(tcp); ok {
				return flow, addrs + "icmp " + icmp.TypeCode.String(), true
			}
		}
		if len(icmp.Payload) >= 24 { // an IP header and the ports
			ihl := int(icmp.Payload[0]&0xf) * 4
			if len(icmp.Payload) >= ihl+4 {
				tcp := &layers.TCP{SrcPort: layers.TCPPort(uint16(icmp.Payload[ihl])<<8 | uint16(icmp.Payload[ihl+1])), DstPort: layers.TCPPort(uint16(icmp.Payload[ihl+2])<<8 | uint16(icmp.Payload[ihl+3]))}
				if flow, ok := flowOf(tcp); ok {
					return flow, addrs + "icmp " + icmp.TypeCode.String(), true
				}
			}
		}
		return 0, "", false
	}
	if icmp, ok := p.Layer(layers.LayerTypeICMPv6).(*layers.ICMPv6); ok && icmp.TypeCode.Type() == layers.ICMPv6TypeDestinationUnreachable {
		// The payload: 4 unused bytes, then the packet.
		if len(icmp.Payload) >= 4+40+4 && icmp.Payload[4+6] == byte(layers.IPProtocolTCP) {
			at := 4 + 40
			tcp := &layers.TCP{SrcPort: layers.TCPPort(uint16(icmp.Payload[at])<<8 | uint16(icmp.Payload[at+1])), DstPort: layers.TCPPort(uint16(icmp.Payload[at+2])<<8 | uint16(icmp.Payload[at+3]))}
			if flow, ok := flowOf(tcp); ok {
				return flow, addrs + "icmp6 " + icmp.TypeCode.String(), true
			}
		}
		return 0, "", false
	}
	tcp, ok := p.Layer(layers.LayerTypeTCP).(*layers.TCP)
	if !ok {
		return 0, "", false
	}
	flow, ok := flowOf(tcp)
	if !ok {
		return 0, "", false
	}
	return flow, fmt.Sprintf("%s%d>%d %s", addrs, tcp.SrcPort, tcp.DstPort, segFlags(tcp)), true
}

// flowOf is the flow of a segment: its port at or above frameFlowBase.
func flowOf(tcp *layers.TCP) (uint16, bool) {
	switch {
	case uint16(tcp.SrcPort) >= frameFlowBase:
		return uint16(tcp.SrcPort), true
	case uint16(tcp.DstPort) >= frameFlowBase:
		return uint16(tcp.DstPort), true
	}
	return 0, false
}

func segFlags(tcp *layers.TCP) string {
	var b []byte
	for _, f := range []struct {
		on bool
		c  byte
	}{{tcp.SYN, 'S'}, {tcp.ACK, 'A'}, {tcp.FIN, 'F'}, {tcp.RST, 'R'}, {tcp.PSH, 'P'}, {tcp.URG, 'U'}} {
		if f.on {
			b = append(b, f.c)
		}
	}
	if len(b) == 0 {
		return "none"
	}
	return string(b)
}

// TestRoutedFrames runs random rule sets of both families under bpfwall
// restore and under iptables-legacy, and compares what the same segments
// meet (see frameFlows). BPFWALL_ROUTED_SEEDS sets the number of rule
// sets and BPFWALL_ROUTED_PROBES the segments per rule set and family
// (make difftest runs 200 of 500).
func TestRoutedFrames(t *testing.T) { routedFrames(t, false) }

// TestRoutedFramesAccelerated is TestRoutedFrames with an accelerator on
// both of the router's interfaces (restore --accelerate), over rule sets
// it judges (randomRoutedFor): what it drops at xdp must be what the
// chains would have dropped, and it must drop some.
func TestRoutedFramesAccelerated(t *testing.T) { routedFrames(t, true) }

func routedFrames(t *testing.T, accel bool) {
	testenv.RequireTool(t, "iptables-legacy-restore", "ip6tables-legacy-restore", "iptables-restore")
	seeds, probes := envInt(t, "BPFWALL_ROUTED_SEEDS", 8), envInt(t, "BPFWALL_ROUTED_PROBES", 200)
	bin := buildBpfwall(t)
	r := newRouted(t)
	noICMPLimits(t, r.client, r.router, r.server)
	// Neighbours first: a raw segment to an unresolved address waits in
	// a short queue. (A connection to a closed port resolves them.)
	for _, p := range [][2]string{{r.client, "rc"}, {r.server, "rs"}, {r.router, "client"}, {r.router, "server"}} {
		for fam := range 2 {
			got := ""
			for range 5 {
				if got = r.connect(p[0], routedAddrs[p[1]][fam], 9); got == "refused" {
					break
				}
			}
			if got != "refused" {
				t.Fatalf("a connection from %s to %s:9 meets %s, want refused", p[0], routedAddrs[p[1]][fam], got)
			}
		}
	}
	socks := r.frameSockets()
	dir := t.TempDir()
	mismatches, flows, sites := 0, 0, map[string]int{}
	counterMismatches := 0
	var accelDrops uint64
	port := uint16(frameFlowBase)
	for seed := range seeds {
		rng := rand.New(rand.NewPCG(uint64(seed), 17))
		text := [2]string{randomRoutedFor(rng, 0, accel), randomRoutedFor(rng, 1, accel)}
		var segs [2][]frameSeg
		if int(port)+4*probes > 65000 {
			port = frameFlowBase // the entries of earlier flows are flushed
		}
		for fam := range 2 {
			segs[fam] = frameFlows(rng, fam, probes, &port)
		}
		var args []string
		var after func()
		if accel {
			args = []string{"--accelerate", "rc0,rs0"}
			after = func() {
				// The rule sets are ones both accelerators judge.
				drops, n := r.acceleratorDrops(bin)
				if n != 2 {
					t.Errorf("seed %d: %d accelerators run, want 2", seed, n)
				}
				accelDrops += drops
			}
		}
		got, want := bothWays(r, bin, dir, seed, text, args, after, func(byBpfwall bool) framesRun {
			run := framesRun{flows: socks.run(t, segs)}
			save := []string{"iptables-legacy-save", "-c"}
			if byBpfwall {
				save = []string{bin, "save", "-c"}
			}
			run.counters = savedTables(r.run("", save...))
			return run
		})
		// What the counters counted of the IPv4 segments, in every table
		// both print (bpfwall save prints the rule set's tables, and the
		// kernel's nat); IPv6's counters also count neighbour discovery,
		// whose timers are the stacks'.
		for name, text := range want.counters {
			if got, ok := got.counters[name]; ok && got != text {
				counterMismatches++
				if counterMismatches <= 3 {
					t.Errorf("seed %d: counters of table %s:\nbpfwall save -c:\n%s\niptables-legacy-save -c:\n%s", seed, name, got, text)
				}
			}
		}
		for fam := range 2 {
			seen := map[uint16]bool{}
			for _, seg := range segs[fam] {
				flow := seg.sport
				if flow < frameFlowBase || seen[flow] {
					continue // an answer, or a flow's next segment
				}
				seen[flow] = true
				flows++
				for _, w := range want.flows[flow] {
					sites[w[:strings.IndexByte(w, ' ')]]++
				}
				if !slices.Equal(got.flows[flow], want.flows[flow]) {
					mismatches++
					if mismatches <= 5 {
						t.Errorf("seed %d, flow %d (%s):\nbpfwall:  %q\niptables: %q\nsegments: %v\nrules:\n%s", seed, flow, []string{"ipv4", "ipv6"}[fam], got.flows[flow], want.flows[flow], flowSegs(segs[fam], flow), text[fam])
					}
				}
			}
		}
	}
	t.Logf("%d rule sets per family, %d flows, %d mismatches, %d tables whose IPv4 counters differ; what the kernel delivered, by site: %v", seeds, flows, mismatches, counterMismatches, sites)
	if accel {
		t.Logf("the accelerators dropped %d segments at xdp", accelDrops)
		if accelDrops == 0 {
			t.Error("the accelerators dropped nothing: the test does not test them")
		}
	}
	if sites["client"] == 0 || sites["server"] == 0 || sites["router"] == 0 {
		t.Errorf("the kernel delivered %v: the probes do not test every direction", sites)
	}
}

// framesRun is what one run of the frame test saw: what each flow met,
// and the IPv4 tables as iptables-save -c prints them (savedTables).
type framesRun struct {
	flows    map[uint16][]string
	counters map[string]string
}

// savedTables splits iptables-save text into its tables, by name, without
// its comments. A builtin chain without rules whose policy is ACCEPT has
// its counters zeroed: no program runs it (restore loads none for it, and
// iptables-nft, which runs the delegated tables, creates no such chain),
// so bpfwall does not count its policy, where iptables-legacy does.
func savedTables(save string) map[string]string {
	ruled := make(map[string]bool) // table/chain
	name := ""
	for line := range strings.Lines(save) {
		switch {
		case strings.HasPrefix(line, "*"):
			name = strings.TrimSpace(line[1:])
		case strings.HasPrefix(line, "["), strings.HasPrefix(line, "-A "):
			chain := strings.Fields(line[strings.Index(line, "-A ")+3:])[0]
			ruled[name+"/"+chain] = true
		}
	}
	out := make(map[string]string)
	for line := range strings.Lines(save) {
		switch {
		case strings.HasPrefix(line, "#"):
		case strings.HasPrefix(line, "*"):
			name = strings.TrimSpace(line[1:])
		case name == "":
		default:
			if f := strings.Fields(line); strings.HasPrefix(line, ":") && len(f) == 3 && f[1] == "ACCEPT" && !ruled[name+"/"+f[0][1:]] {
				line = f[0] + " ACCEPT [0:0]\n"
			}
			out[name] += line
		}
	}
	return out
}

// flowSegs are the segments of flow.
func flowSegs(segs []frameSeg, flow uint16) []frameSeg {
	var out []frameSeg
	for _, s := range segs {
		if s.sport == flow || s.dport == flow {
			out = append(out, s)
		}
	}
	return out
}

// envInt is the number in environment variable name, or def.
func envInt(t *testing.T, name string, def int) int {
	t.Helper()
	s := os.Getenv(name)
	if s == "" {
		return def
	}
	n, err := strconv.Atoi(s)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return n
}
