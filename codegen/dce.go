package codegen

import (
	"fmt"

	"github.com/cilium/ebpf/asm"
)

// eliminateDeadCode removes the instructions no path from the first one
// reaches, which the verifier would reject: rules after an unconditional
// one, matches after one that never holds, functions only such code calls.
// It returns the symbols of the removed instructions.
func eliminateDeadCode(insns asm.Instructions) (asm.Instructions, map[string]bool, error) {
	at := make(map[string]int)
	for i, ins := range insns {
		if s := ins.Symbol(); s != "" {
			at[s] = i
		}
	}
	target := func(ins asm.Instruction) (int, error) {
		i, ok := at[ins.Reference()]
		if !ok {
			return 0, fmt.Errorf("codegen: reference to undefined label %q", ins.Reference())
		}
		return i, nil
	}
	live := make([]bool, len(insns))
	work := []int{0}
	for len(work) > 0 {
		i := work[len(work)-1]
		work = work[:len(work)-1]
		if i >= len(insns) || live[i] {
			continue
		}
		live[i] = true
		ins := insns[i]
		op := ins.OpCode
		switch {
		case ins.IsFunctionReference():
			t, err := target(ins)
			if err != nil {
				return nil, nil, err
			}
			work = append(work, i+1, t)
		case op.Class().IsJump() && op.JumpOp() == asm.Exit:
		case op.Class().IsJump() && op.JumpOp() == asm.Call:
			work = append(work, i+1)
		case op.Class().IsJump():
			t, err := target(ins)
			if err != nil {
				return nil, nil, err
			}
			work = append(work, t)
			if op.JumpOp() != asm.Ja {
				work = append(work, i+1)
			}
		default:
			work = append(work, i+1)
		}
	}
	out := make(asm.Instructions, 0, len(insns))
	removed := make(map[string]bool)
	for i, ins := range insns {
		if live[i] {
			out = append(out, ins)
		} else if s := ins.Symbol(); s != "" {
			removed[s] = true
		}
	}
	return out, removed, nil
}
