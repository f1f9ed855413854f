package conntrack

import (
	"fmt"

	"github.com/cilium/ebpf/asm"

	"bpfwall/codegen/insn"
	"bpfwall/codegen/kernel"
	"bpfwall/codegen/pkt"
	"bpfwall/model"
)

// A TCP segment whose tuple finds an entry gets the state
// model.Packet.ConntrackTCP predicts: ct_state reads the entry's TCP tracking
// (nf_conn.proto.tcp) and replays nf_conntrack_tcp_packet and
// tcp_in_window on copies of the two directions' windows in its stack
// frame, so that the entry is only read, never written.

// The copies, in ct_state's frame: the sender's and the receiver's
// ip_ct_tcp_state, the segment, and the rest of the entry. Every field of
// the entry the replay reads is read once, at ct_tcp_found, into these
// copies (the entry can change under the program: another CPU's packet of
// the connection), so that one evaluation sees each field with one value.
const (
	ctSnd   = -136 // ip_ct_tcp_state of the segment's direction
	ctRcv   = -160 // of the other direction
	ctSeg   = -192 // the segment, see seg*
	ctLoop  = -216 // the SACK walk's bpf_loop context: insn.LoopCtx, insn.LoopState; a u32 map key at +16
	ctEntry = -240 // the entry's status and last_* fields, see ent*
	ctLow   = ctEntry
)

// Offsets in the copied entry.
const (
	entStatus    = 0  // u32: nf_conn.status's low half
	entLastEnd   = 4  // u32
	entLastAck   = 8  // u32
	entLastWin   = 12 // u16
	entLastDir   = 14 // u8
	entLastIndex = 15 // u8
	entLastScale = 16 // u8: last_wscale
	entLastFlags = 17 // u8
)

// Offsets in a copied ip_ct_tcp_state.
const (
	tdEnd    = 0  // u32
	tdMaxEnd = 4  // u32
	tdMaxWin = 8  // u32
	tdMaxAck = 12 // u32
	tdScale  = 16 // u8
	tdFlags  = 17 // u8
)

// Offsets in the copied segment.
const (
	segSeq   = 0  // u32
	segAck   = 4  // u32
	segSack  = 8  // u32: the highest (s)ack
	segEnd   = 12 // u32: seq + length, SYN and FIN counting one
	segWin   = 16 // u32: the raw window
	segFlags = 20 // u8: FIN SYN RST ACK URG
	segDir   = 21 // u8: 1 in the reply direction
	segState = 22 // u8: the entry's enum tcp_conntrack
	segIndex = 23 // u8: enum tcp_bit_set
	segFound = 24 // u8: the state resolve_normal_ct gives
)

const symCTSack = "walk_tcp_sack"

// Status bits and ip_ct_tcp flags ct_state reads.
const (
	ipsAssured   = 1 << 2
	ipsSeqAdjust = 1 << 6

	maxAckWinConst = 66000 // MAXACKWINCONST
)

// tcpField names field of nf_conn.proto.tcp.
func tcpField(field string) kernel.Field {
	return kernel.Field{Struct: "nf_conn", Field: "proto.tcp." + field}
}

// The entry's namespace, and its TCP conntrack sysctls that change a
// segment's verdict.
var (
	nfConnNet              = kernel.Field{Struct: "nf_conn", Field: "ct_net.net"}
	netTCPBeLiberal        = kernel.Field{Struct: "net", Field: "ct.nf_ct_proto.tcp.tcp_be_liberal"}
	netTCPIgnoreInvalidRST = kernel.Field{Struct: "net", Field: "ct.nf_ct_proto.tcp.tcp_ignore_invalid_rst"}
)

// sysctl loads the sysctl f of the entry's namespace into r1: it is
// read when the packet is, as nf_conntrack_tcp_packet reads it.
func (g *gen) sysctl(f kernel.Field) {
	g.b.Emit(
		kernel.Load(asm.R1, asm.R9, asm.DWord, nfConnNet),
		kernel.Load(asm.R1, asm.R1, asm.Byte, f),
	)
}

