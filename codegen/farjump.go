package codegen

import (
	"math"

	"github.com/cilium/ebpf/asm"
)

// farJumps rewrites the jumps of insns whose target is further than a
// 16-bit offset reaches, which cilium/ebpf would truncate into a jump
// elsewhere (a large classified segment's jump to its end wrapped into a
// loop the verifier refused): an unconditional one becomes a long jump
// (gotol, a 32-bit offset), and "if cond goto L" becomes
//
//	if cond goto +1
//	goto +1
//	gotol L
//
// Every other instruction, and the labels, stay as they are. Raw offsets
// change as jumps grow, so it runs until none is too far.
func farJumps(insns asm.Instructions) asm.Instructions {
	for {
		at := make([]int, len(insns))
		symbols := make(map[string]int)
		off := 0
		for i, ins := range insns {
			at[i] = off
			if s := ins.Symbol(); s != "" {
				symbols[s] = off
			}
			off += int(ins.Size() / asm.InstructionSize)
		}
		var out asm.Instructions
		for i, ins := range insns {
			to, ok := symbols[ins.Reference()]
			op := ins.OpCode
			if !ok || !op.Class().IsJump() || op.JumpOp() == asm.Call || op.JumpOp() == asm.Exit || ins.Offset != -1 {
				if out != nil {
					out = append(out, ins)
				}
				continue
			}
			if d := to - at[i] - 1; d >= math.MinInt16 && d <= math.MaxInt16 {
				if out != nil {
					out = append(out, ins)
				}
				continue
			}
			if out == nil {
				out = append(make(asm.Instructions, 0, len(insns)+64), insns[:i]...)
			}
			long := asm.LongJump(ins.Reference())
			if op.JumpOp() == asm.Ja {
				// Its labels and comments go with it.
				long.Metadata = ins.Metadata
				out = append(out, long.WithReference(ins.Reference()))
				continue
			}
			near := ins.WithReference("")
			near.Offset = 1
			out = append(out, near, asm.Instruction{OpCode: asm.Ja.Op(asm.ImmSource), Offset: 1}, long)
		}
		if out == nil {
			return insns
		}
		insns = out
	}
}
