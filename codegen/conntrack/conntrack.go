package conntrack

import (
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/btf"

	"bpfwall/codegen/insn"
)

// Sym is the symbol of the ct_state function.
const Sym = "ct_state"

// Packet is how ct_state reads packet bytes: the packet parser's
// machinery at the program's hook.
type Packet interface {
	// Load copies n bytes of packet (r4 holds the length when n is 0)
	// from the offset in r2 to frame+buf, with the context in r1; it
	// jumps to fail when the packet is shorter. It clobbers r0-r5.
	Load(frame asm.Register, buf int16, n int32, fail string)
	// CallbackPrologue starts a bpf_loop callback: it keeps the context
	// at insn.CallbackCtx and leaves the loop state in r6.
	CallbackPrologue()
}

// Target is what ct_state needs of the program it is part of, at xdp
// or tc-ingress.
type Target struct {
	IPv6 bool
	// TC: the program runs at tc-ingress and looks up with
	// bpf_skb_ct_lookup; otherwise at xdp, with bpf_xdp_ct_lookup.
	TC bool
	// Proto is ct_state's prototype: int ct_state(ctx, pkt).
	Proto *btf.FuncProto
	// ScratchMap is an array whose one value, of at least ScratchSize
	// bytes, holds the SACK walk's loop state.
	ScratchMap string
	Packet
	// EntryUnknown makes the state of a packet that has an entry
	// unknown. Conntrack changes the entry for the packet before any
	// chain runs (TCP windows and state, seen-reply, the timeout), even
	// when a chain then drops it, and nat rewrites the destination of
	// some (a reply of source NAT): an accelerator, which would drop the
	// packet before conntrack sees it, must leave those to the chains.
	EntryUnknown bool
}

// Lookup emits ct_state for xdp and tc-ingress: the function returns
// the model.ConnState of the parsed packet its second argument points to.
func Lookup(b *insn.Builder, t Target) {
	g := &gen{b: b, Target: t}
	g.state()
}

type gen struct {
	b *insn.Builder
	Target
}

// The SACK walk's loop state, in ScratchMap's value.
const (
	sackIndex   = 0
	sackLen     = 8
	sackMax     = 16 // the highest right edge so far
	sackOptions = 64 // the TCP options, at most 40 bytes

	// ScratchSize is how much of ScratchMap's value ct_state uses.
	ScratchSize = sackOptions + maxOptions
)

// maxOptions bounds the TCP options' length.
const maxOptions = 40
