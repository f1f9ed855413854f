package difftest

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"

	"bpfwall/codegen"
	"bpfwall/internal/testenv"
	"bpfwall/internal/topology"
	"bpfwall/loader"
	"bpfwall/parser/iptables"
	"bpfwall/rules"
)

// The conversations' endpoints: addresses no host owns, so that neither
// end's stack answers the crafted segments (no RST, no ICMP); the
// firewall forwards to them through permanent neighbour entries.
var (
	convClient  = net.IPv4(192, 0, 2, 50).To4()
	convServer  = net.IPv4(198, 51, 100, 50).To4()
	convClient6 = net.ParseIP("2001:db8:1::50")
	convServer6 = net.ParseIP("2001:db8:2::50")
)

const convServerPort = 80

// convSeg is one crafted segment of a conversation.
type convSeg struct {
	v6         bool
	fromClient bool
	port       uint16 // the client's port: one conversation each
	flags      string // of "SAFRPU"
	seq, ack   uint32
	win        uint16
	data       int
	opts       []layers.TCPOption
}

func (s convSeg) String() string {
	dir := "c→s"
	if !s.fromClient {
		dir = "s→c"
	}
	return fmt.Sprintf("port %d %s [%s] seq %d ack %d win %d len %d opts %d", s.port, dir, s.flags, s.seq, s.ack, s.win, s.data, len(s.opts))
}

// frame builds the segment's Ethernet frame, as the end sending it puts
// it on its veth towards the firewall.
func (s convSeg) frame(t *testing.T) []byte {
	eth := &layers.Ethernet{SrcMAC: topology.SenderMAC, DstMAC: topology.FirewallInMAC, EthernetType: layers.EthernetTypeIPv4}
	src, dst := convClient, convServer
	if s.v6 {
		eth.EthernetType, src, dst = layers.EthernetTypeIPv6, convClient6, convServer6
	}
	tcp := &layers.TCP{SrcPort: layers.TCPPort(s.port), DstPort: convServerPort, Seq: s.seq, Ack: s.ack, Window: s.win, Options: s.opts}
	if !s.fromClient {
		eth.SrcMAC, eth.DstMAC = topology.ReceiverMAC, topology.FirewallOutMAC
		src, dst = dst, src
		tcp.SrcPort, tcp.DstPort = convServerPort, layers.TCPPort(s.port)
	}
	var ip gopacket.SerializableLayer
	if s.v6 {
		ip6 := &layers.IPv6{Version: 6, HopLimit: 64, NextHeader: layers.IPProtocolTCP, SrcIP: src, DstIP: dst}
		tcp.SetNetworkLayerForChecksum(ip6)
		ip = ip6
	} else {
		ip4 := &layers.IPv4{Version: 4, TTL: 64, Protocol: layers.IPProtocolTCP, SrcIP: src, DstIP: dst}
		tcp.SetNetworkLayerForChecksum(ip4)
		ip = ip4
	}
	for _, f := range s.flags {
		switch f {
		case 'S':
			tcp.SYN = true
		case 'A':
			tcp.ACK = true
		case 'F':
			tcp.FIN = true
		case 'R':
			tcp.RST = true
		case 'P':
			tcp.PSH = true
		case 'U':
			tcp.URG = true
		}
	}
	buf := gopacket.NewSerializeBuffer()
	if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{ComputeChecksums: true, FixLengths: true},
		eth, ip, tcp, gopacket.Payload(bytes.Repeat([]byte{'x'}, s.data))); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// convEnd is what the generator knows of one end: the sequence number it
// sends next, its window, and its scale once both offered one.
type convEnd struct {
	nxt   uint32
	win   uint16
	scale uint8
}

// convGen writes conversations: scripted openings that bring the
// connection to a TCP state, then segments sampled around the window
// edges conntrack checks. It tracks the ends as if every segment sent
// with the expected numbers arrived; the kernel is the judge of the rest.
type convGen struct {
	v6   bool
	r    *rand.Rand
	segs []convSeg
	port uint16
	c, s convEnd
	opts bool // window scale and SACK offered in the handshake
}

