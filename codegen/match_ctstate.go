package codegen

import (
	"github.com/cilium/ebpf/asm"

	"bpfwall/codegen/insn"
	"bpfwall/codegen/pkt"
	"bpfwall/ir"
	"bpfwall/model"
)

// -m conntrack --ctstate and -m state. SNAT and DNAT come from the entry's
// status, which only the chain's own netfilter hook reads after the nat
// hooks the kernel's chain runs after.
var ctStateCode = &kind[ir.CTState]{
	emit: func(c *compiler, _ *ir.Rule, m ir.CTState, next, hotdrop string) bool {
		return c.ctMatch(m, next, hotdrop)
	},
	hooks: func(c *compiler, m ir.CTState) string {
		if m.States&(model.ConnSNAT|model.ConnDNAT) != 0 && c.hook != HookNetfilter {
			// Before the nat table's hooks, or after them, the entry's
			// status is not the one the chain would read.
			return "conntrack state SNAT/DNAT (read only at the chain's own netfilter hook: --hook netfilter, or restore without -i)"
		}
		return ""
	},
	lookup: refuse[ir.CTState]("conntrack state match"),
	// Where every state is known, a state match drops nothing: it may
	// guard a table (a chain's netfilter hook, most rule sets' -m state
	// --state NEW).
	pure: func(c *compiler, _ ir.CTState) bool { return !c.ctUnknown() },
}

// ctUnknown reports whether the program may not know a packet's
// conntrack state: at xdp and tc-ingress, which replay TCP's tracking
// (package conntrack), and in an accelerator. A CTState match then drops
// the packet (hotdrop).
func (c *compiler) ctUnknown() bool { return c.defers() || c.accel }

// ctMatch emits a CTState match: the state ct_state stored. A state it
// could not determine drops the packet: at xdp and tc-ingress, a TCP
// segment whose entry it cannot replay (package conntrack). (Class U never
// gets here: main defers it to the netfilter stage.) It reports whether
// it jumps to hotdrop.
func (c *compiler) ctMatch(m ir.CTState, next, hotdrop string) bool {
	b := c.b
	b.Emit(insn.Ld(asm.R1, asm.R6, pkt.CTState, asm.Byte))
	unknown := c.ctUnknown()
	if unknown {
		b.Emit(asm.JSet.Imm(asm.R1, int32(model.ConnUnknown), hotdrop))
	}
	b.Emit(asm.And.Imm(asm.R1, int32(m.States)))
	if m.Neg {
		b.Emit(asm.JNE.Imm(asm.R1, 0, next))
	} else {
		b.Emit(asm.JEq.Imm(asm.R1, 0, next))
	}
	return unknown
}