// tcpFound emits what follows a TCP lookup that found the entry in r0,
// with the segment's flags (FIN SYN RST ACK URG) in r8: nf_conntrack_in's
// state for the segment, as model.Packet.ConntrackTCP. Every path ends at
// ct_release with the state in r8.
func (g *gen) tcpFound() {
	b := g.b
	b.Mark("ct_tcp_found")
	b.Note("a tcp entry: nf_conntrack_tcp_packet's verdict on copies of the entry's windows (model.Packet.ConntrackTCP)")
	b.Emit(insn.Movr(asm.R9, asm.R0))
	g.entryUnknown()
	for off := int16(ctLow); off < ctSnd+24; off += 8 {
		b.Emit(insn.StImm(asm.R10, off, 0, asm.DWord))
	}
	b.Note("the entry's fields, each read once")
	g.copyEntry()
	b.Emit(
		insn.St(asm.R10, ctSeg+segFlags, asm.R8, asm.Byte),
		insn.Ld(asm.R1, asm.R10, ctOpts+ctOptsDir, asm.Byte),
		insn.St(asm.R10, ctSeg+segDir, asm.R1, asm.Byte),
		// resolve_normal_ct's state
		insn.Mov(asm.R8, ctStateEstab),
		asm.JEq.Imm(asm.R1, ipCTDirReply, "ct_tcp_resolved"),
		insn.Ld(asm.R2, asm.R10, ctEntry+entStatus, asm.Word),
		asm.JSet.Imm(asm.R2, ipsSeenReply, "ct_tcp_resolved"),
		insn.Mov(asm.R8, ctStateRelated),
		asm.JSet.Imm(asm.R2, ipsExpected, "ct_tcp_resolved"),
		insn.Mov(asm.R8, ctStateNew),
	)
	b.Mark("ct_tcp_resolved")
	b.Emit(
		insn.St(asm.R10, ctSeg+segFound, asm.R8, asm.Byte),
		insn.Mov(asm.R8, ctStateUnknown),
		// NAT's sequence adjustment is in an extension; a first
		// fragment's segment length is its datagram's.
		insn.Ld(asm.R2, asm.R10, ctEntry+entStatus, asm.Word),
		asm.JSet.Imm(asm.R2, ipsSeqAdjust, "ct_release"),
		insn.Ld(asm.R2, asm.R7, pkt.Flags, asm.Byte),
		asm.JSet.Imm(asm.R2, pkt.FlagFragment, "ct_release"),
		insn.Ld(asm.R2, asm.R10, ctSeg+segState, asm.Byte),
		asm.JGE.Imm(asm.R2, int32(model.TCPSynSent2)+1, "ct_release"),
	)

	b.Note("the segment: seq, ack, window, end")
	b.Emit(
		insn.Movr(asm.R1, asm.R6),
		insn.Ld(asm.R2, asm.R7, pkt.L4Off, asm.Half),
	)
	g.Load(asm.R10, ctBuf, 20, "ct_release")
	b.Emit(
		insn.Ld(asm.R1, asm.R10, ctBuf+4, asm.Word),
		insn.Ntoh(asm.R1, asm.Word),
		insn.St(asm.R10, ctSeg+segSeq, asm.R1, asm.Word),
		insn.Ld(asm.R2, asm.R10, ctBuf+8, asm.Word),
		insn.Ntoh(asm.R2, asm.Word),
		insn.St(asm.R10, ctSeg+segAck, asm.R2, asm.Word),
		insn.St(asm.R10, ctSeg+segSack, asm.R2, asm.Word),
		insn.Ld(asm.R2, asm.R10, ctBuf+14, asm.Half),
		insn.Ntoh(asm.R2, asm.Half),
		insn.St(asm.R10, ctSeg+segWin, asm.R2, asm.Word),
		// segment_seq_plus_len
		insn.Ld(asm.R2, asm.R10, ctBuf+12, asm.Byte),
		asm.RSh.Imm(asm.R2, 4),
		asm.LSh.Imm(asm.R2, 2),
		insn.Ld(asm.R3, asm.R7, pkt.L4Len, asm.Word),
		asm.Sub.Reg(asm.R3, asm.R2),
		asm.Add.Reg32(asm.R1, asm.R3),
		insn.Ld(asm.R3, asm.R10, ctSeg+segFlags, asm.Byte),
		insn.Movr(asm.R4, asm.R3),
		asm.And.Imm(asm.R4, 1), // FIN
		asm.Add.Reg32(asm.R1, asm.R4),
		asm.RSh.Imm(asm.R3, 1),
		asm.And.Imm(asm.R3, 1), // SYN
		asm.Add.Reg32(asm.R1, asm.R3),
		insn.St(asm.R10, ctSeg+segEnd, asm.R1, asm.Word),
	)

	b.Note("get_conntrack_index")
	b.Emit(
		insn.Ld(asm.R2, asm.R10, ctSeg+segFlags, asm.Byte),
		insn.Mov(asm.R1, int32(model.TCPRstSet)),
		asm.JSet.Imm(asm.R2, tcpRST, "ct_tcp_index"),
		insn.Movr(asm.R3, asm.R2),
		asm.And.Imm(asm.R3, tcpSYN|tcpACK),
		insn.Mov(asm.R1, int32(model.TCPSynAckSet)),
		asm.JEq.Imm(asm.R3, tcpSYN|tcpACK, "ct_tcp_index"),
		insn.Mov(asm.R1, int32(model.TCPSynSet)),
		asm.JSet.Imm(asm.R2, tcpSYN, "ct_tcp_index"),
		insn.Mov(asm.R1, int32(model.TCPFinSet)),
		asm.JSet.Imm(asm.R2, tcpFIN, "ct_tcp_index"),
		insn.Mov(asm.R1, int32(model.TCPAckSet)),
		asm.JSet.Imm(asm.R2, tcpACK, "ct_tcp_index"),
		insn.Mov(asm.R1, int32(model.TCPNoneSet)),
	)
	b.Mark("ct_tcp_index")
	b.Emit(insn.St(asm.R10, ctSeg+segIndex, asm.R1, asm.Byte))

	b.Note("the windows: seen[dir] is the sender's, seen[!dir] the receiver's")
	b.Emit(
		insn.Ld(asm.R1, asm.R10, ctSeg+segDir, asm.Byte),
		asm.JEq.Imm(asm.R1, ipCTDirReply, "ct_tcp_seen_reply"),
	)
	g.copySeen(0, ctSnd)
	g.copySeen(1, ctRcv)
	b.Emit(insn.Ja("ct_tcp_seen_done"))
	b.Mark("ct_tcp_seen_reply")
	g.copySeen(1, ctSnd)
	g.copySeen(0, ctRcv)
	b.Mark("ct_tcp_seen_done")

	g.tcpTransition()
	g.tcpWindow()

	b.Mark("ct_tcp_accept")
	b.Emit(insn.Ld(asm.R8, asm.R10, ctSeg+segFound, asm.Byte), insn.Ja("ct_release"))
	b.Mark("ct_tcp_invalid")
	b.Emit(insn.Mov(asm.R8, ctStateInvalid), insn.Ja("ct_release"))
	b.Mark("ct_tcp_new")
	b.Emit(insn.Mov(asm.R8, ctStateNew), insn.Ja("ct_release"))
}

// TCP flags in the segment's flags.
const (
	tcpFIN = 0x01
	tcpSYN = 0x02
	tcpRST = 0x04
	tcpACK = 0x10
)

