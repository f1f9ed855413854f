package main

import (
	"errors"
	"fmt"
	"io"

	"bpfwall/codegen"
	"bpfwall/ir"
	"bpfwall/parser/iptables"
	"bpfwall/rules"
)

func runCheck(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("check", stdout, stderr)
	var cf compileFlags
	cf.register(fs)
	in := &cf.inputFlags
	noflush := fs.BoolP("noflush", "n", false, "read fragments applied with iptables-restore -n: each on top of the previous files, chains defined elsewhere allowed")
	noDelegate := fs.Bool("no-delegate", false, "as restore --no-delegate: what bpfwall cannot compile is an error, not left to the kernel's netfilter")
	files, err := parseFlags(fs, args)
	if err != nil {
		return err
	}
	if files, err = in.inputs(files); err != nil {
		return err
	}
	if len(files) == 0 {
		fmt.Fprintln(stderr, "usage: bpfwall check [-6] [-n] [--ipset FILE] (FILE... | --from-kernel)")
		return errUsage
	}
	failed := 0
	var base *rules.Ruleset
	for _, name := range files {
		if *noflush {
			in.fragment, in.base = true, base
		}
		rs, err := in.load(name, stderr)
		if err != nil {
			fmt.Fprintln(stderr, err)
			if line := iptables.FailedLine(err); line > 0 {
				fmt.Fprintf(stderr, "%s: line %d failed\n", name, line)
			}
			failed++
			continue
		}
		base = rs
		// What restore would refuse, check refuses: the chain restore
		// enforces at the hook must compile (the kernel's verifier is
		// restore -t's part).
		if *noflush {
			// A fragment applies to a rule set not known here.
		} else if err := checkCompiles(&cf, fs.Changed("hook"), *noDelegate, rs, stderr); err != nil {
			if rerr := reportRuleErrors(err, false, stderr); errors.Is(rerr, errUsage) {
				return rerr
			} else if _, ok := rerr.(exitError); !ok {
				fmt.Fprintf(stderr, "%s: %v\n", name, rerr)
			}
			if line := iptables.FailedLine(err); line > 0 {
				fmt.Fprintf(stderr, "%s: line %d failed\n", name, line)
			}
			failed++
			continue
		}
		tables, chains, nrules := count(rs)
		fmt.Fprintf(stdout, "%s: %s, %d tables, %d chains, %d rules\n", name, rs.Family, tables, chains, nrules)
		for _, w := range shadowWarnings(rs) {
			fmt.Fprintln(stdout, w)
		}
	}
	if failed > 0 {
		return exitError{1}
	}
	return nil
}

// checkCompiles compiles rs as restore would: without --hook every chain
// at its netfilter hook, saying what would go to the kernel; with --hook
// the chain of that hook.
func checkCompiles(cf *compileFlags, hookGiven, noDelegate bool, rs *rules.Ruleset, stderr io.Writer) error {
	if hookGiven && cf.hook != codegen.HookNetfilter.String() {
		_, err := cf.compileRuleset(rs, stderr)
		return err
	}
	level, err := cf.level()
	if err != nil {
		return err
	}
	keep := func() (*rules.Ruleset, error) { return rs, nil } // check keeps the rule set anyway
	cc, err := compileChains(rs, keep, rs.Family, level, noDelegate, nil)
	if err != nil {
		return err
	}
	for _, p := range cc.progs {
		cf.print(stderr, p.Warnings)
	}
	switch {
	case cf.quiet:
	case cf.readNFT:
		// restore takes iptables input only: nothing of an nft rule
		// set is delegated, what does not compile is only said.
		for _, c := range cc.deleg.chains {
			fmt.Fprintf(stderr, "bpfwall: cannot compile %s, which nft runs as it is:\n", c)
			for _, e := range cc.why[c] {
				fmt.Fprintf(stderr, "  %s\n", e)
			}
		}
	default:
		cc.deleg.note(stderr, cc.why)
	}
	return nil
}

// shadowWarnings lists the rules of filter's builtin chains, and of the
// user chains they reach, that never match, for every chain that lowers.
// A user chain reached from several builtin chains is reported once.
func shadowWarnings(rs *rules.Ruleset) []ir.Warning {
	var out []ir.Warning
	seen := make(map[ir.Warning]bool)
	for _, chain := range []string{"INPUT", "FORWARD", "OUTPUT"} {
		p, err := ir.Lower(rs, ir.LowerOptions{Table: "filter", Chain: chain})
		if err != nil {
			continue
		}
		for _, w := range ir.Shadowed(p) {
			if !seen[w] {
				seen[w] = true
				out = append(out, w)
			}
		}
	}
	return out
}

func count(rs *rules.Ruleset) (tables, chains, nrules int) {
	for _, t := range rs.Tables {
		tables++
		for _, c := range t.Chains {
			chains++
			nrules += len(c.Rules)
		}
	}
	return
}
