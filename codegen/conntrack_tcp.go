package codegen

import (
	"fmt"

	"github.com/cilium/ebpf/asm"

	"bpfwall/ir"
)

// A TCP segment whose tuple finds an entry gets the state
// ir.Packet.ConntrackTCP predicts: ct_state reads the entry's TCP tracking
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
	ctLoop  = -216 // the SACK walk's bpf_loop context: lsCtx, lsState; a u32 map key at +16
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

// The loop state of the SACK walk; the options are at stOptions.
const (
	sackIndex = st0
	sackLen   = st1
	sackMax   = st2 // the highest right edge so far
)

const symCTSack = "walk_tcp_sack"

// Status bits and ip_ct_tcp flags ct_state reads.
const (
	ipsAssured   = 1 << 2
	ipsSeqAdjust = 1 << 6

	maxAckWinConst = 66000 // MAXACKWINCONST
)

// tcpField names field of nf_conn.proto.tcp.
func tcpField(field string) fieldRef { return fieldRef{"nf_conn", "proto.tcp." + field} }

// The entry's namespace, and its TCP conntrack sysctls that change a
// segment's verdict.
var (
	nfConnNet              = fieldRef{"nf_conn", "ct_net.net"}
	netTCPBeLiberal        = fieldRef{"net", "ct.nf_ct_proto.tcp.tcp_be_liberal"}
	netTCPIgnoreInvalidRST = fieldRef{"net", "ct.nf_ct_proto.tcp.tcp_ignore_invalid_rst"}
)

// ctSysctl loads the sysctl f of the entry's namespace into r1: it is
// read when the packet is, as nf_conntrack_tcp_packet reads it.
func (c *compiler) ctSysctl(f fieldRef) {
	c.b.emit(
		ldField(asm.R1, asm.R9, nfConnNet, asm.DWord),
		ldField(asm.R1, asm.R1, f, asm.Byte),
	)
}

// ctTCPFound emits what follows a TCP lookup that found the entry in r0,
// with the segment's flags (FIN SYN RST ACK URG) in r8: nf_conntrack_in's
// state for the segment, as ir.Packet.ConntrackTCP. Every path ends at
// ct_release with the state in r8.
func (c *compiler) ctTCPFound() {
	b := c.b
	b.mark("ct_tcp_found")
	b.note("a tcp entry: nf_conntrack_tcp_packet's verdict on copies of the entry's windows (ir.Packet.ConntrackTCP)")
	b.emit(movr(asm.R9, asm.R0))
	for off := int16(ctLow); off < ctSnd+24; off += 8 {
		b.emit(stImm(asm.R10, off, 0, asm.DWord))
	}
	b.note("the entry's fields, each read once")
	c.ctCopyEntry()
	b.emit(
		st(asm.R10, ctSeg+segFlags, asm.R8, asm.Byte),
		ld(asm.R1, asm.R10, ctOpts+ctOptsDir, asm.Byte),
		st(asm.R10, ctSeg+segDir, asm.R1, asm.Byte),
		// resolve_normal_ct's state
		mov(asm.R8, ctStateEstab),
		asm.JEq.Imm(asm.R1, ipCTDirReply, "ct_tcp_resolved"),
		ld(asm.R2, asm.R10, ctEntry+entStatus, asm.Word),
		asm.JSet.Imm(asm.R2, ipsSeenReply, "ct_tcp_resolved"),
		mov(asm.R8, ctStateRelated),
		asm.JSet.Imm(asm.R2, ipsExpected, "ct_tcp_resolved"),
		mov(asm.R8, ctStateNew),
	)
	b.mark("ct_tcp_resolved")
	b.emit(
		st(asm.R10, ctSeg+segFound, asm.R8, asm.Byte),
		mov(asm.R8, ctStateUnknown),
		// NAT's sequence adjustment is in an extension; a first
		// fragment's segment length is its datagram's.
		ld(asm.R2, asm.R10, ctEntry+entStatus, asm.Word),
		asm.JSet.Imm(asm.R2, ipsSeqAdjust, "ct_release"),
		ld(asm.R2, asm.R7, pktFlags, asm.Byte),
		asm.JSet.Imm(asm.R2, flagFragment, "ct_release"),
		ld(asm.R2, asm.R10, ctSeg+segState, asm.Byte),
		asm.JGE.Imm(asm.R2, int32(ir.TCPSynSent2)+1, "ct_release"),
	)

	b.note("the segment: seq, ack, window, end")
	b.emit(
		movr(asm.R1, asm.R6),
		ld(asm.R2, asm.R7, pktL4Off, asm.Half),
	)
	c.load(asm.R10, ctBuf, 20, "ct_release")
	b.emit(
		ld(asm.R1, asm.R10, ctBuf+4, asm.Word),
		ntoh(asm.R1, asm.Word),
		st(asm.R10, ctSeg+segSeq, asm.R1, asm.Word),
		ld(asm.R2, asm.R10, ctBuf+8, asm.Word),
		ntoh(asm.R2, asm.Word),
		st(asm.R10, ctSeg+segAck, asm.R2, asm.Word),
		st(asm.R10, ctSeg+segSack, asm.R2, asm.Word),
		ld(asm.R2, asm.R10, ctBuf+14, asm.Half),
		ntoh(asm.R2, asm.Half),
		st(asm.R10, ctSeg+segWin, asm.R2, asm.Word),
		// segment_seq_plus_len
		ld(asm.R2, asm.R10, ctBuf+12, asm.Byte),
		asm.RSh.Imm(asm.R2, 4),
		asm.LSh.Imm(asm.R2, 2),
		ld(asm.R3, asm.R7, pktL4Len, asm.Word),
		asm.Sub.Reg(asm.R3, asm.R2),
		asm.Add.Reg32(asm.R1, asm.R3),
		ld(asm.R3, asm.R10, ctSeg+segFlags, asm.Byte),
		movr(asm.R4, asm.R3),
		asm.And.Imm(asm.R4, 1), // FIN
		asm.Add.Reg32(asm.R1, asm.R4),
		asm.RSh.Imm(asm.R3, 1),
		asm.And.Imm(asm.R3, 1), // SYN
		asm.Add.Reg32(asm.R1, asm.R3),
		st(asm.R10, ctSeg+segEnd, asm.R1, asm.Word),
	)

	b.note("get_conntrack_index")
	b.emit(
		ld(asm.R2, asm.R10, ctSeg+segFlags, asm.Byte),
		mov(asm.R1, int32(ir.TCPRstSet)),
		asm.JSet.Imm(asm.R2, tcpRST, "ct_tcp_index"),
		movr(asm.R3, asm.R2),
		asm.And.Imm(asm.R3, tcpSYN|tcpACK),
		mov(asm.R1, int32(ir.TCPSynAckSet)),
		asm.JEq.Imm(asm.R3, tcpSYN|tcpACK, "ct_tcp_index"),
		mov(asm.R1, int32(ir.TCPSynSet)),
		asm.JSet.Imm(asm.R2, tcpSYN, "ct_tcp_index"),
		mov(asm.R1, int32(ir.TCPFinSet)),
		asm.JSet.Imm(asm.R2, tcpFIN, "ct_tcp_index"),
		mov(asm.R1, int32(ir.TCPAckSet)),
		asm.JSet.Imm(asm.R2, tcpACK, "ct_tcp_index"),
		mov(asm.R1, int32(ir.TCPNoneSet)),
	)
	b.mark("ct_tcp_index")
	b.emit(st(asm.R10, ctSeg+segIndex, asm.R1, asm.Byte))

	b.note("the windows: seen[dir] is the sender's, seen[!dir] the receiver's")
	b.emit(
		ld(asm.R1, asm.R10, ctSeg+segDir, asm.Byte),
		asm.JEq.Imm(asm.R1, ipCTDirReply, "ct_tcp_seen_reply"),
	)
	c.ctCopySeen(0, ctSnd)
	c.ctCopySeen(1, ctRcv)
	b.emit(ja("ct_tcp_seen_done"))
	b.mark("ct_tcp_seen_reply")
	c.ctCopySeen(1, ctSnd)
	c.ctCopySeen(0, ctRcv)
	b.mark("ct_tcp_seen_done")

	c.ctTCPTransition()
	c.ctTCPWindow()

	b.mark("ct_tcp_accept")
	b.emit(ld(asm.R8, asm.R10, ctSeg+segFound, asm.Byte), ja("ct_release"))
	b.mark("ct_tcp_invalid")
	b.emit(mov(asm.R8, ctStateInvalid), ja("ct_release"))
	b.mark("ct_tcp_new")
	b.emit(mov(asm.R8, ctStateNew), ja("ct_release"))
}

