package codegen

import (
	"fmt"
	"strings"

	"bpfwall/codegen/abi"
	"bpfwall/codegen/sklookup"
	"bpfwall/rules"
)

// The sk-lookup hook: the program reads a socket lookup instead of a
// packet, runs the mangle PREROUTING rules on it, and steers the lookups
// TPROXY rules take (package sklookup).

// Targets returns the socket of every TPROXY rule and nft tproxy
// statement, by rule ID.
func (p *Program) Targets() map[int]abi.SocketKey { return sklookup.Targets(p.IR.Family, p.IR.Rules) }

// lookupTarget is what the sk-lookup code needs of c.
func (c *compiler) lookupTarget() sklookup.Target {
	return sklookup.Target{
		IPv6:    c.p.Family == rules.IPv6,
		Ifaces:  len(c.ifaces) > 0,
		Scratch: parseScratch,
		OK:      parseOK,
		NotIP:   parseNotIP,
		Key:     c.mainKey(),
		Pkt:     c.mainPkt(),
		End:     symMainEnd,
	}
}

// parseLookup emits the sk-lookup hook's parse function.
func (c *compiler) parseLookup() {
	c.parseFunction(sklookup.SymParse, "read the socket lookup into the bpfwall_pkt at r2")
	sklookup.Parse(c.b, c.lookupTarget())
}

// dumpTargets lists the TPROXY rules' sockets for a dump.
func (p *Program) dumpTargets(b *strings.Builder) {
	targets := p.Targets()
	if len(targets) == 0 {
		return
	}
	b.WriteString("; TPROXY sockets (targets entries):")
	for _, r := range p.IR.Rules {
		if k, ok := targets[r.ID]; ok {
			fmt.Fprintf(b, " r%d=%s", r.ID, k)
		}
	}
	b.WriteString("\n; the packet mark (--tproxy-mark) is not set: sk_lookup needs no policy routing\n")
}
