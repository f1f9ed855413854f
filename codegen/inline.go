package codegen

import (
	"fmt"

	"github.com/cilium/ebpf/asm"

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
		if to, ok := target(r.Action); ok {
			callers[to] = append(callers[to], r)
		}
	}
	size := make([]int, n) // rules an inlined chain brings
	functions := n
	for _, ci := range c.calleesFirst() {
		size[ci] = len(c.p.Chains[ci].Rules)
		for _, r := range c.p.Chains[ci].Rules {
			if to, ok := target(r.Action); ok && inlined[to] {
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
	c.b.note("chain %s, inlined", ch.Name)
	for _, u := range c.units(ch.Rules) {
		c.b.mark(c.unit(u))
	}
	c.b.emit(ja(ret))
	c.ret = outerRet
}

// chainReturn emits the RETURN of the chain being emitted: from its
// function, or, inlined, to what follows its call.
func (c *compiler) chainReturn() {
	if c.ret != "" {
		c.b.emit(ja(c.ret))
		return
	}
	c.b.emit(mov(asm.R0, codeReturn), asm.Return())
}
