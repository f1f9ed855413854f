package kernel

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/btf"
)

// Field names a field of a kernel struct. Field may be a path through
// nested members ("ct.nf_ct_proto.tcp.tcp_loose") with array indexes
// ("cb[0]").
type Field struct{ Struct, Field string }

// CastToKernCtx is the kfunc bpf_cast_to_kern_ctx: the kernel's struct
// behind a program's context, an sk_buff or an xdp_buff.
const CastToKernCtx = "bpf_cast_to_kern_ctx"

// Fields of a netfilter program's context and of an sk_buff that more
// than one part of a program reads.
var (
	NFCtxSkb = Field{Struct: "bpf_nf_ctx", Field: "skb"}
	SkbLen   = Field{Struct: "sk_buff", Field: "len"}
)

// DynptrFromSkb is the kfunc bpf_dynptr_from_skb.
const DynptrFromSkb = "bpf_dynptr_from_skb"

// NFSkb loads the sk_buff of the netfilter program context (struct
// bpf_nf_ctx) at ctx into dst.
func NFSkb(dst, ctx asm.Register) asm.Instruction { return Load(dst, ctx, asm.DWord, NFCtxSkb) }

// NFDynptr makes the bpf_dynptr at r10+slot cover the packet of the
// netfilter context at ctx, from its network header; it jumps to fail
// if it cannot.
func NFDynptr(ctx asm.Register, slot int16, fail string) []asm.Instruction {
	return []asm.Instruction{
		NFSkb(asm.R1, ctx),
		asm.Mov.Imm(asm.R2, 0),
		asm.Mov.Reg(asm.R3, asm.R10),
		asm.Add.Imm(asm.R3, int32(slot)),
		Call(DynptrFromSkb),
		asm.JNE.Imm(asm.R0, 0, fail),
	}
}

// Metadata keys of the instructions Resolve completes.
type (
	kfuncKey    struct{} // string: the kfunc's name
	fieldKey    struct{} // []Field: offsets that add up
	bitfieldKey struct{} // Field: a byte load, then the shift after it
)

// Call is a call of the kfunc called name.
func Call(name string) asm.Instruction {
	ins := asm.Instruction{
		OpCode:   asm.OpCode(asm.JumpClass).SetJumpOp(asm.Call),
		Src:      asm.PseudoKfuncCall,
		Constant: -1,
	}
	ins.Metadata.Set(kfuncKey{}, name)
	return ins
}

// Load loads the field at src plus the offsets of path, a field and the
// fields inside it, into dst.
func Load(dst, src asm.Register, size asm.Size, path ...Field) asm.Instruction {
	ins := asm.LoadMem(dst, src, 0, size)
	ins.Metadata.Set(fieldKey{}, path)
	return ins
}

// AddOffset adds the offset of f to the address in dst.
func AddOffset(dst asm.Register, f Field) asm.Instruction {
	ins := asm.Add.Imm(dst, 0)
	ins.Metadata.Set(fieldKey{}, []Field{f})
	return ins
}

// LoadBitfield loads the bitfield f, of at most a byte, of the struct at
// src into the low bits of dst; the bits above it are the next fields'.
func LoadBitfield(dst, src asm.Register, f Field) []asm.Instruction {
	ins := asm.LoadMem(dst, src, 0, asm.Byte)
	ins.Metadata.Set(bitfieldKey{}, f)
	return []asm.Instruction{ins, asm.RSh.Imm(dst, 0)}
}

// Kfunc is the name of the kfunc ins calls.
func Kfunc(ins asm.Instruction) (string, bool) {
	name, ok := ins.Metadata.Get(kfuncKey{}).(string)
	return name, ok
}

// Fields are the fields whose offsets ins adds up.
func Fields(ins asm.Instruction) []Field {
	path, _ := ins.Metadata.Get(fieldKey{}).([]Field)
	return path
}

// Bitfield is the bitfield ins loads.
func Bitfield(ins asm.Instruction) (Field, bool) {
	f, ok := ins.Metadata.Get(bitfieldKey{}).(Field)
	return f, ok
}

