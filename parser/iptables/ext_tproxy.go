package iptables

import (
	"strings"

	"bpfwall/rules"
)

// Target TPROXY, revision 1 (libxt_TPROXY.c, kernel xt_TPROXY.c).

func init() {
	registerTarget("TPROXY", &targetExt{
		options: []optSpec{
			{name: "on-port", arg: argOne},
			{name: "on-ip", arg: argOne},
			{name: "tproxy-mark", arg: argOne},
		},
		new: func() targetParser { return &tproxyParser{} },
	})
}

type tproxyParser struct{ port, ip, mark *opt }

func (p *tproxyParser) parse(o *opt) error {
	switch o.Name {
	case "on-port":
		p.port = o
	case "on-ip":
		p.ip = o
	case "tproxy-mark":
		p.mark = o
	}
	return nil
}

func (p *tproxyParser) finish(ctx *ruleCtx) (rules.Target, error) {
	t := &rules.TProxy{Located: rules.Located{Pos: ctx.Pos}, Family: ctx.Family}
	if p.port == nil {
		return nil, rules.Errorf(ctx.Pos, "TPROXY: --on-port is required")
	}
	port, ok := parseServicePort(p.port.Arg)
	if !ok && p.port.Arg != "0" {
		return nil, p.port.errorf("--on-port: invalid port %q", p.port.Arg)
	}
	t.Port = port
	if p.ip != nil {
		a, err := parseAddr(p.ip.Arg, ctx.Family)
		if err != nil {
			return nil, p.ip.errorf("--on-ip: %v", err)
		}
		if !a.IsUnspecified() {
			t.Addr = a
		}
	}
	if p.mark != nil {
		value, mask, hasMask := strings.Cut(p.mark.Arg, "/")
		v, ok := parseUint(value, 1<<32-1)
		if !ok {
			return nil, p.mark.errorf("--tproxy-mark: invalid mark %q", p.mark.Arg)
		}
		m := uint64(1<<32 - 1)
		if hasMask {
			if m, ok = parseUint(mask, 1<<32-1); !ok {
				return nil, p.mark.errorf("--tproxy-mark: invalid mask %q", mask)
			}
		}
		t.Mark, t.Mask = uint32(v), uint32(m)
	}
	// The kernel's checks (tproxy_tg4_check, xt_check_target): the mangle
	// table's PREROUTING hook, TCP or UDP.
	if ctx.Table != "mangle" {
		return nil, rules.Errorf(ctx.Pos, "TPROXY is only valid in the mangle table, not %s", ctx.Table)
	}
	if h := ctx.hook(); h != "" && h != "PREROUTING" {
		return nil, rules.Errorf(ctx.Pos, "TPROXY is only valid in the PREROUTING chain, not %s", h)
	}
	if ctx.ProtoNeg || ctx.Proto != 6 && ctx.Proto != 17 {
		return nil, rules.Errorf(ctx.Pos, "TPROXY can be used only with -p tcp or -p udp")
	}
	return t, nil
}
