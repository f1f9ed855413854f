package ir

import (
	"bpfwall/model"
	"bpfwall/rules"
)

// Route is the routing decision that an accelerator program
// (codegen.Accelerator) asks bpf_fib_lookup for before the stack: Forward
// holds for a packet the kernel will forward, whose FORWARD chain decides
// it, and !Forward for one it will deliver locally, or drop, whose INPUT
// chain decides it. No rule a user writes has it. The reference model
// reads the answer from the packet: a packet with an output interface is
// forwarded.
type Route struct {
	Forward bool
}

func (m Route) eval(p *Program, st *State, pkt *model.Packet) outcome {
	return is((pkt.OutIface != "") == m.Forward)
}

func (m Route) appendTo(b []byte, fam rules.Family) []byte {
	if m.Forward {
		return append(b, "route forward"...)
	}
	return append(b, "route local"...)
}

func (m Route) verify(v *verifier, st *ruleState) error { return nil }
