package codegen

import (
	"fmt"
	"slices"
	"strconv"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/btf"

	"bpfwall/codegen/abi"
	"bpfwall/codegen/classify"
	"bpfwall/codegen/conntrack"
	"bpfwall/codegen/insn"
	"bpfwall/codegen/pkt"
	"bpfwall/codegen/sklookup"
	"bpfwall/ir"
	"bpfwall/model"
	"bpfwall/rules"
)

// compiler holds the state of one compilation.
type compiler struct {
	p *ir.Program
	// orig is p before the optimizer: what ir.Eval evaluates, and what
	// decides how much of a first fragment the program needs.
	orig *ir.Program
	hook Hook
	// ingress is, for the netfilter stage (HookStage), the hook of
	// the program whose packets it decides.
	ingress Hook
	// dynptr is the stack slot of the bpf_dynptr over the packet in the
	// function being emitted (netfilter stage).
	dynptr int16
	b      *insn.Builder // where code goes now
	errs   rules.ErrorList

	// ifaces are the interface patterns looked up in abi.IfacesMap, indexed
	// by their bit.
	ifaces []ir.Iface
	// ifaceNums place the numbered names of -i and -o among ifaces
	// (numberIfaces).
	ifaceNums [2]ifaceNumbers
	// readsDSCP: a rule tests the DSCP, which parse then stores.
	readsDSCP bool
	// readsOwner: a rule tests the packet's socket, which parse reads.
	readsOwner bool
	// readsMAC: a rule tests the source MAC address.
	readsMAC bool
	// logUID: a LOG rule has --log-uid, and the program's records carry
	// the socket's IDs (logRecordSize).
	logUID bool
	// optKinds are the TCP option kinds rules test, indexed by their bit
	// in pkt.TCPOpts.
	optKinds []uint8
	// segments are the symbols of each chain's functions, in order.
	segments [][]string
	// inlined marks the chains emitted at their one call site instead of
	// as functions (see inlineChains); ret is where the RETURN, or the
	// end, of the inlined chain being emitted goes ("" in a function).
	inlined []bool
	ret     string

	level     Level
	trace     bool        // Options.Trace
	accel     bool        // Options.Accelerate: an accelerator (accelerate.go)
	log       bool        // the program has LOG rules: chain functions take the context
	ct        bool        // the rules test the conntrack state
	hasRecent bool        // the rules have recent matches: see pktRecentNow
	pktType   *btf.Struct // see btfPkt
	// maps are the classifier's tables and the address sets' tries, in
	// the order the code first uses them; sets are the sets' names, the
	// trie setN holding sets[N].
	maps []*ebpf.MapSpec
	sets []string
	// cls plans the classified segments (-O1).
	cls *classify.Planner
	// rejects are the --reject-with types of the REJECT rules, indexed by
	// their reject function.
	rejects []string
	// inlineParse: main holds the parser's code (parseInlined), unless
	// callParse says it may not (see Compile).
	inlineParse, callParse bool
	// entry is the entry chain's code when main holds it (inlineEntry).
	entry asm.Instructions
}

// newCompiler returns the compiler of p, optimized from orig, for hook.
func newCompiler(p, orig *ir.Program, hook Hook, level Level, forceLookups, trace bool) *compiler {
	c := &compiler{p: p, orig: orig, hook: hook, b: insn.New(), level: level, trace: trace}
	c.cls = &classify.Planner{Program: p, Stage: hook == HookStage, ForceLookups: forceLookups, Pure: c.pureMatch}
	return c
}

// Symbols of the functions.
const (
	symParse     = "parse"
	symParseDone = "parse_done" // main's code after the parser, when it holds it
	symEntryDone = "entry_done" // main's code after the entry chain, when it holds it
	symExtHdrs   = "walk_ext_hdrs"
	symHopByHop  = "parse_hop_by_hop"
	symTCPOpts   = "walk_tcp_options"
	symMainEnd   = "decide"
	symMainChain = "run_chains"
)

// A chain function returns codeContinue when the packet reaches its end,
// codeReturn for RETURN, and otherwise rule<<codeShift|kind for a verdict.
// A long chain is split into segments, functions the callers call in
// turn: the verifier keeps a pending state for every conditional jump of
// a function until the path it follows ends, at most 8192 of them.
const (
	codeContinue = 0
	codeReturn   = 1 << codeShift
	codeShift    = 2
	codeMask     = 3
	codeAccept   = 1
	codeDrop     = 2
	codeHotdrop  = 3
)