// TCP flags in the segment's flags.
const (
	tcpFIN = 0x01
	tcpSYN = 0x02
	tcpRST = 0x04
	tcpACK = 0x10
)

// ctCopyEntry copies the entry's status, TCP state and last_* fields to
// the frame (ctEntry, segState); the windows follow once the direction is
// known (ctCopySeen).
func (c *compiler) ctCopyEntry() {
	c.b.emit(
		ldField(asm.R1, asm.R9, nfConnStatus, asm.DWord),
		st(asm.R10, ctEntry+entStatus, asm.R1, asm.Word),
		ldField(asm.R1, asm.R9, tcpField("state"), asm.Byte),
		st(asm.R10, ctSeg+segState, asm.R1, asm.Byte),
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
		c.b.emit(
			ldField(asm.R1, asm.R9, tcpField(f.name), f.size),
			st(asm.R10, ctEntry+f.off, asm.R1, f.size),
		)
	}
}

// ctCopySeen copies nf_conn.proto.tcp.seen[i] to the frame at dst.
func (c *compiler) ctCopySeen(i int, dst int16) {
	for _, f := range []struct {
		name string
		off  int16
		size asm.Size
	}{
		{"td_end", tdEnd, asm.Word}, {"td_maxend", tdMaxEnd, asm.Word}, {"td_maxwin", tdMaxWin, asm.Word},
		{"td_maxack", tdMaxAck, asm.Word}, {"td_scale", tdScale, asm.Byte}, {"flags", tdFlags, asm.Byte},
	} {
		c.b.emit(
			ldField(asm.R1, asm.R9, tcpField(fmt.Sprintf("seen[%d].%s", i, f.name)), f.size),
			st(asm.R10, dst+f.off, asm.R1, f.size),
		)
	}
}

// tcpConntracksRows packs ir.TCPConntracks: row dir*6+index holds the next
// state for old state s in bits 4s to 4s+3.
func tcpConntracksRows() [12]int64 {
	var rows [12]int64
	for dir := range ir.TCPConntracks {
		for index, row := range ir.TCPConntracks[dir] {
			for old, next := range row {
				rows[dir*6+index] |= int64(next) << (4 * old)
			}
		}
	}
	return rows
}

