package codegen

import (
	"fmt"
	"net/netip"
	"slices"

	"github.com/cilium/ebpf/asm"

	"bpfwall/codegen/abi"
	"bpfwall/codegen/insn"
	"bpfwall/codegen/pkt"
	"bpfwall/codegen/uapi"
	"bpfwall/ir"
	"bpfwall/rules"
)

// An accelerator runs at xdp in front of netfilter mode (restore without
// -i), where the chains run at their own netfilter hooks. It drops early
// what the filter table's INPUT or FORWARD chain would drop, so that a
// flood dies before the stack, and passes everything else to the stack
// and to the chains, which decide it as they would without it. It must
// never drop a packet netfilter would not: a packet it cannot judge as
// the chain would, it passes.
//
// How it stays exact:
//   - Routing. bpf_fib_lookup, asked as ip_route_input asks (input
//     device, addresses, TOS, protocol, ports, length), tells a packet the
//     kernel will forward (FORWARD decides) from one it will deliver
//     locally or drop (INPUT decides: evaluating INPUT for a packet the
//     kernel drops anyway drops it too). Any other answer (blackhole,
//     unreachable, prohibit, a packet too big for the route, errors)
//     passes: the kernel answers those before the chains. Multicast
//     destinations, which multicast routing may forward, and IPv6
//     link-local addresses pass.
//   - What the chain sees. A packet from an interface the program was not
//     told the name of (one created since its swap), a fragment (netfilter sees the datagram), a frame with a
//     VLAN tag (netfilter sees it on the VLAN's device) and an IPv6 packet
//     whose extension headers cannot be walked pass before any rule, and
//     so does an IPv4 packet with options (a source route routes it past
//     its destination).
//   - Conntrack. Conntrack runs before the chains and changes the entry
//     of every packet that has one, even when a chain then drops it (TCP
//     state and windows, seen-reply, the timeout), and nat rewrites the
//     destination of some before routing (the reply of a masqueraded
//     connection): a packet with an entry passes, and so does one that is
//     neither TCP nor UDP, which the kfuncs cannot look up. A packet
//     without one is NEW or INVALID as nf_conntrack_in makes it (no entry
//     is left behind when a chain drops it); RELATED would take an
//     expectation, which only a conntrack helper makes, and a rule set
//     that assigns one gets no accelerator. A hotdrop is a pass here.
//   - Rules. Every match whose value at xdp is the one the chain reads is
//     kept: the parsed packet's fields, the input interface, the output
//     interface the route lookup gives (an interface created since the
//     swap, which the program was not told the name of, passes), the
//     conntrack state as the kfuncs give it. Any other match (the mark,
//     limits, recent and hashlimit tables, ...) is removed, and its rule
//     accepts: a packet the rest of the rule matches passes, one it does
//     not cannot match the original rule and goes on. A rule whose effect
//     the program does not reproduce (REJECT, LOG, a rule without a
//     target, which counts) accepts too. DROP, ACCEPT, jumps and RETURN
//     stay; the chain's policy ends it.
//   - Counters. It counts what it drops as netfilter would have: the rule
//     that drops it and the jumps, gotos and RETURNs on its way there
//     (accelDrop). What passes, the chains count. The rules it adds
//     itself count nothing.
//
// The caller vouches for the rest of the path: nothing before the chains
// (raw and mangle PREROUTING, nat PREROUTING, mangle INPUT and FORWARD)
// changes the packet, its mark or its conntrack entry; the interface has
// no upper devices and no master; nothing else at tc ingress changes
// packets.