// A classifier table's value holds the chain function's code for the
// first three kinds: this fails to compile if they differ.
const _ = -uint(classify.KindAccept ^ codeAccept | classify.KindDrop ^ codeDrop | classify.KindHotdrop ^ codeHotdrop)

// maxSegmentBranches is how many conditional jumps a segment may have;
// tests lower it.
var maxSegmentBranches = 4000

// chainSym is the symbol of segment k of chain ci's function.
func chainSym(ci, k int) string {
	if k == 0 {
		return fmt.Sprintf("chain%d", ci)
	}
	return fmt.Sprintf("chain%d_%d", ci, k)
}

// ruleLabel is the label of a rule's first instruction.
func ruleLabel(r *ir.Rule) string { return "rule" + strconv.Itoa(r.ID) }

// program emits the whole program: main, the chain functions, parse and
// its loop callbacks. Chains are emitted called ones first, so that every
// call site knows how many segments it calls, and laid out in order.
func (c *compiler) program() (_ asm.Instructions, err error) {
	if err := c.collect(); err != nil {
		return nil, err
	}
	root := c.b
	c.segments = make([][]string, len(c.p.Chains))
	if c.inlined, err = c.inlineChains(); err != nil {
		return nil, err
	}
	chains := make([]*insn.Builder, len(c.p.Chains))
	for _, ci := range c.calleesFirst() {
		if c.inlined[ci] {
			continue
		}
		chains[ci] = root.Sub()
		c.b = chains[ci]
		c.chain(ci)
	}
	c.b = root
	if c.entry = c.inlineEntry(chains[0], symEntryDone); c.entry != nil {
		chains[0] = nil
	}
	c.main()
	for _, cb := range chains {
		if cb != nil {
			root.Splice(cb)
		}
	}
	if c.hook == HookSkLookup {
		c.parseLookup()
	} else {
		c.parse()
	}
	if c.ct {
		c.ctState()
	}
	if c.accel {
		c.routeFunction()
	}
	c.rejectFunctions()
	if len(c.hashTables()) > 0 {
		c.hashSweep()
	}
	return root.Finish()
}

// calleesFirst orders the chains so that every chain comes after the
// chains it jumps to.
func (c *compiler) calleesFirst() []int {
	done := make([]bool, len(c.p.Chains))
	var order []int
	var visit func(ci int)
	visit = func(ci int) {
		if done[ci] {
			return
		}
		done[ci] = true
		for _, r := range c.p.Chains[ci].Rules {
			if to, ok := ir.JumpTarget(r.Action); ok {
				visit(to)
			}
		}
		order = append(order, ci)
	}
	for ci := range c.p.Chains {
		visit(ci)
	}
	return order
}

// errorAtFirst returns the error format says, at the position of the
// first rule with a match that is: a rules.Error, which restore
// delegates the chain for.
func (c *compiler) errorAtFirst(is func(ir.Match) bool, format string, args ...any) error {
	for _, r := range c.p.Rules {
		if slices.ContainsFunc(r.Matches, is) {
			return rules.Errorf(r.Pos, format, args...)
		}
	}
	return fmt.Errorf(format, args...)
}

