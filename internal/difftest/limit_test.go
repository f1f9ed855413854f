package difftest

import (
	"fmt"
	"math"
	"net/netip"
	"os"
	"testing"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"

	"bpfwall/codegen"
	"bpfwall/internal/testenv"
	"bpfwall/internal/topology"
	"bpfwall/ir"
	"bpfwall/loader"
	iptparse "bpfwall/parser/iptables"
	"bpfwall/parser/nft"
	"bpfwall/rules"
)

// limitCase is a rule set with one token bucket on the probes' path in
// FORWARD: a probe is delivered exactly when the bucket pays for it.
type limitCase struct {
	name  string
	nft   bool
	rules string
	// sources send the probes, each its own burst: a hashlimit keyed by
	// source address has a bucket per source. One when empty.
	sources []string
	// shared: the sources' keys are the same (the mask hides what differs),
	// so one bucket pays for all of them.
	shared bool
}

var limitCases = []limitCase{
	{name: "xt 10/sec burst 5", rules: `*filter
:INPUT ACCEPT [0:0]
:FORWARD DROP [0:0]
:OUTPUT ACCEPT [0:0]
-A FORWARD -p udp -m udp --dport 5353 -m limit --limit 10/sec --limit-burst 5 -j ACCEPT
COMMIT
`},
	{name: "xt 20/sec burst 8", rules: `*filter
:INPUT ACCEPT [0:0]
:FORWARD DROP [0:0]
:OUTPUT ACCEPT [0:0]
-A FORWARD -p udp -m limit --limit 20/sec --limit-burst 8 -m udp --dport 5353 -j ACCEPT
COMMIT
`},
	{name: "hashlimit 10/sec burst 5 srcip", sources: []string{"192.0.2.2", "198.51.100.1", "198.51.100.2"}, rules: `*filter
:INPUT ACCEPT [0:0]
:FORWARD DROP [0:0]
:OUTPUT ACCEPT [0:0]
-A FORWARD -p udp -m udp --dport 5353 -m hashlimit --hashlimit-upto 10/sec --hashlimit-burst 5 --hashlimit-mode srcip --hashlimit-name t -j ACCEPT
COMMIT
`},
	{name: "hashlimit above 20/sec burst 8 srcip,dstport /24", sources: []string{"192.0.2.2", "198.51.100.1", "198.51.101.2"}, rules: `*filter
:INPUT ACCEPT [0:0]
:FORWARD ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
-A FORWARD -p udp -m udp --dport 5353 -m hashlimit --hashlimit-above 20/sec --hashlimit-burst 8 --hashlimit-mode srcip,dstport --hashlimit-srcmask 24 --hashlimit-name t -j DROP
COMMIT
`},
	{name: "hashlimit 4kb/s srcip", sources: []string{"192.0.2.2", "198.51.100.1"}, rules: `*filter
:INPUT ACCEPT [0:0]
:FORWARD DROP [0:0]
:OUTPUT ACCEPT [0:0]
-A FORWARD -p udp -m udp --dport 5353 -m hashlimit --hashlimit-upto 4kb/s --hashlimit-mode srcip --hashlimit-name tb -j ACCEPT
COMMIT
`},
	{name: "ip6 xt 10/sec burst 5", sources: []string{"2001:db8::2"}, rules: `*filter
:INPUT ACCEPT [0:0]
:FORWARD DROP [0:0]
:OUTPUT ACCEPT [0:0]
-A FORWARD -p udp -m udp --dport 5353 -m limit --limit 10/sec --limit-burst 5 -j ACCEPT
COMMIT
`},
	{name: "ip6 hashlimit 10/sec burst 5 srcip /64", sources: []string{"2001:db8::2", "2001:db8:0:1::2"}, rules: `*filter
:INPUT ACCEPT [0:0]
:FORWARD DROP [0:0]
:OUTPUT ACCEPT [0:0]
-A FORWARD -p udp -m udp --dport 5353 -m hashlimit --hashlimit-upto 10/sec --hashlimit-mode srcip --hashlimit-srcmask 64 --hashlimit-name t6 -j ACCEPT
COMMIT
`},
	{name: "ip6 hashlimit srcip /64 shared by two sources", shared: true, sources: []string{"2001:db8::2", "2001:db8::3"}, rules: `*filter
:INPUT ACCEPT [0:0]
:FORWARD DROP [0:0]
:OUTPUT ACCEPT [0:0]
-A FORWARD -p udp -m udp --dport 5353 -m hashlimit --hashlimit-upto 10/sec --hashlimit-mode srcip --hashlimit-srcmask 64 --hashlimit-name t6 -j ACCEPT
COMMIT
`},
	{name: "nft 10/second burst 5", nft: true, rules: `table ip filter {
	chain forward {
		type filter hook forward priority 0; policy drop;
		udp dport 5353 limit rate 10/second burst 5 packets accept
	}
}
`},
	{name: "nft over 20/second burst 8", nft: true, rules: `table ip filter {
	chain forward {
		type filter hook forward priority 0; policy accept;
		udp dport 5353 limit rate over 20/second burst 8 packets drop
	}
}
`},
	{name: "nft 4 kbytes/second burst 600 bytes", nft: true, rules: `table ip filter {
	chain forward {
		type filter hook forward priority 0; policy drop;
		udp dport 5353 limit rate 4 kbytes/second burst 600 bytes accept
	}
}
`},
}

