package iptables

import (
	"fmt"
	"slices"

	"bpfwall/rules"
)

// ParseRule reads the options of one rule, as iptables-save prints them
// after "-A CHAIN", for a rule of chain in table (a builtin chain name, or
// "" for a user chain). Every position is on pos's line of pos's file.
//
// The nft front end reads the xt matches and targets iptables-nft installs
// this way: it prints each one's info as iptables options, and this
// parser, the one iptables-restore input goes through, checks and models
// them.
func ParseRule(fam rules.Family, table, chain, args string, pos rules.Pos) (*rules.Rule, error) {
	p := &parser{name: pos.File, family: fam, line: pos.Line}
	p.rs = &rules.Ruleset{Family: fam}
	if err := p.openTable("*" + table); err != nil {
		return nil, err
	}
	if !slices.Contains(rules.BuiltinChains[table], chain) {
		chain = "bpfwall-xt" // any user chain: its hooks are not known here
		if err := p.chainLine(":" + chain + " - [0:0]"); err != nil {
			return nil, err
		}
	}
	if err := p.commandLine("-A " + chain + " " + args); err != nil {
		return nil, err
	}
	if err := p.errs.Err(); err != nil {
		return nil, err
	}
	c := p.table.Chain(chain)
	if len(c.Rules) != 1 {
		return nil, rules.Errorf(pos, "%q is %d rules, not one", args, len(c.Rules))
	}
	return c.Rules[0], nil
}

// ParseMatch reads the options of match extension name, as iptables-save
// prints them after "-m NAME", for a rule of protocol proto (0: any;
// negated with protoNeg). See ParseRule.
func ParseMatch(fam rules.Family, table, chain string, proto uint8, protoNeg bool, name, args string, pos rules.Pos) (rules.Match, error) {
	text := fmt.Sprintf("-m %s %s", name, args)
	if proto != 0 {
		neg := ""
		if protoNeg {
			neg = "! "
		}
		text = fmt.Sprintf("%s-p %d %s", neg, proto, text)
	}
	r, err := ParseRule(fam, table, chain, text, pos)
	if err != nil {
		return nil, err
	}
	if len(r.Matches) != 1 {
		return nil, rules.Errorf(pos, "-m %s is %d matches, not one", name, len(r.Matches))
	}
	return r.Matches[0], nil
}

// ParseTarget reads the options of target extension name, as
// iptables-save prints them after "-j NAME". See ParseMatch.
func ParseTarget(fam rules.Family, table, chain string, proto uint8, protoNeg bool, name, args string, pos rules.Pos) (rules.Target, error) {
	text := fmt.Sprintf("-j %s %s", name, args)
	if proto != 0 {
		neg := ""
		if protoNeg {
			neg = "! "
		}
		text = fmt.Sprintf("%s-p %d %s", neg, proto, text)
	}
	r, err := ParseRule(fam, table, chain, text, pos)
	if err != nil {
		return nil, err
	}
	if len(r.Matches) != 0 {
		return nil, rules.Errorf(pos, "-j %s also loaded %d matches", name, len(r.Matches))
	}
	return r.Target, nil
}
