package main

import (
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"bpfwall/codegen"
	"bpfwall/loader"
	"bpfwall/parser/iptables"
	"bpfwall/rules"
)

// runRestore is iptables-restore: the input replaces the tables it names,
// at once, in every filter of the namespace (or the one -i and --hook
// name); bad input changes nothing.
func runRestore(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("restore", stdout, stderr)
	var f swapFlags
	f.register(fs)
	test := fs.BoolP("test", "t", false, "parse, compile and verify the input; change nothing")
	noflush := fs.BoolP("noflush", "n", false, "apply the input on top of the active rule set instead of replacing its tables")
	counters := fs.BoolP("counters", "c", false, "restore the counters given in the input")
	verbose := fs.CountP("verbose", "v", "say what was loaded and replaced")
	table := fs.StringP("table", "T", "", "restore only `TABLE` of the input")
	var fam familyFlags
	fam.register(fs, "read the input as")
	var warn warner
	warn.register(fs)
	var ipsets setFlags
	ipsets.register(fs, &warn)
	noDelegate := fs.Bool("no-delegate", false, "refuse the nat and security tables instead of leaving them to the kernel's netfilter (without -i)")
	var accelerate ifaceList
	fs.Var(&accelerate, "accelerate", "also drop at xdp on `IFACE` (repeatable, or a comma-separated list) what filter INPUT and FORWARD would drop (without -i)")
	version := versionFlag(fs)
	modprobeFlag(fs)
	files, err := parseFlags(fs, args)
	if err != nil {
		return err
	}
	if *version {
		printVersion(stdout)
		return nil
	}
	if err := fam.check(); err != nil {
		return err
	}
	ipv6 := &fam.ipv6
	level, err := f.level()
	if err != nil {
		return err
	}
	if len(files) > 1 {
		return fmt.Errorf("%w: restore reads one FILE, or stdin", errUsage)
	}
	name, display := "-", "<stdin>"
	if len(files) == 1 && files[0] != "-" {
		name, display = files[0], files[0]
	}
	// -v says what it does as it goes: a large restore takes seconds.
	start := time.Now()
	progress := func(format string, args ...any) {
		if *verbose > 0 {
			fmt.Fprintf(stdout, "[%5.2fs] %s\n", time.Since(start).Seconds(), fmt.Sprintf(format, args...))
		}
	}
	src, err := readFile(name)
	if err != nil {
		return err
	}
	loader.StartHZ()
	progress("read %s: %d bytes", display, len(src))
	sets, err := ipsets.read(src, stderr)
	if err != nil {
		return err
	}
	if !*test {
		lock, err := acquireLock(f.waitFlags, stderr)
		if err != nil {
			return err
		}
		defer lock.Release()
	}
	nf, err := netfilterMode(&f)
	if err != nil {
		return err
	}
	if len(accelerate) > 0 && !nf {
		return fmt.Errorf("%w: --accelerate runs in front of the chains at their netfilter hooks (restore without -i and --hook)", errUsage)
	}
	// As iptables-restore and ip6tables-restore: the family is -6's, not
	// a guess from the content ("-p ipv6-icmp" is valid IPv4).
	req := restoreRequest{
		src: src, display: display, family: rules.IPv4, sets: sets, level: level,
		opts: iptables.Options{Counters: *counters, Noflush: *noflush, Table: *table, ForceFamily: true},
		test: *test, verbose: *verbose > 0, progress: progress, warn: &warn, flags: &f, noDelegate: *noDelegate,
		accelerate: splitIfaces(accelerate),
	}
	if *ipv6 {
		req.opts.Family, req.family = rules.IPv6, rules.IPv6
	}
	if nf {
		req.again = rereader(name, src)
		return restoreNetfilter(req, stdout, stderr)
	}
	return restoreInterfaces(req, stdout, stderr)
}