func (g *convGen) send(fromClient bool, flags string, seq, ack uint32, win uint16, data int, opts []layers.TCPOption) {
	g.segs = append(g.segs, convSeg{v6: g.v6, fromClient: fromClient, port: g.port, flags: flags, seq: seq, ack: ack, win: win, data: data, opts: opts})
}

func (g *convGen) ends(fromClient bool) (me, peer *convEnd) {
	if fromClient {
		return &g.c, &g.s
	}
	return &g.s, &g.c
}

// synOpts are a SYN's options: MSS, and window scale and SACK permitted
// when the conversation offers them.
func (g *convGen) synOpts(scale uint8) []layers.TCPOption {
	opts := []layers.TCPOption{{OptionType: layers.TCPOptionKindMSS, OptionLength: 4, OptionData: []byte{5, 0xb4}}}
	if g.opts {
		opts = append(opts,
			layers.TCPOption{OptionType: layers.TCPOptionKindSACKPermitted, OptionLength: 2},
			layers.TCPOption{OptionType: layers.TCPOptionKindNop, OptionLength: 1},
			layers.TCPOption{OptionType: layers.TCPOptionKindWindowScale, OptionLength: 3, OptionData: []byte{scale}})
	}
	return opts
}

// segment sends an in-sequence segment and advances the sender.
func (g *convGen) segment(fromClient bool, flags string, data int) {
	me, peer := g.ends(fromClient)
	var opts []layers.TCPOption
	if strings.Contains(flags, "S") {
		opts = g.synOpts(me.scale)
	}
	ack := peer.nxt
	if !strings.Contains(flags, "A") {
		ack = 0
	}
	g.send(fromClient, flags, me.nxt, ack, me.win, data, opts)
	me.nxt += uint32(data)
	if strings.ContainsAny(flags, "SF") {
		me.nxt++
	}
}

// Phases a conversation's scripted opening reaches.
var convPhases = []string{
	"pickup", "syn_sent", "syn_recv", "established", "data", "fin_wait", "close_wait",
	"last_ack", "time_wait", "reset", "reopened", "syn_retransmitted", "simultaneous",
}

// opening scripts the conversation up to phase.
func (g *convGen) opening(phase string) {
	c, s := true, false
	if phase == "pickup" {
		// Conntrack picks the connection up from an ACK (tcp_loose).
		g.segment(c, "A", 20)
		g.segment(s, "A", 0)
		return
	}
	g.segment(c, "S", 0)
	switch phase {
	case "syn_sent":
		return
	case "syn_retransmitted":
		g.c.nxt--
		g.segment(c, "S", 0)
		return
	case "simultaneous":
		g.segment(s, "S", 0)
		return
	}
	g.segment(s, "SA", 0)
	if phase == "syn_recv" {
		return
	}
	if !g.opts {
		g.c.scale, g.s.scale = 0, 0
	}
	g.segment(c, "A", 0)
	if phase == "established" {
		return
	}
	g.segment(c, "PA", 100)
	g.segment(s, "A", 0)
	g.segment(s, "PA", 300)
	g.segment(c, "A", 0)
	switch phase {
	case "data":
		return
	case "reset":
		g.segment(c, "R", 0)
		return
	}
	g.segment(c, "FA", 0)
	if phase == "fin_wait" {
		return
	}
	g.segment(s, "A", 0)
	if phase == "close_wait" {
		return
	}
	g.segment(s, "FA", 0)
	if phase == "last_ack" {
		return
	}
	g.segment(c, "A", 0)
	if phase == "time_wait" {
		return
	}
	// reopened: a new SYN with a higher sequence number
	g.c.nxt += 1 << 20
	g.segment(c, "S", 0)
	g.s.nxt += 1 << 20
	g.segment(s, "SA", 0)
	g.segment(c, "A", 0)
}