// ctTCPTransition emits nf_conntrack_tcp_packet up to tcp_in_window: the
// next state from tcp_conntracks and the special cases that decide
// without the window check.
func (c *compiler) ctTCPTransition() {
	b := c.b
	b.note("tcp_conntracks[dir][index][state], packed four bits a state")
	b.emit(
		ld(asm.R2, asm.R10, ctSeg+segDir, asm.Byte),
		asm.Mul.Imm(asm.R2, 6),
		ld(asm.R1, asm.R10, ctSeg+segIndex, asm.Byte),
		asm.Add.Reg(asm.R2, asm.R1),
	)
	for row, v := range tcpConntracksRows() {
		next := b.fresh("ct_tcp_row")
		b.emit(
			asm.JNE.Imm(asm.R2, int32(row), next),
			asm.LoadImm(asm.R3, v, asm.DWord),
			ja("ct_tcp_row_found"),
		)
		b.mark(next)
	}
	b.emit(ja("ct_tcp_invalid"))
	b.mark("ct_tcp_row_found")
	b.emit(
		ld(asm.R4, asm.R10, ctSeg+segState, asm.Byte),
		ld(asm.R5, asm.R10, ctSeg+segIndex, asm.Byte),
		movr(asm.R1, asm.R4),
		asm.LSh.Imm(asm.R1, 2),
		asm.RSh.Reg(asm.R3, asm.R1),
		asm.And.Imm(asm.R3, 0xf),
		asm.JEq.Imm(asm.R3, int32(ir.TCPSynSent), "ct_tcp_to_syn_sent"),
		asm.JEq.Imm(asm.R3, tcpIgnoreState, "ct_tcp_ignore"),
		asm.JEq.Imm(asm.R3, tcpInvalidState, "ct_tcp_invalid"),
		asm.JEq.Imm(asm.R3, int32(ir.TCPTimeWait), "ct_tcp_to_time_wait"),
		asm.JEq.Imm(asm.R3, int32(ir.TCPClose), "ct_tcp_to_close"),
		ja("ct_tcp_window"),
	)

	b.mark("ct_tcp_to_syn_sent")
	b.note("a SYN on a closed or aborted connection kills it and starts a new one")
	b.emit(
		asm.JLT.Imm(asm.R4, int32(ir.TCPTimeWait), "ct_tcp_window"),
		ld(asm.R1, asm.R10, ctSnd+tdFlags, asm.Byte),
		ld(asm.R2, asm.R10, ctRcv+tdFlags, asm.Byte),
		asm.Or.Reg(asm.R1, asm.R2),
		asm.JSet.Imm(asm.R1, ir.TCPFlagCloseInit, "ct_tcp_new"),
		ld(asm.R1, asm.R10, ctEntry+entLastDir, asm.Byte),
		ld(asm.R2, asm.R10, ctSeg+segDir, asm.Byte),
		asm.JNE.Reg(asm.R1, asm.R2, "ct_tcp_ignore"),
		ld(asm.R1, asm.R10, ctEntry+entLastIndex, asm.Byte),
		asm.JEq.Imm(asm.R1, int32(ir.TCPRstSet), "ct_tcp_new"),
	)

	b.mark("ct_tcp_ignore")
	b.note("ignored: the entry's state, unless a SYN-ACK answers a SYN ignored before, which takes that SYN's window")
	b.emit(
		ld(asm.R5, asm.R10, ctSeg+segIndex, asm.Byte),
		asm.JNE.Imm(asm.R5, int32(ir.TCPSynAckSet), "ct_tcp_accept"),
		ld(asm.R1, asm.R10, ctEntry+entLastIndex, asm.Byte),
		asm.JNE.Imm(asm.R1, int32(ir.TCPSynSet), "ct_tcp_accept"),
		ld(asm.R1, asm.R10, ctEntry+entLastDir, asm.Byte),
		ld(asm.R2, asm.R10, ctSeg+segDir, asm.Byte),
		asm.JEq.Reg(asm.R1, asm.R2, "ct_tcp_accept"),
		ld(asm.R1, asm.R10, ctEntry+entLastEnd, asm.Word),
		ld(asm.R2, asm.R10, ctSeg+segAck, asm.Word),
		asm.JNE.Reg(asm.R1, asm.R2, "ct_tcp_accept"),
		st(asm.R10, ctRcv+tdEnd, asm.R1, asm.Word),
		st(asm.R10, ctRcv+tdMaxEnd, asm.R1, asm.Word),
		ld(asm.R1, asm.R10, ctEntry+entLastWin, asm.Half),
		asm.JNE.Imm(asm.R1, 0, "ct_tcp_last_win"),
		mov(asm.R1, 1),
	)
	b.mark("ct_tcp_last_win")
	b.emit(
		st(asm.R10, ctRcv+tdMaxWin, asm.R1, asm.Word),
		ld(asm.R1, asm.R10, ctEntry+entLastScale, asm.Byte),
		st(asm.R10, ctRcv+tdScale, asm.R1, asm.Byte),
		ld(asm.R1, asm.R10, ctEntry+entLastFlags, asm.Byte),
		asm.And.Imm(asm.R1, 0xff&^ir.TCPExpChallengeAck),
		st(asm.R10, ctRcv+tdFlags, asm.R1, asm.Byte),
		// nf_ct_tcp_state_reset of the sender
		stImm(asm.R10, ctSnd, 0, asm.DWord),
		stImm(asm.R10, ctSnd+8, 0, asm.DWord),
		stImm(asm.R10, ctSnd+tdScale, 0, asm.Byte),
		ld(asm.R1, asm.R10, ctSnd+tdFlags, asm.Byte),
		asm.And.Imm(asm.R1, ir.TCPFlagBeLiberal),
		st(asm.R10, ctSnd+tdFlags, asm.R1, asm.Byte),
		ja("ct_tcp_window"),
	)

	b.mark("ct_tcp_to_time_wait")
	b.note("an RFC 5961 challenge ACK in LAST_ACK does not change the state")
	b.emit(
		asm.JNE.Imm(asm.R4, int32(ir.TCPLastAck), "ct_tcp_window"),
		asm.JNE.Imm(asm.R5, int32(ir.TCPAckSet), "ct_tcp_window"),
		ld(asm.R1, asm.R10, ctEntry+entLastDir, asm.Byte),
		ld(asm.R2, asm.R10, ctSeg+segDir, asm.Byte),
		asm.JEq.Reg(asm.R1, asm.R2, "ct_tcp_window"),
		ld(asm.R1, asm.R10, ctEntry+entLastIndex, asm.Byte),
		asm.JNE.Imm(asm.R1, int32(ir.TCPSynSet), "ct_tcp_window"),
		ld(asm.R1, asm.R10, ctEntry+entLastFlags, asm.Byte),
		asm.JSet.Imm(asm.R1, ir.TCPExpChallengeAck, "ct_tcp_accept"),
		ja("ct_tcp_window"),
	)
	c.ctTCPReset()
}

