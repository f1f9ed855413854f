package codegen

import (
	"github.com/cilium/ebpf/asm"

	"bpfwall/codegen/pkt"
	"bpfwall/ir"
)

// --sport, --dport, and multiport's lists and ranges.
var portsCode = &kind[ir.Ports]{
	emit: func(c *compiler, _ *ir.Rule, m ir.Ports, next, _ string) bool {
		var offs []int16
		switch m.Dir {
		case ir.Src:
			offs = []int16{pkt.Sport}
		case ir.Dst:
			offs = []int16{pkt.Dport}
		default:
			offs = []int16{pkt.Sport, pkt.Dport}
		}
		ranges := make([]valueRange, len(m.Ranges))
		for i, pr := range m.Ranges {
			ranges[i] = valueRange{uint32(pr.Lo), uint32(pr.Hi)}
		}
		c.inRanges(offs, asm.Word, ranges, 0xffff, m.Neg, next)
		return false
	},
	pure: always[ir.Ports],
}
