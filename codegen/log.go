package codegen

import (
	"encoding/binary"
	"fmt"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"

	"bpfwall/codegen/insn"
	"bpfwall/codegen/pkt"
	"bpfwall/codegen/uapi"
	"bpfwall/ir"
)

// LOG rules: a matching packet is copied, with what the kernel's LOG line
// needs besides its bytes, into a ring buffer that `bpfwall log` reads and
// formats as nf_log_syslog would; the chain goes on.
const (
	// LogMap is the RINGBUF of LogRecords; present only when the program
	// has LOG rules.
	LogMap = "log"
	// LogLostMap is a PERCPU_ARRAY with one u64: the events the ring
	// buffer had no room for.
	LogLostMap = "log_lost"
	// LogCapture is how many bytes of each frame, from its first (the
	// Ethernet header), a LogRecord holds at most.
	LogCapture = 512
	// logRingSize is the ring buffer's size: some 1900 events.
	logRingSize = 1 << 20
	// logWakeBytes is how full the ring buffer gets before an event wakes
	// its reader up; readers poll too (LogPoll).
	logWakeBytes = 64 << 10
	// LogPoll is how often a reader should look for events that did not
	// wake it up.
	LogPoll = 100 * time.Millisecond
)

// Flags of the ring buffer helpers.
const (
	rbAvailData   = 0 // BPF_RB_AVAIL_DATA
	rbNoWakeup    = 1 // BPF_RB_NO_WAKEUP
	rbForceWakeup = 2 // BPF_RB_FORCE_WAKEUP
)

// Layout of a LogRecord in the ring buffer, host byte order.
const (
	logRule    = 0  // u32 rule ID
	logIfindex = 4  // u32 the device the program runs on
	logMark    = 8  // u32 skb->mark (tc), 0 (xdp)
	logLen     = 12 // u32 the frame's length
	logCapLen  = 16 // u32 bytes of frame in the record
	logFlags   = 20 // u32 LogNoMAC, LogMACOther (the netfilter stage)
	logTime    = 24 // u64 bpf_ktime_get_ns
	logOut     = 32 // u32 the output device, at a chain's netfilter hook; 0 elsewhere
	logData    = 40 // the first CapLen bytes of the frame
	logSize    = logData + LogCapture
	// A program with --log-uid rules has records of logUIDSize bytes:
	// after the frame, a u32 that is 1 when the socket's fsuid and fsgid
	// follow as u32s.
	logUIDSet  = logSize
	logUIDVal  = logSize + 4
	logGIDVal  = logSize + 8
	logUIDSize = logSize + 16
)

// LogRecord is one event of a LOG rule.
type LogRecord struct {
	Rule uint32 // rule ID
	// Ifindex is the device the program runs on; at a chain's netfilter
	// hook the input device (0: none), Out the output device (0: none).
	Ifindex uint32
	Out     uint32
	Mark    uint32
	Len     uint32 // the frame's length
	Time    uint64 // CLOCK_MONOTONIC, ns
	Frame   []byte // the frame's first bytes, from the Ethernet header
	// Flags are LogNoMAC and LogMACOther, which only the netfilter
	// stage sets: Frame's first 14 bytes are then not the MAC header.
	Flags uint32
	// HasUID is set for a --log-uid rule's packet whose socket has a
	// file, whose fsuid and fsgid UID and GID are (nf_log_dump_sk_uid_gid).
	HasUID   bool
	UID, GID uint32
}

// Flags of a LogRecord.
const (
	// LogNoMAC: the device has no MAC header for the packet (its
	// hard_header_len is 0, or skb->mac_header is unset or equal to the
	// network header): netfilter prints "MAC= ".
	LogNoMAC = 1
	// LogMACOther: the MAC header netfilter prints is not a 14-byte
	// Ethernet header just before the network header; not recorded.
	LogMACOther = 2
)