// ctTCPReset is the transition to CLOSE: which RSTs skip the window, and
// which are invalid before the peer's highest ACK.
func (c *compiler) ctTCPReset() {
	b := c.b
	b.mark("ct_tcp_to_close")
	b.note("an RST: closing states skip the window; before the peer's highest ACK it is invalid, unless nf_conntrack_tcp_ignore_invalid_rst")
	b.emit(
		asm.JNE.Imm(asm.R5, int32(ir.TCPRstSet), "ct_tcp_window"),
		asm.JLT.Imm(asm.R4, int32(ir.TCPFinWait), "ct_tcp_rst_checks"),
		asm.JLE.Imm(asm.R4, int32(ir.TCPClose), "ct_tcp_accept"),
	)
	b.mark("ct_tcp_rst_checks")
	b.emit(
		ld(asm.R1, asm.R10, ctRcv+tdFlags, asm.Byte),
		asm.JSet.Imm(asm.R1, ir.TCPFlagMaxAckSet, "ct_tcp_rst_maxack"),
		ja("ct_tcp_rst_answer"),
	)
	b.mark("ct_tcp_rst_maxack")
	b.emit(
		ld(asm.R1, asm.R10, ctEntry+entLastIndex, asm.Byte),
		asm.JEq.Imm(asm.R1, int32(ir.TCPSynSet), "ct_tcp_rst_answer"),
		ld(asm.R1, asm.R10, ctSeg+segSeq, asm.Word),
		asm.JNE.Imm(asm.R1, 0, "ct_tcp_rst_seq"),
	)
	c.jumpUnlessEstablished("ct_tcp_window")
	b.mark("ct_tcp_rst_seq")
	b.emit(
		ld(asm.R1, asm.R10, ctSeg+segSeq, asm.Word),
		ld(asm.R2, asm.R10, ctRcv+tdMaxAck, asm.Word),
		asm.Sub.Reg32(asm.R1, asm.R2),
		asm.JSGE.Imm32(asm.R1, 0, "ct_tcp_rst_valid"),
	)
	c.ctSysctl(netTCPIgnoreInvalidRST)
	b.emit(asm.JEq.Imm(asm.R1, 0, "ct_tcp_invalid"))
	b.mark("ct_tcp_rst_valid")
	c.jumpUnlessEstablished("ct_tcp_window")
	b.emit(
		ld(asm.R1, asm.R10, ctSeg+segSeq, asm.Word),
		ld(asm.R2, asm.R10, ctRcv+tdMaxAck, asm.Word),
		asm.JEq.Reg(asm.R1, asm.R2, "ct_tcp_window"),
		ld(asm.R2, asm.R10, ctEntry+entLastIndex, asm.Byte),
		asm.JNE.Imm(asm.R2, int32(ir.TCPAckSet), "ct_tcp_rst_answer"),
		ld(asm.R2, asm.R10, ctEntry+entLastDir, asm.Byte),
		ld(asm.R3, asm.R10, ctSeg+segDir, asm.Byte),
		asm.JNE.Reg(asm.R2, asm.R3, "ct_tcp_rst_answer"),
		ld(asm.R2, asm.R10, ctEntry+entLastEnd, asm.Word),
		asm.JEq.Reg(asm.R1, asm.R2, "ct_tcp_window"),
	)
	b.mark("ct_tcp_rst_answer")
	b.note("an RST answering a SYN or ACK let through, or a challenge ACK, skips the window")
	b.emit(
		ld(asm.R1, asm.R10, ctEntry+entLastEnd, asm.Word),
		ld(asm.R2, asm.R10, ctSeg+segAck, asm.Word),
		asm.JNE.Reg(asm.R1, asm.R2, "ct_tcp_rst_challenge"),
		ld(asm.R1, asm.R10, ctEntry+entStatus, asm.Word),
		ld(asm.R2, asm.R10, ctEntry+entLastIndex, asm.Byte),
		asm.JSet.Imm(asm.R1, ipsSeenReply, "ct_tcp_rst_seen_reply"),
		ja("ct_tcp_rst_unassured"),
	)
	b.mark("ct_tcp_rst_seen_reply")
	b.emit(
		asm.JNE.Imm(asm.R2, int32(ir.TCPSynSet), "ct_tcp_rst_unassured"),
		// from the other side than the SYN: upstream's direction check
		// (see ir.ConntrackTCP)
		ld(asm.R3, asm.R10, ctEntry+entLastDir, asm.Byte),
		ld(asm.R4, asm.R10, ctSeg+segDir, asm.Byte),
		asm.JNE.Reg(asm.R3, asm.R4, "ct_tcp_accept"),
	)
	b.mark("ct_tcp_rst_unassured")
	b.emit(
		asm.JSet.Imm(asm.R1, ipsAssured, "ct_tcp_rst_challenge"),
		asm.JEq.Imm(asm.R2, int32(ir.TCPAckSet), "ct_tcp_accept"),
	)
	b.mark("ct_tcp_rst_challenge")
	b.emit(
		ld(asm.R1, asm.R10, ctSeg+segState, asm.Byte),
		asm.JNE.Imm(asm.R1, int32(ir.TCPSynSent), "ct_tcp_window"),
		ld(asm.R1, asm.R10, ctEntry+entLastIndex, asm.Byte),
		asm.JNE.Imm(asm.R1, int32(ir.TCPAckSet), "ct_tcp_window"),
		ld(asm.R1, asm.R10, ctEntry+entLastDir, asm.Byte),
		asm.JNE.Imm(asm.R1, ipCTDirReply, "ct_tcp_window"),
		ld(asm.R1, asm.R10, ctEntry+entLastAck, asm.Word),
		ld(asm.R2, asm.R10, ctSeg+segSeq, asm.Word),
		asm.JEq.Reg(asm.R1, asm.R2, "ct_tcp_accept"),
		ja("ct_tcp_window"),
	)
}

