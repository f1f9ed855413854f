package main

import (
	"errors"
	"fmt"
	"io"

	"bpfwall/parser/iptables"
	"bpfwall/rules"
)

// runSave prints the active rule set as iptables-save does; with -c the
// counters of compiled rules are the kernel's, summed over CPUs.
func runSave(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("save", stderr)
	counters := fs.Bool("c", false, "print packet and byte counters")
	hook := fs.String("hook", "", "the filter to print when several hold different rule sets")
	files, err := parseFlags(fs, args)
	if err != nil {
		return err
	}
	if len(files) != 0 {
		fmt.Fprintln(stderr, "usage: bpfwall save [-c] [--hook H]")
		return errUsage
	}
	targets, err := findTargets(*hook, nil, stderr)
	if err != nil {
		return err
	}
	src := targets[0].snap.Meta.Source
	for _, t := range targets[1:] {
		if t.snap.Meta.Source != src {
			return fmt.Errorf("the %s and %s filters hold different rule sets; choose one with --hook", targets[0].place.Hook, t.place.Hook)
		}
	}
	rs, err := iptables.Parse(activeName, []byte(src), iptables.Options{Counters: true})
	if err != nil {
		return fmt.Errorf("read the active rule set: %w", err)
	}
	// Filters compiled from the same rule set count for it together, as
	// netfilter counts a user chain's rules on every path through them.
	counted := make(map[int]bool)
	for _, t := range targets {
		live, err := t.active()
		if err != nil {
			return err
		}
		if err := addCounters(rs, live, t.snap.Meta.Lines, t.snap.Meta.Table, t.snap.Meta.Chain, counted); err != nil {
			return err
		}
	}
	_, err = stdout.Write(rs.Save(rules.SaveOptions{Counters: *counters}))
	return err
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

func sum(a, b rules.Counters, add bool) rules.Counters {
	if !add {
		return b
	}
	return rules.Counters{Packets: a.Packets + b.Packets, Bytes: a.Bytes + b.Bytes}
}
