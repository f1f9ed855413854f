package bench

import (
	"bytes"
	"encoding/xml"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"bpfwall/internal/testenv"
)

func TestFamiliesGenerate(t *testing.T) {
	for _, fam := range Families("") {
		if fam.Fixed {
			continue
		}
		for _, n := range []int{1, 32, 1000} {
			t.Run(fam.Name+"/"+strconv.Itoa(n), func(t *testing.T) {
				w, err := fam.Generate(n, 7)
				if err != nil {
					t.Fatal(err)
				}
				if w.N != n {
					t.Errorf("N = %d, want %d", w.N, n)
				}
				_, p, err := lower(w)
				if err != nil {
					t.Fatalf("generated rules do not parse or lower: %v", err)
				}
				if got := len(p.Chains[0].Rules); got != n {
					t.Errorf("chain %s has %d rules, want %d", w.Chain, got, n)
				}
				// findProbes checks with ir.Eval that the no-match frame
				// reaches the policy and the last-rule frame the last rule.
				pr, err := findProbes(w, p, 7)
				if err != nil {
					t.Fatal(err)
				}
				// realistic's one rule is ESTABLISHED,RELATED: no frame of a
				// test run is decided by it, and the random frames aimed at it
				// that are neither TCP nor UDP go to the netfilter stage.
				ctOnly := fam.Name == "realistic" && n == 1
				if pr.noMatch == nil || (pr.last == nil) != ctOnly || w.Flood == nil {
					t.Errorf("missing frames: no-match %v, last %v, flood %v", pr.noMatch != nil, pr.last != nil, w.Flood != nil)
				}
				if ctOnly && len(pr.random) == 0 || !ctOnly && len(pr.random) < randomProbes/2 {
					t.Errorf("%d random frames, want about %d", len(pr.random), randomProbes)
				}
				again, err := fam.Generate(n, 7)
				if err != nil || !bytes.Equal(again.Rules, w.Rules) {
					t.Errorf("the same seed generated different rules (%v)", err)
				}
			})
		}
	}
}

func TestTUMFamily(t *testing.T) {
	dir := testenv.Corpus(t, "real")
	fams, err := LookupFamilies([]string{"tum"}, filepath.Join(dir, TUMDump))
	if err != nil {
		t.Fatal(err)
	}
	w, err := fams[0].Generate(0, 1)
	if err != nil {
		t.Fatal(err)
	}
	if w.N != 5556 {
		t.Errorf("N = %d, want 5556", w.N)
	}
	if bytes.Contains(w.Rules, []byte(anonymizedMAC)) {
		t.Error("anonymized MACs left in the rules")
	}
	// FORWARD compiles at its netfilter hook, at both levels.
	for _, level := range []int{0, 1} {
		if _, _, err := compile(w, level, w.hook()); err != nil {
			t.Errorf("-O%d: %v", level, err)
		}
	}
}

func TestLookupFamiliesUnknown(t *testing.T) {
	if _, err := LookupFamilies([]string{"bpfilter", "nope"}, ""); err == nil || !strings.Contains(err.Error(), "nope") {
		t.Errorf("error = %v, want one naming the unknown family", err)
	}
}

func sampleResults() []Result {
	return []Result{
		{Family: "bpfilter", N: 1, Level: 0, NoMatchNs: 50, FloorNs: 6},
		{Family: "bpfilter", N: 1000, Level: 0, NoMatchNs: 1300, FloorNs: 6},
		{Family: "bpfilter", N: 100000, Level: 0, Skipped: "does not load: too large"},
		{Family: "bpfilter", N: 1, Level: 1, NoMatchNs: 40, FloorNs: 6},
		{Family: "bpfilter", N: 1000, Level: 1, NoMatchNs: 45, FloorNs: 7},
		{Family: "tum", N: 5556, Level: 0, NoMatchNs: 900, FloorNs: 6},
		{Family: "tum", N: 5556, Level: 1, Skipped: "does not load: too large"},
	}
}