// Accelerator returns the program an accelerator compiles (with
// Options.Accelerate), from the lowered filter INPUT and FORWARD chains of
// one family; either may be nil, when it has nothing to drop. It returns
// nil when neither does. Its entry chain sends a forwarded packet to
// FORWARD's copy and another to INPUT's; the rules keep the position and
// text of the rule each was made from.
func Accelerator(input, forward *ir.Program) (*ir.Program, error) {
	var fam rules.Family
	switch {
	case input != nil:
		fam = input.Family
	case forward != nil:
		fam = forward.Family
	default:
		return nil, nil
	}
	if input != nil && forward != nil && input.Family != forward.Family {
		return nil, fmt.Errorf("accelerator: INPUT is %s, FORWARD %s", input.Family, forward.Family)
	}
	out := &ir.Program{Family: fam, Table: "filter"}
	a := &accelBuilder{out: out, c: newCompiler(out, out, HookXDP, O0, false, false)}
	a.c.accel = true
	entry := &ir.Chain{Name: "ACCELERATE", Policy: rules.PolicyAccept}
	out.Chains = append(out.Chains, entry)
	for _, pass := range unroutedPrefixes(fam) {
		a.add(0, entry, &ir.Rule{Text: "the stack decides " + pass.String(), Matches: []ir.Match{pass.match()}, Action: ir.Accept{}}, accelFrom{})
	}
	if forward != nil {
		ci := a.program(forward, true)
		a.add(0, entry, &ir.Rule{Text: "forwarded: FORWARD", Matches: []ir.Match{ir.Route{Forward: true}}, Action: ir.Goto{Chain: ci}}, accelFrom{})
	}
	if input != nil {
		ci := a.program(input, false)
		a.add(0, entry, &ir.Rule{Text: "delivered: INPUT", Matches: []ir.Match{ir.Route{}}, Action: ir.Goto{Chain: ci}}, accelFrom{})
	}
	// Rule IDs go in chain order; until now a rule's ID was its place in
	// a.from.
	out.Rules = out.Rules[:0]
	from := make([]accelFrom, 0, len(a.from))
	for _, ch := range out.Chains {
		for _, r := range ch.Rules {
			from = append(from, a.from[r.ID])
			r.ID = len(out.Rules)
			out.Rules = append(out.Rules, r)
		}
	}
	if input != nil && input.Texts != nil || forward != nil && forward.Texts != nil {
		out.Texts = func(id int) string {
			if f := from[id]; f.p != nil {
				return f.p.TextOf(f.r)
			}
			return ""
		}
	}
	if err := ir.Verify(out); err != nil {
		return nil, fmt.Errorf("accelerator: %w", err)
	}
	return out, nil
}

// AcceleratorPolicy returns the name of the chain whose policy rule r of
// accelerator p is. A copied entry chain ends in its policy; the only
// other rule of a copy that no rule of the rule set was made into (one
// without a position) is FORWARD's TTL check, which comes first.
func AcceleratorPolicy(p *ir.Program, r *ir.Rule) (string, bool) {
	ch := p.Chains[r.Chain]
	if r.Chain == 0 || r.Pos != (rules.Pos{}) || ch.Rules[len(ch.Rules)-1] != r {
		return "", false
	}
	return ch.Name, true
}

// isKind reports whether m is of kind M.
func isKind[M ir.Match](m ir.Match) bool {
	_, ok := m.(M)
	return ok
}

// unrouted is an address range whose packets the accelerator leaves to
// the stack.
type unrouted struct {
	dir    ir.Dir
	prefix netip.Prefix
}

func (u unrouted) match() ir.Match {
	return ir.Addr{Dir: u.dir, Addr: u.prefix.Addr(), Mask: rules.MaskOf(u.prefix.Addr().BitLen(), u.prefix.Bits())}
}

func (u unrouted) String() string { return fmt.Sprintf("%s %s", u.dir, u.prefix) }

// unroutedPrefixes are the destinations multicast routing may forward,
// and in IPv6 the link-local addresses, which ip6_forward refuses before
// FORWARD and bpf_fib_lookup answers as not forwarded.
func unroutedPrefixes(fam rules.Family) []unrouted {
	if fam == rules.IPv6 {
		return []unrouted{
			{ir.Dst, netip.MustParsePrefix("ff00::/8")},
			{ir.Dst, netip.MustParsePrefix("fe80::/10")},
			{ir.Src, netip.MustParsePrefix("fe80::/10")},
		}
	}
	return []unrouted{{ir.Dst, netip.MustParsePrefix("224.0.0.0/4")}}
}

// accelBuilder copies chains into an accelerator's program.
type accelBuilder struct {
	out *ir.Program
	// from holds the rule each rule added was made from, in the order
	// they were added: the rule's text, when it was lowered without it
	// (ir.Program.Texts), is that rule's.
	from []accelFrom
	// c is a compiler for the accelerator, which says which matches xdp
	// tests as netfilter would.
	c *compiler
}

// accelFrom is rule r of program p; the zero value for a rule the
// accelerator makes.
type accelFrom struct {
	p *ir.Program
	r *ir.Rule
}

