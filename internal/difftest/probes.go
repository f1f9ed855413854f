package difftest

import (
	"bpfwall/internal/packets"
	"bpfwall/model"
	"bpfwall/rules"
)

// Probes returns n frames for c, addressed from the sender to the
// firewall: half aimed at c's rules (packets.Generator.Aim), breadth
// first (every rule's base frame, then every rule's first edge, ...), and
// half from packets.Generator.Random, which picks each field on its own.
func Probes(c *Case, seed uint64, n int) [][]byte {
	g := packets.NewGenerator(c.Program, seed)
	opts := packets.AimOptions{
		Meta:   c.Meta(),
		Usable: func(f []byte, pkt *model.Packet) bool { return Forwarded(pkt, f) == "" },
	}
	rls := c.Program.Rules
	aimed := make([][]packets.Aimed, len(rls))
	var out [][]byte
	for round := 0; len(out) < n/2 && len(rls) > 0; round++ {
		for i, r := range rls {
			if len(out) == n/2 {
				break
			}
			if len(aimed[i]) == 0 {
				aimed[i] = g.Aim(r, opts)
			}
			out = append(out, aimed[i][0].Frame)
			aimed[i] = aimed[i][1:]
		}
	}
	for len(out) < n {
		out = append(out, random(g, c.Family)) // the topology fixes the interfaces
	}
	for _, f := range out {
		copy(f[0:6], fwInMAC)
	}
	return out
}

// RandomProbes is Probes without aimed frames: only
// packets.Generator.Random's.
func RandomProbes(c *Case, seed uint64, n int) [][]byte {
	g := packets.NewGenerator(c.Program, seed)
	out := make([][]byte, n)
	for i := range out {
		out[i] = random(g, c.Family)
		copy(out[i][0:6], fwInMAC)
	}
	return out
}

// ProbesWhere is Probes keeping only the frames keep accepts; it gives
// up after 50 tries per probe wanted.
func ProbesWhere(c *Case, seed uint64, n int, keep func([]byte) bool) [][]byte {
	var out [][]byte
	for batch := uint64(0); len(out) < n && batch < 50; batch++ {
		for _, f := range Probes(c, seed*1000+batch, n) {
			if len(out) < n && keep(f) {
				out = append(out, f)
			}
		}
	}
	return out
}

// random returns a frame of g.Random that is not an IP packet of the
// other family: the case's rules are one family's, and what the other
// family's tables and routes make of a packet is not the case's.
func random(g *packets.Generator, fam rules.Family) []byte {
	for {
		f := g.Random().Data
		if pkt, err := model.Decode(f, model.Meta{}); err != nil || pkt.NotIP || pkt.Family == fam {
			return f
		}
	}
}
