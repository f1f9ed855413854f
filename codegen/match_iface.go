package codegen

import (
	"fmt"
	"slices"

	"bpfwall/codegen/pkt"
	"bpfwall/ir"
)

// -i and -o, and nft's further interface tests. At sk-lookup only the
// input interface is known.
var ifaceCode = &kind[ir.Iface]{
	emit: func(c *compiler, _ *ir.Rule, m ir.Iface, next, _ string) bool {
		c.iface(m, next)
		return false
	},
	lookup: func(m ir.Iface) string {
		if m.Dir == ir.IfaceOut {
			return "-o (output interface) match"
		}
		return ""
	},
	pure: always[ir.Iface],
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