// copyEntry copies the entry's status, TCP state and last_* fields to
// the frame (ctEntry, segState); the windows follow once the direction is
// known (copySeen).
func (g *gen) copyEntry() {
	g.b.Emit(
		kernel.Load(asm.R1, asm.R9, asm.DWord, nfConnStatus),
		insn.St(asm.R10, ctEntry+entStatus, asm.R1, asm.Word),
		kernel.Load(asm.R1, asm.R9, asm.Byte, tcpField("state")),
		insn.St(asm.R10, ctSeg+segState, asm.R1, asm.Byte),
	)
	for _, f := range []struct {
		name string
		off  int16
		size asm.Size
	}{
		{"last_end", entLastEnd, asm.Word}, {"last_ack", entLastAck, asm.Word}, {"last_win", entLastWin, asm.Half},
		{"last_dir", entLastDir, asm.Byte}, {"last_index", entLastIndex, asm.Byte},
		{"last_wscale", entLastScale, asm.Byte}, {"last_flags", entLastFlags, asm.Byte},
	} {
		g.b.Emit(
			kernel.Load(asm.R1, asm.R9, f.size, tcpField(f.name)),
			insn.St(asm.R10, ctEntry+f.off, asm.R1, f.size),
		)
	}
}

// copySeen copies nf_conn.proto.tcp.seen[i] to the frame at dst.
func (g *gen) copySeen(i int, dst int16) {
	for _, f := range []struct {
		name string
		off  int16
		size asm.Size
	}{
		{"td_end", tdEnd, asm.Word}, {"td_maxend", tdMaxEnd, asm.Word}, {"td_maxwin", tdMaxWin, asm.Word},
		{"td_maxack", tdMaxAck, asm.Word}, {"td_scale", tdScale, asm.Byte}, {"flags", tdFlags, asm.Byte},
	} {
		g.b.Emit(
			kernel.Load(asm.R1, asm.R9, f.size, tcpField(fmt.Sprintf("seen[%d].%s", i, f.name))),
			insn.St(asm.R10, dst+f.off, asm.R1, f.size),
		)
	}
}

// tcpConntracksRows packs model.TCPConntracks: row dir*6+index holds the next
// state for old state s in bits 4s to 4s+3.
func tcpConntracksRows() [12]int64 {
	var rows [12]int64
	for dir := range model.TCPConntracks {
		for index, row := range model.TCPConntracks[dir] {
			for old, next := range row {
				rows[dir*6+index] |= int64(next) << (4 * old)
			}
		}
	}
	return rows
}

// tcpTransition emits nf_conntrack_tcp_packet up to tcp_in_window: the
// next state from tcp_conntracks and the special cases that decide
// without the window check.
func (g *gen) tcpTransition() {
	b := g.b
	b.Note("tcp_conntracks[dir][index][state], packed four bits a state")
	b.Emit(
		insn.Ld(asm.R2, asm.R10, ctSeg+segDir, asm.Byte),
		asm.Mul.Imm(asm.R2, 6),
		insn.Ld(asm.R1, asm.R10, ctSeg+segIndex, asm.Byte),
		asm.Add.Reg(asm.R2, asm.R1),
	)
	for row, v := range tcpConntracksRows() {
		next := b.Fresh("ct_tcp_row")
		b.Emit(
			asm.JNE.Imm(asm.R2, int32(row), next),
			asm.LoadImm(asm.R3, v, asm.DWord),
			insn.Ja("ct_tcp_row_found"),
		)
		b.Mark(next)
	}
	b.Emit(insn.Ja("ct_tcp_invalid"))
	b.Mark("ct_tcp_row_found")
	b.Emit(
		insn.Ld(asm.R4, asm.R10, ctSeg+segState, asm.Byte),
		insn.Ld(asm.R5, asm.R10, ctSeg+segIndex, asm.Byte),
		insn.Movr(asm.R1, asm.R4),
		asm.LSh.Imm(asm.R1, 2),
		asm.RSh.Reg(asm.R3, asm.R1),
		asm.And.Imm(asm.R3, 0xf),
		asm.JEq.Imm(asm.R3, int32(model.TCPSynSent), "ct_tcp_to_syn_sent"),
		asm.JEq.Imm(asm.R3, tcpIgnoreState, "ct_tcp_ignore"),
		asm.JEq.Imm(asm.R3, tcpInvalidState, "ct_tcp_invalid"),
		asm.JEq.Imm(asm.R3, int32(model.TCPTimeWait), "ct_tcp_to_time_wait"),
		asm.JEq.Imm(asm.R3, int32(model.TCPClose), "ct_tcp_to_close"),
		insn.Ja("ct_tcp_window"),
	)

	b.Mark("ct_tcp_to_syn_sent")
	b.Note("a SYN on a closed or aborted connection kills it and starts a new one")
	b.Emit(
		asm.JLT.Imm(asm.R4, int32(model.TCPTimeWait), "ct_tcp_window"),
		insn.Ld(asm.R1, asm.R10, ctSnd+tdFlags, asm.Byte),
		insn.Ld(asm.R2, asm.R10, ctRcv+tdFlags, asm.Byte),
		asm.Or.Reg(asm.R1, asm.R2),
		asm.JSet.Imm(asm.R1, model.TCPFlagCloseInit, "ct_tcp_new"),
		insn.Ld(asm.R1, asm.R10, ctEntry+entLastDir, asm.Byte),
		insn.Ld(asm.R2, asm.R10, ctSeg+segDir, asm.Byte),
		asm.JNE.Reg(asm.R1, asm.R2, "ct_tcp_ignore"),
		insn.Ld(asm.R1, asm.R10, ctEntry+entLastIndex, asm.Byte),
		asm.JEq.Imm(asm.R1, int32(model.TCPRstSet), "ct_tcp_new"),
	)

	b.Mark("ct_tcp_ignore")
	b.Note("ignored: the entry's state, unless a SYN-ACK answers a SYN ignored before, which takes that SYN's window")
	b.Emit(
		insn.Ld(asm.R5, asm.R10, ctSeg+segIndex, asm.Byte),
		asm.JNE.Imm(asm.R5, int32(model.TCPSynAckSet), "ct_tcp_accept"),
		insn.Ld(asm.R1, asm.R10, ctEntry+entLastIndex, asm.Byte),
		asm.JNE.Imm(asm.R1, int32(model.TCPSynSet), "ct_tcp_accept"),
		insn.Ld(asm.R1, asm.R10, ctEntry+entLastDir, asm.Byte),
		insn.Ld(asm.R2, asm.R10, ctSeg+segDir, asm.Byte),
		asm.JEq.Reg(asm.R1, asm.R2, "ct_tcp_accept"),
		insn.Ld(asm.R1, asm.R10, ctEntry+entLastEnd, asm.Word),
		insn.Ld(asm.R2, asm.R10, ctSeg+segAck, asm.Word),
		asm.JNE.Reg(asm.R1, asm.R2, "ct_tcp_accept"),
		insn.St(asm.R10, ctRcv+tdEnd, asm.R1, asm.Word),
		insn.St(asm.R10, ctRcv+tdMaxEnd, asm.R1, asm.Word),
		insn.Ld(asm.R1, asm.R10, ctEntry+entLastWin, asm.Half),
		asm.JNE.Imm(asm.R1, 0, "ct_tcp_last_win"),
		insn.Mov(asm.R1, 1),
	)
	b.Mark("ct_tcp_last_win")
	b.Emit(
		insn.St(asm.R10, ctRcv+tdMaxWin, asm.R1, asm.Word),
		insn.Ld(asm.R1, asm.R10, ctEntry+entLastScale, asm.Byte),
		insn.St(asm.R10, ctRcv+tdScale, asm.R1, asm.Byte),
		insn.Ld(asm.R1, asm.R10, ctEntry+entLastFlags, asm.Byte),
		asm.And.Imm(asm.R1, 0xff&^model.TCPExpChallengeAck),
		insn.St(asm.R10, ctRcv+tdFlags, asm.R1, asm.Byte),
		// nf_ct_tcp_state_reset of the sender
		insn.StImm(asm.R10, ctSnd, 0, asm.DWord),
		insn.StImm(asm.R10, ctSnd+8, 0, asm.DWord),
		insn.StImm(asm.R10, ctSnd+tdScale, 0, asm.Byte),
		insn.Ld(asm.R1, asm.R10, ctSnd+tdFlags, asm.Byte),
		asm.And.Imm(asm.R1, model.TCPFlagBeLiberal),
		insn.St(asm.R10, ctSnd+tdFlags, asm.R1, asm.Byte),
		insn.Ja("ct_tcp_window"),
	)

	b.Mark("ct_tcp_to_time_wait")
	b.Note("an RFC 5961 challenge ACK in LAST_ACK does not change the state")
	b.Emit(
		asm.JNE.Imm(asm.R4, int32(model.TCPLastAck), "ct_tcp_window"),
		asm.JNE.Imm(asm.R5, int32(model.TCPAckSet), "ct_tcp_window"),
		insn.Ld(asm.R1, asm.R10, ctEntry+entLastDir, asm.Byte),
		insn.Ld(asm.R2, asm.R10, ctSeg+segDir, asm.Byte),
		asm.JEq.Reg(asm.R1, asm.R2, "ct_tcp_window"),
		insn.Ld(asm.R1, asm.R10, ctEntry+entLastIndex, asm.Byte),
		asm.JNE.Imm(asm.R1, int32(model.TCPSynSet), "ct_tcp_window"),
		insn.Ld(asm.R1, asm.R10, ctEntry+entLastFlags, asm.Byte),
		asm.JSet.Imm(asm.R1, model.TCPExpChallengeAck, "ct_tcp_accept"),
		insn.Ja("ct_tcp_window"),
	)
	g.tcpReset()
}

