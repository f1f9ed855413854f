package codegen

import (
	"fmt"
	"strings"

	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/btf"
)

// builder accumulates instructions. Labels and comments are attached to the
// next instruction emitted; several labels for one instruction become
// aliases of the first, resolved by finish. Builders made with sub share
// their labels' namespace, and splice joins their code.
type builder struct {
	insns   asm.Instructions
	label   string
	comment []string
	fn      *btf.Func
	*labels
}

// labels are the label namespace of a program.
type labels struct {
	alias map[string]string
	next  int // for fresh labels
}

func newBuilder() *builder {
	return &builder{labels: &labels{alias: make(map[string]string)}}
}

// sub returns an empty builder in b's label namespace.
func (b *builder) sub() *builder { return &builder{labels: b.labels} }

// emit appends instructions. An instruction that already has a symbol or
// a comment keeps it, after the pending ones.
func (b *builder) emit(insns ...asm.Instruction) {
	for _, ins := range insns {
		if b.label != "" {
			if s := ins.Symbol(); s != "" {
				b.alias[b.label] = s
			} else {
				ins = ins.WithSymbol(b.label)
			}
			b.label = ""
		}
		if len(b.comment) > 0 {
			text := strings.Join(b.comment, "\n")
			if src := ins.Source(); src != nil {
				text += "\n" + src.String()
			}
			ins = ins.WithSource(asm.Comment(text))
			b.comment = nil
		}
		if b.fn != nil {
			ins = btf.WithFuncMetadata(ins, b.fn)
			b.fn = nil
		}
		b.insns = append(b.insns, ins)
	}
}

// splice appends o's code; o's pending label and comments become b's.
func (b *builder) splice(o *builder) {
	b.emit(o.insns...)
	if o.label != "" {
		b.mark(o.label)
	}
	b.comment = append(b.comment, o.comment...)
	o.insns, o.label, o.comment = nil, "", nil
}

// mark places label on the next instruction.
func (b *builder) mark(label string) {
	if b.label != "" {
		b.alias[label] = b.label
		return
	}
	b.label = label
}

// note adds a comment line above the next instruction.
func (b *builder) note(format string, args ...any) {
	b.comment = append(b.comment, fmt.Sprintf(format, args...))
}

// function starts a BPF function: its symbol, its BTF description and a
// comment, which the kernel requires as line info at every function start.
func (b *builder) function(fn *btf.Func, format string, args ...any) {
	b.mark(fn.Name)
	b.fn = fn
	b.note(format, args...)
}

// fresh returns a label that is not used anywhere else.
func (b *builder) fresh(prefix string) string {
	b.next++
	return fmt.Sprintf("%s_%d", prefix, b.next)
}

// canonical returns the label that stands for label on its instruction.
func (b *builder) canonical(label string) string {
	for {
		to, ok := b.alias[label]
		if !ok {
			return label
		}
		label = to
	}
}

// finish resolves label aliases and returns the instructions.
func (b *builder) finish() (asm.Instructions, error) {
	if b.label != "" || len(b.comment) > 0 || b.fn != nil {
		return nil, fmt.Errorf("codegen: label %q or comment %q at the end of the program", b.label, b.comment)
	}
	for i := range b.insns {
		ins := &b.insns[i]
		if ref := ins.Reference(); ref != "" && (ins.OpCode.Class().IsJump() || ins.IsLoadOfFunctionPointer()) {
			if to := b.canonical(ref); to != ref {
				*ins = ins.WithReference(to)
			}
		}
	}
	return b.insns, nil
}

// branches counts the conditional jumps in insns: the verifier keeps a
// pending state for each until the path it follows ends.
func branches(insns asm.Instructions) int {
	n := 0
	for _, ins := range insns {
		op := ins.OpCode
		if op.Class().IsJump() && op.JumpOp() != asm.Ja && op.JumpOp() != asm.Call && op.JumpOp() != asm.Exit {
			n++
		}
	}
	return n
}

// Shorthands for the instructions the code generator uses most.

// ld loads size bytes at src+off into dst.
func ld(dst, src asm.Register, off int16, size asm.Size) asm.Instruction {
	return asm.LoadMem(dst, src, off, size)
}

// st stores src to dst+off.
func st(dst asm.Register, off int16, src asm.Register, size asm.Size) asm.Instruction {
	return asm.StoreMem(dst, off, src, size)
}

// stImm stores the constant v to dst+off; for DWord, v is a sign-extended
// 32-bit immediate (asm.StoreImm refuses DWord, the kernel does not).
func stImm(dst asm.Register, off int16, v int32, size asm.Size) asm.Instruction {
	return asm.Instruction{OpCode: asm.StoreImmOp(size), Dst: dst, Offset: off, Constant: int64(v)}
}

// mov sets dst to the constant v.
func mov(dst asm.Register, v int32) asm.Instruction { return asm.Mov.Imm(dst, v) }

// movr sets dst to src.
func movr(dst, src asm.Register) asm.Instruction { return asm.Mov.Reg(dst, src) }

// ntoh converts the big-endian value of size bytes in dst to host order.
func ntoh(dst asm.Register, size asm.Size) asm.Instruction { return asm.HostTo(asm.BE, dst, size) }

// ja jumps to label.
func ja(label string) asm.Instruction { return asm.Ja.Label(label) }

// call calls the BPF function at label.
func call(label string) asm.Instruction { return asm.Call.Label(label) }

// funcRef loads the address of the BPF function at label into dst, for
// helpers that take a callback.
func funcRef(dst asm.Register, label string) asm.Instruction {
	return asm.Instruction{
		OpCode:   asm.LoadImmOp(asm.DWord),
		Dst:      dst,
		Src:      asm.PseudoFunc,
		Constant: -1,
	}.WithReference(label)
}

// mapRef loads the address of the map called name into dst.
func mapRef(dst asm.Register, name string) asm.Instruction {
	return asm.LoadMapPtr(dst, 0).WithReference(name)
}

// u32 is v as the int32 immediate of a 32-bit instruction.
func u32(v uint32) int32 { return int32(v) }
