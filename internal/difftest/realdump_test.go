package difftest

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"bpfwall/internal/testenv"
	"bpfwall/ir"
	"bpfwall/model"
	iptparse "bpfwall/parser/iptables"
	"bpfwall/rules"
)

// dumpCase is one chain of a real dump to run, with the interfaces the
// firewall gets.
type dumpCase struct {
	chain             string
	inIface, outIface string
}

// dumpCases picks the chains of a dump to test (FORWARD, and INPUT run
// as FORWARD) and up to three pairs of interface names the rules test.
func dumpCases(prog *ir.Program, chain string) []dumpCase {
	in, out := Interfaces(prog)
	in = append(in, "fwin")
	out = append(out, "fwout")
	var cases []dumpCase
	for _, i := range in[:min(len(in), 3)] {
		o := out[0]
		if o == i {
			o = out[1]
		}
		cases = append(cases, dumpCase{chain, i, o})
	}
	return cases
}

// TestRealDumps loads the INPUT and FORWARD chains of every real dump that
// lowers into the firewall's FORWARD chain, with the firewall's interfaces
// named as the rules expect, and compares netfilter with ir.Eval on probes
// built from the dump's own addresses and ports. DIFFTEST_PROBES sets the
// probes per case (default 300).
func TestRealDumps(t *testing.T) {
	requireKernel(t)
	probes := envInt(t, "DIFFTEST_PROBES", 300)
	var totals []Totals
	// Topologies are shared by the cases with the same interfaces.
	benches := map[dumpCase]*bench{}
	parent := t
	skipped := forRealDumps(t, func(t *testing.T, name string, fam rules.Family, text []byte, dc dumpCase) {
		key := dumpCase{inIface: dc.inIface, outIface: dc.outIface}
		if benches[key] == nil {
			benches[key] = newBench(parent, TopologyOptions{InIface: dc.inIface, OutIface: dc.outIface})
		}
		totals = addTotals(totals, runDump(t, benches[key], name, fam, text, dc, probes))
	})
	logTotals(t, "real dumps", totals)
	for _, s := range skipped {
		t.Logf("skipped %s", s)
	}
	if len(totals) == 0 || totals[0].Cases == 0 {
		t.Fatal("no real dump was run")
	}
}

// TestRealDumpsIptablesNFT loads the same chains of the real dumps with
// iptables-nft-restore, reads them back as --from-kernel does, and
// compares the kernel's verdicts with ir.Eval's on the model read.
func TestRealDumpsIptablesNFT(t *testing.T) {
	requireKernel(t)
	testenv.RequireTool(t, "iptables-nft-restore", "ip6tables-nft-restore")
	probes := envInt(t, "DIFFTEST_PROBES", 300)
	var totals []Totals
	benches := map[dumpCase]*bench{}
	parent := t
	skipped := forRealDumps(t, func(t *testing.T, name string, fam rules.Family, text []byte, dc dumpCase) {
		key := dumpCase{inIface: dc.inIface, outIface: dc.outIface}
		if benches[key] == nil {
			topo := NewTopology(parent, TopologyOptions{InIface: dc.inIface, OutIface: dc.outIface})
			benches[key] = &bench{topo: topo, ref: Netfilter{Topo: topo, IptablesNFT: true}, others: []Source{FromKernel{Topo: topo, Inner: Eval{}}}}
		}
		if err := benches[key].topo.LoadIptablesNFT(fam, text); err != nil {
			t.Skipf("iptables-nft-restore refuses it: %v", firstLine(err))
		}
		totals = addTotals(totals, runDump(t, benches[key], name, fam, text, dc, probes))
	})
	logTotals(t, "real dumps through iptables-nft", totals)
	for _, s := range skipped {
		t.Logf("skipped %s", s)
	}
	if len(totals) == 0 || totals[0].Cases < 20 {
		t.Fatalf("only %d real dump chains were run", totals[0].Cases)
	}
}

// forRealDumps calls f, in a subtest, for the FORWARD and the INPUT chain
// (run as FORWARD) of every real dump that lowers, with each pair of
// interface names dumpCases picks. It returns what it left out, and why.
func forRealDumps(t *testing.T, f func(t *testing.T, name string, fam rules.Family, text []byte, dc dumpCase)) (skipped []string) {
	dir := testenv.Corpus(t, "real")
	files, err := filepath.Glob(filepath.Join(dir, "*"))
	if err != nil {
		t.Fatal(err)
	}
	for _, file := range files {
		base := filepath.Base(file)
		if base == "README.md" || base == "raw-anomalies" {
			continue
		}
		src, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		rs, err := iptparse.Parse(base, src, iptparse.Options{})
		if err != nil || strings.HasSuffix(base, ".rules") {
			skipped = append(skipped, base+" (does not parse on its own)")
			continue
		}
		if len(rs.Sets) > 0 || strings.Contains(string(src), "--match-set") {
			skipped = append(skipped, base+" (needs ipsets)")
			continue
		}
		for _, chain := range []string{"FORWARD", "INPUT"} {
			text, err := AsForward(rs, chain)
			if err != nil {
				continue
			}
			if _, rl := ruleLines(text); len(rl) == 0 {
				continue // an empty chain tests nothing
			}
			probe, err := NewCase(CaseOptions{Name: base, Family: rs.Family, Rules: text})
			if err != nil {
				skipped = append(skipped, fmt.Sprintf("%s %s (%v)", base, chain, firstLine(err)))
				continue
			}
			for _, dc := range dumpCases(probe.Program, chain) {
				name := fmt.Sprintf("%s/%s/%s-%s", base, chain, dc.inIface, dc.outIface)
				t.Run(name, func(t *testing.T) { f(t, name, rs.Family, text, dc) })
			}
		}
	}
	return skipped
}

func runDump(t *testing.T, b *bench, name string, fam rules.Family, text []byte, dc dumpCase, n int) []Totals {
	c, err := NewCase(CaseOptions{Name: name, Family: fam, Rules: text, InIface: dc.inIface, OutIface: dc.outIface})
	if err != nil {
		t.Fatal(err)
	}
	if UsesConntrack(c.Program) {
		c.CTState = model.ConnNew
		c.Probes = ProbesWhere(c, 1, n, func(f []byte) bool { return ConntrackNew(c, f) })
	} else {
		c.Probes = Probes(c, 1, n)
	}
	tot := check(t, c, b.ref, b.others...)
	logTotals(t, name, tot)
	t.Logf("coverage: %s", MeasureCoverage(c, c.Probes))
	return tot
}

func firstLine(err error) string {
	s, _, _ := strings.Cut(err.Error(), "\n")
	return s
}