// collect numbers the interface patterns and TCP option kinds the rules
// test.
func (c *compiler) collect() error {
	// An accelerator looks every packet up: it passes those with an
	// entry (conntrack.Target.EntryUnknown).
	c.ct = c.orig.TestsConntrack() || c.accel
	_, slots := c.recentTables()
	c.hasRecent = slots > 0
	c.numberIfaces()
	for _, r := range c.p.Rules {
		for _, m := range r.Matches {
			codeOf(m).collectMatch(c, m)
		}
	}
	c.logUID = c.logsUID()
	if c.logUID && (c.hook == HookNetfilter || c.hook == HookTCEgress) {
		c.readsOwner = true // LOG --log-uid prints the socket's fsuid and fsgid
	}
	if c.readsOwner && c.readsMAC {
		// They share the packet's fields. Only LOG --log-uid reads the
		// owner where xt_mac runs: at the first mac match.
		for _, r := range c.p.Rules {
			if slices.ContainsFunc(r.Matches, isKind[ir.SrcMAC]) {
				return rules.Errorf(r.Pos, "the rules test the source MAC address and the owner (LOG --log-uid), which bpfwall does not compile in one chain")
			}
		}
		return fmt.Errorf("the rules test the source MAC address and the owner, which bpfwall does not compile in one chain")
	}
	if len(c.ifaces) > 64 {
		// At the first rule that tests a pattern past the 64th: restore
		// delegates the chain, as it does a rule it cannot compile.
		return c.errorAtFirst(func(m ir.Match) bool {
			im, ok := m.(ir.Iface)
			return ok && c.ifaceBit(im) >= 64
		}, "the rules test %d interface names, more than the 64 bpfwall supports", len(c.ifaces))
	}
	if c.hook != HookStage {
		c.collectRejects() // the stage drops: stageRejectWarnings
	}
	c.inlineParse = (c.hook == HookXDP || c.hook.tc() || c.hook == HookNetfilter) && !c.callParse
	if len(c.optKinds) > 64 {
		return c.errorAtFirst(func(m ir.Match) bool {
			om, ok := m.(ir.TCPOption)
			return ok && slices.Index(c.optKinds, om.Kind) >= 64
		}, "the rules test %d TCP option kinds, more than the 64 bpfwall supports", len(c.optKinds))
	}
	if m := c.limitsMap(); m != nil {
		c.maps = append(c.maps, m)
	}
	c.maps = append(c.maps, c.hashLimitMaps()...)
	c.maps = append(c.maps, c.recentMaps()...)
	return nil
}

// presentIface is the interface the hook knows: the device the program
// runs on. The other one is empty.
func (c *compiler) presentIface() ir.IfaceDir {
	if c.hook == HookTCEgress {
		return ir.IfaceOut
	}
	return ir.IfaceIn
}

// knowsIface reports whether the program knows the interface of
// direction dir. At a chain's own netfilter hook it knows what netfilter
// knows there: the input device before routing and at INPUT, the output
// device at OUTPUT and POSTROUTING, both at FORWARD; elsewhere the device
// the program runs on.
func (c *compiler) knowsIface(dir ir.IfaceDir) bool {
	if c.accel {
		// The route lookup gives a forwarded packet's output device.
		return true
	}
	if c.hook != HookNetfilter {
		return dir == c.presentIface()
	}
	in, out := netfilterDevices(c.p.Chains[0].Name)
	if dir == ir.IfaceIn {
		return in
	}
	return out
}

// netfilterDevices reports which devices netfilter gives the chains of
// a builtin chain's hook.
func netfilterDevices(chain string) (in, out bool) {
	switch chain {
	case "PREROUTING", "INPUT":
		return true, false
	case "FORWARD":
		return true, true
	}
	return false, true // OUTPUT, POSTROUTING
}

// ifaceKey is the pattern of m that Program.Ifaces holds: its name and
// whether it is a prefix, and at a chain's netfilter hook, which knows
// both devices of FORWARD, its direction.
// main emits the program's entry point: parse the packet, run the entry
// chain, count the policy, record the decision and return the verdict.
//
//	r6 ctx, r7 decision kind, r8 deciding rule, r9 return code
func (c *compiler) main() {
	if c.hook == HookStage {
		c.nfMain()
		return
	}
	b := c.b
	b.Function(c.funcMain(), "parse the packet, run chain %s, record the decision", c.p.Chains[0].Name)
	b.Emit(insn.Movr(asm.R6, asm.R1))
	for off := c.mainPkt(); off < 0; off += 8 {
		b.Emit(insn.StImm(asm.R10, off, 0, asm.DWord))
	}
	if c.parseInlined() {
		b.Emit(insn.Movr(asm.R7, asm.R10), asm.Add.Imm(asm.R7, int32(c.mainPkt())))
		c.parseBody()
		b.Mark(symParseDone)
		// They share their bytes with parse's slots: see mainPkt. The
		// verifier lets no slot of a dynptr be read as memory until it
		// is overwritten.
		if c.hook.nf() {
			b.Emit(
				insn.StImm(asm.R10, parseDynptr, 0, asm.DWord),
				insn.StImm(asm.R10, parseDynptr+8, 0, asm.DWord),
			)
		}
		if c.hasRecent {
			b.Emit(insn.StImm(asm.R10, c.mainPkt()+c.pktRecentNow(), 0, asm.DWord))
		}
		if c.accel {
			b.Emit(insn.StImm(asm.R10, c.mainPkt()+c.pktPath(), 0, asm.Word))
		}
	} else {
		b.Emit(
			insn.Movr(asm.R1, asm.R6),
			insn.Movr(asm.R2, asm.R10),
			asm.Add.Imm(asm.R2, int32(c.mainPkt())),
			insn.Call(symParse),
		)
	}
	b.Emit(
		insn.Mov(asm.R8, 0),
		asm.JEq.Imm(asm.R0, parseOK, symMainChain),
		insn.Mov(asm.R7, int32(abi.SkippedNotIP)),
		insn.Mov(asm.R9, c.hook.pass()),
		asm.JEq.Imm(asm.R0, parseNotIP, symMainEnd),
		insn.Mov(asm.R7, int32(abi.SkippedInvalid)),
		insn.Mov(asm.R9, c.hook.drop()),
		insn.Ja(symMainEnd),
	)
	b.Mark(symMainChain)
	c.mainChains()
}

