package codegen

import (
	"fmt"
	"slices"

	"github.com/cilium/ebpf/asm"

	"bpfwall/codegen/abi"
	"bpfwall/codegen/insn"
	"bpfwall/codegen/pkt"
	"bpfwall/ir"
)

// -i and -o, and nft's further interface tests. At sk-lookup only the
// input interface is known.
var ifaceCode = &kind[ir.Iface]{
	emit: func(c *compiler, _ *ir.Rule, m ir.Iface, next, hotdrop string) bool {
		if c.accel && m.Dir == ir.IfaceOut && (m.Name != "" || !m.Prefix) {
			c.accelOutIface(m, next, hotdrop)
			return true
		}
		c.iface(m, next)
		return false
	},
	lookup: func(m ir.Iface) string {
		if m.Dir == ir.IfaceOut {
			return "-o (output interface) match"
		}
		return ""
	},
	// An accelerator's -o looks the output device up, and may not find
	// it.
	pure: func(c *compiler, m ir.Iface) bool { return !c.accel || m.Dir != ir.IfaceOut },
	collect: func(c *compiler, m ir.Iface) {
		if !c.knowsIface(m.Dir) || (m.Name == "" && m.Prefix) {
			return // constant: see iface
		}
		if key := c.ifaceKey(m); !slices.Contains(c.ifaces, key) {
			c.ifaces = append(c.ifaces, key)
		}
	},
}

// iface emits -i / -o. The interface the hook does not know has the empty
// name, which only "+" matches; the one it knows is looked up in
// abi.IfacesMap by parse, and "+" matches every name.
func (c *compiler) iface(m ir.Iface, next string) {
	if !c.knowsIface(m.Dir) {
		c.constant((m.Name == "") != m.Neg, next)
		return
	}
	if m.Name == "" && m.Prefix {
		c.constant(!m.Neg, next)
		return
	}
	c.bit(pkt.Ifaces, c.ifaceBit(m), m.Neg, next)
}

// accelOutIface emits -o in an accelerator: the patterns the output
// device's name matches, from abi.IfacesMap at the ifindex the route
// lookup left in pkt.OutIfindex. A device the swap did not name (created
// since) is unknown: the packet goes to hotdrop, which passes it.
func (c *compiler) accelOutIface(m ir.Iface, next, hotdrop string) {
	b := c.b
	b.Emit(
		insn.Ld(asm.R1, asm.R6, pkt.OutIfindex, asm.Word),
		insn.St(asm.R10, chainKey, asm.R1, asm.Word),
	)
	b.Emit(insn.Lookup(abi.IfacesMap, asm.R10, chainKey)...)
	b.Emit(
		asm.JEq.Imm(asm.R0, 0, hotdrop),
		insn.Ld(asm.R1, asm.R0, 0, asm.DWord),
	)
	if i := c.ifaceBit(m); i > 0 {
		b.Emit(asm.RSh.Imm(asm.R1, int32(i)))
	}
	b.Emit(asm.And.Imm(asm.R1, 1))
	c.equal(asm.R1, 1, m.Neg, next)
}

// ifaceKey is the pattern m tests, as abi.IfacesMap numbers it: at netfilter
// hooks, which know both devices, with its direction.
func (c *compiler) ifaceKey(m ir.Iface) ir.Iface {
	key := ir.Iface{Name: m.Name, Prefix: m.Prefix}
	if c.hook == HookNetfilter {
		key.Dir = m.Dir
	}
	return key
}

func (c *compiler) ifaceBit(m ir.Iface) int {
	key := c.ifaceKey(m)
	for i, p := range c.ifaces {
		if p == key {
			return i
		}
	}
	panic(fmt.Sprintf("codegen: interface pattern %+v was not collected", m))
}