// tcpReset is the transition to CLOSE: which RSTs skip the window, and
// which are invalid before the peer's highest ACK.
func (g *gen) tcpReset() {
	b := g.b
	b.Mark("ct_tcp_to_close")
	b.Note("an RST: closing states skip the window; before the peer's highest ACK it is invalid, unless nf_conntrack_tcp_ignore_invalid_rst")
	b.Emit(
		asm.JNE.Imm(asm.R5, int32(model.TCPRstSet), "ct_tcp_window"),
		asm.JLT.Imm(asm.R4, int32(model.TCPFinWait), "ct_tcp_rst_checks"),
		asm.JLE.Imm(asm.R4, int32(model.TCPClose), "ct_tcp_accept"),
	)
	b.Mark("ct_tcp_rst_checks")
	b.Emit(
		insn.Ld(asm.R1, asm.R10, ctRcv+tdFlags, asm.Byte),
		asm.JSet.Imm(asm.R1, model.TCPFlagMaxAckSet, "ct_tcp_rst_maxack"),
		insn.Ja("ct_tcp_rst_answer"),
	)
	b.Mark("ct_tcp_rst_maxack")
	b.Emit(
		insn.Ld(asm.R1, asm.R10, ctEntry+entLastIndex, asm.Byte),
		asm.JEq.Imm(asm.R1, int32(model.TCPSynSet), "ct_tcp_rst_answer"),
		insn.Ld(asm.R1, asm.R10, ctSeg+segSeq, asm.Word),
		asm.JNE.Imm(asm.R1, 0, "ct_tcp_rst_seq"),
	)
	g.jumpUnlessEstablished("ct_tcp_window")
	b.Mark("ct_tcp_rst_seq")
	b.Emit(
		insn.Ld(asm.R1, asm.R10, ctSeg+segSeq, asm.Word),
		insn.Ld(asm.R2, asm.R10, ctRcv+tdMaxAck, asm.Word),
		asm.Sub.Reg32(asm.R1, asm.R2),
		asm.JSGE.Imm32(asm.R1, 0, "ct_tcp_rst_valid"),
	)
	g.sysctl(netTCPIgnoreInvalidRST)
	b.Emit(asm.JEq.Imm(asm.R1, 0, "ct_tcp_invalid"))
	b.Mark("ct_tcp_rst_valid")
	g.jumpUnlessEstablished("ct_tcp_window")
	b.Emit(
		insn.Ld(asm.R1, asm.R10, ctSeg+segSeq, asm.Word),
		insn.Ld(asm.R2, asm.R10, ctRcv+tdMaxAck, asm.Word),
		asm.JEq.Reg(asm.R1, asm.R2, "ct_tcp_window"),
		insn.Ld(asm.R2, asm.R10, ctEntry+entLastIndex, asm.Byte),
		asm.JNE.Imm(asm.R2, int32(model.TCPAckSet), "ct_tcp_rst_answer"),
		insn.Ld(asm.R2, asm.R10, ctEntry+entLastDir, asm.Byte),
		insn.Ld(asm.R3, asm.R10, ctSeg+segDir, asm.Byte),
		asm.JNE.Reg(asm.R2, asm.R3, "ct_tcp_rst_answer"),
		insn.Ld(asm.R2, asm.R10, ctEntry+entLastEnd, asm.Word),
		asm.JEq.Reg(asm.R1, asm.R2, "ct_tcp_window"),
	)
	b.Mark("ct_tcp_rst_answer")
	b.Note("an RST answering a SYN or ACK let through, or a challenge ACK, skips the window")
	b.Emit(
		insn.Ld(asm.R1, asm.R10, ctEntry+entLastEnd, asm.Word),
		insn.Ld(asm.R2, asm.R10, ctSeg+segAck, asm.Word),
		asm.JNE.Reg(asm.R1, asm.R2, "ct_tcp_rst_challenge"),
		insn.Ld(asm.R1, asm.R10, ctEntry+entStatus, asm.Word),
		insn.Ld(asm.R2, asm.R10, ctEntry+entLastIndex, asm.Byte),
		asm.JSet.Imm(asm.R1, ipsSeenReply, "ct_tcp_rst_seen_reply"),
		insn.Ja("ct_tcp_rst_unassured"),
	)
	b.Mark("ct_tcp_rst_seen_reply")
	b.Emit(
		asm.JNE.Imm(asm.R2, int32(model.TCPSynSet), "ct_tcp_rst_unassured"),
		// from the other side than the SYN: upstream's direction check
		// (see ir.ConntrackTCP)
		insn.Ld(asm.R3, asm.R10, ctEntry+entLastDir, asm.Byte),
		insn.Ld(asm.R4, asm.R10, ctSeg+segDir, asm.Byte),
		asm.JNE.Reg(asm.R3, asm.R4, "ct_tcp_accept"),
	)
	b.Mark("ct_tcp_rst_unassured")
	b.Emit(
		asm.JSet.Imm(asm.R1, ipsAssured, "ct_tcp_rst_challenge"),
		asm.JEq.Imm(asm.R2, int32(model.TCPAckSet), "ct_tcp_accept"),
	)
	b.Mark("ct_tcp_rst_challenge")
	b.Emit(
		insn.Ld(asm.R1, asm.R10, ctSeg+segState, asm.Byte),
		asm.JNE.Imm(asm.R1, int32(model.TCPSynSent), "ct_tcp_window"),
		insn.Ld(asm.R1, asm.R10, ctEntry+entLastIndex, asm.Byte),
		asm.JNE.Imm(asm.R1, int32(model.TCPAckSet), "ct_tcp_window"),
		insn.Ld(asm.R1, asm.R10, ctEntry+entLastDir, asm.Byte),
		asm.JNE.Imm(asm.R1, ipCTDirReply, "ct_tcp_window"),
		insn.Ld(asm.R1, asm.R10, ctEntry+entLastAck, asm.Word),
		insn.Ld(asm.R2, asm.R10, ctSeg+segSeq, asm.Word),
		asm.JEq.Reg(asm.R1, asm.R2, "ct_tcp_accept"),
		insn.Ja("ct_tcp_window"),
	)
}

