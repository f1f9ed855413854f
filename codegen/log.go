package codegen

import (
	"fmt"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"

	"bpfwall/codegen/abi"
	"bpfwall/codegen/insn"
	"bpfwall/codegen/pkt"
	"bpfwall/codegen/uapi"
	"bpfwall/ir"
)

// The ring buffer's size and wake-up threshold.
const (
	// logRingSize is the ring buffer's size: some 1900 events.
	logRingSize = 1 << 20
	// logWakeBytes is how full the ring buffer gets before an event wakes
	// its reader up; readers poll too (abi.LogPoll).
	logWakeBytes = 64 << 10
)

// Flags of the ring buffer helpers.
const (
	rbAvailData   = 0 // BPF_RB_AVAIL_DATA
	rbNoWakeup    = 1 // BPF_RB_NO_WAKEUP
	rbForceWakeup = 2 // BPF_RB_FORCE_WAKEUP
)

// hasLog reports whether the program has LOG rules: only then do the chain
// functions take the context, which they need to copy the packet.
func (c *compiler) hasLog() bool {
	for _, r := range c.p.Rules {
		if _, ok := r.Action.(ir.Log); ok {
			return true
		}
	}
	return false
}

// logMaps are the maps of LOG rules.
func logMaps() []*ebpf.MapSpec {
	return []*ebpf.MapSpec{
		{Name: abi.LogMap, Type: ebpf.RingBuf, MaxEntries: logRingSize},
		{Name: abi.LogLostMap, Type: ebpf.PerCPUArray, KeySize: 4, ValueSize: 8, MaxEntries: 1, Key: btfU32, Value: btfU64},
	}
}

// checkLog reports the LOG options and chains whose line the hook cannot
// reproduce exactly.
func (c *compiler) checkLog(r *ir.Rule, a ir.Log) string {
	chain := c.p.Chains[0].Name
	switch {
	case a.Flags&logUID != 0 && c.hook != HookNetfilter && c.hook != HookTCEgress:
		// nf_log_dump_sk_uid_gid prints the fsuid and fsgid of the file
		// of skb->sk: before the stack (and at INPUT the socket is the one
		// early demux found, if any) the packet has no socket yet.
		return fmt.Sprintf("--log-uid (nft: log flags skuid, or all) is not supported on %s: the packet has no socket there yet (only at a chain's own netfilter hook, or at tc-egress)", c.hook)
	case c.p.Table == "netdev":
		// nf_log_netdev_packet logs ARP and other frames too, which the
		// program passes without running the chain.
		return fmt.Sprintf("log in netdev chain %s is not supported on %s: nft logs every frame there, and the program runs the rules for IP packets only", chain, c.hook)
	case c.hook == HookNetfilter:
		// The hook state gives both devices netfilter prints.
	case c.hook == HookTCEgress && chain != "OUTPUT" && chain != "POSTROUTING":
		return fmt.Sprintf("LOG in chain %s is not supported on %s: the line names the input interface, which the hook does not know", chain, c.hook)
	case c.hook != HookTCEgress && chain != "INPUT" && chain != "PREROUTING":
		return fmt.Sprintf("LOG in chain %s is not supported on %s: the line names the output interface, which the hook does not know", chain, c.hook)
	}
	return ""
}

// logUID is XT_LOG_UID.
const logUID = 0x08

// logsUID reports whether a LOG rule of the program has --log-uid: its
// records then carry the socket's fsuid and fsgid, which parse reads.
// collect keeps the answer in c.logUID: LOG rules ask for every event.
func (c *compiler) logsUID() bool {
	for _, r := range c.p.Rules {
		if a, ok := r.Action.(ir.Log); ok && a.Flags&logUID != 0 {
			return true
		}
	}
	return false
}

// logRecordSize is the size of the program's LOG records.
func (c *compiler) logRecordSize() int32 {
	if c.logUID {
		return abi.LogUIDSize
	}
	return abi.LogSize
}

// Stack slot of a chain function holding the program's context, when the
// program has LOG rules; in main, of the entry chain it holds, also when
// the program has REJECT rules.
const chainCtx = -40

