package difftest

import (
	"bytes"
	"fmt"

	"bpfwall/ir"
	"bpfwall/model"
	iptparse "bpfwall/parser/iptables"
	"bpfwall/parser/nft"
	"bpfwall/rules"
)

// CaseOptions describe a case to build.
type CaseOptions struct {
	Name   string
	Family rules.Family
	// Rules is iptables-save text with a filter table; its FORWARD chain
	// is under test. With NFT it is an nft -f script, and its base chains
	// on the forward hook are under test.
	Rules             []byte
	NFT               bool
	InIface, OutIface string
	CTState           model.ConnState
	Probes            [][]byte
}

// NewCase parses and lowers the rules of a case.
func NewCase(opts CaseOptions) (*Case, error) {
	var rs *rules.Ruleset
	var err error
	if opts.NFT {
		rs, err = nft.Parse(opts.Name, opts.Rules, nft.Options{Family: opts.Family})
	} else {
		rs, err = iptparse.Parse(opts.Name, opts.Rules, iptparse.Options{Family: opts.Family, ForceFamily: true})
	}
	if err != nil {
		return nil, fmt.Errorf("parse %s: %w", opts.Name, err)
	}
	prog, err := ir.Lower(rs, ir.LowerOptions{Chain: "FORWARD"})
	if err != nil {
		return nil, fmt.Errorf("lower %s: %w", opts.Name, err)
	}
	if UsesLimit(prog) {
		// Probe by probe, a token bucket's or a recent list's answer
		// depends on when the probe comes and on the probes before;
		// TestLimitBursts and TestRecentSequences compare timed runs.
		return nil, fmt.Errorf("case %s: %w", opts.Name, &Unsupported{Reason: "limit and recent matches answer by the time and the probes before, not by the probe"})
	}
	return &Case{
		Name:     opts.Name,
		Family:   opts.Family,
		Rules:    opts.Rules,
		NFT:      opts.NFT,
		Ruleset:  rs,
		Program:  prog,
		InIface:  opts.InIface,
		OutIface: opts.OutIface,
		CTState:  opts.CTState,
		Probes:   opts.Probes,
	}, nil
}

// options returns the options c was built from.
func (c *Case) options() CaseOptions {
	return CaseOptions{Name: c.Name, Family: c.Family, Rules: c.Rules, NFT: c.NFT, InIface: c.InIface, OutIface: c.OutIface, CTState: c.CTState, Probes: c.Probes}
}

// ruleLines splits iptables-save text into lines and returns the indexes
// of the rule ("-A") lines.
func ruleLines(text []byte) (lines [][]byte, rules []int) {
	lines = bytes.SplitAfter(text, []byte("\n"))
	for i, l := range lines {
		if bytes.HasPrefix(l, []byte("-A ")) {
			rules = append(rules, i)
		}
	}
	return lines, rules
}

// ruleLines splits the case's rules into lines and returns the indexes of
// those that Minimize may remove: the "-A" lines of iptables-save text;
// in nft text every line that holds no brace and declares no table,
// chain or set (rules, but also hooks and policies, whose removal leaves
// a mismatch or not like any other).
func (opts CaseOptions) ruleLines() (lines [][]byte, rules []int) {
	if !opts.NFT {
		return ruleLines(opts.Rules)
	}
	lines = bytes.SplitAfter(opts.Rules, []byte("\n"))
	for i, l := range lines {
		l = bytes.TrimSpace(l)
		switch {
		case len(l) == 0, l[0] == '#', bytes.ContainsAny(l, "{}"),
			bytes.HasPrefix(l, []byte("add table")), bytes.HasPrefix(l, []byte("add chain")),
			bytes.HasPrefix(l, []byte("flush ")):
			continue
		}
		rules = append(rules, i)
	}
	return lines, rules
}

func without(lines [][]byte, skip int) []byte {
	var b []byte
	for i, l := range lines {
		if i != skip {
			b = append(b, l...)
		}
	}
	return b
}