// add appends r, made from from, to chain ci (ch); Accelerator numbers
// the rules.
func (a *accelBuilder) add(ci int, ch *ir.Chain, r *ir.Rule, from accelFrom) {
	r.Chain, r.ID = ci, len(a.from)
	a.from = append(a.from, from)
	a.out.Rules = append(a.out.Rules, r)
	ch.Rules = append(ch.Rules, r)
}

// program copies p's chains, the entry chain as a user chain that ends in
// p's policy, and returns the entry chain's index.
func (a *accelBuilder) program(p *ir.Program, forward bool) int {
	base := len(a.out.Chains)
	for _, ch := range p.Chains {
		name := ch.Name
		if slices.ContainsFunc(a.out.Chains, func(c *ir.Chain) bool { return c.Name == name }) {
			// A user chain both INPUT and FORWARD reach has a copy in
			// each.
			name += "@" + p.Chains[0].Name
		}
		a.out.Chains = append(a.out.Chains, &ir.Chain{Name: name, Policy: rules.PolicyNone})
	}
	policy := ir.Action(ir.Accept{})
	if p.Chains[0].Policy == rules.PolicyDrop {
		policy = ir.Drop{}
	}
	for i, ch := range p.Chains {
		ci := base + i
		nc := a.out.Chains[ci]
		if i == 0 && forward {
			// ip_forward drops it before FORWARD, with an ICMP error.
			a.add(ci, nc, &ir.Rule{Text: "ttl expires before FORWARD", Matches: []ir.Match{ir.TTL{Op: ir.CmpLt, Value: 2}}, Action: ir.Accept{}}, accelFrom{})
		}
		for _, r := range ch.Rules {
			ms, exact := a.matches(r.Matches)
			act := ir.Action(ir.Accept{})
			if exact {
				act = a.action(r.Action, i == 0, policy, base)
			}
			a.add(ci, nc, &ir.Rule{Pos: r.Pos, Text: r.Text, Matches: ms, Action: act}, accelFrom{p, r})
		}
		if i == 0 {
			a.add(ci, nc, &ir.Rule{Text: "policy " + p.Chains[0].Policy.String(), Action: policy}, accelFrom{})
		}
	}
	return base
}

// matches returns the matches of ms that the accelerator tests as the
// chain would, and whether those are all of them.
func (a *accelBuilder) matches(ms []ir.Match) ([]ir.Match, bool) {
	out := make([]ir.Match, 0, len(ms))
	for _, m := range ms {
		if a.exact(m) {
			out = append(out, m)
		}
	}
	return out, len(out) == len(ms)
}

// exact reports whether the accelerator's test of m gives what the chain's
// would: xdp tests it, and it reads the parsed packet alone (or the
// conntrack state, whose unknowns pass), which the path before the chain
// leaves as it arrived.
func (a *accelBuilder) exact(m ir.Match) bool {
	code := codeOf(m)
	if code.unsupportedAt(a.c, m) != "" {
		return false
	}
	if ifc, ok := m.(ir.Iface); ok {
		return a.c.knowsIface(ifc.Dir)
	}
	switch {
	case isKind[ir.CTState](m), isKind[ir.L4Header](m), isKind[ir.Proto](m), isKind[ir.TCPOption](m):
		// They read what the chain reads; their hotdrops (a state the
		// program cannot know, a header cut short, extension headers
		// that cannot be walked) pass here.
		return true
	case isKind[ir.Route](m):
		return false
	}
	// Pure kinds read the parsed packet alone; the others keep state, or
	// read what xdp does not have. (Not a switch over every kind: a new
	// kind is judged by its purity too, without a case here.)
	return code.pureMatch(a.c, m)
}

// action is what a rule of a copied chain does, all its matches kept;
// entry says the rule is of the copied entry chain, whose RETURN is its
// policy; base is the index of the copy's first chain.
func (a *accelBuilder) action(act ir.Action, entry bool, policy ir.Action, base int) ir.Action {
	switch act := act.(type) {
	case ir.Drop:
		return act
	case ir.Return:
		if entry {
			return policy
		}
		return act
	case ir.Jump:
		return ir.Jump{Chain: base + act.Chain}
	case ir.Goto:
		return ir.Goto{Chain: base + act.Chain}
	case ir.Accept, ir.Reject, ir.Log, ir.None, ir.TProxy:
	}
	return ir.Accept{}
}

