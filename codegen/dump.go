package codegen

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"

	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/btf"

	"bpfwall/codegen/abi"
	"bpfwall/codegen/kernel"
	"bpfwall/rules"
)

// Dump writes the program as annotated eBPF assembly: a header with the
// maps and their sizes and the instruction count, then every function with
// its instructions, each rule's under a comment with its position and
// text. The output depends only on the program.
func (p *Program) Dump(w io.Writer) error {
	var b strings.Builder
	spec := p.Spec.Programs[abi.ProgramName]
	entry := p.IR.Chains[0]
	fmt.Fprintf(&b, "; bpfwall %s %s program: %s table %s, chain %s (policy %s), %d rules in %d chains\n",
		p.Level, p.Hook, p.IR.Family, p.IR.Table, entry.Name, entry.Policy, len(p.IR.Rules), len(p.IR.Chains))
	fmt.Fprintf(&b, "; %s, license %s, %d instructions\n", spec.Type, spec.License, rawLen(spec.Instructions))
	b.WriteString("; maps:\n")
	fixed := []string{abi.CountersMap, abi.DecisionMap, abi.IfacesMap, abi.IfaceSlotsMap, abi.ScratchMap}
	names := slices.DeleteFunc(slices.Sorted(maps.Keys(p.Spec.Maps)), func(n string) bool { return slices.Contains(fixed, n) })
	width := 0
	for name := range p.Spec.Maps {
		width = max(width, len(name))
	}
	for _, name := range append(fixed, names...) {
		m := p.Spec.Maps[name]
		if m == nil {
			continue // abi.DecisionMap without Options.Trace, abi.IfaceSlotsMap
		}
		fmt.Fprintf(&b, ";   %-*s %-12s key %d, value %d, max_entries %d\n", width, name, m.Type, m.KeySize, m.ValueSize, m.MaxEntries)
	}
	if p.Hook == HookSkLookup {
		p.dumpTargets(&b)
	}
	if len(p.Ifaces) > 0 {
		b.WriteString("; interface patterns (bits of ifaces values):")
		for i, pat := range p.Ifaces {
			name := pat.Name
			if pat.Prefix {
				name += "+"
			}
			fmt.Fprintf(&b, " %d=%q", i, name)
		}
		b.WriteByte('\n')
	}
	for _, rm := range p.removed {
		r, by := rm.Rule, rm.CoveredBy
		fmt.Fprintf(&b, "; removed, never matches: r%d %s -A %s %s (covered by r%d %s)\n", r.ID, linePos(r.Pos), p.IR.Chains[r.Chain].Name, p.IR.TextOf(r), by.ID, linePos(by.Pos))
	}
	for _, r := range p.unreachable {
		fmt.Fprintf(&b, "; unreachable, no code: r%d %s -A %s %s\n", r.ID, linePos(r.Pos), p.IR.Chains[r.Chain].Name, p.IR.TextOf(r))
	}
	offset := 0
	for _, ins := range spec.Instructions {
		if s := ins.Symbol(); s != "" {
			if btf.FuncMetadata(&ins) != nil {
				b.WriteByte('\n')
			}
			fmt.Fprintf(&b, "%s:\n", s)
		}
		if src := ins.Source(); src != nil {
			for _, line := range strings.Split(src.String(), "\n") {
				fmt.Fprintf(&b, "\t; %s\n", line)
			}
		}
		fmt.Fprintf(&b, "%6d: %s\n", offset, formatInstruction(ins))
		offset += int(ins.Size() / 8)
	}
	if _, err := io.WriteString(w, b.String()); err != nil {
		return err
	}
	if p.Netfilter != nil {
		if _, err := io.WriteString(w, "\n; the netfilter stage: the packets this program defers, after conntrack; it shares the maps above\n"); err != nil {
			return err
		}
		return p.Netfilter.Dump(w)
	}
	return nil
}

// linePos is a position as file:line.
func linePos(p rules.Pos) string {
	file := p.File
	if file == "" {
		file = "-"
	}
	return fmt.Sprintf("%s:%d", file, p.Line)
}

var sizeNames = map[asm.Size]string{asm.Byte: "u8", asm.Half: "u16", asm.Word: "u32", asm.DWord: "u64"}

var aluOps = map[asm.ALUOp]string{
	asm.Add: "+=", asm.Sub: "-=", asm.Mul: "*=", asm.Div: "/=", asm.Or: "|=", asm.And: "&=",
	asm.LSh: "<<=", asm.RSh: ">>=", asm.Mod: "%=", asm.Xor: "^=", asm.ArSh: "s>>=",
}

var jumpOps = map[asm.JumpOp]string{
	asm.JEq: "==", asm.JNE: "!=", asm.JGT: ">", asm.JGE: ">=", asm.JLT: "<", asm.JLE: "<=",
	asm.JSGT: "s>", asm.JSGE: "s>=", asm.JSLT: "s<", asm.JSLE: "s<=", asm.JSet: "&",
}

var helperNames = map[asm.BuiltinFunc]string{
	asm.FnMapLookupElem: "bpf_map_lookup_elem",
	asm.FnXdpLoadBytes:  "bpf_xdp_load_bytes",
	asm.FnSkbLoadBytes:  "bpf_skb_load_bytes",
	asm.FnXdpGetBuffLen: "bpf_xdp_get_buff_len",
	asm.FnCsumDiff:      "bpf_csum_diff",
	asm.FnLoop:          "bpf_loop",
}