// random sends a segment with numbers, flags, window, length and options
// sampled around the edges tcp_in_window and the state machine test.
func (g *convGen) random() {
	r := g.r
	fromClient := r.IntN(2) == 0
	me, peer := g.ends(fromClient)
	peerWin := uint32(peer.win) << peer.scale
	myWin := uint32(me.win) << me.scale
	flags := []string{"A", "A", "A", "PA", "FA", "R", "RA", "S", "SA", "UA", "RA"}[r.IntN(11)]
	seqOffs := []uint32{0, 0, 0, 1, ^uint32(0), peerWin, peerWin + 1, peerWin + 2, peerWin - 1, -peerWin, -peerWin - 1,
		2 * peerWin, 1 << 30, 3 << 30, 66000, neg(66000), neg(66001), -myWin, -myWin - 1, r.Uint32()}
	seq := me.nxt + seqOffs[r.IntN(len(seqOffs))]
	switch r.IntN(12) {
	case 0:
		seq = 0
	case 1:
		seq = me.nxt - 1 // a keep-alive
	}
	ackOffs := []uint32{0, 0, 0, 1, ^uint32(0), 2, neg(66000), neg(66001), neg(66002), -myWin, -myWin - 1, neg(2 * myWin), 1 << 31, r.Uint32()}
	ack := peer.nxt + ackOffs[r.IntN(len(ackOffs))]
	if r.IntN(10) == 0 {
		ack = 0
	}
	win := []uint16{me.win, me.win, 0, 1, 65535, uint16(r.IntN(65536))}[r.IntN(6)]
	data := []int{0, 0, 0, 1, 10, r.IntN(400)}[r.IntN(6)]
	var opts []layers.TCPOption
	switch r.IntN(6) {
	case 0, 1:
		// SACK blocks whose right edges straddle what the peer sent.
		n := 1 + r.IntN(3)
		d := make([]byte, 8*n)
		for i := range n {
			right := peer.nxt + []uint32{0, 1, ^uint32(0), 1000, 1 << 30}[r.IntN(5)]
			binary.BigEndian.PutUint32(d[8*i:], right-10)
			binary.BigEndian.PutUint32(d[8*i+4:], right)
		}
		opts = []layers.TCPOption{{OptionType: layers.TCPOptionKindNop, OptionLength: 1}, {OptionType: layers.TCPOptionKindNop, OptionLength: 1},
			{OptionType: layers.TCPOptionKindSACK, OptionLength: uint8(2 + 8*n), OptionData: d}}
		if r.IntN(2) == 0 {
			ts := layers.TCPOption{OptionType: layers.TCPOptionKindTimestamps, OptionLength: 10, OptionData: make([]byte, 8)}
			opts = append([]layers.TCPOption{{OptionType: layers.TCPOptionKindNop, OptionLength: 1}, {OptionType: layers.TCPOptionKindNop, OptionLength: 1}, ts}, opts...)
		}
	case 2:
		if strings.Contains(flags, "S") {
			opts = g.synOpts(uint8(r.IntN(16)))
		}
	case 3:
		// Timestamps alone: tcp_sack's fast path.
		opts = []layers.TCPOption{{OptionType: layers.TCPOptionKindNop, OptionLength: 1}, {OptionType: layers.TCPOptionKindNop, OptionLength: 1},
			{OptionType: layers.TCPOptionKindTimestamps, OptionLength: 10, OptionData: make([]byte, 8)}}
	}
	g.send(fromClient, flags, seq, ack, win, data, opts)
	if seq == me.nxt && ack == peer.nxt && !strings.ContainsAny(flags, "RS") {
		me.nxt += uint32(data)
		if strings.Contains(flags, "F") {
			me.nxt++
		}
	}
}