// tcp_conntracks' sIV and sIG.
const (
	tcpInvalidState = 10
	tcpIgnoreState  = 11
)

// jumpUnlessEstablished jumps to label unless nf_conntrack_tcp_established:
// the entry is ESTABLISHED and assured.
func (g *gen) jumpUnlessEstablished(label string) {
	g.b.Emit(
		insn.Ld(asm.R2, asm.R10, ctSeg+segState, asm.Byte),
		asm.JNE.Imm(asm.R2, int32(model.TCPEstablished), label),
		insn.Ld(asm.R2, asm.R10, ctEntry+entStatus, asm.Word),
		asm.And.Imm(asm.R2, ipsAssured),
		asm.JEq.Imm(asm.R2, 0, label),
	)
}

// initSender is tcp_init_sender's part that the verdict depends on:
// the sender's window starts at this segment. r1 holds the segment's end.
func (g *gen) initSender() {
	win := g.b.Fresh("ct_tcp_win")
	g.b.Emit(
		insn.Ld(asm.R1, asm.R10, ctSeg+segEnd, asm.Word),
		insn.St(asm.R10, ctSnd+tdEnd, asm.R1, asm.Word),
		insn.St(asm.R10, ctSnd+tdMaxEnd, asm.R1, asm.Word),
		insn.Ld(asm.R1, asm.R10, ctSeg+segWin, asm.Word),
		asm.JNE.Imm(asm.R1, 0, win),
		insn.Mov(asm.R1, 1),
	)
	g.b.Mark(win)
	g.b.Emit(insn.St(asm.R10, ctSnd+tdMaxWin, asm.R1, asm.Word))
}