// Bursts of the timed runs: every burst is larger than the bucket can
// hold, so each one empties it, and the gaps refill less than a full
// bucket, so no refill is lost to the cap (see limitBounds).
const (
	limitBursts    = 4
	limitBurstSize = 80
	limitGap       = 150 * time.Millisecond
	limitProbeLen  = 100 // bytes of IP packet
)

// TestLimitBursts sends the same timed bursts of probes through
// iptables-legacy (or nft) and through the compiled program attached to
// the firewall's ingress interface, and checks that each delivers as many
// as a token bucket with the kernel's arithmetic can, given the measured
// times of the bursts (limitBounds).
func TestLimitBursts(t *testing.T) {
	requireKernel(t)
	testenv.RequireTool(t, "nft")
	topo := NewTopology(t, TopologyOptions{})
	root := testenv.BPFFS(t)
	t.Cleanup(func() {
		if err := os.RemoveAll(root); err != nil {
			t.Error(err)
		}
	})
	for _, lc := range limitCases {
		t.Run(lc.name, func(t *testing.T) {
			sources := lc.sources
			if len(sources) == 0 {
				sources = []string{"192.0.2.2"}
			}
			var probes [][]byte
			fam := rules.IPv4
			for _, src := range sources {
				a := netip.MustParseAddr(src)
				if a.Is6() {
					fam = rules.IPv6
				}
				probes = append(probes, limitProbe(t, a))
			}
			rs, prog := limitProgram(t, lc, fam)
			var m ir.Match
			for _, r := range prog.Rules {
				for _, x := range r.Matches {
					switch x.(type) {
					case ir.Limit, ir.RateLimit, ir.HashLimit:
						m = x
					}
				}
			}
			if m == nil {
				t.Fatal("no limit match in the rule set")
			}

			// The kernel.
			var err error
			if lc.nft {
				err = topo.LoadNFT(fam, []byte(lc.rules))
			} else {
				err = topo.Load(fam, []byte(lc.rules))
			}
			if err != nil {
				t.Fatal(err)
			}
			kernel := sendBursts(t, topo, probes)
			if err := clearNetfilter(topo); err != nil {
				t.Fatal(err)
			}

			// The compiled program, alone on the path.
			p, err := codegen.Compile(prog, codegen.Options{Trace: true, Hook: codegen.HookXDP})
			if err != nil {
				t.Fatal(err)
			}
			detach := attach(t, topo, root, rs, p)
			bpf := sendBursts(t, topo, probes)
			if err := detach(); err != nil {
				t.Fatal(err)
			}

			for _, run := range []struct {
				who string
				r   burstRun
			}{{"kernel", kernel}, {"bpfwall", bpf}} {
				lo, hi := limitBounds(m, run.r)
				if lc.shared {
					// One bucket: the sum of the sources' counts.
					got := 0
					for _, n := range run.r.delivered {
						got += n
					}
					t.Logf("%s from %v together: %d of %d delivered over %v (bursts %v); a token bucket allows %d..%d",
						run.who, sources, got, len(sources)*limitBursts*limitBurstSize, run.r.elapsed(), run.r.perBurst, lo, hi)
					if got < lo || got > hi {
						t.Errorf("%s delivered %d, outside %d..%d", run.who, got, lo, hi)
					}
					continue
				}
				for i, src := range sources {
					// Delivered are the probes the bucket pays for, with
					// or without -above ("over"), which then drops the rest.
					got := run.r.delivered[i]
					t.Logf("%s from %s: %d of %d delivered over %v (bursts %v); a token bucket allows %d..%d",
						run.who, src, got, limitBursts*limitBurstSize, run.r.elapsed(), run.r.perBurst[i], lo, hi)
					if got < lo || got > hi {
						t.Errorf("%s from %s delivered %d, outside %d..%d", run.who, src, got, lo, hi)
					}
				}
			}
		})
	}
}

