package iptables

import (
	"strings"

	"bpfwall/rules"
)

// Match pkttype (libxt_pkttype.c): the link-layer packet type.

func init() {
	registerMatch("pkttype", &matchExt{
		options: []optSpec{{name: "pkt-type", arg: argOne, invert: true}},
		new:     func() matchParser { return &pkttypeParser{} },
	})
}

// pktTypeNames are the names libxt_pkttype accepts, aliases last.
var pktTypeNames = []struct {
	name string
	typ  uint8
}{
	{"unicast", rules.PacketHost}, {"broadcast", rules.PacketBroadcast},
	{"multicast", rules.PacketMulticast}, {"otherhost", rules.PacketOtherHost},
	{"bcast", rules.PacketBroadcast}, {"mcast", rules.PacketMulticast}, {"host", rules.PacketHost},
}

type pkttypeParser struct{ m *rules.PktType }

func (p *pkttypeParser) parse(o *opt) error {
	for _, n := range pktTypeNames {
		if strings.EqualFold(o.Arg, n.name) {
			p.m = &rules.PktType{Type: n.typ, Neg: o.Neg}
			return nil
		}
	}
	return o.errorf("--pkt-type: bad packet type %q (unicast, broadcast, multicast or otherhost)", o.Arg)
}

func (p *pkttypeParser) finish(ctx *ruleCtx) (rules.Match, error) {
	if p.m == nil {
		return nil, rules.Errorf(ctx.Pos, "pkttype: --pkt-type required")
	}
	m := *p.m
	m.Pos = ctx.Pos
	return &m, nil
}
