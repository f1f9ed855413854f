package iptables

import (
	"strings"

	"bpfwall/rules"
)

// Match multiport, revision 1 (libxt_multiport.c, kernel xt_multiport.c).

// maxMultiPorts is XT_MULTI_PORTS: the kernel structure has 15 port slots
// and a range takes two of them.
const maxMultiPorts = 15

func init() {
	registerMatch("multiport", &matchExt{
		options: []optSpec{
			{name: "source-ports", arg: argOne, invert: true},
			{name: "sports", arg: argOne, invert: true},
			{name: "destination-ports", arg: argOne, invert: true},
			{name: "dports", arg: argOne, invert: true},
			{name: "ports", arg: argOne, invert: true},
		},
		new: func() matchParser { return &multiportParser{} },
	})
}

// multiportProtos are the protocols xt_multiport works with.
var multiportProtos = map[uint8]bool{6: true, 17: true, 33: true, 132: true, 136: true}

type multiportParser struct {
	// The list is parsed in finish: port names depend on the protocol.
	list *opt
	dir  rules.MultiportDir
}

func (p *multiportParser) parse(o *opt) error {
	if p.list != nil {
		return rules.Errorf(o.Pos, "multiport: only one of --sports, --dports or --ports allowed")
	}
	p.list = o
	switch o.Name {
	case "source-ports", "sports":
		p.dir = rules.MultiportSrc
	case "destination-ports", "dports":
		p.dir = rules.MultiportDst
	default:
		p.dir = rules.MultiportBoth
	}
	return nil
}

func (p *multiportParser) finish(ctx *ruleCtx) (rules.Match, error) {
	if p.list == nil {
		return nil, rules.Errorf(ctx.Pos, "multiport: no ports specified (--sports, --dports or --ports)")
	}
	if !multiportProtos[ctx.Proto] || ctx.ProtoNeg {
		return nil, rules.Errorf(ctx.Pos, "-m multiport needs -p tcp, udp, udplite, sctp or dccp")
	}
	ports, err := parseMultiPorts(p.list, rules.ProtoName(ctx.Proto))
	if err != nil {
		return nil, err
	}
	return &rules.Multiport{Located: rules.Located{Pos: ctx.Pos}, Dir: p.dir, Ports: ports, Neg: p.list.Neg}, nil
}

// parseMultiPorts parses "port[,port|,lo:hi]...": at most 15 slots, a
// range taking two, both ends given and lo < hi.
func parseMultiPorts(o *opt, proto string) ([]rules.PortRange, error) {
	var ports []rules.PortRange
	slots := 0
	for _, elem := range strings.Split(o.Arg, ",") {
		lo, hi, isRange := strings.Cut(elem, ":")
		n := 1
		if isRange {
			n = 2
		}
		if slots+n > maxMultiPorts {
			return nil, o.errorf("--%s: too many ports specified (%d slots at most, a range takes two)", o.Name, maxMultiPorts)
		}
		slots += n
		l, ok := parsePort(lo, proto)
		if !ok {
			return nil, o.errorf("--%s: invalid port %q", o.Name, lo)
		}
		h := l
		if isRange {
			if h, ok = parsePort(hi, proto); !ok {
				return nil, o.errorf("--%s: invalid port %q", o.Name, hi)
			}
			if l >= h {
				return nil, o.errorf("--%s: invalid port range %q", o.Name, elem)
			}
		}
		ports = append(ports, rules.PortRange{Lo: l, Hi: h})
	}
	return ports, nil
}
