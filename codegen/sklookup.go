package codegen

import (
	"encoding/binary"
	"fmt"
	"strings"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"

	"bpfwall/codegen/abi"
	"bpfwall/codegen/insn"
	"bpfwall/codegen/pkt"
	"bpfwall/codegen/uapi"
	"bpfwall/ir"
	"bpfwall/rules"
)

// The sk-lookup hook: the program reads a socket lookup (struct
// bpf_sk_lookup) instead of a packet, runs the mangle PREROUTING rules on
// it, and steers the lookups a TPROXY rule takes to that rule's socket,
// which the loader keeps in abi.SocketsMap. A rule whose socket is missing
// drops the lookup, as xt_TPROXY drops the packet; lookups the rules accept
// (or no rule takes) go on to the kernel's own lookup.

// Targets returns the socket of every TPROXY rule and nft tproxy
// statement, by rule ID.
func (p *Program) Targets() map[int]abi.SocketKey {
	out := make(map[int]abi.SocketKey)
	for _, r := range p.IR.Rules {
		if t, _, ok := steerTarget(r); ok {
			out[r.ID] = abi.NewSocketKey(p.IR.Family, t)
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

// dumpTargets lists the TPROXY rules' sockets for a dump.
func (p *Program) dumpTargets(b *strings.Builder) {
	targets := p.Targets()
	if len(targets) == 0 {
		return
	}
	b.WriteString("; TPROXY sockets (targets entries):")
	for _, r := range p.IR.Rules {
		if k, ok := targets[r.ID]; ok {
			fmt.Fprintf(b, " r%d=%s", r.ID, k)
		}
	}
	b.WriteString("\n; the packet mark (--tproxy-mark) is not set: sk_lookup needs no policy routing\n")
}

// SocketsMapSpec is the spec of abi.SocketsMap.
func SocketsMapSpec() *ebpf.MapSpec {
	return &ebpf.MapSpec{
		Name:       abi.SocketsMap,
		Type:       ebpf.SockHash,
		KeySize:    abi.SocketKeySize,
		ValueSize:  8,
		MaxEntries: abi.SocketsMapSize,
	}
}

// lookupMaps are the sk-lookup hook's maps.
func (c *compiler) lookupMaps() []*ebpf.MapSpec {
	targets := &ebpf.MapSpec{
		Name:       abi.TargetsMap,
		Type:       ebpf.Array,
		KeySize:    4,
		ValueSize:  targetValueSize,
		MaxEntries: uint32(max(1, len(c.p.Rules))), // the kernel refuses an empty array
	}
	for _, r := range c.p.Rules {
		if t, terminal, ok := steerTarget(r); ok {
			v := targetValue{Key: abi.NewSocketKey(c.p.Family, t)}
			if terminal {
				v.Terminal = 1
			}
			targets.Contents = append(targets.Contents, ebpf.MapKV{Key: uint32(r.ID), Value: v})
		}
	}
	return []*ebpf.MapSpec{targets, SocketsMapSpec()}
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

// parseLookup emits the sk-lookup hook's parse: it fills in the
// bpfwall_pkt at r2 from the lookup context in r1. A lookup is a TCP or
// UDP header that is all there: no fragment offset, the whole transport
// header, and nothing to count in bytes.
func (c *compiler) parseLookup() {
	b := c.b
	c.parseFunction("lookup_family", "read the socket lookup into the bpfwall_pkt at r2")
	b.Mark("lookup_family")
	family := int32(uapi.AFInet)
	if c.p.Family == rules.IPv6 {
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
	if c.p.Family == rules.IPv4 {
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
	if len(c.ifaces) > 0 {
		b.Note("the interface's name patterns, from %s", abi.IfacesMap)
		b.Emit(
			insn.Ld(asm.R1, asm.R6, lookupIfindex, asm.Word),
			insn.St(asm.R10, parseScratch, asm.R1, asm.Word),
			insn.Movr(asm.R2, asm.R10),
			asm.Add.Imm(asm.R2, parseScratch),
			insn.MapRef(asm.R1, abi.IfacesMap),
			asm.FnMapLookupElem.Call(),
			asm.JEq.Imm(asm.R0, 0, "lookup_ok"),
			insn.Ld(asm.R1, asm.R0, 0, asm.DWord),
			insn.St(asm.R7, pkt.Ifaces, asm.R1, asm.DWord),
		)
	}
	b.Mark("lookup_ok")
	b.Emit(insn.Mov(asm.R0, parseOK), asm.Return())
	b.Mark("lookup_other")
	b.Emit(insn.Mov(asm.R0, parseNotIP), asm.Return())
}

// Where main goes at the sk-lookup hook with a rule's ACCEPT (symSteer),
// and with the policy's ACCEPT (symSteerStatement).
const (
	symSteer          = "steer"
	symSteerStatement = "steer_statement"
)

// pktSteer holds, at the sk-lookup hook, the rule ID + 1 of the last nft
// tproxy statement that found its socket (0: none). It is the mark's
// slot, which no lookup has.
const pktSteer = pkt.Mark

// steer emits the end of main for a lookup the rules accepted (rule in
// r8): a TPROXY rule assigns its socket, or drops the lookup when the
// socket does not exist or does not fit it; any other ACCEPT, and the
// policy's, assigns the socket of the last nft tproxy statement that
// found one, and otherwise passes the lookup on.
//
//	r6 ctx, r7 decision kind, r8 deciding rule, r9 return code
func (c *compiler) steer() {
	b := c.b
	b.Mark(symSteer)
	b.Note("a TPROXY rule's socket, from %s and %s", abi.TargetsMap, abi.SocketsMap)
	b.Emit(
		insn.St(asm.R10, c.mainKey(), asm.R8, asm.Word),
		insn.Movr(asm.R2, asm.R10),
		asm.Add.Imm(asm.R2, int32(c.mainKey())),
		insn.MapRef(asm.R1, abi.TargetsMap),
		asm.FnMapLookupElem.Call(),
		asm.JEq.Imm(asm.R0, 0, symSteerStatement),
		insn.Ld(asm.R1, asm.R0, abi.SocketKeySize, asm.Word), // targetValue.Terminal
		asm.JEq.Imm(asm.R1, 0, symSteerStatement),
		insn.Movr(asm.R2, asm.R0),
		insn.MapRef(asm.R1, abi.SocketsMap),
		asm.FnMapLookupElem.Call(),
		asm.JNE.Imm(asm.R0, 0, "steer_found"),
		insn.Mov(asm.R7, int32(abi.NoSocket)),
		insn.Mov(asm.R9, uapi.SkDrop),
		insn.Ja(symMainEnd),
	)
	b.Mark("steer_found")
	c.assign()

	b.Mark(symSteerStatement)
	b.Note("the socket of the last nft tproxy statement that found one")
	b.Emit(
		insn.Ld(asm.R1, asm.R10, c.mainPkt()+pktSteer, asm.Word),
		asm.JEq.Imm(asm.R1, 0, symMainEnd),
		asm.Sub.Imm(asm.R1, 1),
		insn.St(asm.R10, c.mainKey(), asm.R1, asm.Word),
		insn.Movr(asm.R2, asm.R10),
		asm.Add.Imm(asm.R2, int32(c.mainKey())),
		insn.MapRef(asm.R1, abi.TargetsMap),
		asm.FnMapLookupElem.Call(),
		asm.JEq.Imm(asm.R0, 0, symMainEnd),
		insn.Movr(asm.R2, asm.R0),
		insn.MapRef(asm.R1, abi.SocketsMap),
		asm.FnMapLookupElem.Call(),
		// Gone since the statement found it: as if it had closed just
		// before, the lookup goes on.
		asm.JEq.Imm(asm.R0, 0, symMainEnd),
	)
	c.assign()
}

// assign emits bpf_sk_assign of the socket in r0 to the lookup and its
// release, and goes to main's end with SK_PASS, or SK_DROP and
// abi.AssignFailed when the socket does not fit the lookup.
func (c *compiler) assign() {
	c.b.Emit(
		insn.Movr(asm.R9, asm.R0),
		insn.Movr(asm.R1, asm.R6),
		insn.Movr(asm.R2, asm.R9),
		insn.Mov(asm.R3, 0),
		asm.FnSkAssign.Call(),
		insn.St(asm.R10, c.mainKey(), asm.R0, asm.DWord),
		insn.Movr(asm.R1, asm.R9),
		asm.FnSkRelease.Call(),
		insn.Mov(asm.R9, uapi.SkPass),
		insn.Ld(asm.R1, asm.R10, c.mainKey(), asm.DWord),
		asm.JEq.Imm(asm.R1, 0, symMainEnd),
		insn.Mov(asm.R7, int32(abi.AssignFailed)),
		insn.Mov(asm.R9, uapi.SkDrop),
		insn.Ja(symMainEnd),
	)
}
