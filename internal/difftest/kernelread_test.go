package difftest

import (
	"fmt"
	"os/exec"
	"strings"
	"testing"

	"bpfwall/internal/packets"
	"bpfwall/internal/testenv"
	"bpfwall/ir"
	"bpfwall/model"
	"bpfwall/parser/nft"
	"bpfwall/parser/nft/kernel"
	"bpfwall/rules"
)

// TestReadKernelNFT loads random nft rule sets (GenerateNFT) with nft -f
// into a fresh network namespace and reads them back with kernel.Read
// (--from-kernel): the forward hook of its model must agree under ir.Eval
// with that of the model parser/nft makes of the same text, on probes
// aimed at the rules of both. DIFFTEST_SEEDS rule sets per family (default 4, make
// difftest runs more).
func TestReadKernelNFT(t *testing.T) {
	requireNFT(t)
	seeds := envInt(t, "DIFFTEST_SEEDS", 4) * 5
	read, probes, refused := 0, 0, 0
	for _, fam := range []rules.Family{rules.IPv4, rules.IPv6} {
		for seed := uint64(1); seed <= uint64(seeds); seed++ {
			text := GenerateNFT(seed, GenOptions{Family: fam, InIface: "fwin", OutIface: "fwout", XDP: seed%2 == 0})
			want, err := nft.Parse("gen", text, nft.Options{Family: fam})
			if err != nil {
				continue // TestGenerateNFT counts these
			}
			var got *rules.Ruleset
			var loadErr, readErr error
			testenv.InFreshNetns(t, func() {
				// iif and oif need the interfaces when nft loads the rules.
				if out, err := exec.Command("ip", "link", "add", "fwin", "type", "veth", "peer", "name", "fwout").CombinedOutput(); err != nil {
					loadErr = fmt.Errorf("ip link add: %v: %s", err, out)
					return
				}
				cmd := exec.Command("nft", "-f", "-")
				cmd.Stdin = strings.NewReader(string(text))
				if out, err := cmd.CombinedOutput(); err != nil {
					loadErr = fmt.Errorf("nft -f: %v: %s", err, out)
					return
				}
				got, readErr = kernel.Read(nft.Options{Family: fam})
			})
			if loadErr != nil {
				t.Logf("%s seed %d: %v", fam, seed, loadErr)
				continue
			}
			if readErr != nil && strings.Contains(readErr.Error(), "is not supported") {
				// Refused clearly, naming the rule: allowed, if rare
				// (nft's implicit "ether type" after "ether saddr").
				t.Logf("%s seed %d: ReadKernel refuses: %v", fam, seed, readErr)
				refused++
				continue
			}
			if readErr != nil {
				t.Errorf("%s seed %d: ReadKernel: %v\n%s", fam, seed, readErr, text)
				continue
			}
			n, ok := agreeOnForward(t, fmt.Sprintf("%s seed %d", fam, seed), want, got, seed)
			if !ok {
				gt, _ := nft.Print(got)
				wt, _ := nft.Print(want)
				t.Logf("the kernel's rule set reads as\n%s\nthe text's as\n%s\ntext:\n%s", gt, wt, text)
				continue
			}
			probes += n
			read++
		}
	}
	t.Logf("%d random rule sets read back from the kernel agree with the text's model on %d probes; %d refused", read, probes, refused)
	if read < seeds || refused > read/50 {
		t.Errorf("only %d rule sets read back, %d refused", read, refused)
	}
}

// agreeOnForward lowers the FORWARD chain of both models and compares
// their verdicts on probes aimed at the rules of both, and random ones.
func agreeOnForward(t *testing.T, name string, want, got *rules.Ruleset, seed uint64) (int, bool) {
	t.Helper()
	opts := ir.LowerOptions{Table: "filter", Chain: "FORWARD"}
	pw, err1 := ir.Lower(want, opts)
	pg, err2 := ir.Lower(got, opts)
	switch {
	case err1 != nil && err2 != nil:
		return 0, true // both refuse: the same construct, at other positions
	case err1 != nil || err2 != nil:
		t.Errorf("%s: the text's model lowers with %v, the kernel's with %v", name, err1, err2)
		return 0, false
	}
	meta := model.Meta{InIface: "fwin", OutIface: "fwout"}
	var probes []packets.Aimed
	for i, p := range []*ir.Program{pw, pg} {
		g := packets.NewGenerator(p, seed+uint64(i))
		for _, r := range p.Rules {
			probes = append(probes, g.Aim(r, packets.AimOptions{Meta: meta})...)
		}
		for range 100 {
			f := g.Random()
			m := meta
			m.InIface = f.Iface
			probes = append(probes, packets.Aimed{Frame: f.Data, Meta: m})
		}
	}
	for _, a := range probes {
		m := a.Meta
		m.CTState = model.ConnNew
		p1, err1 := model.Decode(a.Frame, m)
		p2, err2 := model.Decode(a.Frame, m)
		if err1 != nil || err2 != nil {
			t.Fatalf("%s: decode: %v %v", name, err1, err2)
		}
		if r1, r2 := pw.Eval(p1), pg.Eval(p2); r1.Verdict != r2.Verdict {
			t.Errorf("%s: packet %+v\n  text's model:   %v\n  kernel's model: %v", name, *p1, r1, r2)
			return 0, false
		}
	}
	return len(probes), true
}

