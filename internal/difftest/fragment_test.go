package difftest

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"net"
	"os"
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
	"bpfwall/parser/iptables"
	"bpfwall/rules"
)

// The fragments topology: a sender and the firewall, whose own sockets
// are the destination (the INPUT chain).
var (
	fragFW4     = net.IPv4(192, 0, 2, 1).To4()
	fragSender4 = net.IPv4(192, 0, 2, 2).To4()
	fragFW6     = net.ParseIP("2001:db8::1")
	fragSender6 = net.ParseIP("2001:db8::2")
)

// fragTopology is a sender namespace whose packet socket writes frames
// to the firewall namespace, where raw sockets see every datagram that
// INPUT let through, after reassembly (raw_local_deliver and
// raw6_local_deliver run after LOCAL_IN).
type fragTopology struct {
	sender, fw string
	send       *packetSocket
	raw        map[rules.Family][]int // raw sockets in the firewall
}

func newFragTopology(t *testing.T) *fragTopology {
	t.Helper()
	name := fmt.Sprintf("bwfr%d-", os.Getpid())
	ft := &fragTopology{sender: name + "s", fw: name + "fw", raw: map[rules.Family][]int{}}
	for _, ns := range []string{ft.sender, ft.fw} {
		if err := topology.Run("ip", "netns", "add", ns); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { topology.Run("ip", "netns", "del", ns) })
	}
	if err := topology.Sysctl(ft.sender, "net/ipv6/conf/all/disable_ipv6", "1", "net/ipv6/conf/default/disable_ipv6", "1"); err != nil {
		t.Fatal(err)
	}
	if err := topology.Sysctl(ft.fw, "net/ipv6/conf/all/accept_dad", "0", "net/ipv6/conf/default/accept_dad", "0"); err != nil {
		t.Fatal(err)
	}
	fw := []string{
		fmt.Sprintf("link add fwin address %s type veth peer name %s address %s netns %s", topology.FirewallInMAC, topology.SenderIface, topology.SenderMAC, ft.sender),
		"link set fwin up", "link set lo up",
		fmt.Sprintf("addr add %s/24 dev fwin", fragFW4),
		fmt.Sprintf("addr add %s/64 dev fwin nodad", fragFW6),
		// The firewall's own answers (echo replies, resets) need no ARP.
		fmt.Sprintf("neigh replace %s lladdr %s dev fwin nud permanent", fragSender4, topology.SenderMAC),
		fmt.Sprintf("neigh replace %s lladdr %s dev fwin nud permanent", fragSender6, topology.SenderMAC),
	}
	if err := topology.RunInput([]byte(strings.Join(fw, "\n")+"\n"), "ip", "-n", ft.fw, "-batch", "-"); err != nil {
		t.Fatal(err)
	}
	if err := topology.Run("ip", "-n", ft.sender, "link", "set", topology.SenderIface, "up"); err != nil {
		t.Fatal(err)
	}
	var err error
	if ft.send, err = openPacketSocket(ft.sender, topology.SenderIface); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ft.send.Close() })
	err = topology.Do(ft.fw, func() error {
		for _, s := range []struct {
			fam    rules.Family
			domain int
			protos []int
		}{
			{rules.IPv4, unix.AF_INET, []int{unix.IPPROTO_UDP, unix.IPPROTO_TCP, unix.IPPROTO_ICMP}},
			{rules.IPv6, unix.AF_INET6, []int{unix.IPPROTO_UDP, unix.IPPROTO_TCP, unix.IPPROTO_ICMPV6}},
		} {
			for _, proto := range s.protos {
				fd, err := unix.Socket(s.domain, unix.SOCK_RAW|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK, proto)
				if err != nil {
					return fmt.Errorf("raw socket %d/%d: %w", s.domain, proto, err)
				}
				t.Cleanup(func() { unix.Close(fd) })
				ft.raw[s.fam] = append(ft.raw[s.fam], fd)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return ft
}

// A fragProbe is a datagram sent as frames (its fragments, in the order
// given); its tag, at the end of its payload, identifies it among what the
// firewall's raw sockets received.
type fragProbe struct {
	name   string
	tag    string
	frames [][]byte
	// bpfDiffers says why bpfwall, by design, does not do what netfilter
	// does with this probe; want is then bpfwall's documented outcome.
	bpfDiffers string
	want       bool
}

// datagram is a transport header and payload with its checksum, for
// proto (17, 6, 1 or 58) between the sender and the firewall.
func datagram(t *testing.T, fam rules.Family, proto uint8, dport uint16, size int, tag string) []byte {
	t.Helper()
	payload := make([]byte, size-len(tag))
	for i := range payload {
		payload[i] = byte(i)
	}
	payload = append(payload, tag...)
	var nl gopacket.NetworkLayer
	if fam == rules.IPv4 {
		nl = &layers.IPv4{Version: 4, TTL: 64, Protocol: layers.IPProtocol(proto), SrcIP: fragSender4, DstIP: fragFW4}
	} else {
		nl = &layers.IPv6{Version: 6, HopLimit: 64, NextHeader: layers.IPProtocol(proto), SrcIP: fragSender6, DstIP: fragFW6}
	}
	var l4 gopacket.SerializableLayer
	switch proto {
	case 17:
		u := &layers.UDP{SrcPort: 4000, DstPort: layers.UDPPort(dport)}
		u.SetNetworkLayerForChecksum(nl)
		l4 = u
	case 6:
		c := &layers.TCP{SrcPort: 4000, DstPort: layers.TCPPort(dport), Seq: 1, SYN: true, Window: 1024}
		c.SetNetworkLayerForChecksum(nl)
		l4 = c
	case 1:
		l4 = &layers.ICMPv4{TypeCode: layers.CreateICMPv4TypeCode(8, 0), Id: 7, Seq: 1}
	case 58:
		c := &layers.ICMPv6{TypeCode: layers.CreateICMPv6TypeCode(128, 0)}
		c.SetNetworkLayerForChecksum(nl)
		l4 = gopacket.SerializableLayer(c)
		// The echo identifier and sequence number.
		payload = append([]byte{0, 7, 0, 1}, payload...)
	}
	buf := gopacket.NewSerializeBuffer()
	if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{ComputeChecksums: true, FixLengths: true}, l4, gopacket.Payload(payload)); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// fragPiece is one piece of a datagram: data at offset (in bytes, a
// multiple of 8), more fragments to come or not.
type fragPiece struct {
	off  int
	data []byte
	more bool
}

// split cuts d into pieces of at most size bytes (a multiple of 8).
func split(d []byte, size int) []fragPiece {
	var out []fragPiece
	for off := 0; off < len(d); off += size {
		end := min(off+size, len(d))
		out = append(out, fragPiece{off: off, data: d[off:end], more: end < len(d)})
	}
	return out
}

// frames wraps the fragments of datagram id in IP headers, in the order
// given; a single fragment at offset 0 without more is the datagram
// unfragmented.
func frames(t *testing.T, fam rules.Family, proto uint8, id uint32, fs []fragPiece) [][]byte {
	t.Helper()
	var out [][]byte
	for _, f := range fs {
		eth := &layers.Ethernet{SrcMAC: topology.SenderMAC, DstMAC: topology.FirewallInMAC}
		buf := gopacket.NewSerializeBuffer()
		opts := gopacket.SerializeOptions{ComputeChecksums: true, FixLengths: true}
		var err error
		whole := f.off == 0 && !f.more
		if fam == rules.IPv4 {
			eth.EthernetType = layers.EthernetTypeIPv4
			ip := &layers.IPv4{Version: 4, TTL: 64, Protocol: layers.IPProtocol(proto), SrcIP: fragSender4, DstIP: fragFW4,
				Id: uint16(id), FragOffset: uint16(f.off / 8)}
			if f.more {
				ip.Flags = layers.IPv4MoreFragments
			}
			err = gopacket.SerializeLayers(buf, opts, eth, ip, gopacket.Payload(f.data))
		} else {
			eth.EthernetType = layers.EthernetTypeIPv6
			ip := &layers.IPv6{Version: 6, HopLimit: 64, NextHeader: layers.IPProtocol(proto), SrcIP: fragSender6, DstIP: fragFW6}
			data := f.data
			if !whole {
				ip.NextHeader = 44
				hdr := make([]byte, 8)
				hdr[0] = proto
				fo := uint16(f.off)
				if f.more {
					fo |= 1
				}
				binary.BigEndian.PutUint16(hdr[2:], fo)
				binary.BigEndian.PutUint32(hdr[4:], id)
				data = append(hdr, f.data...)
			}
			err = gopacket.SerializeLayers(buf, opts, eth, ip, gopacket.Payload(data))
		}
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, bytes.Clone(buf.Bytes()))
	}
	return out
}

// fragProbes are the datagrams of one family: whole, fragmented in order
// and out of order, with a tiny first fragment, overlapping, duplicated,
// and a lone later fragment; UDP, TCP and ICMP.
//
// Every call numbers its datagrams anew: the fragments an earlier run left
// queued (for 30 s, ipfrag_time) must not complete this run's datagrams.
// conflictDiffers: see the "conflicting first fragments" probe.
// conntrack: the rule set tests the state: the program defers fragments
// and ICMP to its netfilter stage, which decides the reassembled datagram
// after conntrack as netfilter does, so nothing differs by design.
func fragProbes(t *testing.T, fam rules.Family, conflictDiffers, conntrack bool) []fragProbe {
	icmp := uint8(1)
	if fam == rules.IPv6 {
		icmp = 58
	}
	var out []*fragProbe
	id := fragIDs
	defer func() { fragIDs = id }()
	add := func(name string, proto uint8, dport uint16, size int, cut func(d []byte) []fragPiece) *fragProbe {
		id++
		tag := fmt.Sprintf("bwfrag-%s-%d", fam, id)
		d := datagram(t, fam, proto, dport, size, tag)
		out = append(out, &fragProbe{name: name, tag: tag, frames: frames(t, fam, proto, id, cut(d))})
		return out[len(out)-1]
	}
	whole := func(d []byte) []fragPiece { return []fragPiece{{data: d}} }
	inOrder := func(d []byte) []fragPiece { return split(d, 1232) }
	reversed := func(d []byte) []fragPiece {
		fs := split(d, 1232)
		for i, j := 0, len(fs)-1; i < j; i, j = i+1, j-1 {
			fs[i], fs[j] = fs[j], fs[i]
		}
		return fs
	}
	for _, p := range []struct {
		proto uint8
		port  uint16
	}{{17, 53}, {17, 9999}, {6, 22}, {6, 23}, {icmp, 0}} {
		add(fmt.Sprintf("proto %d port %d whole", p.proto, p.port), p.proto, p.port, 200, whole)
		add(fmt.Sprintf("proto %d port %d in order", p.proto, p.port), p.proto, p.port, 3000, inOrder)
		add(fmt.Sprintf("proto %d port %d out of order", p.proto, p.port), p.proto, p.port, 3000, reversed)
	}
	// A first fragment of 16 bytes holds 16 of TCP's 20 header bytes.
	tiny := add("tcp port 22 tiny first fragment", 6, 22, 600, func(d []byte) []fragPiece {
		return []fragPiece{{off: 0, data: d[:16], more: true}, {off: 16, data: d[16:]}}
	})
	switch {
	case conntrack:
		// The netfilter stage sees the reassembled datagram.
	case fam == rules.IPv6:
		// ipv6_frag_rcv drops a first fragment without the whole
		// upper-layer header (ipv6_frag_thdr_truncated): nothing arrives
		// either way.
	default:
		tiny.bpfDiffers = "a first fragment without the whole transport header is dropped (ir.SkipTinyFragment)"
		tiny.want = false
	}
	// A later fragment rewriting the first one's ports: the kernel drops
	// the whole queue (inet_frag_queue_insert: overlap).
	add("udp port 9999 overlapped by port 53", 17, 9999, 2000, func(d []byte) []fragPiece {
		fake := bytes.Clone(d[:16])
		binary.BigEndian.PutUint16(fake[2:], 53)
		return []fragPiece{{off: 0, data: d[:1024], more: true}, {off: 0, data: fake, more: true}, {off: 1024, data: d[1024:]}}
	})
	add("udp port 53 overlapping middle", 17, 53, 2000, func(d []byte) []fragPiece {
		return []fragPiece{{off: 0, data: d[:1024], more: true}, {off: 512, data: d[512:1536], more: true}, {off: 1536, data: d[1536:]}}
	})
	add("udp port 53 duplicate first fragment", 17, 53, 2000, func(d []byte) []fragPiece {
		fs := split(d, 1024)
		return append([]fragPiece{fs[0]}, fs...)
	})
	// Two different first fragments, the dropped port's first: netfilter
	// keeps the first to arrive (a later one with the same range is a
	// duplicate, inet_frag_queue_insert) and filters the datagram by it;
	// bpfwall drops it before the queue, which then keeps the second.
	conflict := add("conflicting first fragments, port 9999 then 53", 17, 9999, 2000, func(d []byte) []fragPiece {
		other := bytes.Clone(d[:1024])
		binary.BigEndian.PutUint16(other[2:], 53)
		// The checksum covers the ports: the port 53 version must be a
		// valid datagram too.
		binary.BigEndian.PutUint16(other[6:], onesAdd(binary.BigEndian.Uint16(d[6:]), 9999, 53))
		return []fragPiece{{off: 0, data: d[:1024], more: true}, {off: 0, data: other, more: true}, {off: 1024, data: d[1024:]}}
	})
	if conflictDiffers && !conntrack {
		conflict.bpfDiffers = "of two different first fragments, the one the rules drop never reaches the queue"
		conflict.want = true
	}
	add("udp port 53 later fragments only", 17, 53, 3000, func(d []byte) []fragPiece { return split(d, 1232)[1:] })
	probes := make([]fragProbe, len(out))
	for i, p := range out {
		probes[i] = *p
	}
	return probes
}

// fragIDs numbers the probe datagrams (IPv4 identification, IPv6
// fragment identification) across runs.
var fragIDs = uint32(0x100)

// onesAdd updates a ones' complement checksum whose data had the 16-bit
// word from replaced by to (RFC 1624).
func onesAdd(sum, from, to uint16) uint16 {
	s := uint32(^sum) + uint32(^from) + uint32(to)
	for s > 0xffff {
		s = s>>16 + s&0xffff
	}
	return ^uint16(s)
}

// fragRules are INPUT rule sets of each family, after a rule that accepts
// the sentinel (UDP port 7 to port 7, never a probe).
var fragRules = []struct {
	name, rules string
	conntrack   bool
}{
	{"accept dns, ssh and ping", `-A INPUT -p udp -m udp --dport 53 -j ACCEPT
-A INPUT -p tcp -m tcp --dport 22 -j ACCEPT
-A INPUT -p ICMP -j ACCEPT
-A INPUT -f -j DROP
`, false},
	{"drop by port, fragments accepted", `-A INPUT -p udp -m udp --dport 9999 -j DROP
-A INPUT -p tcp -m tcp --dport 23 -j DROP
-A INPUT -f -j ACCEPT
-A INPUT -p udp -j ACCEPT
-A INPUT -p tcp -j ACCEPT
`, false},
	// Conntrack turns nf_defrag on: IPv6 INPUT sees reassembled
	// datagrams too, and the state of a first fragment is its datagram's.
	{"conntrack", `-A INPUT -m state --state INVALID -j DROP
-A INPUT -p udp -m udp --dport 53 -m state --state NEW -j ACCEPT
-A INPUT -p tcp -m tcp --dport 22 -m state --state NEW -j ACCEPT
-A INPUT -p udp -m udp --dport 9999 -j DROP
`, true},
}

func fragRuleSet(fam rules.Family, policy, body string) string {
	icmp := "icmp"
	if fam == rules.IPv6 {
		icmp = "ipv6-icmp"
		body = strings.ReplaceAll(body, "-A INPUT -f -j DROP\n", "")
		body = strings.ReplaceAll(body, "-A INPUT -f -j ACCEPT\n", "")
	}
	body = strings.ReplaceAll(body, "ICMP", icmp)
	return "*filter\n:INPUT " + policy + " [0:0]\n:FORWARD ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n" +
		"-A INPUT -p udp -m udp --sport 7 --dport 7 -j ACCEPT\n" + body + "COMMIT\n"
}

// TestFragmentsAtInput sends whole and fragmented datagrams to the
// firewall's own sockets, through its INPUT chain in netfilter
// (iptables-legacy-restore) and through the compiled program attached to
// its interface with netfilter empty, and compares which datagrams the
// firewall received. IPv4 INPUT sees reassembled datagrams
// (ip_local_deliver); IPv6 INPUT sees each fragment.
func TestFragmentsAtInput(t *testing.T) {
	testenv.RequireRoot(t)
	testenv.RequireTool(t, "iptables-legacy-restore")
	testenv.RequireTool(t, "ip6tables-legacy-restore")
	ft := newFragTopology(t)
	root := testenv.BPFFS(t)
	t.Cleanup(func() { os.RemoveAll(root) })
	compared, known := 0, 0
	for _, fam := range []rules.Family{rules.IPv4, rules.IPv6} {
		for _, rs := range fragRules {
			for _, policy := range []string{"DROP", "ACCEPT"} {
				text := fragRuleSet(fam, policy, rs.rules)
				name := fmt.Sprintf("%s/%s/%s", fam, rs.name, policy)
				// Port 9999 dropped, port 53 accepted, in a chain that
				// sees reassembled datagrams.
				conflict := (fam == rules.IPv4 || rs.conntrack) && (policy == "DROP" || strings.Contains(rs.rules, "--dport 9999 -j DROP"))
				t.Run(name, func(t *testing.T) {
					probes := fragProbes(t, fam, conflict, rs.conntrack)
					nf := ft.runNetfilter(t, fam, text, probes)
					for _, hook := range []codegen.Hook{codegen.HookXDP, codegen.HookTCIngress} {
						for _, level := range codegen.Levels {
							probes := fragProbes(t, fam, conflict, rs.conntrack)
							bw := ft.runBPF(t, root, fam, text, hook, level, rs.conntrack, probes)
							for i, pr := range probes {
								if pr.bpfDiffers != "" {
									known++
									t.Logf("%s: netfilter %v, bpfwall on %s %v %v (by design: %s)", pr.name, nf[i], hook, level, bw[i], pr.bpfDiffers)
									if bw[i] != pr.want {
										t.Errorf("%s on %s %v: bpfwall %v, want %v (%s)", pr.name, hook, level, bw[i], pr.want, pr.bpfDiffers)
									}
									continue
								}
								compared++
								if nf[i] != bw[i] {
									t.Errorf("%s on %s %v: netfilter received %v, bpfwall %v\nrules:\n%s", pr.name, hook, level, nf[i], bw[i], text)
								}
							}
						}
					}
				})
			}
		}
	}
	t.Logf("fragments at INPUT: %d outcomes compared with netfilter, %d documented divergences checked", compared, known)
}

// restoreTool is iptables-legacy-restore or its IPv6 twin.
func restoreTool(fam rules.Family) string {
	if fam == rules.IPv6 {
		return "ip6tables-legacy-restore"
	}
	return "iptables-legacy-restore"
}

func (ft *fragTopology) flush(t *testing.T, fam rules.Family) {
	t.Helper()
	ct := &Topology{Topology: &topology.Topology{Firewall: ft.fw}}
	if err := ct.flushConntrack(); err != nil {
		t.Fatal(err)
	}
	empty := "*filter\n:INPUT ACCEPT [0:0]\n:FORWARD ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\nCOMMIT\n"
	if err := topology.RunInput([]byte(empty), "ip", "netns", "exec", ft.fw, restoreTool(fam)); err != nil {
		t.Fatal(err)
	}
}

func (ft *fragTopology) runNetfilter(t *testing.T, fam rules.Family, text string, probes []fragProbe) []bool {
	t.Helper()
	if err := topology.RunInput([]byte(text), "ip", "netns", "exec", ft.fw, restoreTool(fam)); err != nil {
		t.Fatal(err)
	}
	defer ft.flush(t, fam)
	return ft.deliver(t, fam, probes)
}

func (ft *fragTopology) runBPF(t *testing.T, root string, fam rules.Family, text string, hook codegen.Hook, level codegen.Level, conntrack bool, probes []fragProbe) []bool {
	t.Helper()
	rs, err := iptables.Parse("frag.rules", []byte(text), iptables.Options{Family: fam, ForceFamily: true})
	if err != nil {
		t.Fatal(err)
	}
	prog, err := ir.Lower(rs, ir.LowerOptions{Chain: "INPUT"})
	if err != nil {
		t.Fatal(err)
	}
	if want := fam == rules.IPv4 || conntrack; prog.Reassembled != want {
		t.Fatalf("%s INPUT: Reassembled %v, want %v", fam, prog.Reassembled, want)
	}
	p, err := codegen.Compile(prog, codegen.Options{Trace: true, Hook: hook, Level: level})
	if err != nil {
		t.Fatalf("compile for %s: %v", hook, err)
	}
	meta, counters, err := loader.NewMeta(rs, p, "frag.rules")
	if err != nil {
		t.Fatal(err)
	}
	var place loader.Place
	err = topology.Do(ft.fw, func() error {
		if place, err = loader.Here(root, hook); err != nil {
			return err
		}
		swap := loader.Swap{Place: place, Program: p, Meta: meta, Counters: counters, Ifaces: []string{"fwin"}, XDPMode: loader.XDPGeneric}
		err := runSwap(&swap)
		return err
	})
	if err != nil {
		t.Fatalf("attach on %s: %v", hook, err)
	}
	defer func() {
		err := topology.Do(ft.fw, func() error {
			_, err := loader.Unload(place, nil)
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		ft.flush(t, fam)
	}()
	return ft.deliver(t, fam, probes)
}

// deliver sends the probes' frames, then a sentinel datagram, all from
// one CPU so that they arrive in order, and reads the raw sockets until
// the sentinel: which probes reached the firewall's sockets.
func (ft *fragTopology) deliver(t *testing.T, fam rules.Family, probes []fragProbe) []bool {
	t.Helper()
	sentinelTag := fmt.Sprintf("bwfrag-sentinel-%d", time.Now().UnixNano())
	sentinel := frames(t, fam, 17, 1, []fragPiece{{data: sentinelDatagram(t, fam, sentinelTag)}})
	err := onOneCPU(func() error {
		for _, pr := range probes {
			for _, f := range pr.frames {
				if err := ft.send.send(f); err != nil {
					return err
				}
			}
		}
		return ft.send.send(sentinel[0])
	})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	buf := make([]byte, 1<<16)
	deadline := time.Now().Add(5 * time.Second)
	for !got[sentinelTag] {
		if time.Now().After(deadline) {
			t.Fatal("the sentinel datagram never reached the firewall's raw socket")
		}
		fds := make([]unix.PollFd, len(ft.raw[fam]))
		for i, fd := range ft.raw[fam] {
			fds[i] = unix.PollFd{Fd: int32(fd), Events: unix.POLLIN}
		}
		if _, err := unix.Poll(fds, 100); err != nil && err != unix.EINTR {
			t.Fatal(err)
		}
		for _, fd := range ft.raw[fam] {
			for {
				n, _, err := unix.Recvfrom(fd, buf, unix.MSG_DONTWAIT)
				if err != nil {
					break
				}
				for _, pr := range probes {
					if bytes.HasSuffix(buf[:n], []byte(pr.tag)) {
						got[pr.tag] = true
					}
				}
				if bytes.HasSuffix(buf[:n], []byte(sentinelTag)) {
					got[sentinelTag] = true
				}
			}
		}
	}
	out := make([]bool, len(probes))
	for i, pr := range probes {
		out[i] = got[pr.tag]
	}
	return out
}

func sentinelDatagram(t *testing.T, fam rules.Family, tag string) []byte {
	t.Helper()
	var nl gopacket.NetworkLayer
	if fam == rules.IPv4 {
		nl = &layers.IPv4{Version: 4, TTL: 64, Protocol: layers.IPProtocolUDP, SrcIP: fragSender4, DstIP: fragFW4}
	} else {
		nl = &layers.IPv6{Version: 6, HopLimit: 64, NextHeader: layers.IPProtocolUDP, SrcIP: fragSender6, DstIP: fragFW6}
	}
	u := &layers.UDP{SrcPort: 7, DstPort: 7}
	u.SetNetworkLayerForChecksum(nl)
	buf := gopacket.NewSerializeBuffer()
	if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{ComputeChecksums: true, FixLengths: true}, u, gopacket.Payload(tag)); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}
