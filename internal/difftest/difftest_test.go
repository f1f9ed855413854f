package difftest

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"os"
	"slices"
	"strconv"
	"testing"

	"bpfwall/codegen"

	"bpfwall/internal/testenv"
	"bpfwall/rules"
)

func requireKernel(t *testing.T) {
	t.Helper()
	testenv.RequireRoot(t)
	testenv.RequireTool(t, "ip", "iptables-legacy-restore", "ip6tables-legacy-restore")
}

// bench is the reference and the sources compared with it: ir.Eval, the
// compiled program's test runs, and the compiled program attached to the
// ingress interface of another topology with the same interfaces; the
// compiled program at -O0 and at -O1.
type bench struct {
	topo   *Topology // the reference's
	ref    Source
	others []Source
}

func newBench(t *testing.T, opts TopologyOptions) *bench {
	t.Helper()
	topo := NewTopology(t, opts)
	return &bench{topo: topo, ref: Netfilter{Topo: topo}, others: []Source{
		Eval{}, TestRun{Opts: codegen.Options{Trace: true, Level: codegen.O0}}, TestRun{},
		// Every run of rules the classifier can take, whatever its cost.
		TestRun{Opts: codegen.Options{Trace: true, ForceLookups: true}},
		NewAttached(t, opts, codegen.Options{Level: codegen.O0}), NewAttached(t, opts, codegen.Options{}),
	}}
}

// NewAttached returns the Attached source for programs compiled with
// copts on a topology of its own, which t.Cleanup removes with the
// program's pins.
func NewAttached(t *testing.T, opts TopologyOptions, copts codegen.Options) Attached {
	t.Helper()
	root := testenv.BPFFS(t)
	// The cleanups run last first: the pins go before the namespaces.
	a := Attached{Topo: NewTopology(t, opts), Root: root, Opts: copts}
	t.Cleanup(func() {
		if err := a.Detach(); err != nil {
			t.Error(err)
		}
		// Unload leaves the emptied directories; bpffs keeps them otherwise.
		if err := os.RemoveAll(root); err != nil {
			t.Error(err)
		}
	})
	return a
}

// logTotals prints one line of totals per source.
func logTotals(t *testing.T, what string, tots []Totals) {
	t.Helper()
	for _, tot := range tots {
		t.Logf("difftest %s: %s", what, tot)
	}
}

// addTotals adds each source's totals in u to t's, which are in the same
// order.
func addTotals(t, u []Totals) []Totals {
	// A case that failed before comparing returns fewer totals (or none).
	for len(t) < len(u) {
		t = append(t, Totals{})
	}
	for i := range u {
		t[i].Add(u[i])
	}
	return t
}