// tcp_conntracks' sIV and sIG.
const (
	tcpInvalidState = 10
	tcpIgnoreState  = 11
)

// jumpUnlessEstablished jumps to label unless nf_conntrack_tcp_established:
// the entry is ESTABLISHED and assured.
func (c *compiler) jumpUnlessEstablished(label string) {
	c.b.emit(
		ld(asm.R2, asm.R10, ctSeg+segState, asm.Byte),
		asm.JNE.Imm(asm.R2, int32(ir.TCPEstablished), label),
		ld(asm.R2, asm.R10, ctEntry+entStatus, asm.Word),
		asm.And.Imm(asm.R2, ipsAssured),
		asm.JEq.Imm(asm.R2, 0, label),
	)
}

// ctInitSender is tcp_init_sender's part that the verdict depends on:
// the sender's window starts at this segment. r1 holds the segment's end.
func (c *compiler) ctInitSender() {
	win := c.b.fresh("ct_tcp_win")
	c.b.emit(
		ld(asm.R1, asm.R10, ctSeg+segEnd, asm.Word),
		st(asm.R10, ctSnd+tdEnd, asm.R1, asm.Word),
		st(asm.R10, ctSnd+tdMaxEnd, asm.R1, asm.Word),
		ld(asm.R1, asm.R10, ctSeg+segWin, asm.Word),
		asm.JNE.Imm(asm.R1, 0, win),
		mov(asm.R1, 1),
	)
	c.b.mark(win)
	c.b.emit(st(asm.R10, ctSnd+tdMaxWin, asm.R1, asm.Word))
}

