package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"bpfwall/internal/bench"
)

// benchFlags are the flags of bpfwall bench.
type benchFlags struct {
	families, sizes, levels string
	json                    bool
	svg                     string
	repeat, runs            int
	runTime                 time.Duration
	e2e                     bool
	duration                time.Duration
	tum                     string
	seed                    uint64
	quiet                   bool
	saveRules               string
}

const (
	defaultSizes    = "1,32,1000,10000,100000"
	defaultE2ESizes = "1,32,1000,10000"
)

func (f *benchFlags) register(fs *pflag.FlagSet) {
	fs.StringVar(&f.families, "families", "", "comma-separated rule set families (default all; bpfilter with --e2e): bpfilter, blocklist, allowlist, mixed, realistic, tum")
	fs.StringVar(&f.sizes, "sizes", "", "comma-separated rule counts (default "+defaultSizes+"; "+defaultE2ESizes+" with --e2e)")
	fs.StringVar(&f.levels, "levels", "0,1", "comma-separated optimization levels")
	fs.BoolVar(&f.json, "json", false, "print the results as JSON instead of tables")
	fs.StringVar(&f.svg, "svg", "", "write a chart of ns per packet against N to `FILE`")
	fs.IntVar(&f.repeat, "repeat", 1_000_000, "repetitions of a test run at most (BPF_PROG_TEST_RUN)")
	fs.DurationVar(&f.runTime, "run-time", 200*time.Millisecond, "longest a test run may take: lowers --repeat for slow programs")
	fs.IntVar(&f.runs, "runs", 5, "runs per measurement; the median is reported")
	fs.BoolVar(&f.e2e, "e2e", false, "flood a veth pair instead: packets per second dropped by each firewall")
	fs.DurationVar(&f.duration, "duration", time.Second, "how long each --e2e run floods")
	fs.StringVar(&f.tum, "tum", "", "the TUM dump for the tum family (default: found under ../shared/corpora/real)")
	fs.Uint64Var(&f.seed, "seed", 1, "seed of the generated rule sets and frames")
	fs.BoolVarP(&f.quiet, "quiet", "q", false, "no progress lines on stderr")
	fs.StringVar(&f.saveRules, "save-rules", "", "write each rule set as iptables-restore text `DIR`/FAMILY-N.rules and measure nothing")
}

func runBench(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("bench", stdout, stderr)
	var f benchFlags
	f.register(fs)
	rest, err := parseFlags(fs, args)
	if err != nil {
		return err
	}
	if len(rest) != 0 || f.runs < 1 || f.repeat < 1 {
		fmt.Fprintln(stderr, "usage: bpfwall bench [--e2e] [--families F,...] [--sizes N,...] [--levels 0,1] [--json] [--svg FILE] [--repeat N] [--runs K]")
		return errUsage
	}
	if f.families == "" && f.e2e {
		f.families = "bpfilter"
	}
	if f.sizes == "" {
		f.sizes = defaultSizes
		if f.e2e {
			f.sizes = defaultE2ESizes
		}
	}
	families, err := bench.LookupFamilies(list(f.families), f.tumPath())
	if err != nil {
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	sizes, err := ints("--sizes", f.sizes)
	if err != nil {
		return err
	}
	levels, err := ints("--levels", f.levels)
	if err != nil {
		return err
	}
	if f.saveRules != "" {
		return bench.SaveRules(f.saveRules, families, sizes, f.seed, stdout)
	}
	var log io.Writer = stderr
	if f.quiet {
		log = nil
	}
	report := bench.NewReport()
	if f.e2e {
		report.Runs = f.runs
		// bpfwall-nf restores the rules with this binary, as users do.
		var self string
		if self, err = os.Executable(); err != nil {
			return err
		}
		report.E2E, err = bench.EndToEnd(bench.E2EConfig{
			Families: families, Sizes: sizes, Levels: levels,
			Duration: f.duration, Runs: f.runs, Seed: f.seed, Log: log, Bpfwall: self,
		})
	} else {
		report.Repeat, report.RunTime, report.Runs = f.repeat, f.runTime, f.runs
		report.Micro, err = bench.Sweep(bench.Config{
			Families: families, Sizes: sizes, Levels: levels,
			Repeat: f.repeat, RunTime: f.runTime, Runs: f.runs, Seed: f.seed, Log: log,
		})
	}
	if err != nil {
		return err
	}
	if f.svg != "" {
		if err := report.WriteSVGFile(f.svg); err != nil {
			return err
		}
	}
	if f.json {
		return report.WriteJSON(stdout)
	}
	if f.e2e {
		fmt.Fprintf(stdout, "kernel %s, %d CPUs; median of %d runs of %v; dropped = sent − forwarded; ratios compare the rates handled (dropped + forwarded)\n\n",
			report.Kernel, report.CPUs, f.runs, f.duration)
		return bench.WriteE2ETable(stdout, report.E2E)
	}
	fmt.Fprintf(stdout, "kernel %s, %d CPUs; ns per packet: mean of a test run, median of %d runs; repeat ≤ %d, lowered so that a run takes ≤ %v\n\n",
		report.Kernel, report.CPUs, f.runs, f.repeat, f.runTime)
	return bench.WriteTable(stdout, report.Micro)
}

// tumPath is the TUM dump's path: --tum, or the shared corpus found in a
// shared/corpora/real beside the working directory or any directory above
// it, or above the executable.
func (f *benchFlags) tumPath() string {
	if f.tum != "" {
		return f.tum
	}
	var starts []string
	if wd, err := os.Getwd(); err == nil {
		starts = append(starts, wd)
	}
	if exe, err := os.Executable(); err == nil {
		starts = append(starts, filepath.Dir(exe))
	}
	for _, dir := range starts {
		for {
			p := filepath.Join(dir, "shared/corpora/real", bench.TUMDump)
			if _, err := os.Stat(p); err == nil {
				return p
			}
			up := filepath.Dir(dir)
			if up == dir {
				break
			}
			dir = up
		}
	}
	return filepath.Join("../shared/corpora/real", bench.TUMDump)
}

// list splits a comma-separated list; nil for "".
func list(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(s, ",")
}

func ints(flagName, s string) ([]int, error) {
	var out []int
	for _, f := range list(s) {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 0 {
			return nil, fmt.Errorf("%w: %s: %q is not a count", errUsage, flagName, f)
		}
		out = append(out, n)
	}
	return out, nil
}
