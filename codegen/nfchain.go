package codegen

import (
	"encoding/binary"
	"slices"

	"github.com/cilium/ebpf/asm"

	"bpfwall/codegen/abi"
	"bpfwall/codegen/insn"
	"bpfwall/codegen/kernel"
	"bpfwall/codegen/pkt"
	"bpfwall/codegen/reject"
	"bpfwall/ir"
)

// A chain at its own netfilter hook (HookNetfilter). The program is a
// BPF_PROG_TYPE_NETFILTER program that the loader attaches where
// netfilter runs the entry chain: the chain's hook (PREROUTING, INPUT,
// FORWARD, OUTPUT, POSTROUTING) at its table's priority (raw -300,
// mangle -150, filter 0). It sees what the table's chain would see there,
// by construction: the packet after routing, after DNAT, reassembled where
// the kernel reassembles, with the conntrack entry conntrack gave it
// (skb->_nfct), and both devices netfilter knows. It evaluates every
// packet of its family that reaches the hook and returns NF_ACCEPT or
// NF_DROP; its code is the stage's (netfilter.go) without the stage's
// gate:
//
//   - the packet starts at the network header, read through a dynptr;
//   - the IP layer has checked the headers (no checksum, no address
//     checks of ip6_rcv_core);
//   - -i and -o compare the names of the hook state's devices with the
//     patterns, as ifname_compare_aligned does, so that interfaces
//     created or renamed after the load match as the kernel matches them;
//   - at FORWARD the TTL has been decremented: lowering wrote the TTL
//     matches for the TTL as the packet arrived (ir.Program.Forward), so
//     the program adds one back, as at tc-egress.
//
// A BPF netfilter program cannot send packets: REJECT is refused.

// Kernel fields the chain's program reads besides the stage's.
var (
	hookStateOut = kernel.Field{Struct: "nf_hook_state", Field: "out"}
	netdevName0  = kernel.Field{Struct: "net_device", Field: "name"}
	netdevName8  = kernel.Field{Struct: "net_device", Field: "name[8]"}
)

// ifNameSize is IFNAMSIZ.
const ifNameSize = 16

// netfilterIfaces sets the packet's interface bits (pkt.Ifaces) from the
// names of the hook state's devices: bit i when the device of pattern
// i's direction matches it. A device netfilter does not give the chain
// (NULL) has the empty name, which no collected pattern matches ("+" is
// constant). r6 is the context, r7 the packet; r8 stays 0.
func (c *compiler) netfilterIfaces() {
	b := c.b
	b.Note("-i and -o: the devices' names against the patterns, as ifname_compare_aligned")
	b.Emit(insn.Mov(asm.R5, 0))
	for _, dir := range []ir.IfaceDir{ir.IfaceIn, ir.IfaceOut} {
		var pats []int
		for i, p := range c.ifaces {
			if p.Dir == dir {
				pats = append(pats, i)
			}
		}
		if len(pats) == 0 {
			continue
		}
		dev, field := "in", hookStateIn
		if dir == ir.IfaceOut {
			dev, field = "out", hookStateOut
		}
		none := b.Fresh("no_" + dev + "_dev")
		b.Emit(
			kernel.Load(asm.R1, asm.R6, asm.DWord, nfCtxState),
			kernel.Load(asm.R1, asm.R1, asm.DWord, field),
			asm.JEq.Imm(asm.R1, 0, none),
			kernel.Load(asm.R2, asm.R1, asm.DWord, netdevName0),
			kernel.Load(asm.R3, asm.R1, asm.DWord, netdevName8),
		)
		for _, i := range pats {
			c.ifaceNameTest(i, c.ifaces[i])
		}
		b.Mark(none)
	}
	b.Emit(insn.St(asm.R7, pkt.Ifaces, asm.R5, asm.DWord))
	// The verifier follows each test above on both of its branches, and
	// knows the bits on every path it took: code that compares a
	// device's number (ifaceNumber) with a constant then keeps every
	// combination of them apart, where it would merge the paths (266
	// rules on 13 names went over its million instructions). The bits
	// pass through abi.ScratchMap's value, whose contents it does not
	// track: it knows nothing of what it reads back, and the paths merge.
	// The XDP and tc programs read them from abi.IfacesMap's values.
	c.scratchValue()
	b.Emit(
		insn.Ld(asm.R1, asm.R7, pkt.Ifaces, asm.DWord),
		insn.St(asm.R0, st0, asm.R1, asm.DWord),
		insn.Ld(asm.R1, asm.R0, st0, asm.DWord),
		insn.St(asm.R7, pkt.Ifaces, asm.R1, asm.DWord),
	)
}

// ifaceNameTest sets bit i of r5 when the name in r2 (bytes 0-7) and r3
// (bytes 8-15) matches pattern p: the pattern's bytes, and for an exact
// name the NUL after it, as iptables' mask compares them.
func (c *compiler) ifaceNameTest(i int, p ir.Iface) {
	b := c.b
	var val, mask [ifNameSize]byte
	n := len(p.Name)
	copy(val[:], p.Name)
	if !p.Prefix {
		n++ // the NUL that ends the name
	}
	for k := 0; k < n && k < ifNameSize; k++ {
		mask[k] = 0xff
	}
	no := b.Fresh("iface_no_match")
	for w, reg := range []asm.Register{asm.R2, asm.R3} {
		m := binary.NativeEndian.Uint64(mask[8*w:])
		if m == 0 {
			continue
		}
		v := binary.NativeEndian.Uint64(val[8*w:])
		b.Emit(insn.Movr(asm.R0, reg))
		if m != ^uint64(0) {
			b.Emit(asm.LoadImm(asm.R1, int64(m), asm.DWord), asm.And.Reg(asm.R0, asm.R1))
		}
		b.Emit(asm.LoadImm(asm.R1, int64(v), asm.DWord), asm.JNE.Reg(asm.R0, asm.R1, no))
	}
	b.Emit(asm.LoadImm(asm.R1, int64(1)<<i, asm.DWord), asm.Or.Reg(asm.R5, asm.R1))
	b.Mark(no)
}

// Transmits reports whether the program sends packets of its own: the
// replies of REJECT rules, at xdp (XDP_TX) and tc (a redirect to the
// device's egress). At a netfilter hook the kernel's REJECT answers.
func (p *Program) Transmits() bool {
	return p.Hook != HookNetfilter && p.Spec.Maps[abi.RejectRulesMap] != nil
}

// Rejects are the --reject-with values of the program's REJECT rules,
// which the kernel answers for a program at a chain's netfilter hook.
func (p *Program) Rejects() []string {
	if p.Hook != HookNetfilter {
		return nil
	}
	var out []string
	for _, r := range p.IR.Rules {
		if a, ok := r.Action.(ir.Reject); ok && !slices.Contains(out, a.With) {
			out = append(out, a.With)
		}
	}
	slices.Sort(out)
	return out
}

// rejectForgetCall emits main's call of reject_forget, before the chains.
func (c *compiler) rejectForgetCall() {
	if c.hook != HookNetfilter || len(c.rejects) == 0 {
		return
	}
	c.b.Emit(insn.Movr(asm.R1, asm.R6), insn.Mov(asm.R2, 0), insn.Call(reject.SymForget))
}
