package iptables

import (
	"fmt"
	"slices"

	"bpfwall/rules"
)

// Context is where a rule read by ParseRule, ParseMatch or ParseTarget
// is: its family, its table, and its chain (a builtin chain's name, or ""
// for a user chain, whose hooks are not known); its protocol (0: any),
// for the extensions bound to one; and the ipsets -m set may name.
type Context struct {
	Family   rules.Family
	Table    string
	Chain    string
	Proto    uint8
	ProtoNeg bool
	Sets     map[string]*rules.IPSet
}

// ParseRule reads the options of one rule, as iptables-save prints them
// after "-A CHAIN", for a rule in ctx (whose protocol it does not use).
// Every position is on pos's line of pos's file.
//
// The nft front end reads the xt matches and targets iptables-nft installs
// this way: it prints each one's info as iptables options, and this
// parser, the one iptables-restore input goes through, checks and models
// them.
func ParseRule(ctx Context, args string, pos rules.Pos) (*rules.Rule, error) {
	p := &parser{name: pos.File, family: ctx.Family, line: pos.Line, opts: Options{Sets: ctx.Sets}}
	p.rs = &rules.Ruleset{Family: ctx.Family, Sets: ctx.Sets}
	if err := p.openTable("*" + ctx.Table); err != nil {
		return nil, err
	}
	chain := ctx.Chain
	if !slices.Contains(rules.BuiltinChains[ctx.Table], chain) {
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

// protoArgs is "-p PROTO " for ctx's protocol, or "".
func (ctx Context) protoArgs() string {
	switch {
	case ctx.Proto == 0:
		return ""
	case ctx.ProtoNeg:
		return fmt.Sprintf("! -p %d ", ctx.Proto)
	}
	return fmt.Sprintf("-p %d ", ctx.Proto)
}

// ParseMatch reads the options of match extension name, as iptables-save
// prints them after "-m NAME", for a rule in ctx. See ParseRule.
func ParseMatch(ctx Context, name, args string, pos rules.Pos) (rules.Match, error) {
	r, err := ParseRule(ctx, fmt.Sprintf("%s-m %s %s", ctx.protoArgs(), name, args), pos)
	if err != nil {
		return nil, err
	}
	if len(r.Matches) != 1 {
		return nil, rules.Errorf(pos, "-m %s is %d matches, not one", name, len(r.Matches))
	}
	return r.Matches[0], nil
}

// ParseTarget reads the options of target extension name, as
// iptables-save prints them after "-j NAME", for a rule in ctx. See
// ParseRule.
func ParseTarget(ctx Context, name, args string, pos rules.Pos) (rules.Target, error) {
	r, err := ParseRule(ctx, fmt.Sprintf("%s-j %s %s", ctx.protoArgs(), name, args), pos)
	if err != nil {
		return nil, err
	}
	if len(r.Matches) != 0 {
		return nil, rules.Errorf(pos, "-j %s also loaded %d matches", name, len(r.Matches))
	}
	return r.Target, nil
}