func TestSVG(t *testing.T) {
	var buf bytes.Buffer
	if err := WriteSVG(&buf, sampleResults()); err != nil {
		t.Fatal(err)
	}
	dec := xml.NewDecoder(&buf)
	polylines, root := 0, ""
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("not well-formed XML: %v", err)
		}
		if se, ok := tok.(xml.StartElement); ok {
			if root == "" {
				root = se.Name.Local
			}
			if se.Name.Local == "polyline" {
				polylines++
			}
		}
	}
	if root != "svg" {
		t.Errorf("root element %q, want svg", root)
	}
	// bpfilter -O0, bpfilter -O1, tum -O0, tum -O1 (not measured: no
	// line) and the floor.
	series := ChartSeries(sampleResults())
	if len(series) != 5 || polylines != 4 {
		t.Errorf("%d series, %d polylines; want 5 series and 4 lines", len(series), polylines)
	}
	for _, s := range series {
		switch s.Name {
		case "bpfilter -O0":
			if len(s.Points) != 2 || !slices.Equal(s.Missing, []float64{100000}) {
				t.Errorf("bpfilter -O0: %d points, missing %v; want 2 and the skipped N=100000 marked", len(s.Points), s.Missing)
			}
		case "tum -O1":
			if len(s.Points) != 0 || !slices.Equal(s.Missing, []float64{5556}) {
				t.Errorf("tum -O1: %d points, missing %v; want none and N=5556 marked", len(s.Points), s.Missing)
			}
		}
	}
}

// TestE2ESVG checks that an end-to-end report's chart has a line per
// engine that ran, through the point of every size.
func TestE2ESVG(t *testing.T) {
	r := NewReport()
	for _, n := range []int{1, 1000} {
		r.E2E = append(r.E2E,
			E2EResult{Family: "bpfilter", N: n, Engine: "xdp-drop", SentPPS: 2e6, DroppedPPS: 2e6},
			E2EResult{Family: "bpfilter", N: n, Engine: "iptables-legacy", SentPPS: 1e6 / float64(n), DroppedPPS: 1e6 / float64(n)},
			E2EResult{Family: "bpfilter", N: n, Engine: "nftables", Skipped: "nft is not installed"},
		)
	}
	name := filepath.Join(t.TempDir(), "e2e.svg")
	if err := r.WriteSVGFile(name); err != nil {
		t.Fatal(err)
	}
	svg, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(svg), "<polyline"); n != 2 {
		t.Errorf("%d polylines, want 2 (xdp-drop, iptables-legacy):\n%s", n, svg)
	}
	for _, s := range E2EChartSeries(r.E2E) {
		want := 2
		if s.Name == "nftables" {
			want = 0
			if len(s.Missing) != 2 {
				t.Errorf("nftables marks %v as not measured, want both sizes", s.Missing)
			}
		}
		if len(s.Points) != want {
			t.Errorf("%s has %d points, want %d", s.Name, len(s.Points), want)
		}
	}
	if !strings.Contains(string(svg), "not measured") {
		t.Errorf("the chart does not mark the sizes it could not measure:\n%s", svg)
	}
	if !strings.Contains(string(svg), "packets per second") {
		t.Errorf("the chart does not say it shows packets per second:\n%s", svg)
	}
}

func TestJSONRoundTrip(t *testing.T) {
	r := NewReport()
	r.Repeat, r.RunTime, r.Runs = 1000, 200*time.Millisecond, 3
	r.Micro = sampleResults()
	r.Micro[0].Compile, r.Micro[0].Load, r.Micro[0].PeakRSS, r.Micro[0].MapBytes = time.Millisecond, 2*time.Millisecond, 10<<20, 4096
	r.E2E = []E2EResult{
		{Family: "bpfilter", N: 1, Engine: "none", SentPPS: 1e6, ForwardedPPS: 1e6},
		{Family: "bpfilter", N: 1, Engine: "nftables", Skipped: "nft is not installed"},
	}
	var buf bytes.Buffer
	if err := r.WriteJSON(&buf); err != nil {
		t.Fatal(err)
	}
	got, err := ReadJSON(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, r) {
		t.Errorf("round trip changed the report:\n got %+v\nwant %+v", got, r)
	}
}