// tcpWindow emits tcp_in_window: whether the segment is within the
// windows; only its INVALID answer changes the state. Sequence numbers
// compare as the kernel's before(a, b), (s32)(a - b) < 0, and after(a, b)
// as before(b, a), which differs from (s32)(a - b) > 0 when a and b are
// 2^31 apart.
func (g *gen) tcpWindow() {
	b := g.b
	b.Mark("ct_tcp_window")
	b.Note("tcp_in_window; the sack is the highest SACK block's right edge when the receiver permits SACK")
	b.Emit(
		insn.Ld(asm.R1, asm.R10, ctRcv+tdFlags, asm.Byte),
		asm.JSet.Imm(asm.R1, model.TCPFlagSackPerm, "ct_tcp_sack"),
	)
	b.Mark("ct_tcp_sack_done")
	b.Emit(
		insn.Ld(asm.R2, asm.R10, ctSeg+segFlags, asm.Byte),
		insn.Ld(asm.R1, asm.R10, ctSnd+tdMaxWin, asm.Word),
		asm.JNE.Imm(asm.R1, 0, "ct_tcp_reinit"),
		asm.JSet.Imm(asm.R2, tcpSYN, "ct_tcp_init"),
	)
	b.Note("a sender not seen yet (picked up mid-stream): this segment sets its window")
	b.Emit(
		insn.Ld(asm.R1, asm.R10, ctSeg+segEnd, asm.Word),
		insn.St(asm.R10, ctSnd+tdEnd, asm.R1, asm.Word),
		insn.Ld(asm.R2, asm.R10, ctSeg+segWin, asm.Word),
		insn.Ld(asm.R3, asm.R10, ctSnd+tdScale, asm.Byte),
		asm.LSh.Reg32(asm.R2, asm.R3),
		asm.JNE.Imm(asm.R2, 0, "ct_tcp_pickup_win"),
		insn.Mov(asm.R2, 1),
	)
	b.Mark("ct_tcp_pickup_win")
	b.Emit(
		insn.St(asm.R10, ctSnd+tdMaxWin, asm.R2, asm.Word),
		asm.Add.Reg32(asm.R1, asm.R2),
		insn.St(asm.R10, ctSnd+tdMaxEnd, asm.R1, asm.Word),
		insn.Ld(asm.R1, asm.R10, ctSeg+segSack, asm.Word),
		insn.Ld(asm.R3, asm.R10, ctRcv+tdMaxWin, asm.Word),
		asm.JNE.Imm(asm.R3, 0, "ct_tcp_keepalive"),
		insn.St(asm.R10, ctRcv+tdEnd, asm.R1, asm.Word),
		insn.Ja("ct_tcp_checks"),
	)
	b.Mark("ct_tcp_keepalive")
	b.Emit(
		insn.Ld(asm.R2, asm.R10, ctRcv+tdEnd, asm.Word),
		asm.Add.Imm32(asm.R2, 1),
		asm.JNE.Reg(asm.R1, asm.R2, "ct_tcp_checks"),
		insn.St(asm.R10, ctRcv+tdEnd, asm.R2, asm.Word),
		insn.Ja("ct_tcp_checks"),
	)
	b.Mark("ct_tcp_init")
	g.initSender()
	b.Emit(
		insn.Ld(asm.R2, asm.R10, ctSeg+segFlags, asm.Byte),
		asm.JSet.Imm(asm.R2, tcpACK, "ct_tcp_checks"),
		insn.Ja("ct_tcp_accept"), // simultaneous open
	)
	b.Mark("ct_tcp_reinit")
	b.Note("a SYN with a later sequence in SYN_SENT or SYN_RECV starts the sender's window again")
	b.Emit(
		asm.JSet.Imm(asm.R2, tcpSYN, "ct_tcp_reinit_syn"),
		insn.Ja("ct_tcp_checks"),
	)
	b.Mark("ct_tcp_reinit_syn")
	b.Emit(
		// after(end, td_end) is before(td_end, end)
		insn.Ld(asm.R1, asm.R10, ctSnd+tdEnd, asm.Word),
		insn.Ld(asm.R3, asm.R10, ctSeg+segEnd, asm.Word),
		asm.Sub.Reg32(asm.R1, asm.R3),
		asm.JSGE.Imm32(asm.R1, 0, "ct_tcp_checks"),
		insn.Ld(asm.R1, asm.R10, ctSeg+segState, asm.Byte),
		asm.JEq.Imm(asm.R1, int32(model.TCPSynSent), "ct_tcp_reinit_do"),
		asm.JEq.Imm(asm.R1, int32(model.TCPSynRecv), "ct_tcp_reinit_do"),
		insn.Ja("ct_tcp_checks"),
	)
	b.Mark("ct_tcp_reinit_do")
	g.initSender()
	b.Emit(
		insn.Ld(asm.R2, asm.R10, ctSeg+segFlags, asm.Byte),
		asm.JSet.Imm(asm.R2, tcpACK, "ct_tcp_checks"),
		insn.Ld(asm.R1, asm.R10, ctSeg+segDir, asm.Byte),
		asm.JEq.Imm(asm.R1, ipCTDirReply, "ct_tcp_accept"),
	)
	g.tcpBounds()
	g.tcpSack()
}

