package codegen

import (
	"github.com/cilium/ebpf/btf"

	"bpfwall/codegen/abi"
)

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
	if c.hook.nf() {
		return &btf.Pointer{Target: &btf.Struct{Name: "bpf_nf_ctx"}}
	}
	return &btf.Pointer{Target: &btf.Struct{Name: "xdp_md"}}
}

// objectName is the program's name in the kernel, as bpftool shows it:
// bpfwall_HOOK_CHAIN, in the characters an object name may hold. The
// kernel keeps 15; bpftool prints the whole name from the BTF of the
// main function, which has it.
func (c *compiler) objectName() string {
	where := c.hook.String()
	if c.hook == HookNetfilter {
		where = c.p.Table // bpfwall_filter_INPUT, bpfwall_mangle_FORWARD
	}
	name := []byte("bpfwall_" + where + "_" + c.p.Chains[0].Name)
	for i, ch := range name {
		if !(ch >= 'a' && ch <= 'z' || ch >= 'A' && ch <= 'Z' || ch >= '0' && ch <= '9' || ch == '_') {
			name[i] = '_'
		}
	}
	return string(name)
}

// The value types of the maps that bpftool map dump shows as structures.
var (
	// btfCounter is a Counter: what one rule (or, last, the policy)
	// counted, per CPU.
	btfCounter = &btf.Struct{Name: "bpfwall_counter", Size: 16, Members: []btf.Member{
		{Name: "packets", Type: btfU64},
		{Name: "bytes", Type: btfU64, Offset: 64},
	}}
	// btfCounterBlock is an abi.CounterBlock.
	btfCounterBlock = &btf.Array{Index: btfU32, Type: btfCounter, Nelems: abi.CountersPerBlock}
	// btfDecision is an abi.Decision.
	btfDecision = &btf.Struct{Name: "bpfwall_decision", Size: 8, Members: []btf.Member{
		{Name: "rule", Type: btfU32},
		{Name: "kind", Type: btfU32, Offset: 32},
	}}
	// btfIfaceMask is an abi.IfacesMap value: the interface patterns an
	// interface's name matches, as bits.
	btfIfaceMask = &btf.Typedef{Name: "bpfwall_iface_mask", Type: btfU64}
	// btfIfaceSlot is an abi.IfaceSlot.
	btfIfaceSlot = &btf.Struct{Name: "bpfwall_iface_slot", Size: 16, Members: []btf.Member{
		{Name: "ifindex", Type: btfU32},
		{Name: "pad", Type: btfU32, Offset: 32},
		{Name: "mask", Type: btfIfaceMask, Offset: 64},
	}}
)

func (c *compiler) funcMain() *btf.Func {
	return &btf.Func{
		Name:    c.objectName(),
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
	return &btf.Func{Name: name, Linkage: btf.GlobalFunc, Type: c.protoCtxPkt()}
}

// protoCtxPkt is the prototype int f(ctx, pkt), which the packages that
// emit such functions (reject, conntrack) are given.
func (c *compiler) protoCtxPkt() *btf.FuncProto {
	return &btf.FuncProto{
		Return: btfInt,
		Params: []btf.FuncParam{
			{Name: "ctx", Type: c.ctxType()},
			{Name: "pkt", Type: &btf.Pointer{Target: c.btfPkt()}},
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