// TestHandWritten runs rule sets that once disagreed: the TTL a FORWARD
// rule sees is one less than the packet arrived with; --tcp-flags with an
// empty mask and flags to compare never matches; an explicit -p all in
// IPv6 matches every packet whose extension headers can be walked; -o in
// FORWARD tests the interface the routing picks; -m dscp reads the six
// high bits of the IPv4 TOS byte and of the IPv6 traffic class.
func TestHandWritten(t *testing.T) {
	requireKernel(t)
	b := newBench(t, TopologyOptions{})
	topo := b.topo
	for _, tc := range []struct {
		name  string
		fam   rules.Family
		rules string
	}{
		{"ttl", rules.IPv4, "*filter\n:INPUT ACCEPT [0:0]\n:FORWARD ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n-A FORWARD -m ttl --ttl-lt 10 -j DROP\n-A FORWARD -m ttl --ttl-eq 64 -j DROP\n-A FORWARD -m ttl --ttl-gt 254 -j DROP\nCOMMIT\n"},
		{"tcp-flags", rules.IPv4, "*filter\n:INPUT ACCEPT [0:0]\n:FORWARD ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n-A FORWARD -p tcp -m tcp --tcp-flags NONE ACK -j DROP\n-A FORWARD -p tcp -m tcp --dport 80:65535 ! --tcp-flags NONE SYN -j DROP\nCOMMIT\n"},
		{"hl", rules.IPv6, "*filter\n:INPUT ACCEPT [0:0]\n:FORWARD DROP [0:0]\n:OUTPUT ACCEPT [0:0]\n-A FORWARD -m hl --hl-eq 64 -j ACCEPT\n-A FORWARD -m hl --hl-lt 3 -j ACCEPT\nCOMMIT\n"},
		{"p-all", rules.IPv6, "*filter\n:INPUT ACCEPT [0:0]\n:FORWARD DROP [0:0]\n:OUTPUT ACCEPT [0:0]\n-A FORWARD -p all -j ACCEPT\nCOMMIT\n"},
		{"dscp", rules.IPv4, "*filter\n:INPUT ACCEPT [0:0]\n:FORWARD ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n-A FORWARD -m dscp --dscp-class EF -j DROP\n-A FORWARD -p udp -m dscp ! --dscp 0x0a -j DROP\n-A FORWARD -m dscp --dscp 63 -j ACCEPT\nCOMMIT\n"},
		{"dscp6", rules.IPv6, "*filter\n:INPUT ACCEPT [0:0]\n:FORWARD DROP [0:0]\n:OUTPUT ACCEPT [0:0]\n-A FORWARD -m dscp --dscp 0x2e -j ACCEPT\n-A FORWARD -m dscp ! --dscp-class cs1 -p tcp -j ACCEPT\nCOMMIT\n"},
		{"out-iface", rules.IPv4, "*filter\n:INPUT ACCEPT [0:0]\n:FORWARD ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n-A FORWARD -o fwout -p udp -j DROP\n-A FORWARD ! -o fwout -p tcp -j DROP\nCOMMIT\n"},
		{"sctp", rules.IPv4, sctpRules},
		{"sctp6", rules.IPv6, sctpRules},
	} {
		c, err := NewCase(CaseOptions{Name: tc.name, Family: tc.fam, Rules: []byte(tc.rules), InIface: topo.InIface, OutIface: topo.OutIface})
		if err != nil {
			t.Fatal(err)
		}
		c.Probes = Probes(c, 1, 500)
		if tc.rules == sctpRules {
			short := shortSCTP(c.Probes)
			if len(short) < 50 {
				t.Fatalf("%s: %d SCTP packets with a short header among the probes", tc.name, len(short))
			}
			c.Probes = append(c.Probes, short...)
		}
		logTotals(t, tc.name, check(t, c, b.ref, b.others...))
	}
}

// sctpRules test -m sctp's ports, and its 12-byte common header: a first
// fragment or whole packet with less of it is dropped (hotdrop).
const sctpRules = "*filter\n:INPUT ACCEPT [0:0]\n:FORWARD ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n" +
	"-A FORWARD -p sctp -m sctp --dport 1024:65535 -j ACCEPT\n-A FORWARD -p sctp -m sctp ! --sport 7 -j DROP\n-A FORWARD -p sctp -j ACCEPT\nCOMMIT\n"

// shortSCTP returns, for each unfragmented SCTP packet of frames without
// IP options or extension headers, the packet with 0 to 13 bytes of its
// SCTP header, its IP lengths (and IPv4 checksum) made to match.
func shortSCTP(frames [][]byte) [][]byte {
	var out [][]byte
	for _, f := range frames {
		var ipLen int
		switch {
		case len(f) > 34 && binary.BigEndian.Uint16(f[12:]) == 0x0800 && f[14] == 0x45 && f[23] == 132 && binary.BigEndian.Uint16(f[20:])&0x3fff == 0:
			ipLen = 20
		case len(f) > 54 && binary.BigEndian.Uint16(f[12:]) == 0x86dd && f[20] == 132:
			ipLen = 40
		default:
			continue
		}
		for n := range 14 {
			if 14+ipLen+n > len(f) {
				break
			}
			g := slices.Clone(f[:14+ipLen+n])
			if ipLen == 20 {
				binary.BigEndian.PutUint16(g[16:], uint16(ipLen+n))
				g[24], g[25] = 0, 0
				sum := uint32(0)
				for i := 14; i < 34; i += 2 {
					sum += uint32(binary.BigEndian.Uint16(g[i:]))
				}
				for sum > 0xffff {
					sum = sum&0xffff + sum>>16
				}
				binary.BigEndian.PutUint16(g[24:], ^uint16(sum))
			} else {
				binary.BigEndian.PutUint16(g[18:], uint16(n))
			}
			out = append(out, g)
		}
	}
	return out
}

