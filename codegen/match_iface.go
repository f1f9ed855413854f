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

// ifaceNumbers places the patterns a direction's -i or -o matches test
// that the classifier keys on as numbers (ir.FieldIn, FieldOut) in the
// interface patterns: pattern i of ir.Program.IfacePatterns at bit
// base+i of the packet's interface bits, where at most one of them is
// set (no device matches two).
type ifaceNumbers struct {
	base, n int
	known   bool // the bits are the device's: the hook knows it, and parse reads its patterns
}

// numberIfaces puts each direction's numbered patterns first among the
// interface patterns, in their numbers' order.
func (c *compiler) numberIfaces() {
	for d, dir := range []ir.IfaceDir{ir.IfaceIn, ir.IfaceOut} {
		if !c.knowsIface(dir) || (c.accel && dir == ir.IfaceOut) {
			continue
		}
		nums := ifaceNumbers{base: len(c.ifaces), known: true}
		for _, pat := range c.p.IfacePatterns(dir) {
			key := c.ifaceKey(ir.Iface{Dir: dir, Name: pat.Name, Prefix: pat.Prefix})
			if slices.Contains(c.ifaces, key) {
				// Only netfilter hooks number both directions, and
				// their patterns carry the direction.
				panic(fmt.Sprintf("codegen: interface pattern %+v numbered twice", pat))
			}
			c.ifaces = append(c.ifaces, key)
			nums.n++
		}
		c.ifaceNums[d] = nums
	}
}

// ifaceNumbersOf is the numbering of field f, ir.FieldIn or FieldOut.
func (c *compiler) ifaceNumbersOf(f ir.Field) ifaceNumbers {
	if f == ir.FieldOut {
		return c.ifaceNums[1]
	}
	return c.ifaceNums[0]
}

// ifaceNumber leaves in r1 the number of the packet's device of field f:
// 1 + the index of its pattern's bit among the direction's numbered
// patterns, or 0 when the device matches none of them (or the hook does
// not know it). With x the
// one bit set, x ^ (x - 1) has index+1 bits set; with none set, all 64,
// which the mask makes 0 (a direction numbers 63 names at most). The
// bits are counted in pairs, nibbles, then bytes summed by a multiply,
// without a branch: at a netfilter hook parse sets the bits on branches,
// one per pattern, and a branch on the number made the verifier keep a
// state for every combination of them (1k rules on 30 VLANs: over its
// million instructions).
func (c *compiler) ifaceNumber(f ir.Field) {
	b := c.b
	nums := c.ifaceNumbersOf(f)
	if !nums.known || nums.n == 0 {
		b.Emit(insn.Mov(asm.R1, 0))
		return
	}
	b.Emit(insn.Ld(asm.R1, asm.R6, pkt.Ifaces, asm.DWord))
	if nums.base > 0 {
		b.Emit(asm.RSh.Imm(asm.R1, int32(nums.base)))
	}
	b.Emit(
		asm.LoadImm(asm.R2, int64(uint64(1)<<nums.n-1), asm.DWord),
		asm.And.Reg(asm.R1, asm.R2),
		insn.Movr(asm.R2, asm.R1),
		asm.Sub.Imm(asm.R2, 1),
		asm.Xor.Reg(asm.R1, asm.R2),
		insn.Movr(asm.R2, asm.R1),
		asm.RSh.Imm(asm.R2, 1),
		asm.LoadImm(asm.R3, 0x5555555555555555, asm.DWord),
		asm.And.Reg(asm.R2, asm.R3),
		asm.Sub.Reg(asm.R1, asm.R2),
		asm.LoadImm(asm.R3, 0x3333333333333333, asm.DWord),
		insn.Movr(asm.R2, asm.R1),
		asm.And.Reg(asm.R2, asm.R3),
		asm.RSh.Imm(asm.R1, 2),
		asm.And.Reg(asm.R1, asm.R3),
		asm.Add.Reg(asm.R1, asm.R2),
		insn.Movr(asm.R2, asm.R1),
		asm.RSh.Imm(asm.R2, 4),
		asm.Add.Reg(asm.R1, asm.R2),
		asm.LoadImm(asm.R3, 0x0f0f0f0f0f0f0f0f, asm.DWord),
		asm.And.Reg(asm.R1, asm.R3),
		asm.LoadImm(asm.R3, 0x0101010101010101, asm.DWord),
		asm.Mul.Reg(asm.R1, asm.R3),
		asm.RSh.Imm(asm.R1, 56),
		asm.And.Imm(asm.R1, 63),
	)
}