// ctTCPWindow emits tcp_in_window: whether the segment is within the
// windows; only its INVALID answer changes the state. Sequence numbers
// compare as the kernel's before(a, b), (s32)(a - b) < 0, and after(a, b)
// as before(b, a), which differs from (s32)(a - b) > 0 when a and b are
// 2^31 apart.
func (c *compiler) ctTCPWindow() {
	b := c.b
	b.mark("ct_tcp_window")
	b.note("tcp_in_window; the sack is the highest SACK block's right edge when the receiver permits SACK")
	b.emit(
		ld(asm.R1, asm.R10, ctRcv+tdFlags, asm.Byte),
		asm.JSet.Imm(asm.R1, ir.TCPFlagSackPerm, "ct_tcp_sack"),
	)
	b.mark("ct_tcp_sack_done")
	b.emit(
		ld(asm.R2, asm.R10, ctSeg+segFlags, asm.Byte),
		ld(asm.R1, asm.R10, ctSnd+tdMaxWin, asm.Word),
		asm.JNE.Imm(asm.R1, 0, "ct_tcp_reinit"),
		asm.JSet.Imm(asm.R2, tcpSYN, "ct_tcp_init"),
	)
	b.note("a sender not seen yet (picked up mid-stream): this segment sets its window")
	b.emit(
		ld(asm.R1, asm.R10, ctSeg+segEnd, asm.Word),
		st(asm.R10, ctSnd+tdEnd, asm.R1, asm.Word),
		ld(asm.R2, asm.R10, ctSeg+segWin, asm.Word),
		ld(asm.R3, asm.R10, ctSnd+tdScale, asm.Byte),
		asm.LSh.Reg32(asm.R2, asm.R3),
		asm.JNE.Imm(asm.R2, 0, "ct_tcp_pickup_win"),
		mov(asm.R2, 1),
	)
	b.mark("ct_tcp_pickup_win")
	b.emit(
		st(asm.R10, ctSnd+tdMaxWin, asm.R2, asm.Word),
		asm.Add.Reg32(asm.R1, asm.R2),
		st(asm.R10, ctSnd+tdMaxEnd, asm.R1, asm.Word),
		ld(asm.R1, asm.R10, ctSeg+segSack, asm.Word),
		ld(asm.R3, asm.R10, ctRcv+tdMaxWin, asm.Word),
		asm.JNE.Imm(asm.R3, 0, "ct_tcp_keepalive"),
		st(asm.R10, ctRcv+tdEnd, asm.R1, asm.Word),
		ja("ct_tcp_checks"),
	)
	b.mark("ct_tcp_keepalive")
	b.emit(
		ld(asm.R2, asm.R10, ctRcv+tdEnd, asm.Word),
		asm.Add.Imm32(asm.R2, 1),
		asm.JNE.Reg(asm.R1, asm.R2, "ct_tcp_checks"),
		st(asm.R10, ctRcv+tdEnd, asm.R2, asm.Word),
		ja("ct_tcp_checks"),
	)
	b.mark("ct_tcp_init")
	c.ctInitSender()
	b.emit(
		ld(asm.R2, asm.R10, ctSeg+segFlags, asm.Byte),
		asm.JSet.Imm(asm.R2, tcpACK, "ct_tcp_checks"),
		ja("ct_tcp_accept"), // simultaneous open
	)
	b.mark("ct_tcp_reinit")
	b.note("a SYN with a later sequence in SYN_SENT or SYN_RECV starts the sender's window again")
	b.emit(
		asm.JSet.Imm(asm.R2, tcpSYN, "ct_tcp_reinit_syn"),
		ja("ct_tcp_checks"),
	)
	b.mark("ct_tcp_reinit_syn")
	b.emit(
		// after(end, td_end) is before(td_end, end)
		ld(asm.R1, asm.R10, ctSnd+tdEnd, asm.Word),
		ld(asm.R3, asm.R10, ctSeg+segEnd, asm.Word),
		asm.Sub.Reg32(asm.R1, asm.R3),
		asm.JSGE.Imm32(asm.R1, 0, "ct_tcp_checks"),
		ld(asm.R1, asm.R10, ctSeg+segState, asm.Byte),
		asm.JEq.Imm(asm.R1, int32(ir.TCPSynSent), "ct_tcp_reinit_do"),
		asm.JEq.Imm(asm.R1, int32(ir.TCPSynRecv), "ct_tcp_reinit_do"),
		ja("ct_tcp_checks"),
	)
	b.mark("ct_tcp_reinit_do")
	c.ctInitSender()
	b.emit(
		ld(asm.R2, asm.R10, ctSeg+segFlags, asm.Byte),
		asm.JSet.Imm(asm.R2, tcpACK, "ct_tcp_checks"),
		ld(asm.R1, asm.R10, ctSeg+segDir, asm.Byte),
		asm.JEq.Imm(asm.R1, ipCTDirReply, "ct_tcp_accept"),
	)
	c.ctTCPBounds()
	c.ctTCPSack()
}