// TestPrintNFT prints the models of random nft rule sets (nft.Print) and
// parses the text again: the text must print the same, and the forward
// hooks of both models agree under ir.Eval. No kernel is needed.
func TestPrintNFT(t *testing.T) {
	seeds := envInt(t, "DIFFTEST_SEEDS", 4) * 10
	done, probes := 0, 0
	for _, fam := range []rules.Family{rules.IPv4, rules.IPv6} {
		for seed := uint64(1); seed <= uint64(seeds); seed++ {
			text := GenerateNFT(seed, GenOptions{Family: fam, InIface: "fwin", OutIface: "fwout", XDP: seed%2 == 0})
			rs, err := nft.Parse("gen", text, nft.Options{Family: fam})
			if err != nil {
				continue // TestGenerateNFT counts these
			}
			name := fmt.Sprintf("%s seed %d", fam, seed)
			printed, err := nft.Print(rs)
			if err != nil {
				t.Errorf("%s: print: %v\n%s", name, err, text)
				continue
			}
			rs2, err := nft.Parse("printed", printed, nft.Options{Family: fam})
			if err != nil {
				t.Errorf("%s: the printed text does not parse: %v\n%s", name, err, printed)
				continue
			}
			again, err := nft.Print(rs2)
			if err != nil || string(again) != string(printed) {
				t.Errorf("%s: printing is not stable (%v):\n%s\nthen\n%s", name, err, printed, again)
				continue
			}
			n, ok := agreeOnForward(t, name, rs, rs2, seed)
			if !ok {
				t.Logf("text:\n%s\nprinted:\n%s", text, printed)
				continue
			}
			probes += n
			done++
		}
	}
	t.Logf("%d random rule sets print, read back and agree on %d probes", done, probes)
	if done < seeds {
		t.Errorf("only %d rule sets printed and compared", done)
	}
}

// TestRandomIptablesNFT loads random iptables rule sets (GenerateRules)
// with iptables-nft-restore, which installs native expressions and
// xtables extensions, and compares the kernel's verdicts with those of
// the rule set read back from the kernel (--from-kernel): under ir.Eval
// and compiled at -O1. 2×DIFFTEST_SEEDS rule sets per family (default
// 20) and DIFFTEST_PROBES probes each (default 300).
func TestRandomIptablesNFT(t *testing.T) {
	requireKernel(t)
	testenv.RequireTool(t, "iptables-nft-restore", "ip6tables-nft-restore")
	seeds := 2 * envInt(t, "DIFFTEST_SEEDS", 10)
	probes := envInt(t, "DIFFTEST_PROBES", 300)
	topo := NewTopology(t, TopologyOptions{})
	ref := Netfilter{Topo: topo, IptablesNFT: true}
	others := []Source{FromKernel{Topo: topo, Inner: Eval{}}, FromKernel{Topo: topo, Inner: TestRun{}}}
	var totals []Totals
	cases, refused := 0, 0
	for _, fam := range []rules.Family{rules.IPv4, rules.IPv6} {
		for seed := uint64(1); seed <= uint64(seeds); seed++ {
			text := GenerateRules(seed, GenOptions{Family: fam, InIface: topo.InIface, OutIface: topo.OutIface, XDP: seed%2 == 0})
			c, err := NewCase(CaseOptions{
				Name: fmt.Sprintf("%s-seed-%d", fam, seed), Family: fam, Rules: text,
				InIface: topo.InIface, OutIface: topo.OutIface,
			})
			if err != nil {
				continue // TestRandom checks that iptables refuses these too
			}
			if err := topo.LoadIptablesNFT(fam, text); err != nil {
				// iptables-nft refuses a few rule sets iptables-legacy
				// takes ("RULE_APPEND failed").
				t.Logf("%s: %v", c.Name, err)
				refused++
				continue
			}
			c.Probes = Probes(c, seed, probes)
			totals = addTotals(totals, check(t, c, ref, others...))
			cases++
		}
	}
	logTotals(t, "iptables-nft", totals)
	t.Logf("difftest iptables-nft: %d rule sets refused by iptables-nft-restore", refused)
	if refused > cases/10 {
		t.Errorf("iptables-nft-restore refused %d rule sets, %d loaded", refused, cases)
	}
	// Odd seeds use -o, which xdp cannot compile.
	for i, min := range []int{cases, cases / 3} {
		if totals[i].Cases < min {
			t.Errorf("%s judged %d of %d rule sets", totals[i].Source, totals[i].Cases, cases)
		}
	}
}
