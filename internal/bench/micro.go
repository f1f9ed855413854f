package bench

import (
	"errors"
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/cilium/ebpf"

	"bpfwall/codegen"
	"bpfwall/codegen/abi"
	"bpfwall/ir"
	"bpfwall/loader"
)

// Config describes a sweep.
type Config struct {
	Families []Family
	Sizes    []int
	Levels   []int
	// Repeat is how often a test run repeats a frame at most; RunTime is
	// how long one test run may take, and lowers Repeat for slow programs
	// (never below minRepeat).
	Repeat  int
	RunTime time.Duration
	// Runs is how many test runs make a measurement: the median counts.
	Runs int
	Seed uint64
	// Log, when not nil, receives a line per step.
	Log io.Writer
}

// minRepeat is the fewest repetitions of a test run.
const minRepeat = 1000

// Result is the measurement of one workload at one level. Times per
// packet are the kernel's mean over a test run's repetitions, the median
// of Config.Runs test runs.
type Result struct {
	Family string `json:"family"`
	N      int    `json:"n"`
	Level  int    `json:"level"`
	// Skipped says why nothing was measured: the rule set did not
	// compile, or the kernel did not load it.
	Skipped string `json:"skipped,omitempty"`
	// NoMatchNs is for a frame no rule matches, LastNs for one the last
	// rule decides, RandomNs the mean over frames aimed at random rules;
	// zero when the family has no such frame.
	NoMatchNs float64 `json:"nomatch_ns,omitempty"`
	LastNs    float64 `json:"last_ns,omitempty"`
	RandomNs  float64 `json:"random_ns,omitempty"`
	// FloorNs is an empty XDP program's time for the no-match frame,
	// measured beside the others.
	FloorNs float64 `json:"floor_ns,omitempty"`
	// Repeat is the fewest repetitions of the test runs of this row.
	Repeat int `json:"repeat,omitempty"`
	// Insns is the program's size in instructions, Verified the number
	// the verifier processed.
	Insns      int    `json:"insns,omitempty"`
	Verified   int    `json:"verified_insns,omitempty"`
	JITedBytes int    `json:"jited_bytes,omitempty"`
	MapBytes   uint64 `json:"map_bytes,omitempty"`
	// Compile is parsing, lowering and compiling; Load is the kernel's
	// creating the maps and verifying the program.
	Compile time.Duration `json:"compile_ns,omitempty"`
	Load    time.Duration `json:"load_ns,omitempty"`
	// PeakRSS is the process's peak resident set size while compiling
	// and loading, in bytes.
	PeakRSS int64 `json:"peak_rss_bytes,omitempty"`
}

// Sweep measures every family at every size and level.
func Sweep(cfg Config) ([]Result, error) {
	m := meter{cfg: cfg}
	defer m.close()
	var out []Result
	for _, fam := range cfg.Families {
		for _, n := range fam.sizesOf(cfg.Sizes) {
			w, err := fam.Generate(n, cfg.Seed)
			if err != nil {
				m.logf("%-10s skipped: %v", fam.Name, err)
				out = append(out, Result{Family: fam.Name, N: n, Skipped: err.Error()})
				continue
			}
			var pr probes
			_, p, lerr := lower(w)
			if lerr == nil {
				if pr, err = findProbes(w, p, cfg.Seed); err != nil {
					return out, err
				}
			}
			for _, level := range cfg.Levels {
				r := Result{Family: fam.Name, N: w.N, Level: level}
				m.logf("%-10s N=%-6d -O%d ...", r.Family, r.N, r.Level)
				if lerr != nil {
					r.Skipped = "does not compile: " + reason(lerr)
				} else if err := m.measure(&r, w, pr); err != nil {
					return out, err
				}
				m.logf("%-10s N=%-6d -O%d %s", r.Family, r.N, r.Level, summary(r))
				out = append(out, r)
			}
		}
	}
	return out, nil
}