// mainChains emits the rest of main, for a parsed packet: the fragment
// gate, the conntrack state, the entry chain, the policy and the verdict.
// r8 is 0.
func (c *compiler) mainChains() {
	b := c.b
	if c.accel {
		c.accelGate()
	}
	if c.p.Forward && c.hook != HookSkLookup && c.hook != HookNetfilter {
		b.Note("ip_forward drops a packet with TTL (hop limit) 1 or less before FORWARD: it passes, to be dropped there")
		b.Emit(
			insn.Ld(asm.R1, asm.R10, c.mainPkt()+pkt.TTL, asm.Byte),
			insn.Mov(asm.R7, int32(abi.TTLExpired)),
			insn.Mov(asm.R9, c.hook.pass()),
			asm.JLE.Imm(asm.R1, 1, symMainEnd),
		)
	}
	if c.p.Reassembled && c.hook != HookNetfilter {
		// (At a chain's own hook the program sees the packet netfilter
		// sees: a reassembled datagram where the kernel reassembles.)
		c.fragmentGate()
	} else if c.defers() {
		// Without the gate, every fragment is of class U.
		b.Emit(
			insn.Ld(asm.R1, asm.R10, c.mainPkt()+pkt.Flags, asm.Byte),
			asm.JSet.Imm(asm.R1, pkt.FlagFragment, symDeferred),
		)
	}
	if c.defers() {
		c.deferClassU()
	}
	c.rejectForgetCall()
	if c.ct {
		b.Emit(
			insn.Movr(asm.R1, asm.R6),
			insn.Movr(asm.R2, asm.R10),
			asm.Add.Imm(asm.R2, int32(c.mainPkt())),
			insn.Call(conntrack.Sym),
			insn.St(asm.R10, c.mainPkt()+pkt.CTState, asm.R0, asm.Byte),
		)
		if c.accel {
			b.Emit(
				insn.Mov(asm.R7, int32(abi.Unaccelerated)),
				insn.Mov(asm.R9, c.hook.pass()),
				asm.JSet.Imm(asm.R0, int32(model.ConnUnknown), symMainEnd),
			)
		}
	}
	if c.entry != nil {
		b.Note("chain %s, in main", c.p.Chains[0].Name)
		// LOG reads the context at chainCtx, and REJECT wants it back
		// in r6: the chain's code, like a chain function's, keeps r6
		// for the packet.
		if c.log || len(c.rejects) > 0 {
			b.Emit(insn.St(asm.R10, chainCtx, asm.R6, asm.DWord))
		}
		b.Emit(insn.Movr(asm.R6, asm.R10), asm.Add.Imm(asm.R6, int32(c.mainPkt())))
		b.Emit(c.entry...)
		b.Mark(symEntryDone)
		if len(c.rejects) > 0 {
			b.Emit(insn.Ld(asm.R6, asm.R10, chainCtx, asm.DWord))
		}
		b.Emit(
			asm.JEq.Imm(asm.R0, codeContinue, "entry_policy"),
			asm.JNE.Imm(asm.R0, codeReturn, "ruled"),
		)
		// The policy's decision names no rule: r8 is 0 again.
		b.Mark("entry_policy")
		b.Emit(insn.Mov(asm.R8, 0))
	} else {
		c.callChain(0, asm.R10, int32(c.mainPkt()), "policy", "ruled")
	}
	b.Mark("policy")
	b.Note("policy %s of chain %s", c.p.Chains[0].Policy, c.p.Chains[0].Name)
	if !c.accel { // whose entry chain's policy passes
		c.count(len(c.p.Rules), asm.R10, c.mainPkt()+pkt.Bytes, c.mainKey())
	}
	policy, decided := c.hook.pass(), symMainEnd
	if c.p.Chains[0].Policy == rules.PolicyDrop {
		policy = c.hook.drop()
	} else if c.hook == HookSkLookup {
		decided = sklookup.SymSteerStatement
	}
	b.Emit(
		insn.Mov(asm.R7, int32(abi.DecidedByPolicy)),
		insn.Mov(asm.R9, policy),
		insn.Ja(decided),
	)
	b.Mark("ruled")
	accepted := symMainEnd
	if c.hook == HookSkLookup {
		accepted = sklookup.SymSteer // an ACCEPT, or a TPROXY to steer
	}
	b.Emit(
		insn.Movr(asm.R8, asm.R0),
		asm.RSh.Imm(asm.R8, codeShift),
		asm.And.Imm(asm.R0, codeMask),
		insn.Mov(asm.R7, int32(abi.DecidedByRule)),
		insn.Mov(asm.R9, c.hook.pass()),
		asm.JEq.Imm(asm.R0, codeAccept, accepted),
		insn.Mov(asm.R9, c.hook.drop()),
	)
	switch {
	case len(c.rejects) > 0:
		b.Emit(asm.JEq.Imm(asm.R0, codeDrop, "ruled_drop"))
	case c.accel:
		b.Emit(asm.JEq.Imm(asm.R0, codeDrop, "accel_drop"))
	default:
		b.Emit(asm.JEq.Imm(asm.R0, codeDrop, symMainEnd))
	}
	b.Emit(insn.Mov(asm.R7, int32(abi.Hotdrop)))
	if c.accel {
		// A state the program could not determine: netfilter decides.
		b.Emit(insn.Mov(asm.R9, c.hook.pass()))
	}
	if len(c.rejects) > 0 {
		b.Emit(insn.Ja(symMainEnd))
		c.rejectDecided()
	}
	if c.accel {
		b.Emit(insn.Ja(symMainEnd))
		b.Mark("accel_drop")
		c.accelDrop()
	}
	b.Mark(symMainEnd)
	if c.trace {
		b.Emit(
			insn.StImm(asm.R10, c.mainKey(), 0, asm.Word),
			insn.Movr(asm.R2, asm.R10),
			asm.Add.Imm(asm.R2, int32(c.mainKey())),
			insn.MapRef(asm.R1, abi.DecisionMap),
			asm.FnMapLookupElem.Call(),
			asm.JEq.Imm(asm.R0, 0, "verdict"),
			insn.St(asm.R0, 0, asm.R8, asm.Word),
			insn.St(asm.R0, 4, asm.R7, asm.Word),
		)
	}
	b.Mark("verdict")
	b.Emit(
		insn.Movr(asm.R0, asm.R9),
		asm.Return(),
	)
	if c.hook == HookSkLookup {
		sklookup.Steer(c.b, c.lookupTarget())
	}
	if c.defers() {
		c.deferred()
	}
}

