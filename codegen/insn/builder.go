package insn

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
type Builder struct {
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

func New() *Builder {
	return &Builder{labels: &labels{alias: make(map[string]string)}}
}

// Sub returns an empty builder in b's label namespace.
func (b *Builder) Sub() *Builder { return &Builder{labels: b.labels} }

// Emit appends instructions. An instruction that already has a symbol or
// a comment keeps it, after the pending ones.
func (b *Builder) Emit(insns ...asm.Instruction) {
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

// Splice appends o's code; o's pending label and comments become b's.
func (b *Builder) Splice(o *Builder) {
	b.Emit(o.insns...)
	if o.label != "" {
		b.Mark(o.label)
	}
	b.comment = append(b.comment, o.comment...)
	o.insns, o.label, o.comment = nil, "", nil
}

// Mark places label on the next instruction.
func (b *Builder) Mark(label string) {
	if b.label != "" {
		b.alias[label] = b.label
		return
	}
	b.label = label
}

// Note adds a comment line above the next instruction.
func (b *Builder) Note(format string, args ...any) {
	b.comment = append(b.comment, fmt.Sprintf(format, args...))
}

// Function starts a BPF function: its symbol, its BTF description and a
// comment, which the kernel requires as line info at every function start.
func (b *Builder) Function(fn *btf.Func, format string, args ...any) {
	b.Mark(fn.Name)
	b.fn = fn
	b.Note(format, args...)
}

// Fresh returns a label that is not used anywhere else.
func (b *Builder) Fresh(prefix string) string {
	b.next++
	return fmt.Sprintf("%s_%d", prefix, b.next)
}

// Canonical returns the label that stands for label on its instruction.
func (b *Builder) Canonical(label string) string {
	for {
		to, ok := b.alias[label]
		if !ok {
			return label
		}
		label = to
	}
}

// Code is the instructions emitted so far.
func (b *Builder) Code() asm.Instructions { return b.insns }

// Finish resolves label aliases and returns the instructions.
func (b *Builder) Finish() (asm.Instructions, error) {
	if b.label != "" || len(b.comment) > 0 || b.fn != nil {
		return nil, fmt.Errorf("codegen: label %q or comment %q at the end of the program", b.label, b.comment)
	}
	for i := range b.insns {
		ins := &b.insns[i]
		if ref := ins.Reference(); ref != "" && (ins.OpCode.Class().IsJump() || ins.IsLoadOfFunctionPointer()) {
			if to := b.Canonical(ref); to != ref {
				*ins = ins.WithReference(to)
			}
		}
	}
	return b.insns, nil
}

// Branches counts the conditional jumps in insns: the verifier keeps a
// pending state for each until the path it follows ends.
func Branches(insns asm.Instructions) int {
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

// Ld loads size bytes at src+off into dst.
func Ld(dst, src asm.Register, off int16, size asm.Size) asm.Instruction {
	return asm.LoadMem(dst, src, off, size)
}

// St stores src to dst+off.
func St(dst asm.Register, off int16, src asm.Register, size asm.Size) asm.Instruction {
	return asm.StoreMem(dst, off, src, size)
}

// StImm stores the constant v to dst+off; for DWord, v is a sign-extended
// 32-bit immediate (asm.StoreImm refuses DWord, the kernel does not).
func StImm(dst asm.Register, off int16, v int32, size asm.Size) asm.Instruction {
	return asm.Instruction{OpCode: asm.StoreImmOp(size), Dst: dst, Offset: off, Constant: int64(v)}
}

// Mov sets dst to the constant v.
func Mov(dst asm.Register, v int32) asm.Instruction { return asm.Mov.Imm(dst, v) }

// Movr sets dst to src.
func Movr(dst, src asm.Register) asm.Instruction { return asm.Mov.Reg(dst, src) }

// Ntoh converts the big-endian value of size bytes in dst to host order.
func Ntoh(dst asm.Register, size asm.Size) asm.Instruction { return asm.HostTo(asm.BE, dst, size) }

// Ja jumps to label.
func Ja(label string) asm.Instruction { return asm.Ja.Label(label) }

// Call calls the BPF function at label.
func Call(label string) asm.Instruction { return asm.Call.Label(label) }

// FuncRef loads the address of the BPF function at label into dst, for
// helpers that take a callback.
func FuncRef(dst asm.Register, label string) asm.Instruction {
	return asm.Instruction{
		OpCode:   asm.LoadImmOp(asm.DWord),
		Dst:      dst,
		Src:      asm.PseudoFunc,
		Constant: -1,
	}.WithReference(label)
}

// MapRef loads the address of the map called name into dst.
func MapRef(dst asm.Register, name string) asm.Instruction {
	return asm.LoadMapPtr(dst, 0).WithReference(name)
}

// U32 is v as the int32 immediate of a 32-bit instruction.
func U32(v uint32) int32 { return int32(v) }

// The context a caller gives bpf_loop for a callback, in its own frame.
const (
	LoopCtx   = 0 // the program's context, for the load helper
	LoopState = 8 // the loop's state, in a map value
)

// A callback's stack frame.
const (
	CallbackBuf = -8  // 8 bytes of packet
	CallbackCtx = -16 // the program's context
)

var (
	btfLong = &btf.Int{Name: "long", Size: 8, Encoding: btf.Signed}
	btfU64  = &btf.Int{Name: "__u64", Size: 8}
)

// Callback describes a bpf_loop callback: static long name(u64 index,
// void *ctx), which bpf_loop requires to be static.
func Callback(name string) *btf.Func {
	return &btf.Func{
		Name:    name,
		Linkage: btf.StaticFunc,
		Type: &btf.FuncProto{
			Return: btfLong,
			Params: []btf.FuncParam{
				{Name: "index", Type: btfU64},
				{Name: "ctx", Type: &btf.Pointer{Target: &btf.Void{}}},
			},
		},
	}
}

// Lookup calls bpf_map_lookup_elem on the map called name with the key at
// base+off: r0 is the value, or 0.
func Lookup(name string, base asm.Register, off int16) []asm.Instruction {
	return []asm.Instruction{
		MapRef(asm.R1, name),
		Movr(asm.R2, base),
		asm.Add.Imm(asm.R2, int32(off)),
		asm.FnMapLookupElem.Call(),
	}
}