// ParseLogRecord decodes a record read from LogMap.
func ParseLogRecord(b []byte) (LogRecord, error) {
	if len(b) < logData {
		return LogRecord{}, fmt.Errorf("log record of %d bytes, want at least %d", len(b), logData)
	}
	he := binary.NativeEndian
	r := LogRecord{
		Rule:    he.Uint32(b[logRule:]),
		Ifindex: he.Uint32(b[logIfindex:]),
		Mark:    he.Uint32(b[logMark:]),
		Len:     he.Uint32(b[logLen:]),
		Time:    he.Uint64(b[logTime:]),
		Flags:   he.Uint32(b[logFlags:]),
		Out:     he.Uint32(b[logOut:]),
	}
	n := he.Uint32(b[logCapLen:])
	if n > LogCapture || int(n) > len(b)-logData || n > r.Len {
		return LogRecord{}, fmt.Errorf("log record claims %d captured bytes of %d", n, r.Len)
	}
	r.Frame = b[logData : logData+n]
	if len(b) >= logUIDSize && he.Uint32(b[logUIDSet:]) == 1 {
		r.HasUID, r.UID, r.GID = true, he.Uint32(b[logUIDVal:]), he.Uint32(b[logGIDVal:])
	}
	return r, nil
}

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
		{Name: LogMap, Type: ebpf.RingBuf, MaxEntries: logRingSize},
		{Name: LogLostMap, Type: ebpf.PerCPUArray, KeySize: 4, ValueSize: 8, MaxEntries: 1, Key: btfU32, Value: btfU64},
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
		return logUIDSize
	}
	return logSize
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
		insn.MapRef(asm.R1, LogMap),
		insn.Mov(asm.R2, c.logRecordSize()),
		insn.Mov(asm.R3, 0),
		asm.FnRingbufReserve.Call(),
		asm.JEq.Imm(asm.R0, 0, lost),
		insn.Movr(asm.R7, asm.R0),
	)
	if a, _ := r.Action.(ir.Log); a.Flags&logUID != 0 {
		c.logOwner(r)
	} else if c.logUID {
		b.Emit(insn.StImm(asm.R7, logUIDSet, 0, asm.Word))
	}
	b.Emit(
		insn.StImm(asm.R7, logRule, int32(r.ID), asm.Word),
		insn.StImm(asm.R7, logCapLen, 0, asm.Word),
		insn.StImm(asm.R7, logFlags, 0, asm.Word),
		insn.StImm(asm.R7, logOut, 0, asm.Word),
		asm.FnKtimeGetNs.Call(),
		insn.St(asm.R7, logTime, asm.R0, asm.DWord),
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
			insn.St(asm.R7, logIfindex, asm.R2, asm.Word),
			insn.Ld(asm.R2, asm.R1, uapi.SkbMark, asm.Word),
			insn.St(asm.R7, logMark, asm.R2, asm.Word),
			insn.Ld(asm.R8, asm.R1, uapi.SkbLen, asm.Word),
		)
	} else {
		b.Emit(
			insn.Ld(asm.R2, asm.R1, uapi.XDPIngressIfindex, asm.Word),
			insn.St(asm.R7, logIfindex, asm.R2, asm.Word),
			insn.StImm(asm.R7, logMark, 0, asm.Word),
			asm.FnXdpGetBuffLen.Call(),
			insn.Movr(asm.R8, asm.R0),
		)
	}
	capped := ruleLabel(r) + "_log_capped"
	b.Emit(
		insn.St(asm.R7, logLen, asm.R8, asm.Word),
		asm.JLE.Imm(asm.R8, LogCapture, capped),
		insn.Mov(asm.R8, LogCapture),
	)
	b.Mark(capped)
	b.Emit(
		asm.JEq.Imm(asm.R8, 0, copied),
		insn.Ld(asm.R1, asm.R10, chainCtx, asm.DWord),
		insn.Mov(asm.R2, 0),
		insn.Movr(asm.R3, asm.R7),
		asm.Add.Imm(asm.R3, logData),
		insn.Movr(asm.R4, asm.R8),
		c.loadHelper().Call(),
		asm.JNE.Imm(asm.R0, 0, copied),
		insn.St(asm.R7, logCapLen, asm.R8, asm.Word),
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
		insn.St(asm.R7, logUIDVal, asm.R1, asm.Word),
		insn.Ld(asm.R1, asm.R6, pkt.OwnerGID, asm.Word),
		insn.St(asm.R7, logGIDVal, asm.R1, asm.Word),
		insn.StImm(asm.R7, logUIDSet, 1, asm.Word),
		insn.Ja(done),
	)
	b.Mark(none)
	b.Emit(insn.StImm(asm.R7, logUIDSet, 0, asm.Word))
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
		insn.MapRef(asm.R1, LogMap),
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
		insn.MapRef(asm.R1, LogLostMap),
		asm.FnMapLookupElem.Call(),
		asm.JEq.Imm(asm.R0, 0, done),
		insn.Ld(asm.R1, asm.R0, 0, asm.DWord),
		asm.Add.Imm(asm.R1, 1),
		insn.St(asm.R0, 0, asm.R1, asm.DWord),
	)
	b.Mark(done)
}