// code is the return value of a chain function for a rule's decision.
func code(r *ir.Rule, kind int32) int32 { return int32(r.ID)<<codeShift | kind }

// count adds the packet to rule id's counter: the packet's length is at
// frame+lenOff, and key is a free stack slot for the map key.
func (c *compiler) count(id int, frame asm.Register, lenOff int16, key int16) {
	c.b.Emit(insn.StImm(asm.R10, key, int32(abi.CounterKey(id)), asm.Word))
	c.addCount(key, frame, lenOff, int16(16*abi.CounterIndex(id)), nil)
}

// countIDAt adds the packet to the counter of the rule whose ID the code
// get loads into r1, which it may do more than once: it writes the key
// to the stack slot key, and the ID is read again after the lookup. The
// packet's length is at frame+lenOff.
func (c *compiler) countIDAt(get func(), key int16, frame asm.Register, lenOff int16) {
	get()
	c.b.Emit(
		asm.RSh.Imm(asm.R1, abi.CounterKeyShift),
		insn.St(asm.R10, key, asm.R1, asm.Word),
	)
	c.addCount(key, frame, lenOff, 0, func() {
		get()
		c.b.Emit(
			asm.And.Imm(asm.R1, abi.CountersPerBlock-1),
			asm.LSh.Imm(asm.R1, 4),
			asm.Add.Reg(asm.R0, asm.R1),
		)
	})
}