func TestTableNotes(t *testing.T) {
	var buf bytes.Buffer
	results := sampleResults()
	if err := WriteTable(&buf, results); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	if n := strings.Count(out, "does not load: too large"); n != 1 {
		t.Errorf("the reason appears %d times, want once as a note:\n%s", n, out)
	}
	if n := strings.Count(out, "skipped [1]"); n != 2 {
		t.Errorf("%d rows refer to note 1, want 2:\n%s", n, out)
	}
	// Aligned: every row as wide as the header.
	lines := strings.Split(out, "\n")
	for _, l := range lines[1 : len(results)+1] {
		if utf8.RuneCountInString(l) != utf8.RuneCountInString(lines[0]) {
			t.Errorf("row %q is not as wide as the header %q", l, lines[0])
		}
	}
}

func TestE2ETableRatios(t *testing.T) {
	var buf bytes.Buffer
	err := WriteE2ETable(&buf, []E2EResult{
		{Family: "bpfilter", N: 1, Engine: "xdp-drop", SentPPS: 2e6, DroppedPPS: 2e6},
		{Family: "bpfilter", N: 1, Engine: "iptables-legacy", SentPPS: 1e5, DroppedPPS: 1e5},
		{Family: "bpfilter", N: 1, Engine: "bpfwall -O1", SentPPS: 1.5e6, DroppedPPS: 1.5e6},
	})
	if err != nil {
		t.Fatal(err)
	}
	line := ""
	for l := range strings.Lines(buf.String()) {
		if strings.Contains(l, "bpfwall -O1") {
			line = l
		}
	}
	if f := strings.Fields(line); len(f) < 10 || f[7] != "0.75" || f[8] != "15.00" {
		t.Errorf("bpfwall row %q: want 0.75 of the floor and 15.00 times iptables", line)
	}
}