// -- code --

// symRoute is the function that asks the routing table.
const symRoute = "accelerator_route"

// Return values of symRoute.
const (
	routePass    = 0 // the stack decides
	routeLocal   = 1
	routeForward = 2
)

// bpf_fib_lookup's flags and answers (bpf.h).
const (
	fibSkipNeigh   = 1 << 2 // BPF_FIB_LOOKUP_SKIP_NEIGH
	fibNotFwded    = 4      // BPF_FIB_LKUP_RET_NOT_FWDED
	fibFwdDisabled = 5      // BPF_FIB_LKUP_RET_FWD_DISABLED
	fibNoNeigh     = 7      // BPF_FIB_LKUP_RET_NO_NEIGH
	fibTOS         = 12     // tos (IPv4), flowinfo (IPv6)
	fibSport       = 2
	fibDport       = 4
)

// -route forward / route local: pkt.FlagForward, which the accelerator's
// route lookup set.
var routeCode = &kind[ir.Route]{
	emit: func(c *compiler, _ *ir.Rule, m ir.Route, next, _ string) bool {
		c.b.Emit(insn.Ld(asm.R1, asm.R6, pkt.Flags, asm.Byte))
		c.flagTest(pkt.FlagForward, !m.Forward, next)
		return false
	},
	hooks: func(c *compiler, _ ir.Route) string {
		if !c.accel {
			return "route match (an accelerator's own)"
		}
		return ""
	},
	lookup: refuse[ir.Route]("route match"),
	pure:   always[ir.Route],
}

// flagTest emits "bit of pkt.Flags (in r1) is set" (clear, with neg),
// failing to next.
func (c *compiler) flagTest(bit int32, neg bool, next string) {
	if neg {
		c.b.Emit(asm.JSet.Imm(asm.R1, bit, next))
		return
	}
	c.b.Emit(asm.And.Imm(asm.R1, bit), asm.JEq.Imm(asm.R1, 0, next))
}

// accelGate emits main's start in an accelerator: the packets it leaves
// to the stack, and the route lookup. r8 is 0.
func (c *compiler) accelGate() {
	b := c.b
	base := c.mainPkt()
	b.Note("accelerator: what the chains would not see as xdp does passes")
	b.Emit(
		insn.Mov(asm.R7, int32(abi.Unaccelerated)),
		insn.Mov(asm.R9, c.hook.pass()),
		insn.Ld(asm.R1, asm.R10, base+pkt.Flags, asm.Byte),
		asm.JSet.Imm(asm.R1, pkt.FlagVLAN|pkt.FlagBadExtHeaders|pkt.FlagFragment|pkt.FlagUnnamedIface, symMainEnd),
	)
	tracked := b.Fresh("tcp_or_udp")
	b.Emit(
		insn.Ld(asm.R1, asm.R10, base+pkt.Proto, asm.Byte),
		asm.JEq.Imm(asm.R1, uapi.ProtoTCP, tracked),
		asm.JNE.Imm(asm.R1, uapi.ProtoUDP, symMainEnd),
	)
	b.Mark(tracked)
	if c.p.Family == rules.IPv4 {
		// IP options: a source route (accept_source_route) routes the
		// packet past its destination.
		b.Emit(
			insn.Ld(asm.R1, asm.R10, base+pkt.L4Off, asm.Half),
			asm.JNE.Imm(asm.R1, ethHeaderLen+20, symMainEnd),
		)
	}
	b.Emit(
		insn.Movr(asm.R1, asm.R6),
		insn.Movr(asm.R2, asm.R10),
		asm.Add.Imm(asm.R2, int32(base)),
		insn.Call(symRoute),
		insn.Mov(asm.R8, 0),
		asm.JEq.Imm(asm.R0, routePass, symMainEnd),
	)
}

