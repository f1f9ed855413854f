package main

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"golang.org/x/sys/unix"

	"bpfwall/codegen"
	"bpfwall/internal/testenv"
	"bpfwall/internal/topology"
	"bpfwall/ir"
	"bpfwall/loader"
	"bpfwall/model"
	"bpfwall/parser/iptables"
	"bpfwall/parser/nft"
	"bpfwall/rules"
)

// logCase is a rule set of the differential test of LOG.
type logCase struct {
	name   string
	family rules.Family
	nft    bool   // nft text, or iptables-restore input
	table  string // the table bpfwall compiles
	chain  string // PREROUTING or OUTPUT
	src    string
	probes func() [][]byte
}

// TestLogMatchesKernel sends the same frames through the kernel's LOG
// target (or nft's log statement) and through bpfwall's compiled LOG
// rules, and compares the kernel's lines (read from /dev/kmsg) with
// `bpfwall log --json` line by line, level included. Ingress rules are in
// PREROUTING, where netfilter sees every frame as it arrived (no
// reassembly, no option processing), as the ingress hooks do; egress
// rules are in OUTPUT, and the packets leave the firewall from a raw
// socket.
func TestLogMatchesKernel(t *testing.T) {
	testenv.RequireRoot(t)
	testenv.RequireTool(t, "iptables-legacy-restore")
	testenv.RequireTool(t, "ip6tables-legacy-restore")
	testenv.RequireTool(t, "nft")
	bin := buildBpfwall(t)
	allowNetnsLogging(t)

	var id [3]byte
	rand.Read(id[:])
	tag := "bwl" + hex.EncodeToString(id[:])
	cases := []logCase{
		{"ipv4", rules.IPv4, false, "raw", "PREROUTING", logRules(tag, rules.IPv4, "PREROUTING"), logProbes4},
		{"ipv6", rules.IPv6, false, "raw", "PREROUTING", logRules(tag, rules.IPv6, "PREROUTING"), logProbes6},
		{"nft-ipv4", rules.IPv4, true, "mangle", "PREROUTING", nftLogRules(tag, "ip", "prerouting"), logProbes4},
		{"nft-ipv6", rules.IPv6, true, "mangle", "PREROUTING", nftLogRules(tag, "ip6", "prerouting"), logProbes6},
		{"egress-ipv4", rules.IPv4, false, "raw", "OUTPUT", logRules(tag, rules.IPv4, "OUTPUT"), logProbes4},
		{"egress-ipv6", rules.IPv6, false, "raw", "OUTPUT", logRules(tag, rules.IPv6, "OUTPUT"), logProbes6},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			topo, err := topology.New(topology.Options{Prefix: "bwlog", InIface: tag})
			if err != nil {
				t.Fatal(err)
			}
			defer topo.Close()
			if err := topology.Run("ip", "-n", topo.Firewall, "addr", "add", "2001:db8::1/64", "dev", topo.InIface, "nodad"); err != nil {
				t.Fatal(err)
			}
			frames := c.probes()
			kernel := kernelLogLines(t, topo, tag, c, frames)
			if len(kernel) < len(frames) {
				t.Fatalf("the kernel logged %d lines for %d frames", len(kernel), len(frames))
			}
			checkTrace(t, tag, c, append(frames, endMarker(c.family)), kernel, topo)
			hooks := []codegen.Hook{codegen.HookXDP, codegen.HookTCIngress}
			if c.chain == "OUTPUT" {
				hooks = []codegen.Hook{codegen.HookTCEgress}
			}
			for _, hook := range hooks {
				for _, level := range codegen.Levels {
					t.Run(fmt.Sprintf("%s/%v", hook, level), func(t *testing.T) {
						got := bpfwallLogLines(t, bin, topo, c, hook, level, frames, len(kernel))
						compareLogLines(t, kernel, got)
					})
				}
			}
		})
	}
}

