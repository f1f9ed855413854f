package main

import (
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"regexp"
	"slices"
	"strings"

	"bpfwall/loader"
	"bpfwall/rules"
)

// runSave prints the active rule set as iptables-save does; with -c the
// counters of compiled rules are the kernel's, summed over CPUs.
func runSave(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("save", stdout, stderr)
	counters := fs.BoolP("counters", "c", false, "print packet and byte counters")
	table := fs.StringP("table", "t", "", "print only `TABLE`")
	file := fs.StringP("file", "f", "", "write to `FILE` instead of stdout")
	var fam familyFlags
	fam.register(fs, "print the rule set of")
	hook := fs.String("hook", "", "the filter at `HOOK`, when several hold different rule sets")
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
	if len(files) != 0 {
		return fmt.Errorf("%w: save takes no FILE (-f FILE writes to one)", errUsage)
	}
	if err := fam.check(); err != nil {
		return err
	}
	family := rules.IPv4
	if fam.ipv6 {
		family = rules.IPv6
	}
	out, err := saveText(*hook, family, *table, *counters, stderr)
	if err != nil {
		return err
	}
	if *file != "" {
		return os.WriteFile(*file, out, 0o600)
	}
	_, err = stdout.Write(out)
	return err
}

// saveText is the active rule set of family as iptables-save prints it:
// nothing when no filter of family is loaded.
func saveText(hook string, family rules.Family, table string, counters bool, stderr io.Writer) ([]byte, error) {
	all, err := findTargets(hook, nil, stderr)
	if isNothingLoaded(err) {
		return delegatedText(family, table, counters)
	}
	if err != nil {
		return nil, err
	}
	var targets, accels []target
	for _, t := range all {
		switch {
		case metaFamily(&t.snap.Meta) != family:
		case t.place.Accelerator():
			accels = append(accels, t)
		default:
			targets = append(targets, t)
		}
	}
	if len(targets) == 0 {
		// A restore that left every table to the kernel: its tables.
		if text, err := delegatedText(family, table, counters); err != nil || len(text) > 0 {
			return text, err
		}
		if family == rules.IPv4 {
			fmt.Fprintln(stderr, "bpfwall: no IPv4 filter is loaded; save -6 prints the IPv6 ones")
		}
		return nil, nil
	}
	src := targets[0].snap.Meta.Source
	for _, t := range targets[1:] {
		if t.snap.Meta.Source != src {
			return nil, fmt.Errorf("the %s and %s filters hold different rule sets; choose one with --hook", targets[0].place.Name(), t.place.Name())
		}
	}
	rs, err := activeRuleset(&targets[0].snap.Meta)
	if err != nil {
		return nil, fmt.Errorf("read the active rule set: %w", err)
	}
	// Filters compiled from the same rule set count for it together, as
	// netfilter counts a user chain's rules on every path through them.
	counted := make(map[int]bool)
	for _, t := range targets {
		live, err := t.active()
		if err != nil {
			return nil, err
		}
		if err := addCounters(rs, live, t.snap.Meta.Lines, t.snap.Meta.Table, t.snap.Meta.Chain, counted); err != nil {
			return nil, err
		}
	}
	// What an accelerator dropped, the chains did not see.
	for _, t := range accels {
		if t.snap.Meta.Source != src {
			return nil, fmt.Errorf("the %s and %s hold different rule sets", targets[0].place.Name(), t.place.Name())
		}
		addAcceleratorCounters(rs, t.snap)
	}
	if counters {
		if err := addKernelCounters(rs, family, targets); err != nil {
			return nil, err
		}
	}
	if table != "" {
		t := rs.Table(table)
		if t == nil {
			return nil, fmt.Errorf("table %q is not in the active rule set", table)
		}
		rs.Tables = []*rules.Table{t}
	}
	out := rs.Save(rules.SaveOptions{Counters: counters})
	// Tables an earlier restore left to the kernel, which a later one did
	// not name: they stay, as with iptables-restore.
	kernel, err := kernelTables(family, counters)
	if err != nil {
		return nil, err
	}
	for _, name := range tableOrder(slices.Collect(maps.Keys(kernel))) {
		if rs.Table(name) == nil && (table == "" || table == name) {
			out = append(out, kernel[name]...)
		}
	}
	return out, nil
}

