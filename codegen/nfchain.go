package codegen

import (
	"encoding/binary"
	"fmt"

	"github.com/cilium/ebpf/asm"

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
	hookStateOut = fieldRef{"nf_hook_state", "out"}
	netdevName0  = fieldRef{"net_device", "name"}
	netdevName8  = fieldRef{"net_device", "name[8]"}
)

// ifNameSize is IFNAMSIZ.
const ifNameSize = 16

// netfilterIfaces sets the packet's interface bits (pktIfaces) from the
// names of the hook state's devices: bit i when the device of pattern
// i's direction matches it. A device netfilter does not give the chain
// (NULL) has the empty name, which no collected pattern matches ("+" is
// constant). r6 is the context, r7 the packet; r8 stays 0.
func (c *compiler) netfilterIfaces() {
	b := c.b
	b.note("-i and -o: the devices' names against the patterns, as ifname_compare_aligned")
	b.emit(mov(asm.R5, 0))
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
		none := b.fresh("no_" + dev + "_dev")
		b.emit(
			ldField(asm.R1, asm.R6, nfCtxState, asm.DWord),
			ldField(asm.R1, asm.R1, field, asm.DWord),
			asm.JEq.Imm(asm.R1, 0, none),
			ldField(asm.R2, asm.R1, netdevName0, asm.DWord),
			ldField(asm.R3, asm.R1, netdevName8, asm.DWord),
		)
		for _, i := range pats {
			c.ifaceNameTest(i, c.ifaces[i])
		}
		b.mark(none)
	}
	b.emit(st(asm.R7, pktIfaces, asm.R5, asm.DWord))
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
	no := b.fresh("iface_no_match")
	for w, reg := range []asm.Register{asm.R2, asm.R3} {
		m := binary.NativeEndian.Uint64(mask[8*w:])
		if m == 0 {
			continue
		}
		v := binary.NativeEndian.Uint64(val[8*w:])
		b.emit(movr(asm.R0, reg))
		if m != ^uint64(0) {
			b.emit(asm.LoadImm(asm.R1, int64(m), asm.DWord), asm.And.Reg(asm.R0, asm.R1))
		}
		b.emit(asm.LoadImm(asm.R1, int64(v), asm.DWord), asm.JNE.Reg(asm.R0, asm.R1, no))
	}
	b.emit(asm.LoadImm(asm.R1, int64(1)<<i, asm.DWord), asm.Or.Reg(asm.R5, asm.R1))
	b.mark(no)
}

// checkNetfilterMatch names the match m that a chain at its own
// netfilter hook cannot express; "" when it can.
func (c *compiler) checkNetfilterMatch(m ir.Match) string {
	if c.hook != HookNetfilter {
		return ""
	}
	if _, ok := m.(ir.SrcMAC); ok {
		return "mac match"
	}
	return ""
}

// netfilterLog reports why the LOG of a chain at its own netfilter hook
// is not supported; "" when it is.
func (c *compiler) netfilterLog(chain string) string {
	if c.hook != HookNetfilter || chain == "INPUT" || chain == "PREROUTING" {
		return ""
	}
	return fmt.Sprintf("LOG in chain %s is not supported on netfilter: the line names the output interface, which bpfwall's LOG records do not carry yet", chain)
}