// parseLogCase parses and lowers the case's rule set.
func parseLogCase(t *testing.T, c logCase) (*rules.Ruleset, *ir.Program) {
	t.Helper()
	var rs *rules.Ruleset
	var err error
	if c.nft {
		rs, err = nft.Parse("log.rules", []byte(c.src), nft.Options{Family: c.family})
	} else {
		rs, err = iptables.Parse("log.rules", []byte(c.src), iptables.Options{Family: c.family, ForceFamily: true})
	}
	if err != nil {
		t.Fatal(err)
	}
	p, err := ir.Lower(rs, ir.LowerOptions{Table: c.table, Chain: c.chain})
	if err != nil {
		t.Fatal(err)
	}
	return rs, p
}

// checkTrace checks that ir.Trace counts the LOG rules whose lines the
// kernel printed, in its order, and with BPFWALL_UPDATE=1 writes each
// frame with its rule and line for the formatter's unit test.
func checkTrace(t *testing.T, tag string, c logCase, frames [][]byte, kernel []kmsgLine, topo *topology.Topology) {
	t.Helper()
	_, p := parseLogCase(t, c)
	meta, dir := model.Meta{InIface: topo.InIface}, "in "+topo.InIface
	if c.chain == "OUTPUT" {
		meta, dir = model.Meta{OutIface: topo.OutIface}, "out "+topo.OutIface
	}
	var fixture strings.Builder
	i := 0
	for _, f := range frames {
		pkt, err := model.Decode(f, meta)
		if err != nil {
			t.Fatal(err)
		}
		p.Trace(pkt, func(r *ir.Rule) {
			a, ok := r.Action.(ir.Log)
			if !ok {
				return
			}
			if i >= len(kernel) || !strings.HasPrefix(kernel[i].text, a.Prefix+"IN=") || kernel[i].level != int(a.Level) {
				t.Logf("%+v", kernel)
				t.Errorf("ir.Trace logs %q at level %d as line %d; the kernel printed %d lines", a.Prefix, a.Level, i, len(kernel))
				return
			}
			// The fixture does not depend on the run's tag.
			prefix := strings.Replace(a.Prefix, tag, "test", 1)
			line := strings.ReplaceAll(kernel[i].text, tag, "test")
			fmt.Fprintf(&fixture, "frame %x\nrule %q %d %d\n%s\nline %s\n\n", f, prefix, a.Level, a.Flags, strings.ReplaceAll(dir, tag, "test"), line)
			i++
		})
	}
	if i != len(kernel) {
		t.Errorf("ir.Trace logs %d lines, the kernel %d", i, len(kernel))
	}
	if os.Getenv("BPFWALL_UPDATE") != "" && !t.Failed() {
		name := fmt.Sprintf("../../nflog/testdata/kernel_%s.txt", c.name)
		head := "# Frames, the LOG rule (prefix, level, flags), the interface and the\n# line the kernel printed, written by TestLogMatchesKernel (cmd/bpfwall).\n\n"
		if err := os.WriteFile(name, []byte(head+fixture.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// allowNetnsLogging lets netfilter log from the test's namespaces
// (net.netfilter.nf_log_all_netns, in the initial namespace) until the
// test ends.
func allowNetnsLogging(t *testing.T) {
	// Runs of this test in other processes (other checkouts) must not
	// restore the old value while this one runs: they take turns.
	lock, err := os.OpenFile("/run/bpfwall-log-test.lock", os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.Flock(int(lock.Fd()), unix.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lock.Close() })
	const path = "/proc/sys/net/netfilter/nf_log_all_netns"
	old, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read nf_log_all_netns: %v", err)
	}
	if err := os.WriteFile(path, []byte("1"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.WriteFile(path, old, 0o644) })
}

// logRules are the LOG rules of the test, in chain (PREROUTING or
// OUTPUT) of the raw table: every option bpfwall supports, two LOG rules
// for one packet, one in a user chain, and the end marker, a UDP datagram
// to port 65000, logged last.
func logRules(tag string, fam rules.Family, chain string) string {
	src := "192.0.2.2"
	if fam == rules.IPv6 {
		src = "2001:db8::2"
	}
	return fmt.Sprintf(`*raw
:PREROUTING ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
:LOGGED - [0:0]
-A %[3]s -s %[2]s -p tcp -j LOG --log-prefix "%[1]s tcp " --log-level 6 --log-tcp-sequence --log-tcp-options
-A %[3]s -s %[2]s -p udp -m udp --dport 65000 -j LOG --log-prefix "%[1]s end "
-A %[3]s -s %[2]s -p udp -m udp --dport 65000 -j ACCEPT
-A %[3]s -s %[2]s ! -p tcp -j LOG --log-prefix "%[1]s ip " --log-ip-options --log-level 3
-A %[3]s -s %[2]s -p udp -m udp --dport 53 -j LOGGED
-A %[3]s -s %[2]s -j LOG --log-prefix "%[1]s all: "
-A LOGGED -j LOG --log-prefix "%[1]s mac " --log-macdecode --log-level 7
COMMIT
`, tag, src, chain)
}

// nftLogRules are logRules for nft, in a table of family ip or ip6, with
// a log statement without a prefix.
func nftLogRules(tag, family, hook string) string {
	saddr := "ip saddr 192.0.2.2"
	if family == "ip6" {
		saddr = "ip6 saddr 2001:db8::2"
	}
	return fmt.Sprintf(`table %[3]s bwlog {
	chain logged {
		log prefix "%[1]s mac " level debug flags ether
	}
	chain pre {
		type filter hook %[4]s priority raw; policy accept;
		%[2]s meta l4proto tcp log prefix "%[1]s tcp " level info flags tcp sequence,options
		%[2]s udp dport 65000 log prefix "%[1]s end " accept
		%[2]s meta l4proto != tcp log prefix "%[1]s ip " level err flags ip options
		%[2]s udp dport 53 jump logged
		%[2]s log
	}
}
`, tag, saddr, family, hook)
}

// kmsgLine is a line the kernel printed.
type kmsgLine struct {
	level int
	text  string
}

// kernelLogLines loads the case's rules in the firewall, sends frames
// and the end marker, and returns the lines the kernel logged for the
// test, up to the end marker's.
func kernelLogLines(t *testing.T, topo *topology.Topology, tag string, c logCase, frames [][]byte) []kmsgLine {
	t.Helper()
	load, unload := []string{"iptables-legacy-restore"}, "*raw\n:PREROUTING ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\nCOMMIT\n"
	switch {
	case c.nft:
		load, unload = []string{"nft", "-f", "-"}, "flush ruleset\n"
	case c.family == rules.IPv6:
		load[0] = "ip6tables-legacy-restore"
	}
	if err := topology.RunInput([]byte(c.src), "ip", append([]string{"netns", "exec", topo.Firewall}, load...)...); err != nil {
		t.Fatal(err)
	}
	defer topology.RunInput([]byte(unload), "ip", append([]string{"netns", "exec", topo.Firewall}, load...)...)
	kmsg, err := os.OpenFile("/dev/kmsg", os.O_RDONLY|unix.O_NONBLOCK, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer kmsg.Close()
	if _, err := unix.Seek(int(kmsg.Fd()), 0, unix.SEEK_END); err != nil {
		t.Fatal(err)
	}
	sendLogFrames(t, topo, c, frames)
	// Lines of this test: those with its prefix, and those of the nft
	// log statement without one, which name its interface.
	iface := "IN=" + topo.InIface + " "
	if c.chain == "OUTPUT" {
		iface = "IN= OUT=" + topo.OutIface + " "
	}
	var out []kmsgLine
	buf := make([]byte, 8192)
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		n, err := unix.Read(int(kmsg.Fd()), buf)
		if errors.Is(err, unix.EAGAIN) {
			time.Sleep(20 * time.Millisecond)
			continue
		}
		if errors.Is(err, unix.EPIPE) {
			continue // records were overwritten; the next read goes on
		}
		if err != nil {
			t.Fatalf("read /dev/kmsg: %v", err)
		}
		rec := string(buf[:n])
		head, text, ok := strings.Cut(rec, ";")
		if !ok {
			continue
		}
		text, _, _ = strings.Cut(text, "\n")
		if !strings.HasPrefix(text, tag+" ") && !strings.HasPrefix(text, iface) {
			continue
		}
		pri, _, _ := strings.Cut(head, ",")
		p, _ := strconv.Atoi(pri)
		out = append(out, kmsgLine{level: p & 7, text: unescapeKmsg(text)})
		if strings.HasPrefix(text, tag+" end ") {
			return out
		}
	}
	t.Fatalf("no end marker from the kernel within 10s; got %d lines", len(out))
	return nil
}

// unescapeKmsg undoes /dev/kmsg's \xNN escapes.
func unescapeKmsg(s string) string {
	if !strings.Contains(s, `\x`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) && s[i+1] == 'x' {
			if v, err := strconv.ParseUint(s[i+2:i+4], 16, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// bpfwallLogLines compiles the case's rules for hook, attaches them to
// the firewall's interface the frames cross, sends the frames and the end
// marker, and returns what `bpfwall log --json` prints for n events.
func bpfwallLogLines(t *testing.T, bin string, topo *topology.Topology, c logCase, hook codegen.Hook, level codegen.Level, frames [][]byte, n int) []kmsgLine {
	t.Helper()
	rs, p := parseLogCase(t, c)
	prog, err := codegen.Compile(p, codegen.Options{Trace: true, Hook: hook, Level: level})
	if err != nil {
		t.Fatal(err)
	}
	iface := topo.InIface
	if hook == codegen.HookTCEgress {
		iface = topo.OutIface
	}
	var place loader.Place
	err = topology.Do(topo.Firewall, func() error {
		if place, err = loader.Here(os.Getenv("BPFWALL_ROOT"), hook); err != nil {
			return err
		}
		meta, counters, err := loader.NewMeta(rs, prog, "log.rules")
		if err != nil {
			return err
		}
		s := &loader.Swap{Place: place, Program: prog, Meta: meta, Counters: counters, Ifaces: []string{iface}}
		_, err = s.Run()
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	defer topology.Do(topo.Firewall, func() error {
		_, err := loader.Unload(place, nil)
		return err
	})
	// The ring buffer keeps the events until a reader takes them: the
	// reader can start after the frames are sent.
	sendLogFrames(t, topo, c, frames)
	cmd := exec.Command("nsenter", "--net=/run/netns/"+topo.Firewall, bin, "log", "--json", "--hook", hook.String(), "--count", strconv.Itoa(n), "--timeout", "20s")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("bpfwall log: %v\n%s", err, stderr.Bytes())
	}
	var lines []kmsgLine
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		var ev logEvent
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			t.Fatalf("bpfwall log printed %q: %v", sc.Text(), err)
		}
		if ev.Error != "" {
			t.Errorf("event of %s: %s", ev.Rule, ev.Error)
		}
		if !strings.HasPrefix(ev.Rule, "log.rules:") {
			t.Errorf("event names rule %q", ev.Rule)
		}
		lines = append(lines, kmsgLine{level: int(ev.Level), text: ev.Line})
	}
	return lines
}

func compareLogLines(t *testing.T, kernel, got []kmsgLine) {
	t.Helper()
	for i := range max(len(kernel), len(got)) {
		var k, g kmsgLine
		if i < len(kernel) {
			k = kernel[i]
		}
		if i < len(got) {
			g = got[i]
		}
		if k != g {
			t.Errorf("line %d:\nkernel  <%d>%q\nbpfwall <%d>%q", i, k.level, k.text, g.level, g.text)
		}
	}
}

// sendLogFrames sends the frames and the end marker where the case's
// chain sees them: from the sender, or out of the firewall.
func sendLogFrames(t *testing.T, topo *topology.Topology, c logCase, frames [][]byte) {
	t.Helper()
	all := append(append([][]byte{}, frames...), endMarker(c.family))
	if c.chain == "OUTPUT" {
		sendRaw(t, topo, all)
		return
	}
	sendFrames(t, topo, all)
}

// sendRaw sends the IP packets of frames from a raw socket of the
// firewall, headers included, to the receiver's side.
func sendRaw(t *testing.T, topo *topology.Topology, frames [][]byte) {
	t.Helper()
	err := topology.Do(topo.Firewall, func() error {
		fd4, err := unix.Socket(unix.AF_INET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.IPPROTO_RAW)
		if err != nil {
			return err
		}
		defer unix.Close(fd4)
		fd6, err := unix.Socket(unix.AF_INET6, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.IPPROTO_RAW)
		if err != nil {
			return err
		}
		defer unix.Close(fd6)
		for _, f := range frames {
			pkt := f[14:]
			var err error
			if pkt[0]>>4 == 4 {
				err = unix.Sendto(fd4, pkt, 0, &unix.SockaddrInet4{Addr: [4]byte(pkt[16:20])})
			} else {
				err = unix.Sendto(fd6, pkt, 0, &unix.SockaddrInet6{Addr: [16]byte(pkt[24:40])})
			}
			if err != nil {
				return fmt.Errorf("send: %w", err)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// sendFrames sends frames from the sender's interface, in order, from one
// CPU, so that the firewall processes them in order.
func sendFrames(t *testing.T, topo *topology.Topology, frames [][]byte) {
	t.Helper()
	err := topology.Do(topo.Sender, func() error {
		var saved, one unix.CPUSet
		if err := unix.SchedGetaffinity(0, &saved); err != nil {
			return err
		}
		for cpu := range 1024 {
			if saved.IsSet(cpu) {
				one.Set(cpu)
				break
			}
		}
		if err := unix.SchedSetaffinity(0, &one); err != nil {
			return err
		}
		defer unix.SchedSetaffinity(0, &saved)
		ifi, err := net.InterfaceByName(topology.SenderIface)
		if err != nil {
			return err
		}
		fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		sa := &unix.SockaddrLinklayer{Ifindex: ifi.Index}
		for _, f := range frames {
			if err := unix.Sendto(fd, f, 0, sa); err != nil {
				return fmt.Errorf("send: %w", err)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	runtime.Gosched()
}

var (
	logSrc4 = netip.MustParseAddr("192.0.2.2")
	logDst4 = netip.MustParseAddr("198.51.100.7")
	logSrc6 = netip.MustParseAddr("2001:db8::2")
	logDst6 = netip.MustParseAddr("2001:db8:1::7") // routed out of the firewall
)

// frame serializes layers after an Ethernet header from the sender to
// the firewall.
func frame(et layers.EthernetType, ls ...gopacket.SerializableLayer) []byte {
	eth := &layers.Ethernet{SrcMAC: topology.SenderMAC, DstMAC: topology.FirewallInMAC, EthernetType: et}
	buf := gopacket.NewSerializeBuffer()
	opts := gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true}
	if err := gopacket.SerializeLayers(buf, opts, append([]gopacket.SerializableLayer{eth}, ls...)...); err != nil {
		panic(err)
	}
	// Without gopacket's padding to Ethernet's minimum: the packet is
	// the same whether it enters the firewall or leaves it from a raw
	// socket, which sends all it is given.
	b := buf.Bytes()
	n := 14 + (int(b[16])<<8 | int(b[17]))
	if et == layers.EthernetTypeIPv6 {
		n = 14 + 40 + (int(b[18])<<8 | int(b[19]))
	}
	return bytes.Clone(b[:min(n, len(b))])
}

func ip4(proto layers.IPProtocol, id uint16) *layers.IPv4 {
	return &layers.IPv4{Version: 4, IHL: 5, TTL: 64, Id: id, Protocol: proto, SrcIP: logSrc4.AsSlice(), DstIP: logDst4.AsSlice()}
}

func ip6(next layers.IPProtocol) *layers.IPv6 {
	return &layers.IPv6{Version: 6, HopLimit: 64, NextHeader: next, SrcIP: logSrc6.AsSlice(), DstIP: logDst6.AsSlice()}
}

// endMarker is the last frame sent: its LOG line ends the batch.
func endMarker(fam rules.Family) []byte {
	udp := &layers.UDP{SrcPort: 4000, DstPort: 65000}
	if fam == rules.IPv6 {
		i := ip6(layers.IPProtocolUDP)
		udp.SetNetworkLayerForChecksum(i)
		return frame(layers.EthernetTypeIPv6, i, udp, gopacket.Payload("end"))
	}
	i := ip4(layers.IPProtocolUDP, 9)
	udp.SetNetworkLayerForChecksum(i)
	return frame(layers.EthernetTypeIPv4, i, udp, gopacket.Payload("end"))
}

func tcpSyn() *layers.TCP {
	return &layers.TCP{
		SrcPort: 40000, DstPort: 22, Seq: 3_000_000_001, Ack: 17, SYN: true, Window: 64240, Urgent: 3,
		Options: []layers.TCPOption{
			{OptionType: layers.TCPOptionKindMSS, OptionLength: 4, OptionData: []byte{0x05, 0xb4}},
			{OptionType: layers.TCPOptionKindSACKPermitted, OptionLength: 2},
			{OptionType: layers.TCPOptionKindTimestamps, OptionLength: 10, OptionData: []byte{0, 0, 0, 1, 0, 0, 0, 0}},
			{OptionType: layers.TCPOptionKindNop},
			{OptionType: layers.TCPOptionKindWindowScale, OptionLength: 3, OptionData: []byte{7}},
		},
	}
}

// logProbes4 are IPv4 frames for every part of the kernel's line.
func logProbes4() [][]byte {
	var out [][]byte
	// TCP SYN with options, DF and a TOS.
	{
		i := ip4(layers.IPProtocolTCP, 1234)
		i.Flags, i.TOS = layers.IPv4DontFragment, 0xb8
		tcp := tcpSyn()
		tcp.SetNetworkLayerForChecksum(i)
		out = append(out, frame(layers.EthernetTypeIPv4, i, tcp))
	}
	// TCP with every flag and the reserved bits; ECN CE.
	{
		i := ip4(layers.IPProtocolTCP, 1235)
		i.TOS = 0x03
		tcp := &layers.TCP{SrcPort: 1, DstPort: 65535, Seq: 1, Ack: 4294967295, Window: 0,
			FIN: true, SYN: true, RST: true, PSH: true, ACK: true, URG: true, ECE: true, CWR: true, NS: true}
		tcp.SetNetworkLayerForChecksum(i)
		b := frame(layers.EthernetTypeIPv4, i, tcp, gopacket.Payload("data"))
		b[14+20+12] |= 0x0e // reserved bits, besides NS (AE)
		out = append(out, b)
	}
	// UDP to port 53, logged twice (the second with --log-macdecode).
	{
		i := ip4(layers.IPProtocolUDP, 7)
		udp := &layers.UDP{SrcPort: 5353, DstPort: 53}
		udp.SetNetworkLayerForChecksum(i)
		out = append(out, frame(layers.EthernetTypeIPv4, i, udp, gopacket.Payload("query")))
	}
	// ICMP echo request.
	out = append(out, frame(layers.EthernetTypeIPv4, ip4(layers.IPProtocolICMPv4, 8),
		&layers.ICMPv4{TypeCode: layers.CreateICMPv4TypeCode(8, 0), Id: 77, Seq: 3}, gopacket.Payload("ping")))
	// ICMP errors with the packet they are about: fragmentation needed
	// (MTU) around UDP, time exceeded around TCP (8 bytes of it:
	// INCOMPLETE), redirect (GATEWAY), parameter problem.
	inner := func(proto layers.IPProtocol, l4 []byte) []byte {
		i := &layers.IPv4{Version: 4, IHL: 5, TTL: 1, Id: 99, Protocol: proto, Flags: layers.IPv4DontFragment,
			SrcIP: logDst4.AsSlice(), DstIP: net.IPv4(203, 0, 113, 9), Length: 1400}
		buf := gopacket.NewSerializeBuffer()
		gopacket.SerializeLayers(buf, gopacket.SerializeOptions{ComputeChecksums: true}, i, gopacket.Payload(l4))
		return bytes.Clone(buf.Bytes())
	}
	udpHdr := []byte{0x9c, 0x40, 0x00, 0x35, 0x05, 0x64, 0, 0}
	tcpHdr := []byte{0x9c, 0x40, 0x01, 0xbb, 0, 0, 0, 1}
	for _, e := range []struct {
		typ, code uint8
		rest      [4]byte
		body      []byte
	}{
		{3, 4, [4]byte{0, 0, 0x05, 0xdc}, inner(layers.IPProtocolUDP, udpHdr)},
		{11, 0, [4]byte{}, inner(layers.IPProtocolTCP, tcpHdr)},
		{5, 1, [4]byte{192, 0, 2, 254}, inner(layers.IPProtocolUDP, udpHdr)},
		{12, 0, [4]byte{20, 0, 0, 0}, inner(layers.IPProtocolICMPv4, []byte{8, 0, 0, 0, 0, 1, 0, 1})},
		{3, 3, [4]byte{}, inner(layers.IPProtocolUDP, udpHdr[:4])},
	} {
		icmp := append([]byte{e.typ, e.code, 0, 0}, e.rest[:]...)
		out = append(out, frame(layers.EthernetTypeIPv4, ip4(layers.IPProtocolICMPv4, 10),
			icmpRaw(icmp, e.body)))
	}
	// An ICMP timestamp request shorter than its type requires.
	out = append(out, frame(layers.EthernetTypeIPv4, ip4(layers.IPProtocolICMPv4, 11), icmpRaw([]byte{13, 0, 0, 0, 0, 1, 0, 2}, []byte{1, 2, 3, 4})))
	// IP options (router alert, NOP, end) with --log-ip-options.
	{
		i := ip4(layers.IPProtocolUDP, 12)
		i.Flags = layers.IPv4EvilBit // CE in the kernel's line
		i.Options = []layers.IPv4Option{
			{OptionType: 148, OptionLength: 4, OptionData: []byte{0, 0}},
			{OptionType: 1},
			{OptionType: 1},
			{OptionType: 1},
			{OptionType: 0},
		}
		udp := &layers.UDP{SrcPort: 7, DstPort: 9}
		udp.SetNetworkLayerForChecksum(i)
		out = append(out, frame(layers.EthernetTypeIPv4, i, udp, gopacket.Payload("opt")))
	}
	// Fragments: the first of a UDP datagram (MF), a later one (FRAG:),
	// and a later fragment of TCP.
	{
		i := ip4(layers.IPProtocolUDP, 13)
		i.Flags = layers.IPv4MoreFragments
		out = append(out, frame(layers.EthernetTypeIPv4, i, gopacket.Payload([]byte{0x13, 0x88, 0x13, 0x89, 0, 40, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8})))
		i = ip4(layers.IPProtocolUDP, 13)
		i.FragOffset = 2
		out = append(out, frame(layers.EthernetTypeIPv4, i, gopacket.Payload(make([]byte, 24))))
		i = ip4(layers.IPProtocolTCP, 14)
		i.FragOffset, i.Flags = 100, layers.IPv4MoreFragments
		out = append(out, frame(layers.EthernetTypeIPv4, i, gopacket.Payload(make([]byte, 16))))
	}
	// Other protocols: ESP and AH (SPI), GRE, UDP-Lite.
	out = append(out, frame(layers.EthernetTypeIPv4, ip4(layers.IPProtocolESP, 15), gopacket.Payload([]byte{0xde, 0xad, 0xbe, 0xef, 0, 0, 0, 1, 9, 9})))
	out = append(out, frame(layers.EthernetTypeIPv4, ip4(layers.IPProtocolAH, 16), gopacket.Payload([]byte{17, 4, 0, 0, 0x12, 0x34, 0x56, 0x78, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0})))
	out = append(out, frame(layers.EthernetTypeIPv4, ip4(layers.IPProtocolGRE, 17), gopacket.Payload([]byte{0, 0, 0x08, 0})))
	out = append(out, frame(layers.EthernetTypeIPv4, ip4(layers.IPProtocolUDPLite, 18), gopacket.Payload([]byte{0, 1, 0, 2, 0, 8, 0, 0})))
	// A TCP header cut short by the datagram's end: INCOMPLETE.
	out = append(out, frame(layers.EthernetTypeIPv4, ip4(layers.IPProtocolTCP, 19), gopacket.Payload([]byte{0, 80, 0, 81, 0, 0})))
	return out
}

// icmpRaw is an ICMP message with its checksum.
func icmpRaw(hdr, body []byte) gopacket.Payload {
	b := append(bytes.Clone(hdr), body...)
	var sum uint32
	for i := 0; i+1 < len(b); i += 2 {
		sum += uint32(b[i])<<8 | uint32(b[i+1])
	}
	if len(b)%2 == 1 {
		sum += uint32(b[len(b)-1]) << 8
	}
	for sum > 0xffff {
		sum = sum&0xffff + sum>>16
	}
	c := ^uint16(sum)
	b[2], b[3] = byte(c>>8), byte(c)
	return gopacket.Payload(b)
}

// logProbes6 are IPv6 frames for every part of the kernel's line.
func logProbes6() [][]byte {
	var out [][]byte
	// TCP SYN with options, a traffic class and a flow label.
	{
		i := ip6(layers.IPProtocolTCP)
		i.TrafficClass, i.FlowLabel = 0xb8, 0xabcde
		tcp := tcpSyn()
		tcp.SetNetworkLayerForChecksum(i)
		out = append(out, frame(layers.EthernetTypeIPv6, i, tcp))
	}
	// UDP to port 53.
	{
		i := ip6(layers.IPProtocolUDP)
		udp := &layers.UDP{SrcPort: 5353, DstPort: 53}
		udp.SetNetworkLayerForChecksum(i)
		out = append(out, frame(layers.EthernetTypeIPv6, i, udp, gopacket.Payload("query")))
	}
	// ICMPv6 echo request, and packet too big around UDP.
	{
		i := ip6(layers.IPProtocolICMPv6)
		icmp := &layers.ICMPv6{TypeCode: layers.CreateICMPv6TypeCode(128, 0)}
		icmp.SetNetworkLayerForChecksum(i)
		out = append(out, frame(layers.EthernetTypeIPv6, i, icmp, gopacket.Payload([]byte{0, 77, 0, 3, 'p', 'i', 'n', 'g'})))
		in := &layers.IPv6{Version: 6, HopLimit: 1, NextHeader: layers.IPProtocolUDP, SrcIP: logDst6.AsSlice(), DstIP: net.ParseIP("2001:db8:ffff::9"), Length: 1452}
		buf := gopacket.NewSerializeBuffer()
		gopacket.SerializeLayers(buf, gopacket.SerializeOptions{}, in, gopacket.Payload([]byte{0x9c, 0x40, 0x00, 0x35, 0x05, 0xac, 0, 0}))
		i = ip6(layers.IPProtocolICMPv6)
		icmp = &layers.ICMPv6{TypeCode: layers.CreateICMPv6TypeCode(2, 0)}
		icmp.SetNetworkLayerForChecksum(i)
		out = append(out, frame(layers.EthernetTypeIPv6, i, icmp, gopacket.Payload(append([]byte{0, 0, 0x05, 0x00}, buf.Bytes()...))))
	}
	// Hop-by-hop and destination options before UDP (--log-ip-options).
	{
		i := ip6(layers.IPProtocolIPv6HopByHop)
		hbh := []byte{byte(layers.IPProtocolIPv6Destination), 0, 1, 4, 0, 0, 0, 0}
		dst := []byte{byte(layers.IPProtocolUDP), 0, 1, 4, 0, 0, 0, 0}
		udp := []byte{0x00, 0x07, 0x00, 0x09, 0, 11, 0, 0, 'o', 'p', 't'}
		out = append(out, frame(layers.EthernetTypeIPv6, i, gopacket.Payload(append(append(hbh, dst...), udp...))))
	}
	// Fragments: the first of a UDP datagram, and a later one.
	{
		i := ip6(layers.IPProtocolIPv6Fragment)
		fh := []byte{byte(layers.IPProtocolUDP), 0, 0, 1, 0xca, 0xfe, 0xba, 0xbe}
		udp := []byte{0x13, 0x88, 0x13, 0x89, 0, 40, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8}
		out = append(out, frame(layers.EthernetTypeIPv6, i, gopacket.Payload(append(fh, udp...))))
		i = ip6(layers.IPProtocolIPv6Fragment)
		fh = []byte{byte(layers.IPProtocolUDP), 0, 0, 16, 0xca, 0xfe, 0xba, 0xbe}
		out = append(out, frame(layers.EthernetTypeIPv6, i, gopacket.Payload(append(fh, make([]byte, 24)...))))
	}
	// No next header.
	out = append(out, frame(layers.EthernetTypeIPv6, ip6(layers.IPProtocolNoNextHeader), gopacket.Payload([]byte{1, 2, 3, 4})))
	return out
}
