package sklookup

import (
	"encoding/binary"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"

	"bpfwall/codegen/abi"
	"bpfwall/codegen/insn"
	"bpfwall/codegen/pkt"
	"bpfwall/codegen/uapi"
	"bpfwall/ir"
	"bpfwall/rules"
)

// Target is what the sk-lookup code needs of the program it is part of.
type Target struct {
	IPv6 bool
	// Ifaces: the rules test interfaces, whose patterns Parse reads from
	// abi.IfacesMap.
	Ifaces bool
	// Scratch is a u32 slot of parse's frame, for a map key.
	Scratch int16
	// OK and NotIP are parse's return codes.
	OK, NotIP int32
	// Key is a u32 slot of main's frame, Pkt where main's parsed packet
	// starts, and End the label of main's end.
	Key, Pkt int16
	End      string
}

// SymParse is where parse's body starts.
const SymParse = "lookup_family"

// Targets returns the socket of every TPROXY rule and nft tproxy
// statement of rs, by rule ID.
func Targets(fam rules.Family, rs []*ir.Rule) map[int]abi.SocketKey {
	out := make(map[int]abi.SocketKey)
	for _, r := range rs {
		if t, _, ok := steerTarget(r); ok {
			out[r.ID] = abi.NewSocketKey(fam, t)
		}
	}
	return out
}

// steerTarget returns the socket r steers to: its TPROXY target's, or its nft
// tproxy statement's (terminal false).
func steerTarget(r *ir.Rule) (t ir.TProxy, terminal, ok bool) {
	if t, ok := r.Action.(ir.TProxy); ok {
		return t, true, true
	}
	if n := len(r.Matches); n > 0 {
		if m, ok := r.Matches[n-1].(ir.TProxyTo); ok {
			return ir.TProxy(m), false, true
		}
	}
	return ir.TProxy{}, false, false
}

// targetValue is an abi.TargetsMap value.
type targetValue struct {
	Key      abi.SocketKey
	Terminal uint32
}

func (v targetValue) MarshalBinary() ([]byte, error) {
	b, _ := v.Key.MarshalBinary()
	return binary.NativeEndian.AppendUint32(b, v.Terminal), nil
}

const targetValueSize = abi.SocketKeySize + 4

// socketsMapSpec is the spec of abi.SocketsMap.
func socketsMapSpec() *ebpf.MapSpec {
	return &ebpf.MapSpec{
		Name:       abi.SocketsMap,
		Type:       ebpf.SockHash,
		KeySize:    abi.SocketKeySize,
		ValueSize:  8,
		MaxEntries: abi.SocketsMapSize,
	}
}

// Maps are the sk-lookup hook's maps for the rules of a program of
// family fam.
func Maps(fam rules.Family, rs []*ir.Rule) []*ebpf.MapSpec {
	targets := &ebpf.MapSpec{
		Name:       abi.TargetsMap,
		Type:       ebpf.Array,
		KeySize:    4,
		ValueSize:  targetValueSize,
		MaxEntries: uint32(max(1, len(rs))), // the kernel refuses an empty array
	}
	for _, r := range rs {
		if t, terminal, ok := steerTarget(r); ok {
			v := targetValue{Key: abi.NewSocketKey(fam, t)}
			if terminal {
				v.Terminal = 1
			}
			targets.Contents = append(targets.Contents, ebpf.MapKV{Key: uint32(r.ID), Value: v})
		}
	}
	return []*ebpf.MapSpec{targets, socketsMapSpec()}
}

// Offsets in struct bpf_sk_lookup.
const (
	lookupFamily   = 8
	lookupProtocol = 12
	lookupRemote4  = 16
	lookupRemote6  = 20
	lookupRemPort  = 36 // __be16
	lookupLocal4   = 40
	lookupLocal6   = 44
	lookupLocPort  = 60 // host order
	lookupIfindex  = 64
)