// logEvent emits the LOG action of rule r: reserve a record, fill it in,
// copy the frame's first bytes and submit; a full ring buffer counts the
// event as lost. r6 is the parsed packet, the context is at chainCtx.
func (c *compiler) logEvent(r *ir.Rule) {
	b := c.b
	lost := ruleLabel(r) + "_log_lost"
	done := ruleLabel(r) + "_logged"
	copied := ruleLabel(r) + "_log_copied"
	b.Emit(
		insn.MapRef(asm.R1, abi.LogMap),
		insn.Mov(asm.R2, c.logRecordSize()),
		insn.Mov(asm.R3, 0),
		asm.FnRingbufReserve.Call(),
		asm.JEq.Imm(asm.R0, 0, lost),
		insn.Movr(asm.R7, asm.R0),
	)
	if a, _ := r.Action.(ir.Log); a.Flags&logUID != 0 {
		c.logOwner(r)
	} else if c.logUID {
		b.Emit(insn.StImm(asm.R7, abi.LogUIDSet, 0, asm.Word))
	}
	b.Emit(
		insn.StImm(asm.R7, abi.LogRule, int32(r.ID), asm.Word),
		insn.StImm(asm.R7, abi.LogCapLen, 0, asm.Word),
		insn.StImm(asm.R7, abi.LogFlags, 0, asm.Word),
		insn.StImm(asm.R7, abi.LogOut, 0, asm.Word),
		asm.FnKtimeGetNs.Call(),
		insn.St(asm.R7, abi.LogTime, asm.R0, asm.DWord),
		insn.Ld(asm.R1, asm.R10, chainCtx, asm.DWord),
	)
	if c.hook.nf() {
		// r6, the parsed packet, is not needed after the LOG.
		b.Emit(insn.St(asm.R10, chainDynptr-8, asm.R6, asm.DWord))
		c.logNetfilter(r, copied)
		b.Mark(copied)
		b.Emit(insn.Ld(asm.R6, asm.R10, chainDynptr-8, asm.DWord))
		c.logSubmit(r, lost, done)
		return
	}
	if c.hook.tc() {
		b.Emit(
			insn.Ld(asm.R2, asm.R1, uapi.SkbIfindex, asm.Word),
			insn.St(asm.R7, abi.LogIfindex, asm.R2, asm.Word),
			insn.Ld(asm.R2, asm.R1, uapi.SkbMark, asm.Word),
			insn.St(asm.R7, abi.LogMark, asm.R2, asm.Word),
			insn.Ld(asm.R8, asm.R1, uapi.SkbLen, asm.Word),
		)
	} else {
		b.Emit(
			insn.Ld(asm.R2, asm.R1, uapi.XDPIngressIfindex, asm.Word),
			insn.St(asm.R7, abi.LogIfindex, asm.R2, asm.Word),
			insn.StImm(asm.R7, abi.LogMark, 0, asm.Word),
			asm.FnXdpGetBuffLen.Call(),
			insn.Movr(asm.R8, asm.R0),
		)
	}
	capped := ruleLabel(r) + "_log_capped"
	b.Emit(
		insn.St(asm.R7, abi.LogLen, asm.R8, asm.Word),
		asm.JLE.Imm(asm.R8, abi.LogCapture, capped),
		insn.Mov(asm.R8, abi.LogCapture),
	)
	b.Mark(capped)
	b.Emit(
		asm.JEq.Imm(asm.R8, 0, copied),
		insn.Ld(asm.R1, asm.R10, chainCtx, asm.DWord),
		insn.Mov(asm.R2, 0),
		insn.Movr(asm.R3, asm.R7),
		asm.Add.Imm(asm.R3, abi.LogData),
		insn.Movr(asm.R4, asm.R8),
		c.loadHelper().Call(),
		asm.JNE.Imm(asm.R0, 0, copied),
		insn.St(asm.R7, abi.LogCapLen, asm.R8, asm.Word),
	)
	b.Mark(copied)
	c.logSubmit(r, lost, done)
}

// logOwner fills in the record in r7 with the fsuid and fsgid of the
// socket of the packet in r6, as nf_log_dump_sk_uid_gid prints them: of
// skb->sk itself, which must be a full socket (not a request socket, which
// the owner match takes for its listener) with a file.
func (c *compiler) logOwner(r *ir.Rule) {
	b := c.b
	none, done := ruleLabel(r)+"_log_nouid", ruleLabel(r)+"_log_uid"
	b.Emit(
		insn.Ld(asm.R1, asm.R6, pkt.Owner, asm.Byte),
		asm.JNE.Imm(asm.R1, ownerFile, none),
		insn.Ld(asm.R1, asm.R6, pkt.OwnerUID, asm.Word),
		insn.St(asm.R7, abi.LogUIDVal, asm.R1, asm.Word),
		insn.Ld(asm.R1, asm.R6, pkt.OwnerGID, asm.Word),
		insn.St(asm.R7, abi.LogGIDVal, asm.R1, asm.Word),
		insn.StImm(asm.R7, abi.LogUIDSet, 1, asm.Word),
		insn.Ja(done),
	)
	b.Mark(none)
	b.Emit(insn.StImm(asm.R7, abi.LogUIDSet, 0, asm.Word))
	b.Mark(done)
}

// logSubmit submits the record in r7, or counts the event as lost.
func (c *compiler) logSubmit(r *ir.Rule, lost, done string) {
	b := c.b
	// A wakeup costs more than the event (an interrupt, in a VM an exit):
	// the event that fills the ring past logWakeBytes wakes the reader,
	// which otherwise finds the events when it polls. (The data available
	// counts this event, reserved.)
	submit := ruleLabel(r) + "_log_submit"
	b.Emit(
		insn.MapRef(asm.R1, abi.LogMap),
		insn.Mov(asm.R2, rbAvailData),
		asm.FnRingbufQuery.Call(),
		insn.Mov(asm.R2, rbNoWakeup),
		asm.JLT.Imm(asm.R0, logWakeBytes, submit),
		// What a record takes in the ring: its 8-byte header and the
		// record, 8-byte aligned.
		asm.JGE.Imm(asm.R0, logWakeBytes+8+c.logRecordSize(), submit),
		insn.Mov(asm.R2, rbForceWakeup),
	)
	b.Mark(submit)
	b.Emit(
		insn.Movr(asm.R1, asm.R7),
		asm.FnRingbufSubmit.Call(),
		insn.Ja(done),
	)
	b.Mark(lost)
	b.Emit(
		insn.StImm(asm.R10, chainKey, 0, asm.Word),
		insn.Movr(asm.R2, asm.R10),
		asm.Add.Imm(asm.R2, chainKey),
		insn.MapRef(asm.R1, abi.LogLostMap),
		asm.FnMapLookupElem.Call(),
		asm.JEq.Imm(asm.R0, 0, done),
		insn.Ld(asm.R1, asm.R0, 0, asm.DWord),
		asm.Add.Imm(asm.R1, 1),
		insn.St(asm.R0, 0, asm.R1, asm.DWord),
	)
	b.Mark(done)
}