func summary(r Result) string {
	if r.Skipped != "" {
		return "skipped: " + r.Skipped
	}
	return fmt.Sprintf("no-match %.1f ns, last %.1f ns, random %.1f ns, floor %.1f ns; %d insns, %d verified; compile %v, load %v",
		r.NoMatchNs, r.LastNs, r.RandomNs, r.FloorNs, r.Insns, r.Verified, r.Compile.Round(time.Millisecond), r.Load.Round(time.Millisecond))
}

// meter takes the measurements of a sweep.
type meter struct {
	cfg Config
	// floors are the empty programs of each hook, loaded when first
	// needed.
	floors map[codegen.Hook]*ebpf.Program
}

// floor returns the empty program of hook: one that passes every packet
// and does nothing else, measured beside each row.
func (m *meter) floor(hook codegen.Hook) (*ebpf.Program, error) {
	if p := m.floors[hook]; p != nil {
		return p, nil
	}
	p, err := bareProgram(hook)
	if err != nil {
		return nil, err
	}
	if m.floors == nil {
		m.floors = make(map[codegen.Hook]*ebpf.Program)
	}
	m.floors[hook] = p
	return p, nil
}

func (m *meter) close() {
	for _, p := range m.floors {
		p.Close()
	}
}

func (m *meter) logf(format string, args ...any) {
	if m.cfg.Log != nil {
		fmt.Fprintf(m.cfg.Log, format+"\n", args...)
	}
}

// measure compiles, loads and test-runs one workload at r.Level. A rule
// set the compiler or the kernel refuses is a skipped row; a verdict that
// differs from ir.Eval's is an error.
func (m *meter) measure(r *Result, w *Workload, pr probes) error {
	floor, err := m.floor(w.hook())
	if err != nil {
		return err
	}
	resetPeakRSS()
	start := time.Now()
	_, prog, err := compile(w, r.Level, w.hook())
	r.Compile = time.Since(start)
	if err != nil {
		r.Skipped = "does not compile: " + reason(err)
		return nil
	}
	start = time.Now()
	l, err := loader.Load(prog, loader.Options{})
	r.Load = time.Since(start)
	r.PeakRSS = peakRSS()
	if err != nil {
		r.Skipped = "does not load: " + reason(err)
		return nil
	}
	defer l.Close()
	r.Insns = instructions(prog)
	r.Verified = l.VerifiedInsns
	fp, err := l.Footprint()
	if err != nil {
		return err
	}
	r.JITedBytes, r.MapBytes = fp.JITedBytes, fp.MapBytes
	run := func(frame []byte, repeat int) (time.Duration, uint32, error) { return l.Benchmark(frame, repeat) }
	check := checkXDPVerdict
	runFloor := func(frame []byte, repeat int) (time.Duration, uint32, error) {
		ret, d, err := floor.Benchmark(frame, repeat, nil)
		return d, ret, err
	}
	if w.Netfilter {
		c, ok := loader.LookupNetfilterChain("filter", w.Chain)
		if !ok {
			return fmt.Errorf("%s: no netfilter hook runs chain %s", w.Family, w.Chain)
		}
		hook := c.Hook
		run = func(frame []byte, repeat int) (time.Duration, uint32, error) {
			return l.BenchmarkNetfilter(frame, hook, repeat)
		}
		runFloor = func(frame []byte, repeat int) (time.Duration, uint32, error) {
			return loader.BenchmarkNetfilterProgram(floor, prog.IR.Family, frame, hook, repeat)
		}
		check = checkNetfilterVerdict
	} else if err := l.SetIface(1, inIface); err != nil {
		// A test run's frame arrives on the loopback device: give it
		// the name of the veth the end-to-end frames arrive on.
		return err
	}
	r.Repeat = m.cfg.Repeat
	for _, x := range []struct {
		p   *probe
		out *float64
	}{{pr.noMatch, &r.NoMatchNs}, {pr.last, &r.LastNs}} {
		if x.p == nil {
			continue
		}
		if *x.out, err = m.time(r, run, check, []probe{*x.p}); err != nil {
			return err
		}
	}
	if len(pr.random) > 0 {
		if r.RandomNs, err = m.time(r, run, check, pr.random); err != nil {
			return err
		}
	}
	// The floor runs the no-match frame, or the first frame there is.
	var f *probe
	for _, p := range []*probe{pr.noMatch, pr.last} {
		if f == nil {
			f = p
		}
	}
	if f == nil && len(pr.random) > 0 {
		f = &pr.random[0]
	}
	if f != nil {
		saved := r.Repeat
		if r.FloorNs, err = m.time(r, runFloor, check, []probe{{f.frame, ir.VerdictAccept}}); err != nil {
			return err
		}
		r.Repeat = saved
	}
	return nil
}