// envInt reads a positive count from the environment, or returns def.
func envInt(t *testing.T, name string, def int) int {
	s := os.Getenv(name)
	if s == "" {
		return def
	}
	n, err := strconv.Atoi(s)
	if err != nil || n <= 0 {
		t.Fatalf("%s=%q is not a positive count", name, s)
	}
	return n
}

// maxReports bounds the minimized reproductions printed per test.
const maxReports = 5

// check compares a case with the reference and reports each mismatch,
// minimized, as an error, and each source's failure on the case.
func check(t *testing.T, c *Case, ref Source, others ...Source) []Totals {
	t.Helper()
	bad, tot, err := Compare(c, ref, others...)
	if err != nil {
		t.Error(err)
	}
	for i, m := range bad {
		if i == maxReports {
			t.Errorf("%s: %d more mismatches", c.Name, len(bad)-i)
			break
		}
		src := others[0]
		for _, s := range others {
			if s.Name() == m.Source {
				src = s
			}
		}
		t.Errorf("%s", Minimize(m, ref, src))
	}
	return tot
}

// TestRandom sends probes aimed at the edges of random rule sets through
// netfilter and compares with ir.Eval and the compiled program, test-run
// and attached. DIFFTEST_SEEDS rule sets per family (default 10, make
// difftest runs more) and DIFFTEST_PROBES probes each (default 300);
// DIFFTEST_SEED0 picks the first seed. Even seeds leave out what the xdp hook cannot compile.
func TestRandom(t *testing.T) {
	requireKernel(t)
	seeds := envInt(t, "DIFFTEST_SEEDS", 10)
	probes := envInt(t, "DIFFTEST_PROBES", 300)
	seed0 := uint64(envInt(t, "DIFFTEST_SEED0", 1))
	b := newBench(t, TopologyOptions{})
	topo := b.topo
	var totals []Totals
	var cover, before Coverage
	var o1, forced Share
	refused := 0
	for _, fam := range []rules.Family{rules.IPv4, rules.IPv6} {
		for seed := seed0; seed < seed0+uint64(seeds); seed++ {
			text := GenerateRules(seed, GenOptions{Family: fam, InIface: topo.InIface, OutIface: topo.OutIface, XDP: seed%2 == 0})
			c, err := NewCase(CaseOptions{
				Name: fmt.Sprintf("%s-seed-%d", fam, seed), Family: fam, Rules: text,
				InIface: topo.InIface, OutIface: topo.OutIface,
			})
			if err != nil {
				// The generator may write what iptables refuses too;
				// what only bpfwall refuses is a bug.
				if kerr := topo.Check(fam, text); kerr == nil {
					t.Errorf("iptables accepts what bpfwall refuses: %v\n%s", err, text)
				}
				refused++
				continue
			}
			c.Probes = Probes(c, seed, probes)
			totals = addTotals(totals, check(t, c, b.ref, b.others...))
			cover.Add(MeasureCoverage(c, c.Probes))
			before.Add(MeasureCoverage(c, RandomProbes(c, seed, probes)))
			o1.AddShare(c, codegen.Options{Trace: true})
			forced.AddShare(c, codegen.Options{Trace: true, ForceLookups: true})
		}
	}
	logTotals(t, "random", totals)
	t.Logf("difftest random: -O1 decides %s; -O1 with every run classified, %s", o1, forced)
	if 2*forced.Classified < forced.Rules {
		t.Errorf("the random rule sets test the classifier too little: %s with every run classified", forced)
	}
	t.Logf("difftest random: %d rule sets refused by iptables and bpfwall alike", refused)
	t.Logf("coverage: %s; random probes alone: %s", cover, before)
	for _, tot := range totals {
		if tot.Chain < tot.Probes/4 {
			t.Errorf("%s: only %d of %d probes reached the FORWARD chain", tot.Source, tot.Chain, tot.Probes)
		}
	}
}