// tcpBounds checks the segment against the windows: tcp_in_window's
// conditions I and III, an RST's sequence, and the liberal senders.
func (g *gen) tcpBounds() {
	b := g.b
	b.Mark("ct_tcp_checks")
	b.Note("no ACK, or an RST with ack 0, acknowledges the receiver's end")
	b.Emit(
		insn.Ld(asm.R2, asm.R10, ctSeg+segFlags, asm.Byte),
		asm.JSet.Imm(asm.R2, tcpACK, "ct_tcp_acked"),
		insn.Ja("ct_tcp_end_ack"),
	)
	b.Mark("ct_tcp_acked")
	b.Emit(
		asm.JSet.Imm(asm.R2, tcpRST, "ct_tcp_rst_ack"),
		insn.Ja("ct_tcp_rst_seq0"),
	)
	b.Mark("ct_tcp_rst_ack")
	b.Emit(
		insn.Ld(asm.R1, asm.R10, ctSeg+segAck, asm.Word),
		asm.JNE.Imm(asm.R1, 0, "ct_tcp_rst_seq0"),
	)
	b.Mark("ct_tcp_end_ack")
	b.Emit(
		insn.Ld(asm.R1, asm.R10, ctRcv+tdEnd, asm.Word),
		insn.St(asm.R10, ctSeg+segSack, asm.R1, asm.Word),
	)
	b.Mark("ct_tcp_rst_seq0")
	b.Emit(
		asm.JSet.Imm(asm.R2, tcpRST, "ct_tcp_rst_syn_sent"),
		insn.Ja("ct_tcp_bounds"),
	)
	b.Mark("ct_tcp_rst_syn_sent")
	b.Note("an RST with seq 0 answering a SYN")
	b.Emit(
		insn.Ld(asm.R1, asm.R10, ctSeg+segSeq, asm.Word),
		asm.JNE.Imm(asm.R1, 0, "ct_tcp_bounds"),
		insn.Ld(asm.R1, asm.R10, ctSeg+segState, asm.Byte),
		asm.JNE.Imm(asm.R1, int32(model.TCPSynSent), "ct_tcp_bounds"),
		insn.Ld(asm.R1, asm.R10, ctSnd+tdEnd, asm.Word),
		insn.St(asm.R10, ctSeg+segSeq, asm.R1, asm.Word),
		insn.St(asm.R10, ctSeg+segEnd, asm.R1, asm.Word),
	)

	b.Mark("ct_tcp_bounds")
	b.Note("I: seq <= sender's td_maxend, else only an overshoot within the receiver's window is tolerated")
	b.Emit(
		insn.Ld(asm.R1, asm.R10, ctSeg+segSeq, asm.Word),
		insn.Ld(asm.R2, asm.R10, ctSnd+tdMaxEnd, asm.Word),
		asm.Add.Imm32(asm.R2, 1),
		asm.Sub.Reg32(asm.R1, asm.R2),
		asm.JSLT.Imm32(asm.R1, 0, "ct_tcp_seq_ok"),
		// in the receiver's window
		insn.Ld(asm.R4, asm.R10, ctRcv+tdMaxWin, asm.Word),
		asm.JEq.Imm(asm.R4, 0, "ct_tcp_liberal"),
		insn.Ld(asm.R2, asm.R10, ctSeg+segEnd, asm.Word),
		insn.Ld(asm.R3, asm.R10, ctSnd+tdEnd, asm.Word),
		asm.Sub.Reg32(asm.R3, asm.R4),
		asm.Sub.Imm32(asm.R3, 1),
		asm.Sub.Reg32(asm.R3, asm.R2),
		asm.JSGE.Imm32(asm.R3, 0, "ct_tcp_liberal"),
		// the ack above MAXACKWINDOW's lower bound
		insn.Ld(asm.R3, asm.R10, ctSnd+tdMaxWin, asm.Word),
		asm.JGT.Imm(asm.R3, maxAckWinConst, "ct_tcp_maxackwin"),
		insn.Mov(asm.R3, maxAckWinConst),
	)
	b.Mark("ct_tcp_maxackwin")
	b.Emit(
		insn.Ld(asm.R2, asm.R10, ctRcv+tdEnd, asm.Word),
		asm.Sub.Reg32(asm.R2, asm.R3),
		asm.Sub.Imm32(asm.R2, 1),
		insn.Ld(asm.R1, asm.R10, ctSeg+segSack, asm.Word),
		asm.Sub.Reg32(asm.R2, asm.R1),
		asm.JSGE.Imm32(asm.R2, 0, "ct_tcp_liberal"),
		// the overshoot at most the receiver's window
		insn.Ld(asm.R1, asm.R10, ctSeg+segEnd, asm.Word),
		insn.Ld(asm.R2, asm.R10, ctSnd+tdMaxEnd, asm.Word),
		asm.Sub.Reg32(asm.R1, asm.R2),
		asm.Add.Imm32(asm.R1, 1),
		asm.JGT.Reg32(asm.R1, asm.R4, "ct_tcp_liberal"),
	)
	b.Mark("ct_tcp_seq_ok")
	b.Note("III: sack <= receiver's td_end; the lower bounds only make tcp_in_window ignore a segment")
	b.Emit(
		insn.Ld(asm.R1, asm.R10, ctSeg+segSack, asm.Word),
		insn.Ld(asm.R2, asm.R10, ctRcv+tdEnd, asm.Word),
		asm.Add.Imm32(asm.R2, 1),
		asm.Sub.Reg32(asm.R1, asm.R2),
		asm.JSLT.Imm32(asm.R1, 0, "ct_tcp_accept"),
	)
	b.Mark("ct_tcp_liberal")
	b.Note("nf_tcp_log_invalid: a liberal sender's segments, or all with nf_conntrack_tcp_be_liberal, are never invalid")
	b.Emit(
		insn.Ld(asm.R1, asm.R10, ctSnd+tdFlags, asm.Byte),
		asm.JSet.Imm(asm.R1, model.TCPFlagBeLiberal, "ct_tcp_accept"),
	)
	g.sysctl(netTCPBeLiberal)
	b.Emit(
		asm.JNE.Imm(asm.R1, 0, "ct_tcp_accept"),
		insn.Ja("ct_tcp_invalid"),
	)

}

