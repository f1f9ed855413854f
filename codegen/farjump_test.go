package codegen

import (
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"

	"bpfwall/internal/testenv"
)

// farProgram is an xdp program whose conditional jump reaches past what
// a 16-bit offset can: XDP_PASS (2) when it takes it, as it does (the
// frame's address is not 0); XDP_ABORTED (0) when it falls through, or a
// jump lands elsewhere.
func farProgram() asm.Instructions {
	insns := asm.Instructions{
		asm.Mov.Imm(asm.R0, 0),
		asm.LoadMem(asm.R2, asm.R1, 0, asm.Word),
		asm.JNE.Imm(asm.R2, 0, "far"),
		asm.JEq.Imm(asm.R2, 1, "near"),
		asm.Mov.Reg(asm.R0, asm.R0),
		asm.Mov.Reg(asm.R0, asm.R0).WithSymbol("near"),
	}
	for range 40000 {
		insns = append(insns, asm.Mov.Reg(asm.R0, asm.R0))
	}
	return append(insns, asm.Mov.Imm(asm.R0, 0), asm.Return(), asm.Mov.Imm(asm.R0, 2).WithSymbol("far"), asm.Return())
}

// TestFarJumps: a conditional jump 40,000 instructions on becomes a near
// jump over a long one; a near jump, and every other instruction, stay
// as they are; and the kernel loads and runs the program as written.
// Without the rewrite cilium/ebpf truncates the offset, and the verifier
// refuses a jump that lands elsewhere.
func TestFarJumps(t *testing.T) {
	in := farProgram()
	out := farJumps(in)
	if len(out) != len(in)+2 {
		t.Fatalf("%d instructions, want %d: the far conditional jump and nothing else rewritten", len(out), len(in)+2)
	}
	if out[2].OpCode != in[2].OpCode || out[2].Offset != 1 || out[2].Reference() != "" ||
		out[3].OpCode.JumpOp() != asm.Ja || out[3].Offset != 1 ||
		out[4].OpCode.Class() != asm.Jump32Class || out[4].Reference() != "far" {
		t.Errorf("the far jump became %v; %v; %v", out[2], out[3], out[4])
	}
	if out[5].Reference() != "near" || out[5].Offset != -1 {
		t.Errorf("the near jump became %v", out[5])
	}
	testenv.RequireRoot(t)
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{Type: ebpf.XDP, License: "GPL", Instructions: out})
	if err != nil {
		t.Fatalf("load: %v", err)
	}
	defer prog.Close()
	ret, err := prog.Run(&ebpf.RunOptions{Data: make([]byte, 64)})
	if err != nil {
		t.Fatal(err)
	}
	if ret != 2 {
		t.Errorf("the program returned %d, want 2", ret)
	}
	if p, err := ebpf.NewProgram(&ebpf.ProgramSpec{Type: ebpf.XDP, License: "GPL", Instructions: in}); err == nil {
		p.Close()
		t.Error("the kernel loads the program without the rewrite: the test does not reach past 16 bits")
	}
}