// TestGenerateRulesReproducible: a seed always gives the same rule set,
// and different seeds differ.
func TestGenerateRulesReproducible(t *testing.T) {
	opts := GenOptions{Family: rules.IPv4, InIface: "fwin", OutIface: "fwout"}
	a, b, c := GenerateRules(7, opts), GenerateRules(7, opts), GenerateRules(8, opts)
	if !bytes.Equal(a, b) {
		t.Errorf("seed 7 gave two rule sets:\n%s\n%s", a, b)
	}
	if bytes.Equal(a, c) {
		t.Errorf("seeds 7 and 8 gave the same rule set:\n%s", a)
	}
}

// flipTCP is ir.Eval with a planted bug: it inverts the verdict of every
// TCP probe that reaches the chain.
type flipTCP struct{ Eval }

func (flipTCP) Name() string { return "flipped" }

func (f flipTCP) Outcomes(c *Case) ([]Outcome, error) {
	out, err := f.Eval.Outcomes(c)
	for i, frame := range c.Probes {
		if pkt, derr := decode(c, frame); derr == nil && Forwarded(pkt, frame) == "" && pkt.Proto == 6 {
			out[i].Delivered = !out[i].Delivered
		}
	}
	return out, err
}

// TestHarnessFindsPlantedBug: the comparison fails on exactly the probes
// a broken source gets wrong, and minimizing keeps the rule that matters.
func TestHarnessFindsPlantedBug(t *testing.T) {
	requireKernel(t)
	topo := NewTopology(t, TopologyOptions{InIface: "eth1", OutIface: "eth2"})
	text := "*filter\n:INPUT ACCEPT [0:0]\n:FORWARD ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n" +
		"-A FORWARD -s 198.51.100.0/24 -j ACCEPT\n-A FORWARD -p udp -j DROP\n-A FORWARD -i eth1 -o eth2 -p tcp --dport 22 -j DROP\nCOMMIT\n"
	c, err := NewCase(CaseOptions{Name: "planted", Family: rules.IPv4, Rules: []byte(text), InIface: "eth1", OutIface: "eth2"})
	if err != nil {
		t.Fatal(err)
	}
	c.Probes = Probes(c, 3, 300)
	bad, tot, err := Compare(c, Netfilter{Topo: topo}, flipTCP{})
	if err != nil {
		t.Fatal(err)
	}
	tcp := 0
	for _, f := range c.Probes {
		if pkt, _ := decode(c, f); Forwarded(pkt, f) == "" && pkt.Proto == 6 {
			tcp++
		}
	}
	if tcp == 0 || len(bad) != tcp || tot[0].Failed != tcp {
		t.Fatalf("%d tcp probes reach the chain, %d mismatches, totals %s", tcp, len(bad), tot[0])
	}
	m := Minimize(bad[0], Netfilter{Topo: topo}, flipTCP{})
	if _, rl := ruleLines(m.Case.Rules); len(rl) != 0 {
		t.Errorf("minimized to %d rules, want none (the bug needs no rule):\n%s", len(rl), m)
	}
	_, tot, err = Compare(c, Netfilter{Topo: topo}, Eval{})
	if err != nil || tot[0].Failed != 0 || tot[0].Passed != len(c.Probes) {
		t.Errorf("ir.Eval: %s, %v", tot[0], err)
	}
}

// TestProbeCoverage: probes aimed at the rules exercise clearly more of
// them than as many probes whose fields are picked one by one.
func TestProbeCoverage(t *testing.T) {
	var aimed, random Coverage
	for _, fam := range []rules.Family{rules.IPv4, rules.IPv6} {
		for seed := uint64(1); seed <= 20; seed++ {
			text := GenerateRules(seed, GenOptions{Family: fam, InIface: "fwin", OutIface: "fwout"})
			c, err := NewCase(CaseOptions{Name: fmt.Sprint(seed), Family: fam, Rules: text, InIface: "fwin", OutIface: "fwout"})
			if err != nil {
				continue
			}
			aimed.Add(MeasureCoverage(c, Probes(c, seed, 500)))
			random.Add(MeasureCoverage(c, RandomProbes(c, seed, 500)))
		}
	}
	t.Logf("coverage of 500 probes: aimed and random: %s; random only: %s", aimed, random)
	if aimed.Rules == 0 || aimed.Matched < random.Matched+aimed.Rules/20 || aimed.Decided < random.Decided+aimed.Rules/20 {
		t.Errorf("aiming gains less than 5%% of the rules: %s, against %s", aimed, random)
	}
}
