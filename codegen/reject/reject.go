package reject

import (
	"fmt"
	"maps"
	"slices"

	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/btf"

	"bpfwall/codegen/insn"
	"bpfwall/codegen/uapi"
)

// ScratchSize is the size of abi.RejectScratchMap's value.
const ScratchSize = rsSize

// Target is what the reply builder needs of the program it is part of.
type Target struct {
	IPv6 bool
	// TC: the program runs at tc, with a __sk_buff, and transmits by
	// redirect; otherwise at XDP, with XDP_TX.
	TC bool
	// Forward: the rules are FORWARD's, and an ICMP error's source is
	// routing's choice.
	Forward bool
	// Reassembled: netfilter sees reassembled datagrams at the hook
	// (ir.Program.Reassembled).
	Reassembled bool
	// Drop is the hook's code for a dropped packet.
	Drop int32
	// Proto is the prototype of a reject function: int f(ctx, pkt).
	Proto *btf.FuncProto
}

// Emit emits reject function k for each --reject-with withs[k] names, and
// the loop callbacks they use. Reject function k turns the packet, whose
// parsed fields are at its second argument, into the reply the kernel
// would send and returns the code that transmits it, or t.Drop when the
// kernel sends no reply.
func Emit(b *insn.Builder, t Target, withs []string) {
	g := &gen{b: b, Target: t}
	for k, with := range withs {
		g.reply(k, with)
	}
	g.step()
	if !t.IPv6 {
		g.optionStep()
	}
}

// Valid reports whether with is a --reject-with of the family.
func Valid(with string, ipv6 bool) bool {
	_, ok := types[with]
	return ok && (with == "tcp-reset" || strings6(with) == ipv6)
}

// Reset reports whether with answers with a TCP reset.
func Reset(with string) bool { return types[with].tcpReset }

// Names are the --reject-with values, sorted.
func Names() []string {
	out := slices.Collect(maps.Keys(types))
	slices.Sort(out)
	return out
}

type gen struct {
	b *insn.Builder
	Target
}

// loadHelper is the helper that copies packet bytes.
func (g *gen) loadHelper() asm.BuiltinFunc {
	if g.TC {
		return asm.FnSkbLoadBytes
	}
	return asm.FnXdpLoadBytes
}

// ifindex loads the packet's interface index from the context in r6.
func (g *gen) ifindex(dst asm.Register) asm.Instruction {
	if g.TC {
		return insn.Ld(dst, asm.R6, uapi.SkbIfindex, asm.Word)
	}
	return insn.Ld(dst, asm.R6, uapi.XDPIngressIfindex, asm.Word)
}

// replyType is what one --reject-with sends.
type replyType struct {
	tcpReset bool
	code     uint8 // ICMP or ICMPv6 destination unreachable code
}

// types are the --reject-with names ir.Reject carries.
var types = map[string]replyType{
	"icmp-net-unreachable":   {code: 0},
	"icmp-host-unreachable":  {code: 1},
	"icmp-proto-unreachable": {code: 2},
	"icmp-port-unreachable":  {code: 3},
	"icmp-net-prohibited":    {code: 9},
	"icmp-host-prohibited":   {code: 10},
	"icmp-admin-prohibited":  {code: 13},
	"icmp6-no-route":         {code: 0},
	"icmp6-adm-prohibited":   {code: 1},
	"icmp6-addr-unreachable": {code: 3},
	"icmp6-port-unreachable": {code: 4},
	"icmp6-policy-fail":      {code: 5},
	"icmp6-reject-route":     {code: 6},
	"tcp-reset":              {tcpReset: true},
}

// strings6 reports whether a --reject-with name is IPv6's.
func strings6(with string) bool { return len(with) > 5 && with[:5] == "icmp6" }

// abi.RejectScratchMap's value: the checksum loop's state, and buffers the
// stack has no room for (a reject function's frame comes on top of
// main's, within BPF's 512 bytes).
const (
	rsOff    = 0  // u64: next packet offset to sum
	rsEnd    = 8  // u64: where the range ends
	rsSum    = 16 // u64: the 32-bit sum so far
	rsErr    = 24 // u64: set when a load failed
	rsBuf    = 32 // rsChunk bytes of packet, and 4 bytes of padding
	rsChunk  = 512
	rsPseudo = rsBuf + rsChunk + 8 // 40 bytes: a pseudo-header
	rsSize   = rsPseudo + 40
)

// The frame of a reject function.
const (
	rjKey      = -8   // u32 map key
	rjLoop     = -24  // the loop callback's context: insn.LoopCtx, insn.LoopState
	rjSum      = -32  // u64: checksum being summed
	rjQuote    = -40  // u64: bytes of the original packet the reply quotes
	rjEnd      = -48  // u64: offset where the original datagram ends
	rjTmp      = -56  // u64
	rjTCP      = -80  // 24 bytes: the original TCP header
	rjHdr      = -144 // 64 bytes: the reply's IP and ICMP or TCP headers
	rjL2       = -176 // 32 bytes: the link-layer header
	rjOrig     = -224 // 48 bytes: the original IP header
	rjL3       = -232 // u64: offset of the IP header
	rjL4       = -240 // u64: offset of the transport header
	rjQuoteMax = -248 // u64: the most an ICMP error may quote
	rjPkt      = -256 // the parsed packet's pointer
)

// symStep is the checksum loop's callback.
const symStep = "reject_csum_step"

// Sym is the symbol of reject function k.
func Sym(k int) string { return fmt.Sprintf("reject%d", k) }