func TestSweepKernel(t *testing.T) {
	testenv.RequireRoot(t)
	fams, err := LookupFamilies([]string{"bpfilter"}, "")
	if err != nil {
		t.Fatal(err)
	}
	res, err := Sweep(Config{Families: fams, Sizes: []int{1, 32}, Levels: []int{0, 1}, Repeat: 20000, RunTime: 20 * time.Millisecond, Runs: 1, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != 4 {
		t.Fatalf("%d results, want 4", len(res))
	}
	var o0 []Result
	for _, r := range res {
		if r.Level == 0 {
			o0 = append(o0, r)
		}
		t.Logf("%s N=%d -O%d: %s", r.Family, r.N, r.Level, summary(r))
	}
	for _, r := range o0 {
		if r.Skipped != "" || r.NoMatchNs <= 0 || r.LastNs <= 0 || r.RandomNs <= 0 || r.FloorNs <= 0 || r.Verified <= 0 || r.MapBytes == 0 || r.PeakRSS <= 0 {
			t.Errorf("incomplete -O0 row: %+v", r)
		}
	}
	if len(o0) == 2 && o0[1].Insns <= o0[0].Insns {
		t.Errorf("-O0 programs of 1 and 32 rules have %d and %d instructions", o0[0].Insns, o0[1].Insns)
	}
}

// TestSweepNetfilterKernel measures a workload at its chain's netfilter
// hook, as tum's: every test run's verdict must be ir.Eval's for the
// frame leaving through lo (-o tests its name; the test run gives no
// input device), without a MAC header the mac match reads (the inverted
// match must not drop), and without a conntrack entry (INVALID). At -O1
// the state matches guard the classifier's tables there, and the jumps to
// a chain that never returns are classified with them: the program is a
// fraction of -O0's.
func TestSweepNetfilterKernel(t *testing.T) {
	testenv.RequireRoot(t)
	var b strings.Builder
	b.WriteString("*filter\n:INPUT ACCEPT [0:0]\n:FORWARD ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n:DROPS - [0:0]\n" +
		"-A FORWARD -m mac ! --mac-source 02:00:00:00:00:09 -j DROP\n-A FORWARD -i lo -j DROP\n")
	for i := range 120 {
		state := []string{"NEW", "INVALID", "ESTABLISHED"}[i%3]
		target := []string{"DROP", "ACCEPT", "DROPS"}[i%5%3]
		fmt.Fprintf(&b, "-A FORWARD -s 10.%d.0.0/16 -p udp -m state --state %s -m udp --dport %d -j %s\n", i%7, state, 1000+i, target)
	}
	b.WriteString("-A FORWARD -o lo -p udp -m udp --dport 9 -j DROP\n-A DROPS -p tcp -j ACCEPT\n-A DROPS -j DROP\nCOMMIT\n")
	sweepForward(t, "nf", b.String(), 20000, 3)
}

// sweepForward measures the FORWARD chain of text at its netfilter hook,
// -O0 and -O1, which checks every test run's verdict against ir.Eval's;
// every row must be complete, and -O1 a ratio'th of -O0's instructions
// or fewer, its rules classified.
func sweepForward(t *testing.T, name, text string, repeat, ratio int) {
	t.Helper()
	fam := Family{Name: name, Fixed: true, gen: func(int, *rand.Rand) (*Workload, error) {
		return &Workload{Family: name, N: strings.Count(text, "-A FORWARD"), Rules: []byte(text), Chain: "FORWARD", Netfilter: true}, nil
	}}
	res, err := Sweep(Config{Families: []Family{fam}, Levels: []int{0, 1}, Repeat: repeat, RunTime: 20 * time.Millisecond, Runs: 1, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != 2 {
		t.Fatalf("%d results, want 2", len(res))
	}
	for _, r := range res {
		t.Logf("-O%d: %s", r.Level, summary(r))
		if r.Skipped != "" || r.NoMatchNs <= 0 || r.LastNs <= 0 || r.RandomNs <= 0 || r.FloorNs <= 0 || r.Verified <= 0 {
			t.Errorf("incomplete -O%d row: %+v", r.Level, r)
		}
	}
	if res[1].Insns*ratio > res[0].Insns {
		t.Errorf("-O1 has %d instructions, -O0 %d: the rules are not classified", res[1].Insns, res[0].Insns)
	}
}

// TestSweepNetfilterIfaceKeys: rules that differ in an exact -i or -o
// name share the classifier's tables at a netfilter hook, keyed on the
// names' numbers, and every test run's verdict is ir.Eval's for the frame
// leaving through lo (the test run gives no input device): a rule for
// another output device, or for an input device, never matches it.
func TestSweepNetfilterIfaceKeys(t *testing.T) {
	testenv.RequireRoot(t)
	text := forwardRules(150, "", func(b *strings.Builder, i int, src string) {
		switch i % 5 {
		case 0:
			fmt.Fprintf(b, "-A FORWARD -o eth0 -s %s -j ACCEPT\n-A FORWARD -o lo -s %s -j DROP\n", src, src)
		case 1:
			fmt.Fprintf(b, "-A FORWARD -i lo -s %s -j DROP\n-A FORWARD -o vlan%d -s %s -j DROP\n", src, i%9, src)
		case 2:
			fmt.Fprintf(b, "-A FORWARD -i eth0 -o lo -s %s -j DROP\n", src)
		case 3:
			fmt.Fprintf(b, "-A FORWARD -o vlan%d -p udp -m udp --dport %d -j DROP\n-A FORWARD -o lo -p udp -m udp --dport %d -j DROP\n", i%9, 2000+i, 3000+i)
		default:
			fmt.Fprintf(b, "-A FORWARD -s %s -o lo -j DROP\n", src)
		}
	})
	sweepForward(t, "nf-ifaces", text, 2000, 5)
}

// TestSweepNetfilterIfacePrefixes: -i and -o prefixes that no device can
// match as well as another numbered pattern ("lo+", "et+", "vl+") are
// keys of the classifier's tables at a netfilter hook like exact names,
// and one that overlaps them ("l+") stays residual; every test run's
// verdict is ir.Eval's for the frame leaving through lo.
func TestSweepNetfilterIfacePrefixes(t *testing.T) {
	testenv.RequireRoot(t)
	// The last rule matches frames to lo.
	text := forwardRules(152, "", func(b *strings.Builder, i int, src string) {
		switch i % 4 {
		case 0:
			fmt.Fprintf(b, "-A FORWARD -o et+ -s %s -j ACCEPT\n-A FORWARD -o lo+ -s %s -j DROP\n", src, src)
		case 1:
			fmt.Fprintf(b, "-A FORWARD -i vl+ -s %s -j DROP\n-A FORWARD -o vl%dx+ -s %s -j DROP\n", src, i%9, src)
		case 2:
			fmt.Fprintf(b, "-A FORWARD -o l+ -d %s -j DROP\n-A FORWARD -o lo+ -p udp -m udp --dport %d -j DROP\n", src, 3000+i)
		default:
			fmt.Fprintf(b, "-A FORWARD -s %s -o lo+ -j DROP\n", src)
		}
	})
	sweepForward(t, "nf-prefixes", text, 2000, 4)
}

// TestSweepNetfilterIfaceStates: a chain whose tables key on the numbers
// of 11 output names and an input name at a netfilter hook, and compare
// them with constants, loads at -O1: the verifier follows each name's
// test on both branches, and without the bits passed through a map value
// it kept every combination of them apart (305 rules went over its
// million instructions).
func TestSweepNetfilterIfaceStates(t *testing.T) {
	testenv.RequireRoot(t)
	// The last rule matches the frames sent to lo.
	last := "-A FORWARD -s 10.9.9.9/32 -o lo -j DROP\n"
	text := forwardRules(76, last, func(b *strings.Builder, i int, src string) {
		fmt.Fprintf(b, "-A FORWARD -i vl -s %s -j DROP\n-A FORWARD -o vl%dx -s %s -j DROP\n", src, i%9, src)
		fmt.Fprintf(b, "-A FORWARD -o xx -d %s -j DROP\n-A FORWARD -o lo -p udp -m udp --dport %d -j DROP\n", src, 3000+i)
	})
	sweepForward(t, "nf-states", text, 2000, 4)
}

func TestEndToEndKernel(t *testing.T) {
	testenv.RequireRoot(t)
	testenv.RequireTool(t, "ip", "iptables-legacy-restore", "nft", "iptables-restore-translate")
	fams, err := LookupFamilies([]string{"bpfilter"}, "")
	if err != nil {
		t.Fatal(err)
	}
	res, err := EndToEnd(E2EConfig{Families: fams, Sizes: []int{1}, Levels: []int{0}, Duration: 300 * time.Millisecond, Runs: 1, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	engines := make(map[string]E2EResult)
	for _, r := range res {
		t.Logf("%-16s %s", r.Engine, e2eSummary(r))
		engines[r.Engine] = r
	}
	if r := engines["none"]; r.ForwardedPPS <= 0 || r.DroppedPPS > r.ForwardedPPS/100 {
		t.Errorf("without a firewall: %s, want everything forwarded", e2eSummary(r))
	}
	for _, e := range []string{"xdp-drop", "iptables-legacy", "nftables", "bpfwall -O0"} {
		r, ok := engines[e]
		if !ok || r.Skipped != "" || r.DroppedPPS <= 0 || r.ForwardedPPS > r.DroppedPPS/100 {
			t.Errorf("%s: %s, want everything dropped", e, e2eSummary(r))
		}
	}
}

// TestSaveRules: the files hold what Generate measures, one per family
// and size.
func TestSaveRules(t *testing.T) {
	dir := t.TempDir()
	fams, err := LookupFamilies([]string{"bpfilter", "realistic"}, "")
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := SaveRules(dir, fams, []int{1, 32}, 3, &out); err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(out.String(), "\n"); n != 4 {
		t.Errorf("%d files named, want 4:\n%s", n, out.String())
	}
	for _, fam := range fams {
		for _, n := range []int{1, 32} {
			w, err := fam.Generate(n, 3)
			if err != nil {
				t.Fatal(err)
			}
			got, err := os.ReadFile(filepath.Join(dir, fmt.Sprintf("%s-%d.rules", fam.Name, n)))
			if err != nil || !bytes.Equal(got, w.Rules) {
				t.Errorf("%s-%d.rules: not the generated rules (%v)", fam.Name, n, err)
			}
		}
	}
}

// forwardRules is a filter table whose FORWARD chain holds what rule
// writes for each i below n, given a source address of i's own, and then
// tail.
func forwardRules(n int, tail string, rule func(b *strings.Builder, i int, src string)) string {
	var b strings.Builder
	b.WriteString("*filter\n:INPUT ACCEPT [0:0]\n:FORWARD ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n")
	for i := range n {
		rule(&b, i, fmt.Sprintf("10.%d.%d.%d/32", i%3, i/7, i))
	}
	b.WriteString(tail)
	b.WriteString("COMMIT\n")
	return b.String()
}
