package codegen

import (
	"fmt"
	"maps"
	"slices"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/btf"

	"bpfwall/codegen/abi"
	"bpfwall/codegen/conntrack"
	"bpfwall/codegen/kernel"
	"bpfwall/ir"
	"bpfwall/rules"
)

// Conntrack state matches are answered by the kernel's own conntrack
// table. Before the entry chain runs, the function ct_state (package
// conntrack) stores the packet's state in the parsed packet. The kfuncs'
// BTF IDs and the kernel structs' offsets it uses depend on the running
// kernel: the instructions carry their names, and KernelSpec fills them
// in from the kernel's BTF (package kernel), so that Spec itself stays
// deterministic.

// ctState emits ct_state for the program's hook.
func (c *compiler) ctState() {
	switch {
	case c.hook.nf():
		c.ctStateNetfilter()
	case c.hook == HookTCEgress:
		c.ctStateEgress()
	default:
		conntrack.Lookup(c.b, conntrack.Target{
			IPv6:         c.p.Family == rules.IPv6,
			TC:           c.hook.tc(),
			Proto:        c.protoCtxPkt(),
			ScratchMap:   abi.ScratchMap,
			Packet:       parser{c},
			EntryUnknown: c.accel,
		})
	}
}

// abi.ScratchMap's value holds ct_state's loop state too.
var _ [scratchSize - conntrack.ScratchSize]struct{}

// parser is how ct_state reads packet bytes: as the packet parser does.
type parser struct{ c *compiler }

func (p parser) Load(frame asm.Register, buf int16, n int32, fail string) {
	p.c.load(frame, buf, n, fail)
}

func (p parser) CallbackPrologue() { p.c.callbackPrologue() }

// ctStateEgress emits ct_state for tc-egress: the packet has been
// through conntrack already (LOCAL_OUT, or PREROUTING when forwarded),
// and skb->_nfct holds the state the OUTPUT and FORWARD chains saw, as
// conntrack_mt reads it (nf_ct_get): no conntrack is INVALID, a NULL
// entry with IP_CT_UNTRACKED is UNTRACKED, and the reply flavours count
// as ESTABLISHED and RELATED.
func (c *compiler) ctStateEgress() {
	b := c.b
	b.Function(c.funcCtxPkt(conntrack.Sym), "conntrack state of the packet: skb->_nfct, which conntrack set before the packet left")
	// bpf_cast_to_kern_ctx: the sk_buff behind the context.
	b.Emit(kernel.Call(kernel.CastToKernCtx))
	conntrack.FromSkb(b, false)
}

// UsesConntrack reports whether the program looks packets up in the
// kernel's conntrack table: the loader must make sure conntrack tracks
// connections in the namespace.
func (p *Program) UsesConntrack() bool { return p.uses.conntrack }

// NeedsKernelBTF reports whether the program calls kfuncs or reads kernel
// structs, whose BTF IDs and offsets KernelSpec takes from the running
// kernel: a program that looks up conntrack, and every netfilter program.
func (p *Program) NeedsKernelBTF() bool {
	return p.UsesConntrack() || p.Accelerator || p.Hook.nf() || p.testsOwner()
}

// KernelSpec returns a copy of Spec whose kfunc calls and kernel struct
// offsets are those of kernel, the running kernel's BTF
// (btf.LoadKernelSpec); Spec itself when the program needs none.
func (p *Program) KernelSpec(spec *btf.Spec) (*ebpf.CollectionSpec, error) {
	if !p.NeedsKernelBTF() {
		return p.Spec, nil
	}
	if spec == nil {
		return nil, fmt.Errorf("the %s program needs the kernel's BTF: %w", p.Hook, ebpf.ErrNotSupported)
	}
	// Resolve changes only the main program's instructions: the rest is
	// shared (Spec.Copy copied every map's contents, 100k entries and
	// more at 100k rules).
	out := *p.Spec
	out.Programs = maps.Clone(p.Spec.Programs)
	main := *out.Programs[abi.ProgramName]
	main.Instructions = slices.Clone(main.Instructions)
	out.Programs[abi.ProgramName] = &main
	if err := kernel.Resolve(main.Instructions, spec); err != nil {
		return nil, err
	}
	return &out, nil
}

// ingressStateWarnings names the rules whose conntrack state an ingress
// program looks up before conntrack has seen the packet, where it still
// cannot always know it: a TCP segment of a connection whose sequence
// numbers NAT adjusts (package conntrack), and a packet of class U in a
// VLAN-tagged frame (deferClassU), are dropped at the state match. (What
// the kfuncs cannot look up, the netfilter stage decides.)
func ingressStateWarnings(p *ir.Program, hook Hook) []*rules.Error {
	if hook != HookXDP && hook != HookTCIngress {
		return nil
	}
	var out []*rules.Error
	for _, r := range p.Rules {
		for _, m := range r.Matches {
			if _, ok := m.(ir.CTState); ok {
				out = append(out, rules.Errorf(r.Pos, "conntrack state on %s is looked up before conntrack sees the packet: "+
					"it drops TCP that a NAT helper renumbers, and VLAN-tagged ICMP, fragments and other protocols whose state only conntrack knows", hook))
				break
			}
		}
	}
	return out
}