// formatInstruction prints an instruction in the kernel's (and bpftool's)
// C-like syntax, with labels for jump targets and names for maps.
func formatInstruction(ins asm.Instruction) string {
	op := ins.OpCode
	cls := op.Class()
	reg := func(r asm.Register, wide bool) string {
		if wide {
			return fmt.Sprintf("r%d", r)
		}
		return fmt.Sprintf("w%d", r)
	}
	switch {
	case ins.IsLoadFromMap():
		return fmt.Sprintf("r%d = map[%s]", ins.Dst, ins.Reference())
	case ins.IsLoadOfFunctionPointer():
		return fmt.Sprintf("r%d = func[%s]", ins.Dst, ins.Reference())
	case op.IsDWordLoad():
		return fmt.Sprintf("r%d = %#x ll", ins.Dst, uint64(ins.Constant))
	case cls == asm.LdXClass && op.Mode() == asm.MemMode && kernel.Fields(ins) != nil:
		var offs []string
		for _, f := range kernel.Fields(ins) {
			offs = append(offs, fmt.Sprintf("offsetof(%s, %s)", f.Struct, f.Field))
		}
		return fmt.Sprintf("r%d = *(%s *)(r%d + %s)", ins.Dst, sizeNames[op.Size()], ins.Src, strings.Join(offs, " + "))
	case cls == asm.LdXClass && op.Mode() == asm.MemMode && isBitfield(ins):
		f, _ := kernel.Bitfield(ins)
		return fmt.Sprintf("r%d = *(%s *)(r%d + byte of %s.%s)", ins.Dst, sizeNames[op.Size()], ins.Src, f.Struct, f.Field)
	case cls == asm.LdXClass && op.Mode() == asm.MemMode:
		return fmt.Sprintf("r%d = *(%s *)(r%d %s)", ins.Dst, sizeNames[op.Size()], ins.Src, signed(int64(ins.Offset)))
	case cls == asm.StClass && op.Mode() == asm.MemMode:
		return fmt.Sprintf("*(%s *)(r%d %s) = %s", sizeNames[op.Size()], ins.Dst, signed(int64(ins.Offset)), imm(ins.Constant, op.Size() != asm.DWord))
	case cls == asm.StXClass && op.Mode() == asm.MemMode:
		return fmt.Sprintf("*(%s *)(r%d %s) = r%d", sizeNames[op.Size()], ins.Dst, signed(int64(ins.Offset)), ins.Src)
	case cls.IsALU():
		wide := cls == asm.ALU64Class
		d := reg(ins.Dst, wide)
		src := reg(ins.Src, wide)
		if op.Source() == asm.ImmSource {
			src = imm(ins.Constant, !wide)
		}
		switch aop := op.ALUOp(); aop {
		case asm.Swap:
			e := "be"
			if op.Endianness() == asm.LE {
				e = "le"
			}
			return fmt.Sprintf("r%d = %s%d r%d", ins.Dst, e, ins.Constant, ins.Dst)
		case asm.Mov:
			return fmt.Sprintf("%s = %s", d, src)
		case asm.Neg:
			return fmt.Sprintf("%s = -%s", d, d)
		default:
			if s, ok := aluOps[aop]; ok {
				return fmt.Sprintf("%s %s %s", d, s, src)
			}
		}
	case cls.IsJump():
		switch jop := op.JumpOp(); jop {
		case asm.Exit:
			return "exit"
		case asm.Call:
			if ins.IsFunctionCall() {
				return "call " + ins.Reference()
			}
			if name, ok := kernel.Kfunc(ins); ok {
				return "call kfunc " + name
			}
			fn := asm.BuiltinFunc(ins.Constant)
			if name, ok := helperNames[fn]; ok {
				return "call " + name
			}
			return "call " + fn.String()
		case asm.Ja:
			if cls == asm.Jump32Class {
				return "gotol " + target(ins)
			}
			return "goto " + target(ins)
		default:
			wide := cls == asm.JumpClass
			src := reg(ins.Src, wide)
			if op.Source() == asm.ImmSource {
				src = imm(ins.Constant, !wide)
			}
			if s, ok := jumpOps[jop]; ok {
				return fmt.Sprintf("if %s %s %s goto %s", reg(ins.Dst, wide), s, src, target(ins))
			}
		}
	}
	return fmt.Sprintf("%v", ins)
}

// target is a jump's label, or for a jump farJumps made without one, its
// offset.
func target(ins asm.Instruction) string {
	if ref := ins.Reference(); ref != "" {
		return ref
	}
	return fmt.Sprintf("%+d", ins.Offset)
}

// imm prints an immediate: small ones in decimal, the others in hex, as
// unsigned 32-bit values for 32-bit operations.
func imm(v int64, narrow bool) string {
	if v > -4096 && v < 4096 {
		return fmt.Sprint(v)
	}
	if narrow {
		return fmt.Sprintf("%#x", uint32(v))
	}
	if v < 0 {
		return fmt.Sprintf("-%#x", -v)
	}
	return fmt.Sprintf("%#x", v)
}

// signed prints an offset with its sign: "+ 8", "- 64".
func signed(v int64) string {
	if v < 0 {
		return fmt.Sprintf("- %d", -v)
	}
	return fmt.Sprintf("+ %d", v)
}

func isBitfield(ins asm.Instruction) bool {
	_, ok := kernel.Bitfield(ins)
	return ok
}