// tcpConversations writes the conversations: every phase twice, once
// with window scale and SACK and once without, each followed by random
// segments.
func tcpConversations(r *rand.Rand, randoms int, v6 bool) []convSeg {
	var segs []convSeg
	port := uint16(41000)
	for _, phase := range convPhases {
		for _, opts := range []bool{true, false} {
			g := &convGen{v6: v6, r: r, port: port, opts: opts,
				c: convEnd{nxt: 1_000_000 + uint32(port)*1000, win: 1000, scale: 2},
				s: convEnd{nxt: 3_000_000_000 + uint32(port)*1000, win: 2000, scale: 3}}
			g.opening(phase)
			for range randoms {
				g.random()
			}
			segs = append(segs, g.segs...)
			port++
		}
	}
	return segs
}

// convScripts are minimal conversations, each compared with the kernel
// segment by segment like the others: cases the random segments reach
// only by chance, kept as named reproductions.
var convScripts = []struct {
	name   string
	last   string // netfilter's state for the last segment, without be_liberal
	script func(g *convGen)
}{
	// A SYN in ESTABLISHED is ignored (tcp_conntracks sIG): conntrack
	// notes it in last_index, last_dir and last_end. An RST acknowledging
	// it (ack == last_end) skips the window check (nf_conntrack_tcp_packet,
	// TCP_CONNTRACK_CLOSE: "RST sent to invalid SYN ... we had let
	// through") only when it comes from the other side than the SYN
	// (upstream's direction check, "do not force CLOSE on invalid-seq RST
	// without direction check", in this 6.18.y); these RSTs are far out
	// of window, so the SYN's own side's is INVALID.
	{"rst from the ignored syn's side", "INVALID", func(g *convGen) {
		syn := g.ignoredSyn()
		g.send(true, "RA", g.c.nxt+1<<29, syn+1, g.c.win, 0, nil)
	}},
	{"rst from the other side than the ignored syn", "ESTABLISHED", func(g *convGen) {
		syn := g.ignoredSyn()
		g.send(false, "RA", g.s.nxt+1<<29, syn+1, g.s.win, 0, nil)
	}},
	{"rst from the ignored syn's side, in window", "ESTABLISHED", func(g *convGen) {
		syn := g.ignoredSyn()
		g.send(true, "RA", g.c.nxt, syn+1, g.c.win, 0, nil)
	}},
	{"rst from the other side, not acknowledging the ignored syn", "INVALID", func(g *convGen) {
		syn := g.ignoredSyn()
		g.send(false, "RA", g.s.nxt+1<<29, syn, g.s.win, 0, nil)
	}},
	// A simultaneous open: the server's SYN in SYN_SENT is let through
	// (SYN_SENT2), so last_index is SYN with last_dir the reply
	// direction; the same rule the other way round. Only ignored
	// segments write last_end: it is still tcp_new's 0, which an RST
	// with ack 0 matches.
	{"rst from the client after a simultaneous open", "ESTABLISHED", func(g *convGen) {
		g.opening("simultaneous")
		g.send(true, "RA", g.c.nxt+1<<29, 0, g.c.win, 0, nil)
	}},
	{"rst from the server after a simultaneous open", "INVALID", func(g *convGen) {
		g.opening("simultaneous")
		g.send(false, "RA", g.s.nxt+1<<29, 0, g.s.win, 0, nil)
	}},
	// The server's SYN in TIME_WAIT: the closing side set CLOSE_INIT, so
	// the entry is killed and the SYN starts a connection the other way
	// (-NF_REPEAT); the client answers it.
	{"reply-direction syn in time_wait", "INVALID", func(g *convGen) {
		g.opening("time_wait")
		g.s.nxt += 1 << 20
		g.segment(false, "S", 0)
		g.segment(true, "SA", 0)
		g.segment(false, "A", 0)
		g.send(true, "RA", g.c.nxt+1<<29, g.s.nxt, g.c.win, 0, nil)
	}},
}

