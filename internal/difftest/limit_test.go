package difftest

import (
	"fmt"
	"math"
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
	root, err := os.MkdirTemp(bpffs, "bwdt-")
	if err != nil {
		t.Fatalf("pin directory: %v", err)
	}
	t.Cleanup(func() {
		if err := os.RemoveAll(root); err != nil {
			t.Error(err)
		}
	})
	probe := limitProbe(t)
	for _, lc := range limitCases {
		t.Run(lc.name, func(t *testing.T) {
			rs, prog := limitProgram(t, lc)
			var m ir.Match
			for _, r := range prog.Rules {
				for _, x := range r.Matches {
					switch x.(type) {
					case ir.Limit, ir.RateLimit:
						m = x
					}
				}
			}
			if m == nil {
				t.Fatal("no limit match in the rule set")
			}

			// The kernel.
			if lc.nft {
				err = topo.LoadNFT(rules.IPv4, []byte(lc.rules))
			} else {
				err = topo.Load(rules.IPv4, []byte(lc.rules))
			}
			if err != nil {
				t.Fatal(err)
			}
			kernel := sendBursts(t, topo, probe)
			if err := clearNetfilter(topo); err != nil {
				t.Fatal(err)
			}

			// The compiled program, alone on the path.
			p, err := codegen.Compile(prog, codegen.Options{Hook: codegen.HookXDP})
			if err != nil {
				t.Fatal(err)
			}
			detach := attach(t, topo, root, rs, p)
			bpf := sendBursts(t, topo, probe)
			if err := detach(); err != nil {
				t.Fatal(err)
			}

			for _, run := range []struct {
				who string
				r   burstRun
			}{{"kernel", kernel}, {"bpfwall", bpf}} {
				lo, hi := limitBounds(m, run.r)
				t.Logf("%s: %d of %d delivered over %v (bursts %v); a token bucket allows %d..%d",
					run.who, run.r.delivered, limitBursts*limitBurstSize, run.r.elapsed(), run.r.perBurst, lo, hi)
				if run.r.delivered < lo || run.r.delivered > hi {
					t.Errorf("%s delivered %d, outside %d..%d", run.who, run.r.delivered, lo, hi)
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
	perBurst   []int
	delivered  int
}

func (r burstRun) elapsed() time.Duration { return r.end[len(r.end)-1].Sub(r.start[0]).Round(time.Millisecond) }

func sendBursts(t *testing.T, topo *Topology, probe []byte) burstRun {
	t.Helper()
	frames := make([][]byte, limitBurstSize)
	for i := range frames {
		frames[i] = probe
	}
	var r burstRun
	for i := range limitBursts {
		if i > 0 {
			time.Sleep(limitGap)
		}
		r.start = append(r.start, time.Now())
		got, err := topo.sendBatch(frames)
		// The ARP reply came back: every probe of the burst was handled.
		r.end = append(r.end, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, f := range got {
			if k, _ := arrivalKey(f); k != "" {
				if pk, _ := probeKey(probe); pk == k {
					n++
				}
			}
		}
		r.perBurst = append(r.perBurst, n)
		r.delivered += n
	}
	return r
}

// limitBounds returns the fewest and the most probes the bucket of m can
// have paid for in run. The first probe finds the bucket full; every burst
// empties it (it is larger than the bucket, and the gaps refill less than
// the bucket holds, so the cap never throws credit away); so the payments
// are the bucket's size plus the refill between the first probe and the
// last, in units of the cost: floor((size + refill) / cost). The first
// probe came between the first burst's start and end, the last between
// the last burst's; the refill is bounded by the shortest and longest
// time between them. xt_limit's refill counts jiffies, whose ticks the
// interval can hold one more or fewer of than its length says, and a
// tick may be late: one more jiffy of slack on each side.
func limitBounds(m ir.Match, r burstRun) (lo, hi int) {
	shortest := r.start[len(r.start)-1].Sub(r.end[0])
	longest := r.end[len(r.end)-1].Sub(r.start[0])
	shortest = max(shortest, 0)
	switch m := m.(type) {
	case ir.Limit:
		hz := float64(ir.DefaultHZ)
		capacity, cost := m.Credits(ir.DefaultHZ)
		cpj := uint64(ir.CreditsPerJiffy(ir.DefaultHZ))
		jlo := max(int64(math.Floor(shortest.Seconds()*hz))-1, 0)
		jhi := int64(math.Ceil(longest.Seconds()*hz)) + 1
		return int((uint64(capacity) + uint64(jlo)*cpj) / uint64(cost)), int((uint64(capacity) + uint64(jhi)*cpj) / uint64(cost))
	case ir.RateLimit:
		tokensMax, _ := m.TokensMax()
		cost := m.Cost(limitProbeLen)
		return int((tokensMax + uint64(shortest.Nanoseconds())) / cost), int((tokensMax + uint64(longest.Nanoseconds())) / cost)
	}
	panic(fmt.Sprintf("not a limit match: %T", m))
}

// limitProbe is a UDP datagram from the sender to a host beyond the
// receiver, limitProbeLen bytes of IP packet, port 5353.
func limitProbe(t *testing.T) []byte {
	t.Helper()
	eth := &layers.Ethernet{SrcMAC: senderMAC, DstMAC: fwInMAC, EthernetType: layers.EthernetTypeIPv4}
	ip := &layers.IPv4{Version: 4, TTL: 64, Protocol: layers.IPProtocolUDP,
		SrcIP: senderAddr.AsSlice(), DstIP: []byte{198, 51, 100, 7}}
	udp := &layers.UDP{SrcPort: 40000, DstPort: 5353}
	if err := udp.SetNetworkLayerForChecksum(ip); err != nil {
		t.Fatal(err)
	}
	buf := gopacket.NewSerializeBuffer()
	payload := gopacket.Payload(make([]byte, limitProbeLen-20-8))
	if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true}, eth, ip, udp, payload); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// limitProgram parses a case and lowers its FORWARD chain.
func limitProgram(t *testing.T, lc limitCase) (*rules.Ruleset, *ir.Program) {
	t.Helper()
	var rs *rules.Ruleset
	var err error
	if lc.nft {
		rs, err = nft.Parse(lc.name, []byte(lc.rules), nft.Options{Family: rules.IPv4})
	} else {
		rs, err = iptparse.Parse(lc.name, []byte(lc.rules), iptparse.Options{Family: rules.IPv4})
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
	if err := topo.Load(rules.IPv4, []byte(empty)); err != nil {
		return err
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
		_, err = swap.Run()
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
