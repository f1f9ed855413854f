package iptables

import (
	"net"
	"strconv"
	"strings"

	"bpfwall/rules"
)

// Match mac (libxt_mac.c, kernel xt_mac.c): the Ethernet source address,
// which only incoming packets have.

func init() {
	registerMatch("mac", &matchExt{
		options: []optSpec{{name: "mac-source", arg: argOne, invert: true}},
		new:     func() matchParser { return &macParser{} },
	})
}

type macParser struct{ m *rules.MAC }

func (p *macParser) parse(o *opt) error {
	addr, ok := parseMAC(o.Arg)
	if !ok {
		return o.errorf("--mac-source: invalid MAC address %q", o.Arg)
	}
	p.m = &rules.MAC{Addr: addr, Neg: o.Neg}
	return nil
}

func (p *macParser) finish(ctx *ruleCtx) (rules.Match, error) {
	if p.m == nil {
		return nil, rules.Errorf(ctx.Pos, "mac: --mac-source required")
	}
	switch ctx.hook() {
	case "POSTROUTING", "OUTPUT":
		return nil, rules.Errorf(ctx.Pos, "-m mac is only valid in the PREROUTING, INPUT and FORWARD chains, not %s", ctx.Chain)
	}
	m := *p.m
	m.Pos = ctx.Pos
	return &m, nil
}

// parseMAC parses six colon-separated groups of one or two hex digits.
func parseMAC(s string) (net.HardwareAddr, bool) {
	groups := strings.Split(s, ":")
	if len(groups) != 6 {
		return nil, false
	}
	addr := make(net.HardwareAddr, 6)
	for i, g := range groups {
		if len(g) == 0 || len(g) > 2 {
			return nil, false
		}
		v, err := strconv.ParseUint(g, 16, 8)
		if err != nil {
			return nil, false
		}
		addr[i] = byte(v)
	}
	return addr, true
}