// metaFamily is the family of the filter meta describes (IPv4 in pins
// of versions that did not record it).
func metaFamily(m *loader.Meta) rules.Family {
	if m.Family == rules.IPv6.String() {
		return rules.IPv6
	}
	return rules.IPv4
}

// addCounters sets (or, for lines already counted, adds) the counters of
// the rules on lines, and of the entry chain's policy, from live, a parse
// of the same text, to rs.
func addCounters(rs, live *rules.Ruleset, lines []int, table, chain string, counted map[int]bool) error {
	compiled := make(map[int]bool, len(lines))
	for _, l := range lines {
		compiled[l] = true
	}
	for ti, t := range rs.Tables {
		if ti >= len(live.Tables) || live.Tables[ti].Name != t.Name {
			return errors.New("read the active rule set: tables differ between reads")
		}
		lt := live.Tables[ti]
		for ci, c := range t.Chains {
			lc := lt.Chains[ci]
			if t.Name == table && c.Name == chain {
				c.Counters = sum(c.Counters, lc.Counters, counted[-ci-1])
				counted[-ci-1] = true
			}
			for ri, r := range c.Rules {
				if !compiled[r.Pos.Line] {
					continue
				}
				nr := *r
				nr.Counters = sum(r.Counters, lc.Rules[ri].Counters, counted[r.Pos.Line])
				c.Rules[ri] = &nr
				counted[r.Pos.Line] = true
			}
		}
	}
	return nil
}

// addAcceleratorCounters adds to rs, read from the accelerator's Source,
// what the accelerator counted: each rule's drops to the rule (or the
// chain's policy) on its line.
func addAcceleratorCounters(rs *rules.Ruleset, snap *loader.Snapshot) {
	add := make(map[int]rules.Counters)
	for id, line := range snap.Meta.Lines {
		if line > 0 && id < len(snap.Counters) {
			c := snap.Counters[id]
			add[line] = sum(add[line], rules.Counters{Packets: c.Packets, Bytes: c.Bytes}, true)
		}
	}
	t := rs.Table(snap.Meta.Table)
	if t == nil {
		return
	}
	for _, c := range t.Chains {
		if a, ok := add[c.Pos.Line]; ok && c.Builtin {
			c.Counters = sum(c.Counters, a, true)
		}
		for ri, r := range c.Rules {
			if a, ok := add[r.Pos.Line]; ok {
				nr := *r
				nr.Counters = sum(r.Counters, a, true)
				c.Rules[ri] = &nr
			}
		}
	}
}

func sum(a, b rules.Counters, add bool) rules.Counters {
	if !add {
		return b
	}
	return rules.Counters{Packets: a.Packets + b.Packets, Bytes: a.Bytes + b.Bytes}
}

// addKernelCounters adds to rs the counters of what a netfilter restore
// left to the kernel (delegate.go): the kernel's counters of each rule of
// a delegated chain, paired by place and target with the rules bpfwall
// wrote there. A builtin chain that no filter of targets runs takes them, as
// its policy's; a user chain adds them to what the filters counted.
func addKernelCounters(rs *rules.Ruleset, family rules.Family, targets []target) error {
	kernel, err := kernelDelegated(family)
	if err != nil || len(kernel) == 0 {
		return err
	}
	runs := make(map[string]bool)
	for _, t := range targets {
		runs[t.snap.Meta.Table+" "+t.snap.Meta.Chain] = true
	}
	for _, t := range rs.Tables {
		text, ok := kernel[t.Name]
		if !ok {
			continue
		}
		kr, kp := kernelRules(text)
		for _, c := range t.Chains {
			if c.Builtin && runs[t.Name+" "+c.Name] {
				continue // bpfwall's: its counters are the filter's
			}
			lines := kr[c.Name]
			if c.Builtin {
				if pc, ok := kp[c.Name]; ok {
					c.Counters = pc
				}
			}
			one := rules.Ruleset{Tables: []*rules.Table{{Name: t.Name, Chains: []*rules.Chain{{Name: c.Name, Builtin: c.Builtin, Policy: c.Policy, Rules: c.Rules}}}}}
			ours, _ := kernelRules(one.Save(rules.SaveOptions{}))
			if len(ours[c.Name]) != len(lines) {
				continue // not the rules bpfwall wrote
			}
			for i, r := range c.Rules {
				// The kernel prints some targets' options its own way
				// (MARK --set-mark as --set-xmark): the rules bpfwall
				// wrote pair by place and target.
				if ruleTarget(ours[c.Name][i].text) != ruleTarget(lines[i].text) {
					break
				}
				r.Counters = sum(r.Counters, lines[i].c, !c.Builtin)
			}
		}
	}
	return nil
}

