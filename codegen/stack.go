package codegen

import (
	"fmt"
	"strings"

	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/btf"

	"bpfwall/ir"
	"bpfwall/rules"
)

// maxStack is the stack a BPF call chain may use (MAX_BPF_STACK): the
// verifier adds up the frames of the functions on each chain of calls
// and callbacks.
const maxStack = 512

// The verifier rounds each frame up to 32 bytes for the interpreter, and
// since Linux 6.10 to 16 bytes for a program it JITs
// (round_up_stack_depth). Compile decides with the first where a larger
// count only costs speed (whether main holds the parser), and refuses a
// program only when even the second does not fit.
const (
	frameGranule    = 32
	jitFrameGranule = 16
)

// stackDepth returns the deepest call chain's stack in insns, as the
// verifier counts it (check_max_stack_depth): each function's frame, the
// deepest r10 offset its instructions use, rounded up to granule bytes,
// summed along calls and the callbacks (bpf_loop) a function passes. A
// frame counted here is never smaller than the one the verifier finds,
// which only counts the slots the paths it explores touch; a use of the
// frame it cannot follow (frameAccess) counts as too deep. path names
// the functions of that call chain, from the first; it is nil for a
// frame it cannot measure.
func stackDepth(insns asm.Instructions, granule int) (depth int, path []string) {
	type function struct {
		name    string
		frame   int
		callees []string
	}
	var funcs []*function
	index := make(map[string]int)
	var cur *function
	for i, ins := range insns {
		if btf.FuncMetadata(&insns[i]) != nil || cur == nil {
			cur = &function{name: ins.Symbol()}
			index[ins.Symbol()] = len(funcs)
			funcs = append(funcs, cur)
		}
		switch off, ref, known := frameAccess(insns, i); {
		case !known:
			return maxStack + 1, nil // a frame it cannot measure: too deep
		case ref && off < 0:
			cur.frame = max(cur.frame, int(-off))
		}
		if ins.IsFunctionCall() || ins.IsLoadOfFunctionPointer() {
			cur.callees = append(cur.callees, ins.Reference())
		}
	}
	if len(funcs) == 0 {
		return 0, nil
	}
	depths := make([]int, len(funcs))
	next := make([]int, len(funcs)) // the callee on the deepest chain, or -1
	var visit func(i int) int
	visit = func(i int) int {
		if depths[i] > 0 {
			return depths[i]
		}
		deepest, via := 0, -1
		for _, name := range funcs[i].callees {
			if j, ok := index[name]; ok {
				if d := visit(j); d > deepest {
					deepest, via = d, j
				}
			}
		}
		depths[i], next[i] = (max(funcs[i].frame, 1)+granule-1)/granule*granule+deepest, via
		return depths[i]
	}
	depth = visit(0)
	for i := 0; i >= 0; i = next[i] {
		path = append(path, funcs[i].name)
	}
	return depth, path
}

// stackError is the error of a program whose call chain along path needs
// depth bytes of stack: at the jump to the deepest chain on the path,
// which restore can leave to the kernel, or without a position when the
// path nests no chain.
func (c *compiler) stackError(depth int, path []string) error {
	var chains []int // the chains along the path, each once
	for _, sym := range path {
		var ci, k int
		if n, _ := fmt.Sscanf(sym, "chain%d_%d", &ci, &k); n == 0 || ci >= len(c.p.Chains) {
			continue
		}
		if len(chains) == 0 || chains[len(chains)-1] != ci {
			chains = append(chains, ci)
		}
	}
	why := fmt.Sprintf("its calls need %d bytes of stack, more than the %d a BPF call chain may use", depth, maxStack)
	if len(chains) >= 2 {
		// The jump from the chain before it on the path; where that one
		// was inlined into its caller, the first jump to it.
		from, to := chains[len(chains)-2], chains[len(chains)-1]
		var jump *ir.Rule
		for _, r := range c.p.Rules {
			if t, ok := ir.JumpTarget(r.Action); ok && t == to && (jump == nil || r.Chain == from && jump.Chain != from) {
				jump = r
			}
		}
		if jump != nil {
			names := make([]string, len(chains))
			for i, ci := range chains {
				names[i] = c.p.Chains[ci].Name
			}
			return rules.ErrorList{rules.Errorf(jump.Pos, "jump to %s nests chains too deep for BPF's stack (%s): %s", c.p.Chains[to].Name, strings.Join(names, " → "), why)}
		}
	}
	return fmt.Errorf("compile for %s: %s (%s)", c.hook, why, strings.Join(path, " → "))
}