// burstRun is what one run of the bursts measured: the time before each
// burst was sent and after the firewall had handled all of it, and the
// probes delivered.
type burstRun struct {
	start, end []time.Time
	perBurst   [][]int // per source, per burst
	delivered  []int   // per source
}

func (r burstRun) elapsed() time.Duration {
	return r.end[len(r.end)-1].Sub(r.start[0]).Round(time.Millisecond)
}

// sendBursts sends limitBursts bursts of limitBurstSize probes from each
// source, interleaved, limitGap apart, and counts per source the probes
// delivered.
func sendBursts(t *testing.T, topo *Topology, probes [][]byte) burstRun {
	t.Helper()
	return sendBurstsBetween(t, topo, probes, limitBursts, func() { time.Sleep(limitGap) })
}

// sendBurstsBetween sends n bursts as sendBursts does, calling between
// between them.
func sendBurstsBetween(t *testing.T, topo *Topology, probes [][]byte, n int, between func()) burstRun {
	t.Helper()
	var frames [][]byte
	for range limitBurstSize {
		frames = append(frames, probes...)
	}
	keys := make(map[string]int)
	for i, p := range probes {
		k, _ := probeKey(p)
		keys[k] = i
	}
	r := burstRun{perBurst: make([][]int, len(probes)), delivered: make([]int, len(probes))}
	for i := range n {
		if i > 0 {
			between()
		}
		r.start = append(r.start, time.Now())
		got, err := topo.sendBatch(frames)
		// The ARP reply came back: every probe of the burst was handled.
		r.end = append(r.end, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		n := make([]int, len(probes))
		for _, f := range got {
			if k, _ := arrivalKey(f); k != "" {
				if src, ok := keys[k]; ok {
					n[src]++
				}
			}
		}
		for src := range probes {
			r.perBurst[src] = append(r.perBurst[src], n[src])
			r.delivered[src] += n[src]
		}
	}
	return r
}

// limitBounds returns the fewest and the most probes the bucket of m can
// have paid for in run (per key: each source has its own bucket or none
// shares one).
//
// The first probe finds the bucket full, of capacity C credits, and a
// probe costs K. Every burst empties it: it is larger than the bucket. So
// the payments are at most floor((C + R) / K), R the most the bucket can
// have gained between the first probe and the last: the first probe came
// between the first burst's start and end, the last between the last
// burst's, so at most the time from the first start to the last end.
// When no gap can refill the bucket to its cap (leftover below K plus
// the refill stays under C), none of the refill is lost, and the same
// count with the least time (last start - first end) is the fewest.
// Otherwise each later burst pays at least what its gap alone refilled,
// up to C. xt_limit and xt_hashlimit refill per jiffy: an interval holds
// one tick more or fewer than its length says, and a tick may be late,
// so each side gets one more jiffy of slack; nft_limit counts
// nanoseconds, of the clock time.Now reads too.
func limitBounds(m ir.Match, r burstRun) (lo, hi int) {
	var capacity, cost uint64
	var refill func(d time.Duration, most bool) uint64
	jiffies := func(cpj uint64) func(time.Duration, bool) uint64 {
		hz := float64(ir.DefaultHZ)
		return func(d time.Duration, most bool) uint64 {
			if most {
				return uint64(math.Ceil(d.Seconds()*hz)+1) * cpj
			}
			return uint64(max(math.Floor(d.Seconds()*hz)-1, 0)) * cpj
		}
	}
	switch m := m.(type) {
	case ir.Limit:
		c, k := m.Credits(ir.DefaultHZ)
		capacity, cost = uint64(c), uint64(k)
		refill = jiffies(uint64(ir.CreditsPerJiffy(ir.DefaultHZ)))
	case ir.HashLimit:
		capacity, cost = m.Credits(ir.DefaultHZ)
		refill = jiffies(ir.CreditsPerJiffy64(ir.DefaultHZ))
		if m.Bytes {
			// One second of credits; a probe costs its 16-byte chunks.
			// (A byte burst's refills are not modelled here: the cases
			// have none.)
			if m.Burst != 0 {
				panic("limitBounds: a byte rate with a burst")
			}
			cost = min((limitProbeLen>>4+1)*cost, capacity)
			refill = jiffies(ir.CreditsPerJiffyBytes(ir.DefaultHZ))
		}
	case ir.RateLimit:
		capacity, _ = m.TokensMax()
		cost = m.Cost(limitProbeLen)
		refill = func(d time.Duration, _ bool) uint64 { return uint64(max(d, 0).Nanoseconds()) }
	default:
		panic(fmt.Sprintf("not a limit match: %T", m))
	}
	n := len(r.start)
	hi = int((capacity + refill(r.end[n-1].Sub(r.start[0]), true)) / cost)
	capped := false
	for i := 1; i < n; i++ {
		if refill(r.end[i].Sub(r.start[i-1]), true)+cost > capacity {
			capped = true
		}
	}
	if !capped {
		return int((capacity + refill(r.start[n-1].Sub(r.end[0]), false)) / cost), hi
	}
	lo = int(capacity / cost)
	for i := 1; i < n; i++ {
		lo += int(min(capacity, refill(r.start[i].Sub(r.end[i-1]), false)) / cost)
	}
	return lo, hi
}

// limitProbe is a UDP datagram from src, sent by the sender, to a host
// beyond the receiver (IPv4 or IPv6 as src), limitProbeLen bytes of IP
// packet, port 5353.
func limitProbe(t *testing.T, src netip.Addr) []byte {
	t.Helper()
	udp := &layers.UDP{SrcPort: 40000, DstPort: 5353}
	payload := gopacket.Payload(make([]byte, limitProbeLen-8))
	var net gopacket.SerializableLayer
	eth := &layers.Ethernet{SrcMAC: senderMAC, DstMAC: fwInMAC, EthernetType: layers.EthernetTypeIPv4}
	if src.Is6() {
		eth.EthernetType = layers.EthernetTypeIPv6
		ip := &layers.IPv6{Version: 6, HopLimit: 64, NextHeader: layers.IPProtocolUDP,
			SrcIP: src.AsSlice(), DstIP: netip.MustParseAddr("2001:db8:ffff::7").AsSlice()}
		if err := udp.SetNetworkLayerForChecksum(ip); err != nil {
			t.Fatal(err)
		}
		net, payload = ip, payload[:len(payload)-40]
	} else {
		ip := &layers.IPv4{Version: 4, TTL: 64, Protocol: layers.IPProtocolUDP,
			SrcIP: src.AsSlice(), DstIP: []byte{203, 0, 113, 7}}
		if err := udp.SetNetworkLayerForChecksum(ip); err != nil {
			t.Fatal(err)
		}
		net, payload = ip, payload[:len(payload)-20]
	}
	buf := gopacket.NewSerializeBuffer()
	if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true}, eth, net, udp, payload); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// limitProgram parses a case and lowers its FORWARD chain.