// routeFunction emits symRoute(ctx, pkt): bpf_fib_lookup for the parsed
// packet as it came in, as ip_route_input looks it up. It sets
// pkt.FlagForward for a packet routing forwards and returns routeForward,
// routeLocal for one it delivers or drops without forwarding, and
// routePass for the rest.
func (c *compiler) routeFunction() {
	b := c.b
	b.Function(c.funcCtxPkt(symRoute), "route of the packet: forwarded, delivered, or the stack's to decide (bpf_fib_lookup)")
	const fib = -uapi.FibSize
	pass := b.Fresh("route_pass")
	b.Emit(
		insn.Movr(asm.R6, asm.R1),
		insn.Movr(asm.R7, asm.R2),
		asm.JEq.Imm(asm.R7, 0, pass),
	)
	for off := int16(fib); off < 0; off += 8 {
		b.Emit(insn.StImm(asm.R10, off, 0, asm.DWord))
	}
	family, words := int32(uapi.AFInet), int16(1)
	if c.p.Family == rules.IPv6 {
		family, words = uapi.AFInet6, 4
	}
	b.Emit(
		insn.StImm(asm.R10, fib+uapi.FibFamily, family, asm.Byte),
		insn.Ld(asm.R1, asm.R7, pkt.Proto, asm.Byte),
		insn.St(asm.R10, fib+uapi.FibProto, asm.R1, asm.Byte),
		insn.Ld(asm.R1, asm.R7, pkt.Sport, asm.Word),
		insn.Ntoh(asm.R1, asm.Half),
		insn.St(asm.R10, fib+fibSport, asm.R1, asm.Half),
		insn.Ld(asm.R1, asm.R7, pkt.Dport, asm.Word),
		insn.Ntoh(asm.R1, asm.Half),
		insn.St(asm.R10, fib+fibDport, asm.R1, asm.Half),
		// tot_len, in host order: the MTU check.
		insn.Ld(asm.R1, asm.R7, pkt.Length, asm.Word),
		insn.St(asm.R10, fib+uapi.FibMTU, asm.R1, asm.Half),
		c.ifindex(asm.R1),
		insn.St(asm.R10, fib+uapi.FibIfindex, asm.R1, asm.Word),
		insn.Ld(asm.R1, asm.R7, pkt.DSCP, asm.Byte),
	)
	if family == uapi.AFInet {
		b.Emit(
			asm.LSh.Imm(asm.R1, 2),
			insn.St(asm.R10, fib+fibTOS, asm.R1, asm.Byte),
		)
	} else {
		// flowinfo: the traffic class; the flow label only picks among
		// equal routes.
		b.Emit(
			asm.LSh.Imm(asm.R1, 22),
			insn.Ntoh(asm.R1, asm.Word),
			insn.St(asm.R10, fib+fibTOS, asm.R1, asm.Word),
		)
	}
	for i := range words {
		b.Emit(
			insn.Ld(asm.R1, asm.R7, pkt.Src+4*i, asm.Word),
			insn.Ntoh(asm.R1, asm.Word),
			insn.St(asm.R10, fib+uapi.FibSrc+4*i, asm.R1, asm.Word),
			insn.Ld(asm.R1, asm.R7, pkt.Dst+4*i, asm.Word),
			insn.Ntoh(asm.R1, asm.Word),
			insn.St(asm.R10, fib+uapi.FibDst+4*i, asm.R1, asm.Word),
		)
	}
	local, forward := b.Fresh("route_local"), b.Fresh("route_forward")
	b.Emit(
		insn.Movr(asm.R1, asm.R6),
		insn.Movr(asm.R2, asm.R10),
		asm.Add.Imm(asm.R2, fib),
		insn.Mov(asm.R3, uapi.FibSize),
		insn.Mov(asm.R4, fibSkipNeigh),
		asm.FnFibLookup.Call(),
		asm.JEq.Imm(asm.R0, uapi.FibLookupSuccess, forward),
		asm.JEq.Imm(asm.R0, fibNoNeigh, forward),
		asm.JEq.Imm(asm.R0, fibNotFwded, local),
		asm.JEq.Imm(asm.R0, fibFwdDisabled, local),
	)
	b.Mark(pass)
	b.Emit(
		insn.Mov(asm.R0, routePass),
		asm.Return(),
	)
	b.Mark(local)
	b.Emit(insn.Mov(asm.R0, routeLocal), asm.Return())
	b.Mark(forward)
	b.Emit(
		insn.Ld(asm.R1, asm.R10, fib+uapi.FibIfindex, asm.Word),
		insn.St(asm.R7, pkt.OutIfindex, asm.R1, asm.Word),
		insn.Ld(asm.R1, asm.R7, pkt.Flags, asm.Byte),
		asm.Or.Imm(asm.R1, pkt.FlagForward),
		insn.St(asm.R7, pkt.Flags, asm.R1, asm.Byte),
		insn.Mov(asm.R0, routeForward),
		asm.Return(),
	)
}

