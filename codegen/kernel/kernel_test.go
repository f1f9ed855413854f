package kernel

import (
	"os"
	"strings"
	"testing"

	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/btf"
)

// kernelBTF is the running kernel's BTF; without it the test is skipped,
// except under CI, where the machine has it.
func kernelBTF(t *testing.T) *btf.Spec {
	t.Helper()
	spec, err := btf.LoadKernelSpec()
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("load the kernel's BTF: %v", err)
		}
		t.Skipf("no kernel BTF: %v", err)
	}
	return spec
}

// byteOffset is the byte offset of a field path, read straight from the
// BTF of the struct's members.
func byteOffset(t *testing.T, spec *btf.Spec, structName string, members ...string) int {
	t.Helper()
	var s *btf.Struct
	if err := spec.TypeByName(structName, &s); err != nil {
		t.Fatal(err)
	}
	off := 0
	typ := btf.Type(s)
	for _, name := range members {
		st, ok := btf.UnderlyingType(typ).(*btf.Struct)
		if !ok {
			t.Fatalf("%s: %s is not in a struct", structName, name)
		}
		found := false
		for _, m := range st.Members {
			if m.Name == name {
				off += int(m.Offset) / 8
				typ, found = m.Type, true
				break
			}
		}
		if !found {
			t.Fatalf("%s has no member %s", structName, name)
		}
	}
	return off
}

func TestResolve(t *testing.T) {
	spec := kernelBTF(t)
	status := Field{Struct: "nf_conn", Field: "status"}
	logInvalid := Field{Struct: "net", Field: "ct.sysctl_log_invalid"}
	insns := asm.Instructions{
		Call("bpf_ct_release"),
		Load(asm.R1, asm.R2, asm.DWord, status),
		AddOffset(asm.R3, status),
		Load(asm.R1, asm.R2, asm.Byte, Field{Struct: "sk_buff", Field: "cb"}, Field{Struct: "inet_skb_parm", Field: "frag_max_size"}),
		Load(asm.R1, asm.R2, asm.Byte, logInvalid),
	}
	insns = append(insns, LoadBitfield(asm.R4, asm.R5, Field{Struct: "sk_buff", Field: "pkt_type"})...)
	if err := Resolve(insns, spec); err != nil {
		t.Fatal(err)
	}

	var fn *btf.Func
	if err := spec.TypeByName("bpf_ct_release", &fn); err != nil {
		t.Fatal(err)
	}
	id, _ := spec.TypeID(fn)
	if insns[0].Constant != int64(id) {
		t.Errorf("kfunc call: constant %d, want bpf_ct_release's BTF ID %d", insns[0].Constant, id)
	}
	want := byteOffset(t, spec, "nf_conn", "status")
	if int(insns[1].Offset) != want || insns[2].Constant != int64(want) {
		t.Errorf("nf_conn.status: load offset %d, add %d, want %d", insns[1].Offset, insns[2].Constant, want)
	}
	want = byteOffset(t, spec, "sk_buff", "cb") + byteOffset(t, spec, "inet_skb_parm", "frag_max_size")
	if int(insns[3].Offset) != want {
		t.Errorf("sk_buff.cb + inet_skb_parm.frag_max_size: offset %d, want %d", insns[3].Offset, want)
	}
	want = byteOffset(t, spec, "net", "ct", "sysctl_log_invalid")
	if int(insns[4].Offset) != want {
		t.Errorf("net.ct.sysctl_log_invalid: offset %d, want %d", insns[4].Offset, want)
	}
	// pkt_type is a 3-bit field in a byte: the load takes its byte and
	// the shift its bit.
	if insns[5].Offset == 0 || insns[6].Constant < 0 || insns[6].Constant > 5 {
		t.Errorf("sk_buff.pkt_type: byte %d, shift %d", insns[5].Offset, insns[6].Constant)
	}
}

func TestResolveErrors(t *testing.T) {
	spec := kernelBTF(t)
	for _, tc := range []struct {
		name string
		ins  []asm.Instruction
		want string
	}{
		{"no kfunc", []asm.Instruction{Call("bpf_no_such_kfunc")}, "kfunc bpf_no_such_kfunc"},
		{"no struct", []asm.Instruction{Load(asm.R1, asm.R2, asm.Word, Field{Struct: "no_such_struct", Field: "x"})}, "struct no_such_struct"},
		{"no field", []asm.Instruction{Load(asm.R1, asm.R2, asm.Word, Field{Struct: "nf_conn", Field: "no_such_field"})}, "has no field"},
		{"bad index", []asm.Instruction{Load(asm.R1, asm.R2, asm.Word, Field{Struct: "nf_conn", Field: "status[x]"})}, "bad index"},
		{"not a bitfield", LoadBitfield(asm.R1, asm.R2, Field{Struct: "nf_conn", Field: "status"}), "not a bitfield"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := Resolve(tc.ins, spec)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Resolve: %v, want an error with %q", err, tc.want)
			}
		})
	}
}