// restoreInterfaces restores the filters loaded at interface hooks (-i,
// --hook): each is parsed and compiled, and when all are, swapped.
func restoreInterfaces(req restoreRequest, stdout, stderr io.Writer) error {
	f := req.flags
	targets, err := findTargets(f.hook, attachTo(f.hook, f.ifaces), stderr)
	// A namespace whose filters were loaded with -i: a restore without
	// it swaps those.
	targets = slices.DeleteFunc(targets, func(t target) bool { return t.place.Hook == codegen.HookNetfilter || t.place.Accelerator() })
	if err != nil && req.test && len(f.ifaces) == 0 {
		// Nothing loaded: -t checks the input for the hook asked for.
		targets, err = findTargets(f.hook, []string{""}, stderr)
	}
	if err != nil {
		return err
	}
	// Everything is parsed and compiled before anything is swapped.
	type plan struct {
		t    target
		rs   *rules.Ruleset
		prog *codegen.Program
		mode counterMode
	}
	var plans []plan
	var input *rules.Ruleset // as the input has it, without kept tables
	for _, t := range targets {
		opts := req.opts
		// The active rule set is parsed only when it is needed (restore
		// -n, or tables the input does not name): at 100k rules a parse
		// takes half a second.
		var active *rules.Ruleset
		var activeSets map[string]*rules.IPSet
		if t.snap != nil {
			if req.opts.Noflush {
				if active, err = t.active(); err != nil {
					return err
				}
				activeSets = active.Sets
			} else if activeSets, err = metaSets(&t.snap.Meta); err != nil {
				return err
			}
		}
		// Sets the input does not give stay as the active rule set has them.
		opts.Sets = overSets(activeSets, req.sets)
		mode := countersFromRuleset
		if req.opts.Noflush && active != nil {
			opts.Base, mode = active, countersFollowRuleset
		}
		rs, err := iptables.Parse(req.display, req.src, opts)
		if rs != nil {
			req.warn.print(stderr, rs.Warnings)
		}
		if err != nil {
			return reportRuleErrors(err, true, stderr)
		}
		if input == nil {
			input = &rules.Ruleset{Tables: slices.Clone(rs.Tables)}
		}
		if !req.opts.Noflush && t.snap != nil && keepsTables(t.snap.Meta.Source, rs) {
			// As iptables-restore, tables the input does not name stay.
			if active, err = t.active(); err != nil {
				return err
			}
			for _, at := range active.Tables {
				if rs.Table(at.Name) == nil {
					rs.Tables = append(rs.Tables, at)
					if at.Name == "filter" {
						mode = countersFollowRuleset
					}
				}
			}
		}
		req.progress("%s: parsed %d rules", t.place.Hook, countRules(rs))
		prog, err := compileFor(rs, t, t.chain(f.chain), req.level, req.warn, stderr)
		if err != nil {
			return reportRuleErrors(err, true, stderr)
		}
		req.progress("%s: compiled %d rules of %s into %d instructions (%s)", t.place.Hook, len(prog.IR.Rules), t.chain(f.chain), prog.Size(), prog.Level)
		plans = append(plans, plan{t, rs, prog, mode})
	}

	var runs []ranChain
	for _, p := range plans {
		runs = append(runs, ranAt(p.t, p.prog))
	}
	if input != nil {
		req.warn.print(stderr, unenforced(input, "restore -i", runs))
	}
	if req.test {
		for _, p := range plans {
			req.progress("%s: verifying", p.t.place.Hook)
			l, err := loader.Load(p.prog, loader.Options{})
			if err != nil {
				return privileged(err)
			}
			if req.verbose {
				fmt.Fprintf(stdout, "%s: %d rules verified, %d instructions processed\n", p.t.place.Hook, len(p.prog.IR.Rules), l.VerifiedInsns)
			}
			l.Close()
		}
		return nil
	}
	swapped := 0
	for _, p := range plans {
		if len(f.ifaces) == 0 {
			// A filter whose every interface is gone filters nothing.
			if gone, err := goneEverywhere(p.t, stderr); err != nil || gone {
				if err != nil {
					return err
				}
				continue
			}
		}
		req.progress("%s: loading (the kernel verifies the program) and swapping", p.t.place.Hook)
		res, err := swapIn(p.t, p.rs, p.prog, req.display, f, p.mode)
		if err != nil {
			return err
		}
		swapped++
		noteStage(stderr, p.t, res)
		if req.verbose {
			describeSwap(stdout, p.t, res)
		}
	}
	if swapped == 0 {
		return errors.New("no filter is loaded in this network namespace on an interface that exists; name interfaces with -i")
	}
	return nil
}

// ranChain is a builtin chain a filter at an interface hook runs.
type ranChain struct {
	table, chain string
	hook         codegen.Hook
}

func (r ranChain) String() string { return r.table + " " + r.chain + " at " + r.hook.String() }

// ranAt is the chain that prog, the filter at t, runs.
func ranAt(t target, prog *codegen.Program) ranChain {
	return ranChain{prog.IR.Table, prog.IR.Chains[0].Name, t.place.Hook}
}

// unenforced warns of each builtin chain of rs that has a rule or drops
// by policy and that none of runs, the chains that command (restore -i,
// load) runs at interface hooks, is: netfilter would enforce it, and
// nothing here does. (A user chain is enforced when a chain of runs
// reaches it.)
func unenforced(rs *rules.Ruleset, command string, runs []ranChain) []*rules.Error {
	names := make([]string, len(runs))
	for i, r := range runs {
		names[i] = r.String()
	}
	var out []*rules.Error
	for _, t := range rs.Tables {
		for _, c := range t.Chains {
			if !c.Builtin || len(c.Rules) == 0 && c.Policy != rules.PolicyDrop {
				continue
			}
			if slices.ContainsFunc(runs, func(r ranChain) bool { return r.table == t.Name && r.chain == c.Name }) {
				continue
			}
			pos := c.Pos
			if len(c.Rules) > 0 {
				pos = c.Rules[0].Pos
			}
			if pos == (rules.Pos{}) {
				pos = t.Pos
			}
			out = append(out, rules.Errorf(pos, "%s %s is not enforced: %s runs only %s; restore without -i enforces every chain at its netfilter hook", t.Name, c.Name, command, strings.Join(names, ", ")))
		}
	}
	return out
}

// countRules counts the rules of every chain of rs.
func countRules(rs *rules.Ruleset) int {
	_, _, n := count(rs)
	return n
}

// keepsTables says whether the active rule set, as iptables-save text,
// has a table rs does not name, which a restore keeps.
func keepsTables(source string, rs *rules.Ruleset) bool {
	for line := range strings.Lines(source) {
		if name, ok := strings.CutPrefix(strings.TrimRight(line, "\n"), "*"); ok && rs.Table(name) == nil {
			return true
		}
	}
	return false
}
