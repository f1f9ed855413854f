package codegen

import "github.com/cilium/ebpf/btf"

// BTF descriptions of the functions. The chain functions and parse are
// global functions, which the verifier checks once each, on their own,
// with the arguments their prototypes describe; the loop callbacks are
// static, as bpf_loop requires.
var (
	btfInt  = &btf.Int{Name: "int", Size: 4, Encoding: btf.Signed}
	btfLong = &btf.Int{Name: "long", Size: 8, Encoding: btf.Signed}
	btfU64  = &btf.Int{Name: "__u64", Size: 8}
)

// btfPkt is the parsed packet; the verifier lets a global function read
// and write its bytes (at -O1 with the classifier's key area).
func (c *compiler) btfPkt() *btf.Struct {
	if c.pktType == nil {
		size := uint32(c.pktSize())
		c.pktType = &btf.Struct{
			Name: "bpfwall_pkt",
			Size: size,
			Members: []btf.Member{{
				Name: "bytes",
				Type: &btf.Array{Index: btfInt, Type: &btf.Int{Name: "unsigned char", Size: 1}, Nelems: size},
			}},
		}
	}
	return c.pktType
}

// ctxType is the program's context, which the verifier recognizes by name.
func (c *compiler) ctxType() *btf.Pointer {
	if c.hook.tc() {
		return &btf.Pointer{Target: &btf.Struct{Name: "__sk_buff"}}
	}
	if c.hook == HookSkLookup {
		return &btf.Pointer{Target: &btf.Struct{Name: "bpf_sk_lookup"}}
	}
	if c.hook == HookNetfilter {
		return &btf.Pointer{Target: &btf.Struct{Name: "bpf_nf_ctx"}}
	}
	return &btf.Pointer{Target: &btf.Struct{Name: "xdp_md"}}
}

func (c *compiler) funcMain() *btf.Func {
	return &btf.Func{
		Name:    ProgramName,
		Linkage: btf.GlobalFunc,
		Type: &btf.FuncProto{
			Return: btfInt,
			Params: []btf.FuncParam{{Name: "ctx", Type: c.ctxType()}},
		},
	}
}

// funcCtxPkt describes a global function int name(ctx, pkt): parse, the
// conntrack lookup and the REJECT functions.
func (c *compiler) funcCtxPkt(name string) *btf.Func {
	return &btf.Func{
		Name:    name,
		Linkage: btf.GlobalFunc,
		Type: &btf.FuncProto{
			Return: btfInt,
			Params: []btf.FuncParam{
				{Name: "ctx", Type: c.ctxType()},
				{Name: "pkt", Type: &btf.Pointer{Target: c.btfPkt()}},
			},
		},
	}
}

// funcChain describes a chain function: int chain(pkt), or int chain(pkt,
// ctx) when LOG rules need the context to copy the packet.
func (c *compiler) funcChain(name string) *btf.Func {
	params := []btf.FuncParam{{Name: "pkt", Type: &btf.Pointer{Target: c.btfPkt()}}}
	if c.log {
		params = append(params, btf.FuncParam{Name: "ctx", Type: c.ctxType()})
	}
	return &btf.Func{
		Name:    name,
		Linkage: btf.GlobalFunc,
		Type:    &btf.FuncProto{Return: btfInt, Params: params},
	}
}

// funcCallback describes a bpf_loop callback: long cb(__u64 index, void *ctx).
func funcCallback(name string) *btf.Func {
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