// ctTCPBounds checks the segment against the windows: tcp_in_window's
// conditions I and III, an RST's sequence, and the liberal senders.
func (c *compiler) ctTCPBounds() {
	b := c.b
	b.mark("ct_tcp_checks")
	b.note("no ACK, or an RST with ack 0, acknowledges the receiver's end")
	b.emit(
		ld(asm.R2, asm.R10, ctSeg+segFlags, asm.Byte),
		asm.JSet.Imm(asm.R2, tcpACK, "ct_tcp_acked"),
		ja("ct_tcp_end_ack"),
	)
	b.mark("ct_tcp_acked")
	b.emit(
		asm.JSet.Imm(asm.R2, tcpRST, "ct_tcp_rst_ack"),
		ja("ct_tcp_rst_seq0"),
	)
	b.mark("ct_tcp_rst_ack")
	b.emit(
		ld(asm.R1, asm.R10, ctSeg+segAck, asm.Word),
		asm.JNE.Imm(asm.R1, 0, "ct_tcp_rst_seq0"),
	)
	b.mark("ct_tcp_end_ack")
	b.emit(
		ld(asm.R1, asm.R10, ctRcv+tdEnd, asm.Word),
		st(asm.R10, ctSeg+segSack, asm.R1, asm.Word),
	)
	b.mark("ct_tcp_rst_seq0")
	b.emit(
		asm.JSet.Imm(asm.R2, tcpRST, "ct_tcp_rst_syn_sent"),
		ja("ct_tcp_bounds"),
	)
	b.mark("ct_tcp_rst_syn_sent")
	b.note("an RST with seq 0 answering a SYN")
	b.emit(
		ld(asm.R1, asm.R10, ctSeg+segSeq, asm.Word),
		asm.JNE.Imm(asm.R1, 0, "ct_tcp_bounds"),
		ld(asm.R1, asm.R10, ctSeg+segState, asm.Byte),
		asm.JNE.Imm(asm.R1, int32(ir.TCPSynSent), "ct_tcp_bounds"),
		ld(asm.R1, asm.R10, ctSnd+tdEnd, asm.Word),
		st(asm.R10, ctSeg+segSeq, asm.R1, asm.Word),
		st(asm.R10, ctSeg+segEnd, asm.R1, asm.Word),
	)

	b.mark("ct_tcp_bounds")
	b.note("I: seq <= sender's td_maxend, else only an overshoot within the receiver's window is tolerated")
	b.emit(
		ld(asm.R1, asm.R10, ctSeg+segSeq, asm.Word),
		ld(asm.R2, asm.R10, ctSnd+tdMaxEnd, asm.Word),
		asm.Add.Imm32(asm.R2, 1),
		asm.Sub.Reg32(asm.R1, asm.R2),
		asm.JSLT.Imm32(asm.R1, 0, "ct_tcp_seq_ok"),
		// in the receiver's window
		ld(asm.R4, asm.R10, ctRcv+tdMaxWin, asm.Word),
		asm.JEq.Imm(asm.R4, 0, "ct_tcp_liberal"),
		ld(asm.R2, asm.R10, ctSeg+segEnd, asm.Word),
		ld(asm.R3, asm.R10, ctSnd+tdEnd, asm.Word),
		asm.Sub.Reg32(asm.R3, asm.R4),
		asm.Sub.Imm32(asm.R3, 1),
		asm.Sub.Reg32(asm.R3, asm.R2),
		asm.JSGE.Imm32(asm.R3, 0, "ct_tcp_liberal"),
		// the ack above MAXACKWINDOW's lower bound
		ld(asm.R3, asm.R10, ctSnd+tdMaxWin, asm.Word),
		asm.JGT.Imm(asm.R3, maxAckWinConst, "ct_tcp_maxackwin"),
		mov(asm.R3, maxAckWinConst),
	)
	b.mark("ct_tcp_maxackwin")
	b.emit(
		ld(asm.R2, asm.R10, ctRcv+tdEnd, asm.Word),
		asm.Sub.Reg32(asm.R2, asm.R3),
		asm.Sub.Imm32(asm.R2, 1),
		ld(asm.R1, asm.R10, ctSeg+segSack, asm.Word),
		asm.Sub.Reg32(asm.R2, asm.R1),
		asm.JSGE.Imm32(asm.R2, 0, "ct_tcp_liberal"),
		// the overshoot at most the receiver's window
		ld(asm.R1, asm.R10, ctSeg+segEnd, asm.Word),
		ld(asm.R2, asm.R10, ctSnd+tdMaxEnd, asm.Word),
		asm.Sub.Reg32(asm.R1, asm.R2),
		asm.Add.Imm32(asm.R1, 1),
		asm.JGT.Reg32(asm.R1, asm.R4, "ct_tcp_liberal"),
	)
	b.mark("ct_tcp_seq_ok")
	b.note("III: sack <= receiver's td_end; the lower bounds only make tcp_in_window ignore a segment")
	b.emit(
		ld(asm.R1, asm.R10, ctSeg+segSack, asm.Word),
		ld(asm.R2, asm.R10, ctRcv+tdEnd, asm.Word),
		asm.Add.Imm32(asm.R2, 1),
		asm.Sub.Reg32(asm.R1, asm.R2),
		asm.JSLT.Imm32(asm.R1, 0, "ct_tcp_accept"),
	)
	b.mark("ct_tcp_liberal")
	b.note("nf_tcp_log_invalid: a liberal sender's segments, or all with nf_conntrack_tcp_be_liberal, are never invalid")
	b.emit(
		ld(asm.R1, asm.R10, ctSnd+tdFlags, asm.Byte),
		asm.JSet.Imm(asm.R1, ir.TCPFlagBeLiberal, "ct_tcp_accept"),
	)
	c.ctSysctl(netTCPBeLiberal)
	b.emit(
		asm.JNE.Imm(asm.R1, 0, "ct_tcp_accept"),
		ja("ct_tcp_invalid"),
	)

}