// ignoredSyn establishes the connection, exchanges data, then sends a
// SYN from the client far from its sequence, which conntrack ignores in
// ESTABLISHED, and returns the SYN's sequence number.
func (g *convGen) ignoredSyn() uint32 {
	g.opening("data")
	syn := g.c.nxt + 1<<30
	g.send(true, "S", syn, 0, g.c.win, 0, g.synOpts(g.c.scale))
	return syn
}

// scriptedConversations writes convScripts, with and without window
// scale and SACK, names each segment by its script, and gives the state
// netfilter must give each script's last segment (by index).
func scriptedConversations(v6 bool) ([]convSeg, []string, map[int]string) {
	var segs []convSeg
	var names []string
	last := map[int]string{}
	port := uint16(43000)
	for _, sc := range convScripts {
		for _, opts := range []bool{true, false} {
			g := &convGen{v6: v6, port: port, opts: opts,
				c: convEnd{nxt: 1_000_000 + uint32(port)*1000, win: 1000, scale: 2},
				s: convEnd{nxt: 3_000_000_000 + uint32(port)*1000, win: 2000, scale: 3}}
			sc.script(g)
			segs = append(segs, g.segs...)
			for range g.segs {
				names = append(names, sc.name)
			}
			last[len(segs)-1] = sc.last
			port++
		}
	}
	return segs, names, last
}

// convStates are the states the rules tell apart, in rule order.
var convStates = []string{"INVALID", "NEW", "ESTABLISHED", "RELATED"}

