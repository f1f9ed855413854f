package iptables

import (
	"slices"
	"strings"

	"bpfwall/rules"
)

// Matches tcp and udp (libxt_tcp.c, libxt_udp.c, kernel xt_tcpudp.c). The
// two parse ports differently: libxt_tcp with its own parser (C numbers,
// tcp services), libxt_udp with libxtables' (decimal, any service).

func init() {
	registerMatch("tcp", &matchExt{
		options: append(slices.Clip(portOptions),
			optSpec{name: "syn", arg: argNone, invert: true},
			// Two arguments, mask and comparison; the core hands over
			// every following non-option token and parse checks the count.
			optSpec{name: "tcp-flags", arg: argGreedy, invert: true},
			optSpec{name: "tcp-option", arg: argOne, invert: true},
		),
		new: func() matchParser {
			p := &tcpParser{m: rules.TCP{SrcPorts: rules.AnyPort, DstPorts: rules.AnyPort}}
			p.ports = portOpts{port: tcpPort, src: &p.m.SrcPorts, dst: &p.m.DstPorts, srcNeg: &p.m.SrcNeg, dstNeg: &p.m.DstNeg}
			return p
		},
	})
	registerMatch("udp", &matchExt{
		options: portOptions,
		new: func() matchParser {
			p := &udpParser{m: rules.UDP{SrcPorts: rules.AnyPort, DstPorts: rules.AnyPort}}
			p.ports = portOpts{port: parseServicePort, src: &p.m.SrcPorts, dst: &p.m.DstPorts, srcNeg: &p.m.SrcNeg, dstNeg: &p.m.DstNeg}
			return p
		},
	})
}

// portOptions are the port options of tcp, udp and sctp.
var portOptions = []optSpec{
	{name: "source-port", arg: argOne, invert: true},
	{name: "sport", arg: argOne, invert: true},
	{name: "destination-port", arg: argOne, invert: true},
	{name: "dport", arg: argOne, invert: true},
}

// portOpts parses the port options tcp, udp and sctp share into the fields of
// their match. The long and short names are synonyms: each option may be
// given once, in either spelling.
type portOpts struct {
	port             func(string) (uint16, bool)
	src, dst         *rules.PortRange
	srcNeg, dstNeg   *bool
	srcSeen, dstSeen bool
}

// parse reports whether o was a port option, and its error.
func (p *portOpts) parse(o *opt) (bool, error) {
	var r *rules.PortRange
	var neg, seen *bool
	var long string
	switch o.Name {
	case "source-port", "sport":
		r, neg, seen, long = p.src, p.srcNeg, &p.srcSeen, "--source-port"
	case "destination-port", "dport":
		r, neg, seen, long = p.dst, p.dstNeg, &p.dstSeen, "--destination-port"
	default:
		return false, nil
	}
	if *seen {
		return true, rules.Errorf(o.Pos, "only one %s allowed", long)
	}
	*seen = true
	var err error
	*r, err = parsePortRange(o, p.port)
	*neg = o.Neg
	return true, err
}

type tcpParser struct {
	m         rules.TCP
	ports     portOpts
	flagsSeen bool
}

func (p *tcpParser) parse(o *opt) error {
	if done, err := p.ports.parse(o); done {
		return err
	}
	switch o.Name {
	case "syn", "tcp-flags":
		if p.flagsSeen {
			return rules.Errorf(o.Pos, "only one of --syn or --tcp-flags allowed")
		}
		p.flagsSeen = true
		p.m.FlagsNeg = o.Neg
		if o.Name == "syn" {
			p.m.FlagMask = rules.TCPSyn | rules.TCPRst | rules.TCPAck | rules.TCPFin
			p.m.FlagComp = rules.TCPSyn
			return nil
		}
		if len(o.Args) != 2 {
			return rules.Errorf(o.Pos, "--tcp-flags requires two arguments, a mask and the flags to compare")
		}
		var err error
		if p.m.FlagMask, err = parseTCPFlags(o, o.Args[0]); err != nil {
			return err
		}
		p.m.FlagComp, err = parseTCPFlags(o, o.Args[1])
		return err
	case "tcp-option":
		v, ok := parseUint(o.Arg, 255)
		if !ok || v == 0 {
			return o.errorf("--tcp-option: invalid option number %q (1-255)", o.Arg)
		}
		p.m.Option, p.m.OptionNeg = uint8(v), o.Neg
	}
	return nil
}

func (p *tcpParser) finish(ctx *ruleCtx) (rules.Match, error) {
	if err := ctx.needProto("tcp", 6); err != nil {
		return nil, err
	}
	m := p.m
	m.Pos = ctx.Pos
	return &m, nil
}

// tcpFlagNames are the names libxt_tcp accepts, in the order it prints them.
var tcpFlagNames = []struct {
	name string
	bits uint8
}{
	{"FIN", rules.TCPFin}, {"SYN", rules.TCPSyn}, {"RST", rules.TCPRst},
	{"PSH", rules.TCPPsh}, {"ACK", rules.TCPAck}, {"URG", rules.TCPUrg},
	{"ALL", 0x3f}, {"NONE", 0},
}

func parseTCPFlags(o *opt, s string) (uint8, error) {
	var bits uint8
	for _, f := range strings.Split(s, ",") {
		if f == "" { // strtok skips empty fields
			continue
		}
		found := false
		for _, n := range tcpFlagNames {
			if strings.EqualFold(f, n.name) {
				bits |= n.bits
				found = true
				break
			}
		}
		if !found {
			return 0, o.errorf("--tcp-flags: unknown TCP flag %q", f)
		}
	}
	return bits, nil
}

type udpParser struct {
	m     rules.UDP
	ports portOpts
}

func (p *udpParser) parse(o *opt) error {
	_, err := p.ports.parse(o)
	return err
}

func (p *udpParser) finish(ctx *ruleCtx) (rules.Match, error) {
	if err := ctx.needProto("udp", 17); err != nil {
		return nil, err
	}
	m := p.m
	m.Pos = ctx.Pos
	return &m, nil
}