// addCount looks up the counters' block whose key is the u32 at
// r10+key, and adds the packet to the counter off bytes into it, after
// index, when set, has added the counter's offset to r0 (the block). The
// packet's length is at frame+lenOff.
func (c *compiler) addCount(key int16, frame asm.Register, lenOff int16, off int16, index func()) {
	done := c.b.Fresh("counted")
	c.b.Emit(
		insn.Movr(asm.R2, asm.R10),
		asm.Add.Imm(asm.R2, int32(key)),
		insn.MapRef(asm.R1, abi.CountersMap),
		asm.FnMapLookupElem.Call(),
		asm.JEq.Imm(asm.R0, 0, done),
	)
	if index != nil {
		index()
	}
	c.b.Emit(
		insn.Ld(asm.R1, asm.R0, off, asm.DWord),
		asm.Add.Imm(asm.R1, 1),
		insn.St(asm.R0, off, asm.R1, asm.DWord),
		insn.Ld(asm.R1, frame, lenOff, asm.Word),
		insn.Ld(asm.R2, asm.R0, off+8, asm.DWord),
		asm.Add.Reg(asm.R2, asm.R1),
		insn.St(asm.R0, off+8, asm.R2, asm.DWord),
	)
	c.b.Mark(done)
}

// callChain calls the segments of chain ci with the parsed packet at
// frame+off: it goes on to done when the chain ends or returns, and to
// decided, with the code in r0, when it decides; an empty decided returns
// the code to the caller.
func (c *compiler) callChain(ci int, frame asm.Register, off int32, done, decided string) {
	b := c.b
	segs := c.segments[ci]
	for k, seg := range segs {
		b.Emit(insn.Movr(asm.R1, frame))
		if off != 0 {
			b.Emit(asm.Add.Imm(asm.R1, off))
		}
		if c.log {
			// The context: in r6 in main, whose packet is on its stack;
			// at chainCtx in a chain function.
			if frame == asm.R10 {
				b.Emit(insn.Movr(asm.R2, asm.R6))
			} else {
				b.Emit(insn.Ld(asm.R2, asm.R10, chainCtx, asm.DWord))
			}
		}
		next := done
		if k+1 < len(segs) {
			next = b.Fresh("after_" + seg)
		}
		b.Emit(
			insn.Call(seg),
			asm.JEq.Imm(asm.R0, codeContinue, next),
			asm.JEq.Imm(asm.R0, codeReturn, done),
		)
		if decided == "" {
			b.Emit(asm.Return())
		} else {
			b.Emit(insn.Ja(decided))
		}
		if k+1 < len(segs) {
			b.Mark(next)
		}
	}
}

// jump emits the jump or goto of rule r, whose matches hold: the called
// chain's decision is this chain's. After a jump, the called chain's
// RETURN, or its end, continues at next; after a goto, it returns from
// this chain too. The code ends in a jump or a return.
func (c *compiler) jump(r *ir.Rule, next string) {
	to, _ := ir.JumpTarget(r.Action)
	if _, ok := r.Action.(ir.Jump); ok {
		if c.inlined[to] {
			c.inlineChain(to, next)
		} else {
			c.callChain(to, asm.R6, 0, next, "")
		}
		return
	}
	done := ruleLabel(r) + "_returned"
	if c.inlined[to] {
		c.inlineChain(to, done)
	} else {
		c.callChain(to, asm.R6, 0, done, "")
	}
	c.b.Mark(done)
	c.chainReturn()
}

// unit emits a classified segment or a rule, and returns the label of
// what follows it, where its failing matches go.
func (c *compiler) unit(u classify.Unit) string {
	if u.Seg != nil {
		next := ruleLabel(u.Seg.Rules[len(u.Seg.Rules)-1]) + "_next"
		c.classified(u.Seg, next)
		return next
	}
	next := ruleLabel(u.Rule) + "_next"
	c.rule(u.Rule, next)
	return next
}

