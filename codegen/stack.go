package codegen

import (
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/btf"
)

// maxStack is the stack a BPF call chain may use (MAX_BPF_STACK): the
// verifier adds up the frames of the functions on each chain of calls
// and callbacks.
const maxStack = 512

// stackDepth returns the deepest call chain's stack in insns, as the
// verifier counts it (check_max_stack_depth): each function's frame, the
// deepest r10 offset its instructions use, rounded up to 32 bytes, summed
// along calls and the callbacks (bpf_loop) a function passes. A frame
// counted here is never smaller than the one the verifier finds, which
// only counts the slots the paths it explores touch; a use of the frame
// it cannot follow (frameAccess) counts as too deep.
func stackDepth(insns asm.Instructions) int {
	type function struct {
		frame   int
		callees []string
	}
	var funcs []*function
	index := make(map[string]int)
	var cur *function
	for i, ins := range insns {
		if btf.FuncMetadata(&insns[i]) != nil || cur == nil {
			cur = &function{}
			index[ins.Symbol()] = len(funcs)
			funcs = append(funcs, cur)
		}
		switch off, ref, known := frameAccess(insns, i); {
		case !known:
			return maxStack + 1 // a frame it cannot measure: too deep
		case ref && off < 0:
			cur.frame = max(cur.frame, int(-off))
		}
		if ins.IsFunctionCall() || ins.IsLoadOfFunctionPointer() {
			cur.callees = append(cur.callees, ins.Reference())
		}
	}
	depth := make([]int, len(funcs))
	var visit func(i int) int
	visit = func(i int) int {
		if depth[i] > 0 {
			return depth[i]
		}
		deepest := 0
		for _, name := range funcs[i].callees {
			if j, ok := index[name]; ok {
				deepest = max(deepest, visit(j))
			}
		}
		depth[i] = (max(funcs[i].frame, 1)+31)/32*32 + deepest
		return depth[i]
	}
	if len(funcs) == 0 {
		return 0
	}
	return visit(0)
}