// TestTCPConversations crafts whole TCP conversations with fixed initial
// sequence numbers between two addresses no host owns, through the
// forwarding firewall, from both ends: scripted openings that reach
// every TCP conntrack state, then segments sampled around the window
// edges (td_end, td_maxend, td_maxwin, MAXACKWINDOW, 0), RSTs at and
// beside the peer's highest ACK, SYNs and SYN-ACKs in every state, FINs,
// window scale and SACK options. Every rule accepts, so that conntrack
// sees the same segments in every run: in the kernel's run the mangle
// table marks each forwarded segment's DSCP with its state; in bpfwall's
// runs (xdp, tc-ingress) the rule whose counter a segment raises tells
// the state the program found. They must agree segment by segment.
func TestTCPConversations(t *testing.T) {
	testenv.RequireRoot(t)
	testenv.RequireTool(t, "iptables-legacy-restore", "ip6tables-legacy-restore")
	ft := newFlowTopology(t)
	// IPv6 in the firewall only: the ends keep it off, so their stacks
	// drop the IPv6 segments silently.
	if err := topology.Sysctl(ft.Firewall, "net/ipv6/conf/all/disable_ipv6", "0", "net/ipv6/conf/fwin/disable_ipv6", "0",
		"net/ipv6/conf/fwout/disable_ipv6", "0", "net/ipv6/conf/all/forwarding", "1"); err != nil {
		t.Fatal(err)
	}
	setup := fmt.Sprintf(`addr add 2001:db8:1::1/64 dev fwin nodad
addr add 2001:db8:2::1/64 dev fwout nodad
neigh replace %s lladdr %s dev fwin nud permanent
neigh replace %s lladdr %s dev fwout nud permanent
neigh replace %s lladdr %s dev fwin nud permanent
neigh replace %s lladdr %s dev fwout nud permanent
`, convClient, topology.SenderMAC, convServer, topology.ReceiverMAC, convClient6, topology.SenderMAC, convServer6, topology.ReceiverMAC)
	if err := topology.RunInput([]byte(setup), "ip", "-n", ft.Firewall, "-batch", "-"); err != nil {
		t.Fatal(err)
	}
	root := testenv.BPFFS(t)
	t.Cleanup(func() { os.RemoveAll(root) })

	// The sysctls that change the verdict, which the program reads from
	// the namespace per segment: the defaults for both families, then
	// each set on its own (nf_conntrack_tcp_loose only matters without an
	// entry, the other two only with one).
	for _, run := range []struct {
		fam     rules.Family
		sysctl  string
		liberal string
		rst     string
		loose   string
	}{
		{rules.IPv4, "defaults", "0", "0", "1"},
		{rules.IPv6, "defaults", "0", "0", "1"},
		{rules.IPv4, "be_liberal", "1", "0", "1"},
		{rules.IPv4, "ignore_invalid_rst", "0", "1", "1"},
		{rules.IPv4, "no_loose", "0", "0", "0"},
	} {
		fam := run.fam
		t.Run(fam.String()+"/"+run.sysctl, func(t *testing.T) {
			set := func(liberal, rst, loose string) {
				if err := topology.Sysctl(ft.Firewall, "net/netfilter/nf_conntrack_tcp_be_liberal", liberal,
					"net/netfilter/nf_conntrack_tcp_ignore_invalid_rst", rst, "net/netfilter/nf_conntrack_tcp_loose", loose); err != nil {
					t.Fatal(err)
				}
			}
			set(run.liberal, run.rst, run.loose)
			defer set("0", "0", "1")
			segs := tcpConversations(rand.New(rand.NewPCG(6, 18)), 60, fam == rules.IPv6)
			names := make([]string, len(segs))
			scripted, scriptNames, scriptLast := scriptedConversations(fam == rules.IPv6)
			first := len(segs)
			segs, names = append(segs, scripted...), append(names, scriptNames...)
			frames := make([][]byte, len(segs))
			for i, s := range segs {
				frames[i] = s.frame(t)
			}
			kernel := ft.runConversationNetfilter(t, fam, segs, frames)
			// The first segment is the pickup conversation's ACK, which
			// finds no entry: tcp_new picks the connection up only
			// with nf_conntrack_tcp_loose.
			if want := map[string]string{"0": "INVALID", "1": "NEW"}[run.loose]; kernel[0] != want || segs[0].flags != "A" {
				t.Errorf("netfilter's state for the unsolicited ACK %s with nf_conntrack_tcp_loose=%s: %s, want %s", segs[0], run.loose, kernel[0], want)
			}
			// The scripts must reach the case they are named for.
			if run.liberal == "0" {
				for i, want := range scriptLast {
					if got := kernel[first+i]; got != want {
						t.Errorf("%s: netfilter's state for %s is %s, the script expects %s", names[first+i], segs[first+i], got, want)
					}
				}
			}
			counts := map[string]int{}
			for _, st := range kernel {
				counts[st]++
			}
			compared, mismatches := 0, 0
			for _, hook := range []codegen.Hook{codegen.HookXDP, codegen.HookTCIngress} {
				got := ft.runConversationBPF(t, root, fam, hook, segs, frames)
				for i := range segs {
					compared++
					if got[i] != kernel[i] {
						mismatches++
						if mismatches <= 20 {
							t.Errorf("%s: segment %d (%s) %s: netfilter %s, bpfwall %s", hook, i, segs[i], names[i], kernel[i], got[i])
						}
					}
				}
			}
			if testing.Verbose() {
				for i, name := range names {
					if name != "" {
						t.Logf("%s: %s: netfilter %s", name, segs[i], kernel[i])
					}
				}
			}
			t.Logf("tcp conversations (%s, %s): %d segments in %d conversations, netfilter's states %v; %d compared on xdp and tc-ingress, %d mismatches",
				fam, run.sysctl, len(segs), 2*(len(convPhases)+len(convScripts)), counts, compared, mismatches)
			// The scenario must exercise the states it is for.
			for _, st := range []string{"INVALID", "NEW", "ESTABLISHED"} {
				if counts[st] < 10 {
					t.Errorf("only %d segments were %s in netfilter's run: the scenario does not test what it should", counts[st], st)
				}
			}
		})
	}
}

