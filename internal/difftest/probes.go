package difftest

import (
	"bpfwall/internal/packets"
	"bpfwall/ir"
)

// Probes returns n frames aimed at the edges of prog's rules
// (packets.Generator), addressed from the sender to the firewall.
func Probes(prog *ir.Program, seed uint64, n int) [][]byte {
	g := packets.NewGenerator(prog, seed)
	out := make([][]byte, n)
	for i := range out {
		f, _ := g.Frame() // the topology fixes the interfaces
		copy(f[0:6], fwInMAC)
		copy(f[6:12], senderMAC)
		out[i] = f
	}
	return out
}

// ProbesWhere is Probes keeping only the frames keep accepts; it gives
// up after 50 tries per probe wanted.
func ProbesWhere(prog *ir.Program, seed uint64, n int, keep func([]byte) bool) [][]byte {
	var out [][]byte
	for batch := uint64(0); len(out) < n && batch < 50; batch++ {
		for _, f := range Probes(prog, seed*1000+batch, n) {
			if len(out) < n && keep(f) {
				out = append(out, f)
			}
		}
	}
	return out
}