// chain emits the functions of chain ci. They take the parsed packet in r1
// and keep it in r6.
func (c *compiler) chain(ci int) {
	ch := c.p.Chains[ci]
	c.segment(ci)
	root := c.b
	inSegment := 0
	for _, u := range c.units(ch.Rules) {
		// Where a failing match goes: the next rule, or the end of the
		// segment when the next rule starts another.
		rb := root.Sub()
		c.b = rb
		next := c.unit(u)
		c.b = root
		n := insn.Branches(rb.Code())
		if inSegment > 0 && inSegment+n > maxSegmentBranches {
			// The rule starts the next segment: this one ends here.
			root.Emit(insn.Mov(asm.R0, codeContinue), asm.Return())
			c.segment(ci)
			inSegment = 0
		}
		root.Splice(rb)
		root.Mark(next)
		inSegment += n
	}
	root.Emit(insn.Mov(asm.R0, codeContinue), asm.Return())
}

// segment starts the next function of chain ci.
func (c *compiler) segment(ci int) {
	b := c.b
	ch := c.p.Chains[ci]
	k := len(c.segments[ci])
	sym := chainSym(ci, k)
	c.segments[ci] = append(c.segments[ci], sym)
	fn := c.funcChain(sym)
	switch {
	case k > 0:
		b.Function(fn, "chain %s, part %d", ch.Name, k+1)
	case ci == 0:
		b.Function(fn, "chain %s, policy %s", ch.Name, ch.Policy)
	default:
		b.Function(fn, "chain %s", ch.Name)
	}
	// A global function's pointer argument may be NULL as far as the
	// verifier knows.
	body := sym + "_rules"
	if c.log {
		b.Emit(insn.St(asm.R10, chainCtx, asm.R2, asm.DWord))
	}
	b.Emit(
		insn.Movr(asm.R6, asm.R1),
		asm.JNE.Imm(asm.R6, 0, body),
		insn.Mov(asm.R0, codeContinue),
		asm.Return(),
	)
	b.Mark(body)
}

// rule emits one rule: its matches, which jump to next when one fails, the
// counter, and the action.
func (c *compiler) rule(r *ir.Rule, next string) {
	b := c.b
	b.Mark(ruleLabel(r))
	b.Note("%s -A %s %s", linePos(r.Pos), c.p.Chains[r.Chain].Name, c.p.TextOf(r))
	hotdrop := ruleLabel(r) + "_hotdrop"
	usesHotdrop := false
	for _, m := range r.Matches {
		if c.match(r, m, next, hotdrop) {
			usesHotdrop = true
		}
	}
	if c.accel {
		// It counts the rules of a packet it drops when it drops it.
		switch r.Action.(type) {
		case ir.Jump, ir.Goto, ir.Return:
			// The rules it adds itself (Pos zero) count nothing.
			if r.Pos != (rules.Pos{}) {
				c.accelPush(r.ID)
			}
		case ir.Accept, ir.Drop, ir.Log, ir.None, ir.Reject, ir.TProxy:
			// They end the path, or an accelerator has none of them.
		}
	} else {
		c.count(r.ID, asm.R6, pkt.Bytes, chainKey)
	}
	fallsThrough := false
	switch a := r.Action.(type) {
	case ir.Accept:
		b.Emit(insn.Mov(asm.R0, code(r, codeAccept)), asm.Return())
	case ir.Drop, ir.Reject:
		// main sends a REJECT rule's reply (rejectDecided); the netfilter
		// stage cannot, and counts the packet it drops instead.
		if _, ok := a.(ir.Reject); ok && c.hook == HookStage {
			c.stageCount(abi.StageRejectDropped, chainKey)
		}
		b.Emit(insn.Mov(asm.R0, code(r, codeDrop)), asm.Return())
	case ir.TProxy:
		// main finds the rule's socket in abi.TargetsMap and abi.SocketsMap.
		b.Emit(insn.Mov(asm.R0, code(r, codeAccept)), asm.Return())
	case ir.Return:
		c.chainReturn()
	case ir.Jump, ir.Goto:
		c.jump(r, next)
	case ir.Log:
		c.logEvent(r)
		fallsThrough = true
	case ir.None:
		fallsThrough = true
	default:
		panic(fmt.Sprintf("codegen: action %T survived check", r.Action))
	}
	if usesHotdrop {
		if fallsThrough {
			b.Emit(insn.Ja(next))
		}
		b.Mark(hotdrop)
		b.Emit(insn.Mov(asm.R0, code(r, codeHotdrop)), asm.Return())
	}
}