const convStateRules = `-A FORWARD -m conntrack --ctstate INVALID -j ACCEPT
-A FORWARD -m conntrack --ctstate NEW -j ACCEPT
-A FORWARD -m conntrack --ctstate ESTABLISHED -j ACCEPT
-A FORWARD -m conntrack --ctstate RELATED -j ACCEPT
`

const convFilter = "*filter\n:INPUT ACCEPT [0:0]\n:FORWARD ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n" + convStateRules + "COMMIT\n"

// convMangle marks each forwarded segment's DSCP with its state: 1 + the
// state's index in convStates.
const convMangle = `*mangle
:PREROUTING ACCEPT [0:0]
:INPUT ACCEPT [0:0]
:FORWARD ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
:POSTROUTING ACCEPT [0:0]
-A FORWARD -m conntrack --ctstate INVALID -j DSCP --set-dscp 1
-A FORWARD -m conntrack --ctstate NEW -j DSCP --set-dscp 2
-A FORWARD -m conntrack --ctstate ESTABLISHED -j DSCP --set-dscp 3
-A FORWARD -m conntrack --ctstate RELATED -j DSCP --set-dscp 4
COMMIT
`

const emptyFilter = "*filter\n:INPUT ACCEPT [0:0]\n:FORWARD ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\nCOMMIT\n"

const emptyMangle = "*mangle\n:PREROUTING ACCEPT [0:0]\n:INPUT ACCEPT [0:0]\n:FORWARD ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n:POSTROUTING ACCEPT [0:0]\nCOMMIT\n"

// runConversationNetfilter sends the segments through iptables and
// returns each one's state, read from the DSCP it arrived with.
func (ft *flowTopology) runConversationNetfilter(t *testing.T, fam rules.Family, segs []convSeg, frames [][]byte) []string {
	t.Helper()
	ft.flushFirewall(t)
	restore := "iptables-legacy-restore"
	if fam == rules.IPv6 {
		restore = "ip6tables-legacy-restore"
	}
	if err := topology.RunInput([]byte(convFilter+convMangle), "ip", "netns", "exec", ft.Firewall, restore); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := topology.RunInput([]byte(emptyFilter+emptyMangle), "ip", "netns", "exec", ft.Firewall, restore); err != nil {
			t.Fatal(err)
		}
		ft.flushFirewall(t)
	}()
	out := make([]string, len(segs))
	for i, s := range segs {
		arrived, err := ft.forward(s, frames[i])
		if err != nil {
			t.Fatal(err)
		}
		if arrived == nil {
			out[i] = "dropped"
			continue
		}
		dscp := int(arrived[1] >> 2)
		if fam == rules.IPv6 {
			dscp = int(arrived[0]&0x0f<<2 | arrived[1]>>6)
		}
		if dscp >= 1 && dscp <= len(convStates) {
			out[i] = convStates[dscp-1]
		} else {
			out[i] = "UNTRACKED"
		}
	}
	return out
}

