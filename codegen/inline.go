package codegen

import (
	"fmt"
	"slices"

	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/btf"

	"bpfwall/codegen/insn"
	"bpfwall/ir"
	"bpfwall/rules"
)

// Chains are functions (BPF-to-BPF calls), and the kernel allows a
// program at most 256 of them (BPF_MAX_SUBPROGS), parsing, conntrack and
// REJECT's among them. A rule set with more user chains than that, one
// per customer or per address as generators write them, has its small
// chains that one rule jumps to emitted at that rule instead: the
// chain's rules in the caller's function, its RETURN and its end a jump
// to what follows the call (chainReturn), its decisions returned as the
// caller's. A chain called from several rules, or a large one, stays a
// function; if those are still too many, the compile fails at the rule
// that jumps to the first chain over the limit.

// chainFunctionLimit is how many chain functions a program may have: the
// kernel's 256 less room for the other functions and for segments.
const chainFunctionLimit = 200

// maxChainFunctions is how many chains a program has before it inlines
// some: chainFunctionLimit; tests lower it to inline every chain they
// can.
var maxChainFunctions = chainFunctionLimit

// maxInlinedRules is the most rules an inlined chain may bring into its
// caller, its own inlined chains' included: the caller's function stays
// small enough to verify.
const maxInlinedRules = 64

// inlineChains decides which chains to inline: none while the chains
// fit in functions.
func (c *compiler) inlineChains() ([]bool, error) {
	n := len(c.p.Chains)
	inlined := make([]bool, n)
	if n <= maxChainFunctions {
		return inlined, nil
	}
	callers := make([][]*ir.Rule, n)
	for _, r := range c.p.Rules {
		if to, ok := ir.JumpTarget(r.Action); ok {
			callers[to] = append(callers[to], r)
		}
	}
	size := make([]int, n) // rules an inlined chain brings
	functions := n
	for _, ci := range c.calleesFirst() {
		size[ci] = len(c.p.Chains[ci].Rules)
		for _, r := range c.p.Chains[ci].Rules {
			if to, ok := ir.JumpTarget(r.Action); ok && inlined[to] {
				size[ci] += size[to]
			}
		}
		if ci != 0 && len(callers[ci]) == 1 && callers[ci][0].Chain != ci && size[ci] <= maxInlinedRules {
			inlined[ci] = true
			functions--
		}
	}
	if functions <= chainFunctionLimit {
		return inlined, nil
	}
	// Name the rule that jumps to the first chain over the limit.
	k := 0
	for ci := range c.p.Chains {
		if inlined[ci] {
			continue
		}
		if k++; k > chainFunctionLimit && len(callers[ci]) > 0 {
			r := callers[ci][0]
			return nil, &rules.Error{Pos: r.Pos, Msg: fmt.Sprintf(
				"chain %s: the rules need %d chain functions, more than the %d a BPF program may have: chains that more than one rule jumps to, or with more than %d rules, cannot be inlined",
				c.p.Chains[ci].Name, functions, chainFunctionLimit, maxInlinedRules)}
		}
	}
	return nil, fmt.Errorf("the rules need %d chain functions, more than the %d a BPF program may have", functions, chainFunctionLimit)
}

// inlineChain emits chain ci at its one call site: its RETURN and its end
// go to ret.
func (c *compiler) inlineChain(ci int, ret string) {
	outerRet := c.ret
	c.ret = ret
	ch := c.p.Chains[ci]
	c.b.Note("chain %s, inlined", ch.Name)
	for _, u := range c.units(ch.Rules) {
		c.b.Mark(c.unit(u))
	}
	c.b.Emit(insn.Ja(ret))
	c.ret = outerRet
}

// chainReturn emits the RETURN of the chain being emitted: from its
// function, or, inlined, to what follows its call.
func (c *compiler) chainReturn() {
	if c.ret != "" {
		c.b.Emit(insn.Ja(c.ret))
		return
	}
	c.b.Emit(insn.Mov(asm.R0, codeReturn), asm.Return())
}

// maxEntryInsns is the largest entry chain main holds in place of a call
// (inlineEntry): the verifier checks the chain's code once for every
// state the parser leaves, instead of once as a global function.
const maxEntryInsns = 1024

// entryFrame is how deep the frame of an entry chain held in main may
// reach: parse's header buffer, dead once the packet is parsed.
const entryFrame = -parseBuf

// inlineEntry returns the code of the entry chain's function for main to
// hold instead of calling it, from its first rule on, with every exit a
// jump to done; nil when main must call it. A call and its return cost as
// much as the parser's call did (parseInlined). main holds the chain when
// it holds the parser, the chain is one small function, and its frame
// fits in parse's header buffer. The chain's code has the packet in r6;
// main keeps the context at chainCtx for LOG and REJECT.
func (c *compiler) inlineEntry(fn *insn.Builder, done string) asm.Instructions {
	if !c.inlineParse || len(c.segments[0]) != 1 || len(fn.Code()) > maxEntryInsns {
		return nil
	}
	// The prologue (segment) ends with its first exit.
	body := slices.IndexFunc(fn.Code(), func(ins asm.Instruction) bool { return ins.OpCode.JumpOp() == asm.Exit }) + 1
	if body == 0 || body >= len(fn.Code()) {
		return nil
	}
	insns := slices.Clone(fn.Code()[body:])
	for i, ins := range insns {
		if btf.FuncMetadata(&insns[i]) != nil || !inEntryFrame(insns, i) {
			return nil // another function, or a slot below the buffer
		}
		if ins.OpCode.JumpOp() == asm.Exit {
			j := insn.Ja(done)
			if s := ins.Symbol(); s != "" {
				j = j.WithSymbol(s)
			}
			insns[i] = j.WithSource(ins.Source())
		}
	}
	return insns
}

// inEntryFrame reports whether instruction i of insns reads or writes the
// stack only within entryFrame bytes of its top: loads and stores at
// offsets from r10, and pointers made as r10 plus an offset.
func inEntryFrame(insns asm.Instructions, i int) bool {
	off, ref, known := frameAccess(insns, i)
	return known && (!ref || off >= -entryFrame && off < 0)
}

// frameAccess returns the stack offset instruction i of insns uses (ref):
// a load or store relative to r10, or r10 moved into a register to which
// the next instruction adds a constant (the code's one way of pointing
// into the frame). known is false for a use of r10 these do not follow:
// r10 changed, or copied without the constant.
func frameAccess(insns asm.Instructions, i int) (off int64, ref, known bool) {
	ins := insns[i]
	switch {
	case ins.OpCode.Class().IsLoad() && ins.Src == asm.R10, ins.OpCode.Class().IsStore() && ins.Dst == asm.R10:
		return int64(ins.Offset), true, true
	case ins.OpCode.Class().IsALU() && ins.Dst == asm.R10:
		return 0, false, false
	case ins.OpCode.Class().IsALU() && ins.Src == asm.R10 && ins.OpCode.Source() == asm.RegSource:
		if ins.OpCode.ALUOp() != asm.Mov || i+1 >= len(insns) {
			return 0, false, false
		}
		next := insns[i+1]
		if next.OpCode.ALUOp() != asm.Add || next.OpCode.Source() != asm.ImmSource || next.Dst != ins.Dst {
			return 0, false, false
		}
		return next.Constant, true, true
	}
	return 0, false, true
}