// Parse emits the body of the sk-lookup hook's parse, at SymParse: it
// fills in the parsed packet at r7 from the lookup context in r6 and
// returns t.OK, or t.NotIP for a lookup of the other family. A lookup is a
// TCP or UDP header that is all there: no fragment offset, the whole
// transport header, and nothing to count in bytes.
func Parse(b *insn.Builder, t Target) {
	b.Mark(SymParse)
	family := int32(uapi.AFInet)
	if t.IPv6 {
		family = uapi.AFInet6
	}
	b.Emit(
		insn.Ld(asm.R1, asm.R6, lookupFamily, asm.Word),
		asm.JNE.Imm(asm.R1, family, "lookup_other"),
		insn.Ld(asm.R1, asm.R6, lookupProtocol, asm.Word),
		insn.St(asm.R7, pkt.Proto, asm.R1, asm.Byte),
		insn.Mov(asm.R1, 0xffff),
		insn.St(asm.R7, pkt.L4Len, asm.R1, asm.Word),
		insn.Ld(asm.R1, asm.R6, lookupRemPort, asm.Half),
		insn.Ntoh(asm.R1, asm.Half),
		insn.St(asm.R7, pkt.Sport, asm.R1, asm.Word),
		insn.Ld(asm.R1, asm.R6, lookupLocPort, asm.Word),
		insn.St(asm.R7, pkt.Dport, asm.R1, asm.Word),
	)
	if !t.IPv6 {
		b.Emit(
			insn.Ld(asm.R1, asm.R6, lookupRemote4, asm.Word),
			insn.Ntoh(asm.R1, asm.Word),
			insn.St(asm.R7, pkt.Src, asm.R1, asm.Word),
			insn.Ld(asm.R1, asm.R6, lookupLocal4, asm.Word),
			insn.Ntoh(asm.R1, asm.Word),
			insn.St(asm.R7, pkt.Dst, asm.R1, asm.Word),
		)
	} else {
		for i := int16(0); i < 4; i++ {
			b.Emit(
				insn.Ld(asm.R1, asm.R6, lookupRemote6+4*i, asm.Word),
				insn.Ntoh(asm.R1, asm.Word),
				insn.St(asm.R7, pkt.Src+4*i, asm.R1, asm.Word),
				insn.Ld(asm.R1, asm.R6, lookupLocal6+4*i, asm.Word),
				insn.Ntoh(asm.R1, asm.Word),
				insn.St(asm.R7, pkt.Dst+4*i, asm.R1, asm.Word),
			)
		}
	}
	if t.Ifaces {
		b.Note("the interface's name patterns, from %s", abi.IfacesMap)
		b.Emit(
			insn.Ld(asm.R1, asm.R6, lookupIfindex, asm.Word),
			insn.St(asm.R10, t.Scratch, asm.R1, asm.Word),
			insn.Movr(asm.R2, asm.R10),
			asm.Add.Imm(asm.R2, int32(t.Scratch)),
			insn.MapRef(asm.R1, abi.IfacesMap),
			asm.FnMapLookupElem.Call(),
			asm.JEq.Imm(asm.R0, 0, "lookup_ok"),
			insn.Ld(asm.R1, asm.R0, 0, asm.DWord),
			insn.St(asm.R7, pkt.Ifaces, asm.R1, asm.DWord),
		)
	}
	b.Mark("lookup_ok")
	b.Emit(insn.Mov(asm.R0, t.OK), asm.Return())
	b.Mark("lookup_other")
	b.Emit(insn.Mov(asm.R0, t.NotIP), asm.Return())
}

// Where main goes at the sk-lookup hook with a rule's ACCEPT (symSteer),
// and with the policy's ACCEPT (SymSteerStatement).
const (
	SymSteer          = "steer"
	SymSteerStatement = "steer_statement"
)

// PktSteer holds, at the sk-lookup hook, the rule ID + 1 of the last nft
// tproxy statement that found its socket (0: none). It is the mark's
// slot, which no lookup has.
const PktSteer = pkt.Mark