// An accelerator counts a packet it drops as netfilter would have: the
// rule that drops it and every rule of its path whose counter netfilter
// increments on the way, the jumps, gotos and RETURNs taken (the rules
// that accept do not drop, so none of them is on the path). Until the
// verdict it cannot know whether the chains will count them, so it notes
// them in the parsed packet (pktPath) and counts them once it drops; a
// path too long to note passes, to be counted by the chains.
const (
	accelPathLen  = 15
	accelPathSize = 4 + 4*accelPathLen
)

// accelPush notes rule id on the packet's path; r6 points to the parsed
// packet.
func (c *compiler) accelPush(id int) {
	c.accelNote(asm.R6, c.pktPath(), func(at asm.Register, off int16) asm.Instruction { return insn.StImm(at, off, int32(id), asm.Word) })
}

// accelPushReg notes the rule whose ID is in reg on the packet's path.
func (c *compiler) accelPushReg(reg asm.Register) {
	c.accelNote(asm.R6, c.pktPath(), func(at asm.Register, off int16) asm.Instruction { return insn.St(at, off, reg, asm.Word) })
}

// accelNote emits the store of a rule ID at the next free place of the
// path at base+path, when it has one; the path's count goes up either
// way, so that accelDrop knows a path too long to note.
func (c *compiler) accelNote(base asm.Register, path int16, store func(at asm.Register, off int16) asm.Instruction) {
	b := c.b
	full := b.Fresh("path_full")
	b.Emit(
		insn.Ld(asm.R1, base, path, asm.Word),
		asm.JGE.Imm(asm.R1, accelPathLen, full),
		insn.Movr(asm.R2, asm.R1),
		asm.LSh.Imm(asm.R2, 2),
		asm.Add.Reg(asm.R2, base),
		store(asm.R2, path+4),
	)
	b.Mark(full)
	b.Emit(
		asm.Add.Imm(asm.R1, 1),
		insn.St(base, path, asm.R1, asm.Word),
	)
}

// accelDrop emits main's drop in an accelerator, r8 the rule that drops:
// it counts the rule and its path, and the drop, or passes the packet
// when the path was too long to note.
func (c *compiler) accelDrop() {
	b := c.b
	path := c.mainPkt() + c.pktPath()
	unaccelerated := b.Fresh("path_too_long")
	c.accelNote(asm.R10, path, func(at asm.Register, off int16) asm.Instruction { return insn.St(at, off, asm.R8, asm.Word) })
	b.Emit(
		insn.Ld(asm.R1, asm.R10, path, asm.Word),
		asm.JGT.Imm(asm.R1, accelPathLen, unaccelerated),
	)
	// The path's count is read once, and the rules counted from the
	// last noted to the first: its u32 is then the counters' key.
	counted := b.Fresh("path_counted")
	from := make([]string, accelPathLen)
	for i := range from {
		from[i] = b.Fresh("path_count")
	}
	b.Emit(insn.Ld(asm.R1, asm.R10, path, asm.Word))
	for n := accelPathLen; n >= 1; n-- {
		b.Emit(asm.JEq.Imm(asm.R1, int32(n), from[n-1]))
	}
	b.Emit(insn.Ja(counted)) // an empty path
	for i := accelPathLen - 1; i >= 0; i-- {
		b.Mark(from[i])
		entry := path + 4 + int16(4*i)
		c.countIDAt(func() { b.Emit(insn.Ld(asm.R1, asm.R10, entry, asm.Word)) }, path, asm.R10, c.mainPkt()+pkt.Bytes)
	}
	// The policy's counter, which an accelerator's entry chain never
	// reaches, counts the packets it drops. (mainKey may share its bytes
	// with the path.)
	b.Mark(counted)
	c.count(len(c.p.Rules), asm.R10, c.mainPkt()+pkt.Bytes, c.mainKey())
	b.Emit(insn.Ja(symMainEnd))
	b.Mark(unaccelerated)
	b.Emit(
		insn.Mov(asm.R7, int32(abi.Unaccelerated)),
		insn.Mov(asm.R9, c.hook.pass()),
		insn.Ja(symMainEnd),
	)
}