func limitProgram(t *testing.T, lc limitCase, fam rules.Family) (*rules.Ruleset, *ir.Program) {
	t.Helper()
	var rs *rules.Ruleset
	var err error
	if lc.nft {
		rs, err = nft.Parse(lc.name, []byte(lc.rules), nft.Options{Family: fam})
	} else {
		rs, err = iptparse.Parse(lc.name, []byte(lc.rules), iptparse.Options{Family: fam, ForceFamily: true})
	}
	if err != nil {
		t.Fatal(err)
	}
	prog, err := ir.Lower(rs, ir.LowerOptions{Chain: "FORWARD"})
	if err != nil {
		t.Fatal(err)
	}
	return rs, prog
}

// clearNetfilter leaves the firewall with no iptables rules and no nft
// rule set.
func clearNetfilter(topo *Topology) error {
	empty := "*filter\n:INPUT ACCEPT [0:0]\n:FORWARD ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\nCOMMIT\n"
	for _, fam := range []rules.Family{rules.IPv4, rules.IPv6} {
		if err := topo.Load(fam, []byte(empty)); err != nil {
			return err
		}
	}
	return topo.LoadNFT(rules.IPv4, nil)
}

// attach loads p on the firewall's ingress interface as `bpfwall load`
// does (generic XDP), and returns the function that unloads it.
func attach(t *testing.T, topo *Topology, root string, rs *rules.Ruleset, p *codegen.Program) func() error {
	t.Helper()
	meta, counters, err := loader.NewMeta(rs, p, "limit")
	if err != nil {
		t.Fatal(err)
	}
	err = topology.Do(topo.Firewall, func() error {
		place, err := loader.Here(root, codegen.HookXDP)
		if err != nil {
			return err
		}
		swap := loader.Swap{Place: place, Program: p, Meta: meta, Counters: counters, Ifaces: []string{topo.InIface}, XDPMode: loader.XDPGeneric}
		err = runSwap(&swap)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return func() error {
		return topology.Do(topo.Firewall, func() error {
			place, err := loader.Here(root, codegen.HookXDP)
			if err != nil {
				return err
			}
			_, err = loader.Unload(place, nil)
			return err
		})
	}
}
