package iptables

import "bpfwall/rules"

// Match comment (libxt_comment.c): matches every packet.

// maxCommentLen is XT_MAX_COMMENT_LEN - 1.
const maxCommentLen = 255

func init() {
	registerMatch("comment", &matchExt{
		options: []optSpec{{name: "comment", arg: argOne}},
		new:     func() matchParser { return &commentParser{} },
	})
}

type commentParser struct{ m *rules.Comment }

func (p *commentParser) parse(o *opt) error {
	// libxtables cuts a longer comment to the size of the kernel's field,
	// without a word.
	p.m = &rules.Comment{Text: o.Arg[:min(len(o.Arg), maxCommentLen)]}
	return nil
}

func (p *commentParser) finish(ctx *ruleCtx) (rules.Match, error) {
	if p.m == nil {
		return nil, rules.Errorf(ctx.Pos, "comment: --comment required")
	}
	m := *p.m
	m.Pos = ctx.Pos
	return &m, nil
}
