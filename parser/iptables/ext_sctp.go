package iptables

import (
	"slices"
	"strings"

	"bpfwall/rules"
)

// Match sctp (libxt_sctp.c, kernel xt_sctp.c): ports, and chunk types,
// checked as libxt_sctp does and kept as written.

func init() {
	registerMatch("sctp", &matchExt{
		// --chunk-types takes a match type (all, any, only) and a list
		// of chunks.
		options: append(slices.Clip(portOptions), optSpec{name: "chunk-types", arg: argGreedy, invert: true}),
		new: func() matchParser {
			p := &sctpParser{m: rules.SCTP{SrcPorts: rules.AnyPort, DstPorts: rules.AnyPort}}
			p.ports = portOpts{port: sctpPort, src: &p.m.SrcPorts, dst: &p.m.DstPorts, srcNeg: &p.m.SrcNeg, dstNeg: &p.m.DstNeg}
			return p
		},
	})
}

type sctpParser struct {
	m     rules.SCTP
	ports portOpts
}

// sctpChunks are the chunk names libxt_sctp knows, and sctpChunkFlags the
// flag letters it takes after one (NAME:flags).
var (
	sctpChunks = []string{
		"DATA", "INIT", "INIT_ACK", "SACK", "HEARTBEAT", "HEARTBEAT_ACK", "ABORT",
		"SHUTDOWN", "SHUTDOWN_ACK", "ERROR", "COOKIE_ECHO", "COOKIE_ACK", "ECN_ECNE",
		"ECN_CWR", "SHUTDOWN_COMPLETE", "I_DATA", "RE_CONFIG", "PAD", "ASCONF",
		"ASCONF_ACK", "FORWARD_TSN", "I_FORWARD_TSN", "ALL", "NONE",
	}
	sctpChunkFlags = "iIuUbBeEtT"
)

func (p *sctpParser) parse(o *opt) error {
	if done, err := p.ports.parse(o); done {
		return err
	}
	// --chunk-types
	if p.m.Chunks != "" {
		return o.errorf("--chunk-types given more than once")
	}
	if len(o.Args) != 2 {
		return o.errorf("--chunk-types requires two arguments, all, any or only and a list of chunks")
	}
	if !slices.Contains([]string{"all", "any", "only"}, strings.ToLower(o.Args[0])) {
		return o.errorf("--chunk-types: unknown match type %q (all, any or only)", o.Args[0])
	}
	for _, c := range strings.Split(o.Args[1], ",") {
		name, flags, _ := strings.Cut(c, ":")
		if !slices.ContainsFunc(sctpChunks, func(n string) bool { return strings.EqualFold(n, name) }) {
			return o.errorf("--chunk-types: unknown chunk type %q", name)
		}
		if strings.Trim(flags, sctpChunkFlags) != "" {
			return o.errorf("--chunk-types: invalid flags %q of chunk %s", flags, name)
		}
	}
	// As libxt_sctp prints them, but in the order written: it sorts the
	// chunks by type.
	p.m.Chunks, p.m.ChunksNeg = strings.ToLower(o.Args[0])+" "+upperNames(o.Args[1]), o.Neg
	return nil
}

func (p *sctpParser) finish(ctx *ruleCtx) (rules.Match, error) {
	if err := ctx.needProto("sctp", 132); err != nil {
		return nil, err
	}
	m := p.m
	m.Pos = ctx.Pos
	m.SrcGiven, m.DstGiven = p.ports.srcSeen, p.ports.dstSeen
	return &m, nil
}

// upperNames upper-cases the chunk names of a --chunk-types list, not
// their flags, whose case is their meaning.
func upperNames(list string) string {
	cs := strings.Split(list, ",")
	for i, c := range cs {
		name, flags, hasFlags := strings.Cut(c, ":")
		cs[i] = strings.ToUpper(name)
		if hasFlags {
			cs[i] += ":" + flags
		}
	}
	return strings.Join(cs, ",")
}

// sctpPort parses a port as libxt_sctp does (xtables_parse_port).
func sctpPort(s string) (uint16, bool) { return parsePort(s, "sctp") }