// instructions is a program's size in 8-byte instructions.
func instructions(p *codegen.Program) int {
	n := 0
	for _, ins := range p.Spec.Programs[abi.ProgramName].Instructions {
		n += int(ins.Size() / 8)
	}
	return n
}

// time returns the median over the runs of the mean time per packet of
// test runs of frames, each repeated as often as the run's time allows.
// It checks every run's verdict, and lowers r.Repeat to the repetitions
// it used.
func (m *meter) time(r *Result, run func([]byte, int) (time.Duration, uint32, error), check func(uint32, ir.Verdict) error, frames []probe) (float64, error) {
	// A short run says how long the program takes.
	var est time.Duration
	for _, f := range frames {
		d, _, err := run(f.frame, minRepeat/10)
		if err != nil {
			return 0, err
		}
		est += d
	}
	repeat := m.cfg.Repeat
	if est > 0 {
		repeat = min(repeat, int(m.cfg.RunTime/est)*len(frames))
	}
	repeat = max(repeat, minRepeat)
	r.Repeat = min(r.Repeat, repeat)
	per := max(1, repeat/len(frames))
	samples := make([]float64, 0, m.cfg.Runs)
	for range max(1, m.cfg.Runs) {
		var sum time.Duration
		for _, f := range frames {
			d, ret, err := run(f.frame, per)
			if err != nil {
				return 0, err
			}
			if err := check(ret, f.want); err != nil {
				return 0, fmt.Errorf("%s/%d -O%d: %w", r.Family, r.N, r.Level, err)
			}
			sum += d
		}
		samples = append(samples, float64(sum.Nanoseconds())/float64(len(frames)))
	}
	return median(samples), nil
}

// checkXDPVerdict checks an xdp program's return code against ir.Eval's
// verdict.
func checkXDPVerdict(ret uint32, want ir.Verdict) error {
	got := ir.VerdictAccept
	switch ret {
	case xdpPass:
	case xdpDrop:
		// A REJECT without a reply (none to an RST, say) drops.
		got = ir.VerdictDrop
		if want == ir.VerdictReject {
			got = want
		}
	case xdpTx:
		got = ir.VerdictReject // the reply goes back out
	default:
		return fmt.Errorf("test run returned %d", ret)
	}
	return sameVerdict(got, want)
}

// checkNetfilterVerdict checks a chain's netfilter program's return code
// against ir.Eval's verdict. A REJECT is noted and accepted, for the
// kernel's REJECT rule to answer.
func checkNetfilterVerdict(ret uint32, want ir.Verdict) error {
	var got ir.Verdict
	switch ret {
	case nfDrop:
		got = ir.VerdictDrop
	case nfAccept:
		got = ir.VerdictAccept
		if want == ir.VerdictReject {
			got = want
		}
	default:
		return fmt.Errorf("test run returned %d", ret)
	}
	return sameVerdict(got, want)
}

func sameVerdict(got, want ir.Verdict) error {
	if got != want {
		return errors.New("kernel verdict " + got.String() + " differs from ir.Eval's " + want.String())
	}
	return nil
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}