// ctTCPSack finds the highest SACK block's right edge in the segment's
// options (tcp_sack) and goes back to ct_tcp_sack_done.
func (c *compiler) ctTCPSack() {
	b := c.b
	b.mark("ct_tcp_sack")
	b.note("tcp_sack: the options to ScratchMap's value, one step of the walk a bpf_loop iteration")
	b.emit(
		ld(asm.R1, asm.R10, ctBuf+12, asm.Byte),
		asm.RSh.Imm(asm.R1, 4),
		asm.LSh.Imm(asm.R1, 2),
		asm.Sub.Imm(asm.R1, 20),
		asm.JEq.Imm(asm.R1, 0, "ct_tcp_sack_done"),
		asm.JGT.Imm(asm.R1, 40, "ct_tcp_sack_done"),
		st(asm.R10, ctLoop+lsCtx, asm.R1, asm.DWord), // the length, until the map lookup
		// tcp_sack's fast path: timestamps alone hold no SACK block.
		asm.JNE.Imm(asm.R1, 12, "ct_tcp_sack_walk"),
		movr(asm.R1, asm.R6),
		ld(asm.R2, asm.R7, pktL4Off, asm.Half),
		asm.Add.Imm(asm.R2, 20),
	)
	c.load(asm.R10, ctBuf+20, 4, "ct_tcp_sack_unknown")
	b.emit(
		ld(asm.R1, asm.R10, ctBuf+20, asm.Word),
		ntoh(asm.R1, asm.Word),
		asm.JEq.Imm(asm.R1, 0x0101080a, "ct_tcp_sack_done"), // NOP NOP TIMESTAMP 10
	)
	b.mark("ct_tcp_sack_walk")
	b.emit(
		stImm(asm.R10, ctLoop+16, 0, asm.Word),
		movr(asm.R2, asm.R10),
		asm.Add.Imm(asm.R2, ctLoop+16),
		mapRef(asm.R1, ScratchMap),
		asm.FnMapLookupElem.Call(),
		asm.JEq.Imm(asm.R0, 0, "ct_tcp_sack_unknown"),
		ld(asm.R4, asm.R10, ctLoop+lsCtx, asm.DWord),
		asm.JEq.Imm(asm.R4, 0, "ct_tcp_sack_unknown"),
		asm.JGT.Imm(asm.R4, 40, "ct_tcp_sack_unknown"),
		st(asm.R0, sackLen, asm.R4, asm.DWord),
		stImm(asm.R0, sackIndex, 0, asm.DWord),
		ld(asm.R1, asm.R10, ctSeg+segSack, asm.Word),
		st(asm.R0, sackMax, asm.R1, asm.DWord),
		st(asm.R10, ctLoop+lsCtx, asm.R6, asm.DWord),
		st(asm.R10, ctLoop+lsState, asm.R0, asm.DWord),
		movr(asm.R1, asm.R6),
		ld(asm.R2, asm.R7, pktL4Off, asm.Half),
		asm.Add.Imm(asm.R2, 20),
	)
	c.load(asm.R0, stOptions, 0, "ct_tcp_sack_unknown")
	b.emit(
		mov(asm.R1, maxTCPOptionSteps),
		funcRef(asm.R2, symCTSack),
		movr(asm.R3, asm.R10),
		asm.Add.Imm(asm.R3, ctLoop),
		mov(asm.R4, 0),
		asm.FnLoop.Call(),
		ld(asm.R3, asm.R10, ctLoop+lsState, asm.DWord),
		ld(asm.R1, asm.R3, sackMax, asm.DWord),
		st(asm.R10, ctSeg+segSack, asm.R1, asm.Word),
		ja("ct_tcp_sack_done"),
	)
	b.mark("ct_tcp_sack_unknown")
	b.emit(mov(asm.R8, ctStateUnknown), ja("ct_release"))
}

// ctSackCallback emits one step of tcp_sack's walk over the options at
// stOptions: the first well-formed SACK option's blocks raise sackMax and
// end the walk.
//
//	r6 loop state, r1 index, r2 length of the options
func (c *compiler) ctSackCallback() {
	b := c.b
	b.function(funcCallback(symCTSack), "one step of tcp_sack")
	c.callbackPrologue()
	b.emit(
		ld(asm.R1, asm.R6, sackIndex, asm.DWord),
		ld(asm.R2, asm.R6, sackLen, asm.DWord),
		asm.JGE.Reg(asm.R1, asm.R2, "sack_stop"),
		asm.JGT.Imm(asm.R1, maxTCPOptionSteps-1, "sack_stop"),
		movr(asm.R3, asm.R6),
		asm.Add.Reg(asm.R3, asm.R1),
		ld(asm.R4, asm.R3, stOptions, asm.Byte),
		asm.JEq.Imm(asm.R4, 0, "sack_stop"), // end of options
		asm.JNE.Imm(asm.R4, 1, "sack_option"),
		asm.Add.Imm(asm.R1, 1), // no-op
		ja("sack_next"),
	)
	b.mark("sack_option")
	b.emit(
		movr(asm.R5, asm.R2),
		asm.Sub.Reg(asm.R5, asm.R1),
		asm.JLT.Imm(asm.R5, 2, "sack_stop"),
		ld(asm.R0, asm.R3, stOptions+1, asm.Byte),
		asm.JLT.Imm(asm.R0, 2, "sack_stop"),      // silly options
		asm.JGT.Reg(asm.R0, asm.R5, "sack_stop"), // partial
		asm.JNE.Imm(asm.R4, 5, "sack_skip"),
		asm.JLT.Imm(asm.R0, 10, "sack_skip"),
		movr(asm.R5, asm.R0),
		asm.Sub.Imm(asm.R5, 2),
		asm.JSet.Imm(asm.R5, 7, "sack_skip"),
	)
	for blk := int32(0); blk < 4; blk++ {
		skip := b.fresh("sack_block")
		b.emit(
			asm.JLT.Imm(asm.R0, 10+8*blk, "sack_stop"),
			// The right edge; the bound is the option's, which
			// ends within the 40 bytes.
			movr(asm.R5, asm.R1),
			asm.Add.Imm(asm.R5, 2+8*blk+4),
			asm.JGT.Imm(asm.R5, maxTCPOptionSteps-4, "sack_stop"),
			movr(asm.R3, asm.R6),
			asm.Add.Reg(asm.R3, asm.R5),
			ld(asm.R4, asm.R3, stOptions, asm.Word),
			ntoh(asm.R4, asm.Word),
			ld(asm.R3, asm.R6, sackMax, asm.DWord),
			asm.Sub.Reg32(asm.R3, asm.R4),
			asm.JSGE.Imm32(asm.R3, 0, skip),
			st(asm.R6, sackMax, asm.R4, asm.DWord),
		)
		b.mark(skip)
	}
	b.emit(ja("sack_stop"))
	b.mark("sack_skip")
	b.emit(asm.Add.Reg(asm.R1, asm.R0))
	b.mark("sack_next")
	b.emit(
		st(asm.R6, sackIndex, asm.R1, asm.DWord),
		mov(asm.R0, 0),
		asm.Return(),
	)
	b.mark("sack_stop")
	b.emit(mov(asm.R0, 1), asm.Return())
}