// Resolve sets the BTF IDs of insns' kfunc calls and the offsets of
// their kernel fields to those of spec, the running kernel's BTF
// (btf.LoadKernelSpec).
func Resolve(insns asm.Instructions, spec *btf.Spec) error {
	for i := range insns {
		ins := &insns[i]
		if name, ok := Kfunc(*ins); ok {
			var fn *btf.Func
			if err := spec.TypeByName(name, &fn); err != nil {
				return fmt.Errorf("kfunc %s: %w (conntrack state matches need nf_conntrack's kfuncs)", name, err)
			}
			id, err := spec.TypeID(fn)
			if err != nil {
				return fmt.Errorf("kfunc %s: %w", name, err)
			}
			ins.Constant, ins.Offset = int64(id), 0
		}
		if path := Fields(*ins); path != nil {
			off := 0
			for _, f := range path {
				bits, _, err := fieldBits(spec, f)
				if err != nil {
					return err
				}
				if bits%8 != 0 {
					return fmt.Errorf("field %s.%s at bit %d cannot be loaded", f.Struct, f.Field, bits)
				}
				off += bits / 8
			}
			if off > 1<<15-1 {
				return fmt.Errorf("field %v at byte %d cannot be loaded", path, off)
			}
			if ins.OpCode.Class().IsALU() {
				ins.Constant = int64(off) // an address's offset added
			} else {
				ins.Offset = int16(off)
			}
		}
		if f, ok := Bitfield(*ins); ok {
			bits, size, err := fieldBits(spec, f)
			if err != nil {
				return err
			}
			if size == 0 || bits%8+size > 8 || i+1 == len(insns) {
				return fmt.Errorf("field %s.%s is not a bitfield within a byte", f.Struct, f.Field)
			}
			ins.Offset = int16(bits / 8)
			insns[i+1].Constant = int64(bits % 8)
		}
	}
	return nil
}

// fieldBits is the bit offset of f in the kernel's BTF, and its bitfield
// size (0 for a field that is not a bitfield). A name not found in a
// struct is looked for in its anonymous structs and unions, as C does.
func fieldBits(spec *btf.Spec, f Field) (int, int, error) {
	var s *btf.Struct
	if err := spec.TypeByName(f.Struct, &s); err != nil {
		return 0, 0, fmt.Errorf("struct %s: %w", f.Struct, err)
	}
	var typ btf.Type = s
	var off, size int
	for _, part := range strings.Split(f.Field, ".") {
		name, index := part, -1
		if i := strings.IndexByte(part, '['); i >= 0 && strings.HasSuffix(part, "]") {
			n, err := strconv.Atoi(part[i+1 : len(part)-1])
			if err != nil {
				return 0, 0, fmt.Errorf("field %s.%s: bad index in %q", f.Struct, f.Field, part)
			}
			name, index = part[:i], n
		}
		m, moff, ok := findMember(typ, name)
		if !ok {
			return 0, 0, fmt.Errorf("struct %s has no field %s", f.Struct, f.Field)
		}
		off, typ, size = off+moff, m.Type, int(m.BitfieldSize)
		if index >= 0 {
			a, ok := btf.UnderlyingType(typ).(*btf.Array)
			if !ok || index >= int(a.Nelems) {
				return 0, 0, fmt.Errorf("field %s.%s: %s is not an array of more than %d", f.Struct, f.Field, name, index)
			}
			esize, err := btf.Sizeof(a.Type)
			if err != nil {
				return 0, 0, fmt.Errorf("field %s.%s: %w", f.Struct, f.Field, err)
			}
			off += 8 * esize * index
			typ = a.Type
		}
	}
	return off, size, nil
}

// findMember finds the member called name of the struct or union typ,
// or of its anonymous members, and its bit offset in typ.
func findMember(typ btf.Type, name string) (btf.Member, int, bool) {
	var members []btf.Member
	switch t := btf.UnderlyingType(typ).(type) {
	case *btf.Struct:
		members = t.Members
	case *btf.Union:
		members = t.Members
	}
	for _, m := range members {
		if m.Name == name {
			return m, int(m.Offset), true
		}
	}
	for _, m := range members {
		if m.Name != "" {
			continue
		}
		if in, off, ok := findMember(m.Type, name); ok {
			return in, int(m.Offset) + off, true
		}
	}
	return btf.Member{}, 0, false
}