// Steer emits the end of main for a lookup the rules accepted (rule in
// r8): a TPROXY rule assigns its socket, or drops the lookup when the
// socket does not exist or does not fit it; any other ACCEPT, and the
// policy's, assigns the socket of the last nft tproxy statement that
// found one, and otherwise passes the lookup on.
//
//	r6 ctx, r7 decision kind, r8 deciding rule, r9 return code
func Steer(b *insn.Builder, t Target) {
	b.Mark(SymSteer)
	b.Note("a TPROXY rule's socket, from %s and %s", abi.TargetsMap, abi.SocketsMap)
	b.Emit(
		insn.St(asm.R10, t.Key, asm.R8, asm.Word),
		insn.Movr(asm.R2, asm.R10),
		asm.Add.Imm(asm.R2, int32(t.Key)),
		insn.MapRef(asm.R1, abi.TargetsMap),
		asm.FnMapLookupElem.Call(),
		asm.JEq.Imm(asm.R0, 0, SymSteerStatement),
		insn.Ld(asm.R1, asm.R0, abi.SocketKeySize, asm.Word), // targetValue.Terminal
		asm.JEq.Imm(asm.R1, 0, SymSteerStatement),
		insn.Movr(asm.R2, asm.R0),
		insn.MapRef(asm.R1, abi.SocketsMap),
		asm.FnMapLookupElem.Call(),
		asm.JNE.Imm(asm.R0, 0, "steer_found"),
		insn.Mov(asm.R7, int32(abi.NoSocket)),
		insn.Mov(asm.R9, uapi.SkDrop),
		insn.Ja(t.End),
	)
	b.Mark("steer_found")
	assign(b, t)

	b.Mark(SymSteerStatement)
	b.Note("the socket of the last nft tproxy statement that found one")
	b.Emit(
		insn.Ld(asm.R1, asm.R10, t.Pkt+PktSteer, asm.Word),
		asm.JEq.Imm(asm.R1, 0, t.End),
		asm.Sub.Imm(asm.R1, 1),
		insn.St(asm.R10, t.Key, asm.R1, asm.Word),
		insn.Movr(asm.R2, asm.R10),
		asm.Add.Imm(asm.R2, int32(t.Key)),
		insn.MapRef(asm.R1, abi.TargetsMap),
		asm.FnMapLookupElem.Call(),
		asm.JEq.Imm(asm.R0, 0, t.End),
		insn.Movr(asm.R2, asm.R0),
		insn.MapRef(asm.R1, abi.SocketsMap),
		asm.FnMapLookupElem.Call(),
		// Gone since the statement found it: as if it had closed just
		// before, the lookup goes on.
		asm.JEq.Imm(asm.R0, 0, t.End),
	)
	assign(b, t)
}

// assign emits bpf_sk_assign of the socket in r0 to the lookup and its
// release, and goes to main's end with SK_PASS, or SK_DROP and
// abi.AssignFailed when the socket does not fit the lookup.
func assign(b *insn.Builder, t Target) {
	b.Emit(
		insn.Movr(asm.R9, asm.R0),
		insn.Movr(asm.R1, asm.R6),
		insn.Movr(asm.R2, asm.R9),
		insn.Mov(asm.R3, 0),
		asm.FnSkAssign.Call(),
		insn.St(asm.R10, t.Key, asm.R0, asm.DWord),
		insn.Movr(asm.R1, asm.R9),
		asm.FnSkRelease.Call(),
		insn.Mov(asm.R9, uapi.SkPass),
		insn.Ld(asm.R1, asm.R10, t.Key, asm.DWord),
		asm.JEq.Imm(asm.R1, 0, t.End),
		insn.Mov(asm.R7, int32(abi.AssignFailed)),
		insn.Mov(asm.R9, uapi.SkDrop),
		insn.Ja(t.End),
	)
}