// ruleTarget is the target of an iptables-save rule line.
func ruleTarget(line string) string {
	_, t, _ := strings.Cut(line, " -j ")
	name, _, _ := strings.Cut(t, " ")
	return name
}

// kernelRule is a rule line of iptables-save -c output.
type kernelRule struct {
	text string // without its counters
	c    rules.Counters
}

// kernelRules splits one table's iptables-save text into its rules by
// chain, without bpfwall's answers of REJECT rules, and its builtin
// chains' policy counters.
func kernelRules(text []byte) (map[string][]kernelRule, map[string]rules.Counters) {
	out := make(map[string][]kernelRule)
	policies := make(map[string]rules.Counters)
	for line := range strings.Lines(string(text)) {
		line = strings.TrimRight(line, "\n")
		var c rules.Counters
		if strings.HasPrefix(line, "[") {
			head, rest, ok := strings.Cut(line, "] ")
			if !ok {
				continue
			}
			fmt.Sscanf(head, "[%d:%d", &c.Packets, &c.Bytes)
			line = rest
		}
		if name, ok := strings.CutPrefix(line, ":"); ok {
			f := strings.Fields(name)
			if len(f) == 3 && f[1] != "-" {
				fmt.Sscanf(f[2], "[%d:%d]", &c.Packets, &c.Bytes)
				policies[f[0]] = c
			}
			continue
		}
		rest, ok := strings.CutPrefix(line, "-A ")
		if !ok || strings.Contains(line, " -m bpf --object-pinned ") {
			continue
		}
		chain, _, _ := strings.Cut(rest, " ")
		out[chain] = append(out[chain], kernelRule{text: line, c: c})
	}
	return out, policies
}

// delegatedText is what a netfilter restore left to the kernel, for a
// family without any chain in BPF: the tables bpfwall wrote, as
// iptables-save prints them, without bpfwall's mark; only table when
// given, and the rules' counters with counters.
func delegatedText(family rules.Family, table string, counters bool) ([]byte, error) {
	kernel, err := kernelTables(family, counters)
	if err != nil {
		return nil, err
	}
	var out []byte
	for _, name := range tableOrder(slices.Collect(maps.Keys(kernel))) {
		if table == "" || name == table {
			out = append(out, kernel[name]...)
		}
	}
	return out, nil
}

// kernelTables are the tables bpfwall wrote into the kernel for
// family, by name, as iptables-save prints them without bpfwall's mark
// and its REJECT answers; with the rules' counters with counters.
func kernelTables(family rules.Family, counters bool) (map[string][]byte, error) {
	kernel, err := kernelDelegated(family)
	if err != nil {
		return nil, err
	}
	rc := regexp.MustCompile(`^\[\d+:\d+\] `)
	out := make(map[string][]byte)
	for name, text := range kernel {
		var b []byte
		for line := range strings.Lines(string(text)) {
			if strings.HasPrefix(line, ":"+delegatedMark+" ") || strings.HasPrefix(line, "#") || strings.Contains(line, " -m bpf --object-pinned ") {
				continue
			}
			if !counters {
				line = rc.ReplaceAllString(line, "")
			}
			b = append(b, line...)
		}
		out[name] = b
	}
	return out, nil
}
