package codegen

import (
	"fmt"
	"slices"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"

	"bpfwall/codegen/abi"
	"bpfwall/codegen/insn"
	"bpfwall/codegen/reject"
	"bpfwall/codegen/uapi"
	"bpfwall/ir"
	"bpfwall/rules"
)

// REJECT: a chain function returns a REJECT rule's decision as a DROP;
// main looks the rule up in abi.RejectRulesMap and, for a REJECT rule, calls
// the function that turns the packet into the reply the kernel would send
// (nf_send_unreach and icmp_send, nf_send_reset; their IPv6 counterparts)
// and transmits it: XDP_TX, or on tc a redirect to the device's egress.
// Packets the kernel sends no reply to are dropped as they are.

// checkReject reports why rule r's REJECT cannot be compiled exactly, or
// "".
func (c *compiler) checkReject(a ir.Reject) string {
	if !reject.Valid(a.With, c.p.Family == rules.IPv6) {
		return fmt.Sprintf("REJECT --reject-with %s is not supported for %s", a.With, c.p.Family)
	}
	if c.hook == HookSkLookup {
		return "REJECT is not supported on sk-lookup: a socket lookup has no packet to answer"
	}
	if c.hook == HookTCEgress {
		return "REJECT is not supported on tc-egress: the kernel delivers the reply to the local sender, which a tc program cannot do as the kernel does"
	}
	switch chain := c.p.Chains[0].Name; {
	case chain == "INPUT":
	case chain == "FORWARD" && reject.Reset(a.With):
		// The reset comes from the packet's destination, whatever the
		// chain.
	case chain == "FORWARD":
		// The error's source address is routing's choice: the program
		// asks bpf_fib_lookup (package reject).
	default:
		return fmt.Sprintf("REJECT is not supported in chain %s on %s: bpfwall answers packets that arrive, in INPUT and FORWARD", chain, c.hook)
	}
	return ""
}

// collectRejects numbers the reject functions: one per --reject-with the
// rules use.
func (c *compiler) collectRejects() {
	for _, r := range c.p.Rules {
		if a, ok := r.Action.(ir.Reject); ok && !slices.Contains(c.rejects, a.With) {
			c.rejects = append(c.rejects, a.With)
		}
	}
}

// rejectIndex is the number of the reject function of with.
func (c *compiler) rejectIndex(with string) int { return slices.Index(c.rejects, with) }

// rejectMaps are the maps of a program with REJECT rules, with their
// contents.
func (c *compiler) rejectMaps() []*ebpf.MapSpec {
	if len(c.rejects) == 0 {
		return nil
	}
	var contents []ebpf.MapKV
	for _, r := range c.p.Rules {
		if a, ok := r.Action.(ir.Reject); ok {
			contents = append(contents, ebpf.MapKV{Key: uint32(r.ID), Value: uint32(c.rejectIndex(a.With) + 1)})
		}
	}
	rulesMap := &ebpf.MapSpec{
		Name:       abi.RejectRulesMap,
		Type:       ebpf.Array,
		KeySize:    4,
		ValueSize:  4,
		MaxEntries: uint32(len(c.p.Rules)),
		Contents:   contents,
	}
	if c.hook == HookNetfilter {
		// The kernel answers: no reply is built here (nfchain.go).
		return []*ebpf.MapSpec{rulesMap, reject.PendingMapSpec()}
	}
	return []*ebpf.MapSpec{
		rulesMap,
		{
			Name:       abi.RejectScratchMap,
			Type:       ebpf.PerCPUArray,
			KeySize:    4,
			ValueSize:  reject.ScratchSize,
			MaxEntries: 1,
		},
		{
			Name:       abi.RejectConfigMap,
			Type:       ebpf.Array,
			KeySize:    4,
			ValueSize:  4,
			MaxEntries: 1,
			Contents:   []ebpf.MapKV{{Key: uint32(0), Value: abi.DefaultRejectConfig}},
		},
	}
}

// rejectDecided emits main's handling of a rule's DROP when the program
// rejects: r8 holds the rule. A REJECT rule's function leaves the return
// code in r9; at a chain's netfilter hook the packet is noted and
// accepted instead, for the kernel's REJECT rule after the program to
// answer (nfchain.go). It goes on to symMainEnd.
func (c *compiler) rejectDecided() {
	b := c.b
	b.Mark("ruled_drop")
	if c.hook == HookNetfilter {
		b.Note("a DROP; a REJECT is noted and accepted, and the kernel's REJECT rule after this program answers it")
	} else {
		b.Note("a DROP: REJECT rules send their reply first")
	}
	b.Emit(
		insn.St(asm.R10, c.mainKey(), asm.R8, asm.Word),
		insn.Movr(asm.R2, asm.R10),
		asm.Add.Imm(asm.R2, int32(c.mainKey())),
		insn.MapRef(asm.R1, abi.RejectRulesMap),
		asm.FnMapLookupElem.Call(),
		asm.JEq.Imm(asm.R0, 0, symMainEnd),
		insn.Ld(asm.R1, asm.R0, 0, asm.Word),
	)
	for k, with := range c.rejects {
		next := b.Fresh("not_reject")
		b.Emit(asm.JNE.Imm(asm.R1, int32(k+1), next), insn.Movr(asm.R1, asm.R6))
		if c.hook == HookNetfilter {
			b.Emit(insn.Mov(asm.R2, reject.Code(with)), insn.Call(reject.SymNote), insn.Mov(asm.R9, uapi.NFAccept))
		} else {
			b.Emit(insn.Movr(asm.R2, asm.R10), asm.Add.Imm(asm.R2, int32(c.mainPkt())), insn.Call(reject.Sym(k)), insn.Movr(asm.R9, asm.R0))
		}
		b.Emit(insn.Ja(symMainEnd))
		b.Mark(next)
	}
	b.Emit(insn.Ja(symMainEnd))
}

// rejectFunctions emits the reject functions and their loop callbacks.
func (c *compiler) rejectFunctions() {
	if len(c.rejects) == 0 {
		return
	}
	if c.hook == HookNetfilter {
		reject.EmitNetfilter(c.b, c.p.Family, c.ctxType())
		return
	}
	reject.Emit(c.b, reject.Target{
		IPv6:        c.p.Family == rules.IPv6,
		TC:          c.hook.tc(),
		Forward:     c.p.Chains[0].Name == "FORWARD",
		Reassembled: c.p.Reassembled,
		Drop:        c.hook.drop(),
		Proto:       c.protoCtxPkt(),
	}, c.rejects)
}
