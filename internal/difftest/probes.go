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