// runConversationBPF sends the segments through bpfwall's program on
// hook and returns each one's state, read from the rule counters.
func (ft *flowTopology) runConversationBPF(t *testing.T, root string, fam rules.Family, hook codegen.Hook, segs []convSeg, frames [][]byte) []string {
	t.Helper()
	place := ft.attachForward(t, root, "conv.rules", convFilter, iptables.Options{Family: fam, ForceFamily: true}, hook)
	var active *loader.Active
	err := topology.Do(ft.Firewall, func() (err error) {
		active, err = loader.Open(place)
		return err
	})
	if err != nil {
		t.Fatalf("open the filter on %s: %v", hook, err)
	}
	defer func() {
		active.Close()
		err := topology.Do(ft.Firewall, func() error {
			_, err := loader.Unload(place, nil)
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		ft.flushFirewall(t)
	}()
	last, err := active.Counters()
	if err != nil {
		t.Fatal(err)
	}
	if len(last) != len(convStates)+1 {
		t.Fatalf("%d counters for %d rules and the policy", len(last), len(convStates))
	}
	out := make([]string, len(segs))
	for i, s := range segs {
		arrived, err := ft.forward(s, frames[i])
		if err != nil {
			t.Fatal(err)
		}
		now, err := active.Counters()
		if err != nil {
			t.Fatal(err)
		}
		var raised []string
		for k := range now {
			if now[k].Packets != last[k].Packets {
				name := "policy"
				if k < len(convStates) {
					name = convStates[k]
				}
				raised = append(raised, name)
			}
		}
		last = now
		switch {
		case arrived == nil:
			out[i] = "dropped"
		case len(raised) == 1 && raised[0] == "policy":
			out[i] = "UNTRACKED"
		case len(raised) == 1:
			out[i] = raised[0]
		default:
			out[i] = fmt.Sprintf("counters %v", raised)
		}
	}
	return out
}

// forward sends one segment from its end and returns the IP packet that
// reached the other end, nil when none did. An ARP request to the
// firewall from the same end follows it, as in sendBatch: when its reply
// is back, the firewall is done with the segment.
func (ft *flowTopology) forward(s convSeg, frame []byte) ([]byte, error) {
	from, to := ft.send, ft.recv
	if !s.fromClient {
		from, to = ft.recv, ft.send
	}
	for _, sock := range []*packetSocket{from, to} {
		if err := sock.drain(); err != nil {
			return nil, err
		}
	}
	end, mark := convSentinel(s.fromClient)
	if err := onOneCPU(func() error {
		if err := from.send(frame); err != nil {
			return err
		}
		return from.send(end)
	}); err != nil {
		return nil, err
	}
	buf := make([]byte, 1<<16)
	deadline := time.Now().Add(sentinelTimeout)
	for {
		f, err := from.recv(buf, time.Until(deadline))
		if err != nil {
			return nil, err
		}
		if f == nil {
			return nil, fmt.Errorf("no arp reply from the firewall within %v", sentinelTimeout)
		}
		if isReply(f, mark) {
			break
		}
	}
	want := ipPacket(frame)
	for {
		f, err := to.recv(buf, 0)
		if err != nil || f == nil {
			return nil, err
		}
		// The same segment: the TCP header and data, which forwarding
		// leaves as they were.
		if ip := ipPacket(f); ip != nil && len(ip) == len(want) && bytes.Equal(ip[20:], want[20:]) {
			return bytes.Clone(ip), nil
		}
	}
}

// convSentinel is sentinel for either end: an ARP request to the
// firewall's address on that end's side, claiming that side's host
// address (a permanent neighbour entry in the firewall) with a marked
// hardware address.
func convSentinel(fromClient bool) ([]byte, net.HardwareAddr) {
	if fromClient {
		return sentinel()
	}
	seq := sentinelSeq.Add(1)
	mark := net.HardwareAddr{0x02, 0xb0, 0x0e, byte(seq >> 16), byte(seq >> 8), byte(seq)}
	eth := &layers.Ethernet{SrcMAC: topology.ReceiverMAC, DstMAC: topology.FirewallOutMAC, EthernetType: layers.EthernetTypeARP}
	arp := &layers.ARP{
		AddrType: layers.LinkTypeEthernet, Protocol: layers.EthernetTypeIPv4,
		HwAddressSize: 6, ProtAddressSize: 4, Operation: layers.ARPRequest,
		SourceHwAddress: mark, SourceProtAddress: flowReceiverAddr,
		DstHwAddress: make([]byte, 6), DstProtAddress: net.IPv4(198, 51, 100, 1).To4(),
	}
	buf := gopacket.NewSerializeBuffer()
	if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{}, eth, arp); err != nil {
		panic(err) // fixed layers always serialize
	}
	return buf.Bytes(), mark
}

// neg is -n modulo 2^32.
func neg(n uint32) uint32 { return -n }