// tcpSack finds the highest SACK block's right edge in the segment's
// options (tcp_sack) and goes back to ct_tcp_sack_done.
func (g *gen) tcpSack() {
	b := g.b
	b.Mark("ct_tcp_sack")
	b.Note("tcp_sack: the options to ScratchMap's value, one step of the walk a bpf_loop iteration")
	b.Emit(
		insn.Ld(asm.R1, asm.R10, ctBuf+12, asm.Byte),
		asm.RSh.Imm(asm.R1, 4),
		asm.LSh.Imm(asm.R1, 2),
		asm.Sub.Imm(asm.R1, 20),
		asm.JEq.Imm(asm.R1, 0, "ct_tcp_sack_done"),
		asm.JGT.Imm(asm.R1, 40, "ct_tcp_sack_done"),
		insn.St(asm.R10, ctLoop+insn.LoopCtx, asm.R1, asm.DWord), // the length, until the map lookup
		// tcp_sack's fast path: timestamps alone hold no SACK block.
		asm.JNE.Imm(asm.R1, 12, "ct_tcp_sack_walk"),
		insn.Movr(asm.R1, asm.R6),
		insn.Ld(asm.R2, asm.R7, pkt.L4Off, asm.Half),
		asm.Add.Imm(asm.R2, 20),
	)
	g.Load(asm.R10, ctBuf+20, 4, "ct_tcp_sack_unknown")
	b.Emit(
		insn.Ld(asm.R1, asm.R10, ctBuf+20, asm.Word),
		insn.Ntoh(asm.R1, asm.Word),
		asm.JEq.Imm(asm.R1, 0x0101080a, "ct_tcp_sack_done"), // NOP NOP TIMESTAMP 10
	)
	b.Mark("ct_tcp_sack_walk")
	b.Emit(
		insn.StImm(asm.R10, ctLoop+16, 0, asm.Word),
		insn.Movr(asm.R2, asm.R10),
		asm.Add.Imm(asm.R2, ctLoop+16),
		insn.MapRef(asm.R1, g.ScratchMap),
		asm.FnMapLookupElem.Call(),
		asm.JEq.Imm(asm.R0, 0, "ct_tcp_sack_unknown"),
		insn.Ld(asm.R4, asm.R10, ctLoop+insn.LoopCtx, asm.DWord),
		asm.JEq.Imm(asm.R4, 0, "ct_tcp_sack_unknown"),
		asm.JGT.Imm(asm.R4, 40, "ct_tcp_sack_unknown"),
		insn.St(asm.R0, sackLen, asm.R4, asm.DWord),
		insn.StImm(asm.R0, sackIndex, 0, asm.DWord),
		insn.Ld(asm.R1, asm.R10, ctSeg+segSack, asm.Word),
		insn.St(asm.R0, sackMax, asm.R1, asm.DWord),
		insn.St(asm.R10, ctLoop+insn.LoopCtx, asm.R6, asm.DWord),
		insn.St(asm.R10, ctLoop+insn.LoopState, asm.R0, asm.DWord),
		insn.Movr(asm.R1, asm.R6),
		insn.Ld(asm.R2, asm.R7, pkt.L4Off, asm.Half),
		asm.Add.Imm(asm.R2, 20),
	)
	g.Load(asm.R0, sackOptions, 0, "ct_tcp_sack_unknown")
	b.Emit(
		insn.Mov(asm.R1, maxOptions),
		insn.FuncRef(asm.R2, symCTSack),
		insn.Movr(asm.R3, asm.R10),
		asm.Add.Imm(asm.R3, ctLoop),
		insn.Mov(asm.R4, 0),
		asm.FnLoop.Call(),
		insn.Ld(asm.R3, asm.R10, ctLoop+insn.LoopState, asm.DWord),
		insn.Ld(asm.R1, asm.R3, sackMax, asm.DWord),
		insn.St(asm.R10, ctSeg+segSack, asm.R1, asm.Word),
		insn.Ja("ct_tcp_sack_done"),
	)
	b.Mark("ct_tcp_sack_unknown")
	b.Emit(insn.Mov(asm.R8, ctStateUnknown), insn.Ja("ct_release"))
}

// sackCallback emits one step of tcp_sack's walk over the options at
// sackOptions: the first well-formed SACK option's blocks raise sackMax and
// end the walk.
//
//	r6 loop state, r1 index, r2 length of the options
func (g *gen) sackCallback() {
	b := g.b
	b.Function(insn.Callback(symCTSack), "one step of tcp_sack")
	g.CallbackPrologue()
	b.Emit(
		insn.Ld(asm.R1, asm.R6, sackIndex, asm.DWord),
		insn.Ld(asm.R2, asm.R6, sackLen, asm.DWord),
		asm.JGE.Reg(asm.R1, asm.R2, "sack_stop"),
		asm.JGT.Imm(asm.R1, maxOptions-1, "sack_stop"),
		insn.Movr(asm.R3, asm.R6),
		asm.Add.Reg(asm.R3, asm.R1),
		insn.Ld(asm.R4, asm.R3, sackOptions, asm.Byte),
		asm.JEq.Imm(asm.R4, 0, "sack_stop"), // end of options
		asm.JNE.Imm(asm.R4, 1, "sack_option"),
		asm.Add.Imm(asm.R1, 1), // no-op
		insn.Ja("sack_next"),
	)
	b.Mark("sack_option")
	b.Emit(
		insn.Movr(asm.R5, asm.R2),
		asm.Sub.Reg(asm.R5, asm.R1),
		asm.JLT.Imm(asm.R5, 2, "sack_stop"),
		insn.Ld(asm.R0, asm.R3, sackOptions+1, asm.Byte),
		asm.JLT.Imm(asm.R0, 2, "sack_stop"),      // silly options
		asm.JGT.Reg(asm.R0, asm.R5, "sack_stop"), // partial
		asm.JNE.Imm(asm.R4, 5, "sack_skip"),
		asm.JLT.Imm(asm.R0, 10, "sack_skip"),
		insn.Movr(asm.R5, asm.R0),
		asm.Sub.Imm(asm.R5, 2),
		asm.JSet.Imm(asm.R5, 7, "sack_skip"),
	)
	for blk := int32(0); blk < 4; blk++ {
		skip := b.Fresh("sack_block")
		b.Emit(
			asm.JLT.Imm(asm.R0, 10+8*blk, "sack_stop"),
			// The right edge; the bound is the option's, which
			// ends within the 40 bytes.
			insn.Movr(asm.R5, asm.R1),
			asm.Add.Imm(asm.R5, 2+8*blk+4),
			asm.JGT.Imm(asm.R5, maxOptions-4, "sack_stop"),
			insn.Movr(asm.R3, asm.R6),
			asm.Add.Reg(asm.R3, asm.R5),
			insn.Ld(asm.R4, asm.R3, sackOptions, asm.Word),
			insn.Ntoh(asm.R4, asm.Word),
			insn.Ld(asm.R3, asm.R6, sackMax, asm.DWord),
			asm.Sub.Reg32(asm.R3, asm.R4),
			asm.JSGE.Imm32(asm.R3, 0, skip),
			insn.St(asm.R6, sackMax, asm.R4, asm.DWord),
		)
		b.Mark(skip)
	}
	b.Emit(insn.Ja("sack_stop"))
	b.Mark("sack_skip")
	b.Emit(asm.Add.Reg(asm.R1, asm.R0))
	b.Mark("sack_next")
	b.Emit(
		insn.St(asm.R6, sackIndex, asm.R1, asm.DWord),
		insn.Mov(asm.R0, 0),
		asm.Return(),
	)
	b.Mark("sack_stop")
	b.Emit(insn.Mov(asm.R0, 1), asm.Return())
}
