package iptables

import "bpfwall/rules"

// genericExt parses a match or target bpfwall does not interpret: each
// option is kept with the arguments that follow it, so that the rule prints
// back and compiling it fails with its position.
type genericExt struct {
	name    string
	options []rules.Option
}

func (g *genericExt) parse(o *opt) error {
	g.options = append(g.options, rules.Option{Name: o.Name, Neg: o.Neg, Args: o.Args})
	return nil
}

type genericMatch struct{ genericExt }

func newGenericMatch(name string) matchParser { return &genericMatch{genericExt{name: name}} }

func (g *genericMatch) finish(ctx *ruleCtx) (rules.Match, error) {
	return &rules.Generic{Located: rules.Located{Pos: ctx.Pos}, Ext: g.name, Options: g.options}, nil
}

type genericTarget struct{ genericExt }

func newGenericTarget(name string) targetParser { return &genericTarget{genericExt{name: name}} }

func (g *genericTarget) finish(ctx *ruleCtx) (rules.Target, error) {
	return &rules.GenericTarget{Located: rules.Located{Pos: ctx.Pos}, Target: g.name, Options: g.options}, nil
}
