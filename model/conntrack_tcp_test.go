package model_test

import (
	"encoding/binary"
	"testing"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"

	"bpfwall/model"
)

// TestConntrackTCP: the state nf_conntrack_tcp_packet leaves a segment
// whose tuple finds an entry, case by case from the kernel's source
// (net/netfilter/nf_conntrack_proto_tcp.c). The programs' side is tested
// against the kernel by internal/difftest's TestConntrackFlows and
// TestTCPConversations.
func TestConntrackTCP(t *testing.T) {
	// A connection client 10.0.0.1:1000 → server 198.51.100.1:22, after
	// the handshake (client ISN 1000, server ISN 5000), both sides
	// announcing window 1000 scaled by 2^2 and SACK, as tcp_in_window
	// leaves the entry after the client's first ACK.
	var cISN, sISN uint32 = 1000, 5000
	established := func() model.TCPEntry {
		return model.TCPEntry{
			Status: model.IPSSeenReply | model.IPSAssured,
			State:  model.TCPEstablished,
			Seen: [2]model.TCPSeen{
				{End: cISN + 1, MaxEnd: cISN + 1 + 4000, MaxWin: 4000, MaxAck: sISN + 1, Scale: 2,
					Flags: model.TCPFlagWindowScale | model.TCPFlagSackPerm | model.TCPFlagMaxAckSet},
				{End: sISN + 1, MaxEnd: sISN + 1 + 4000, MaxWin: 4000, MaxAck: cISN + 1, Scale: 2,
					Flags: model.TCPFlagWindowScale | model.TCPFlagSackPerm | model.TCPFlagMaxAckSet},
			},
			LastDir: 0, LastIndex: model.TCPAckSet, LastEnd: cISN + 1, LastAck: sISN + 1, LastWin: 1000,
		}
	}
	with := func(mod func(*model.TCPEntry)) model.TCPEntry {
		e := established()
		mod(&e)
		return e
	}
	type seg struct {
		reply     bool
		flags     string // of "SAFRU"
		seq, ack  uint32
		win       uint16
		data      int
		opts      []layers.TCPOption
		firstFrag bool
	}
	frame := func(s seg) []byte {
		src, dst, sport, dport := "10.0.0.1", "198.51.100.1", uint16(1000), uint16(22)
		if s.reply {
			src, dst, sport, dport = dst, src, dport, sport
		}
		l := &layers.TCP{SrcPort: layers.TCPPort(sport), DstPort: layers.TCPPort(dport), Seq: s.seq, Ack: s.ack, Window: s.win, Options: s.opts}
		for _, f := range s.flags {
			switch f {
			case 'S':
				l.SYN = true
			case 'A':
				l.ACK = true
			case 'F':
				l.FIN = true
			case 'R':
				l.RST = true
			case 'U':
				l.URG = true
			}
		}
		ip := ip4(src, dst, layers.IPProtocolTCP)
		if s.firstFrag {
			ip.Flags = layers.IPv4MoreFragments
		}
		return build(t, ether(layers.EthernetTypeIPv4), ip, l, gopacket.Payload(make([]byte, s.data)))
	}
	sackBlock := func(left, right uint32) layers.TCPOption {
		d := make([]byte, 8)
		binary.BigEndian.PutUint32(d, left)
		binary.BigEndian.PutUint32(d[4:], right)
		return layers.TCPOption{OptionType: layers.TCPOptionKindSACK, OptionLength: 10, OptionData: d}
	}
	nop := layers.TCPOption{OptionType: layers.TCPOptionKindNop, OptionLength: 1}
	ack := func(seq, ackSeq uint32) seg { return seg{flags: "A", seq: seq, ack: ackSeq, win: 1000} }
	reply := func(s seg) seg { s.reply = true; return s }

	for _, c := range []struct {
		name  string
		entry model.TCPEntry
		seg   seg
		want  model.ConnState
	}{
		{"in-window ack", established(), ack(cISN+1, sISN+1), model.ConnEstablished},
		{"in-window data", established(), seg{flags: "A", seq: cISN + 1, ack: sISN + 1, win: 1000, data: 1000}, model.ConnEstablished},
		{"reply in window", established(), reply(ack(sISN+1, cISN+1)), model.ConnEstablished},
		{"seq far beyond td_maxend", established(), ack(cISN+1+1<<30, sISN+1), model.ConnInvalid},
		{"seq at td_maxend", established(), ack(cISN+1+4000, sISN+1), model.ConnEstablished},
		{"seq one past td_maxend, no data: tolerated overshoot", established(), ack(cISN+1+4001, sISN+1), model.ConnEstablished},
		{"seq past td_maxend by more than the window", established(), ack(cISN+1+8002, sISN+1), model.ConnInvalid},
		{"ack of data not seen", established(), ack(cISN+1, sISN+2), model.ConnInvalid},
		{"ack of data not seen, liberal entry", with(func(e *model.TCPEntry) { e.Seen[0].Flags |= model.TCPFlagBeLiberal }), ack(cISN+1, sISN+2), model.ConnEstablished},
		{"ack of data not seen, nf_conntrack_tcp_be_liberal", with(func(e *model.TCPEntry) { e.BeLiberal = true }), ack(cISN+1, sISN+2), model.ConnEstablished},
		{"seq far beyond td_maxend, nf_conntrack_tcp_be_liberal", with(func(e *model.TCPEntry) { e.BeLiberal = true }), ack(cISN+1+1<<30, sISN+1), model.ConnEstablished},
		{"synack from the client, nf_conntrack_tcp_be_liberal: the state machine still refuses it", with(func(e *model.TCPEntry) { e.BeLiberal = true }),
			seg{flags: "SA", seq: cISN, ack: sISN + 1, win: 1000}, model.ConnInvalid},
		{"old retransmission is ignored", established(), ack(cISN-100000, sISN+1), model.ConnEstablished},
		{"ack far below the window is ignored", established(), ack(cISN+1, sISN+1-70000), model.ConnEstablished},
		{"ack far behind: before the window is after it", established(), ack(cISN+1, sISN+1-1<<31-10), model.ConnInvalid},
		{"sack beyond td_end", established(), seg{flags: "A", seq: cISN + 1, ack: sISN + 1, win: 1000, opts: []layers.TCPOption{nop, nop, sackBlock(sISN+1, sISN+100)}}, model.ConnInvalid},
		{"sack within td_end", established(), seg{flags: "A", seq: cISN + 1, ack: sISN + 1, win: 1000, opts: []layers.TCPOption{nop, nop, sackBlock(sISN-100, sISN+1)}}, model.ConnEstablished},
		{"sack without sack permitted", with(func(e *model.TCPEntry) { e.Seen[1].Flags &^= model.TCPFlagSackPerm }),
			seg{flags: "A", seq: cISN + 1, ack: sISN + 1, win: 1000, opts: []layers.TCPOption{nop, nop, sackBlock(sISN+1, sISN+100)}}, model.ConnEstablished},
		{"sack with a bad length is skipped", established(),
			seg{flags: "A", seq: cISN + 1, ack: sISN + 1, win: 1000, opts: []layers.TCPOption{{OptionType: layers.TCPOptionKindSACK, OptionLength: 11, OptionData: make([]byte, 9)}}}, model.ConnEstablished},
		{"synack from the client", established(), seg{flags: "SA", seq: cISN, ack: sISN + 1, win: 1000}, model.ConnInvalid},
		{"syn on an open connection is ignored", established(), seg{flags: "S", seq: 77, win: 1000}, model.ConnEstablished},
		{"syn from the server on an open connection", established(), reply(seg{flags: "S", seq: 77, win: 1000}), model.ConnInvalid},
		{"no flags", established(), seg{flags: "", seq: cISN + 1}, model.ConnInvalid},
		{"urg alone: tcp_error", established(), seg{flags: "U", seq: cISN + 1}, model.ConnInvalid},
		{"rst before the peer's max ack", established(), seg{flags: "R", seq: cISN}, model.ConnInvalid},
		{"rst before the peer's max ack, nf_conntrack_tcp_ignore_invalid_rst: in window", with(func(e *model.TCPEntry) { e.IgnoreInvalidRST = true }),
			seg{flags: "R", seq: cISN}, model.ConnEstablished},
		{"rst at the peer's max ack", established(), seg{flags: "R", seq: cISN + 1}, model.ConnEstablished},
		{"rst after the max ack, in window", established(), seg{flags: "R", seq: cISN + 50}, model.ConnEstablished},
		{"rst far out of window", established(), seg{flags: "R", seq: cISN + 1<<30}, model.ConnInvalid},
		{"rst in fin_wait skips the window", with(func(e *model.TCPEntry) { e.State = model.TCPFinWait }), seg{flags: "R", seq: cISN + 1<<30}, model.ConnEstablished},
		{"rst with seq 0 on an unassured entry: below the window, ignored", with(func(e *model.TCPEntry) { e.Status &^= model.IPSAssured }), seg{flags: "R", seq: 0}, model.ConnEstablished},
		{"fin in window", established(), seg{flags: "FA", seq: cISN + 1, ack: sISN + 1, win: 1000}, model.ConnEstablished},
		{"fin out of window", established(), seg{flags: "FA", seq: cISN + 1<<30, ack: sISN + 1, win: 1000}, model.ConnInvalid},
		{"syn reopens a closed connection", with(func(e *model.TCPEntry) {
			e.State = model.TCPTimeWait
			e.Seen[0].Flags |= model.TCPFlagCloseInit
		}), seg{flags: "S", seq: 99999, win: 1000}, model.ConnNew},
		{"syn from the server reopens it too", with(func(e *model.TCPEntry) {
			e.State = model.TCPTimeWait
			e.Seen[1].Flags |= model.TCPFlagCloseInit
		}), reply(seg{flags: "S", seq: 99999, win: 1000}), model.ConnNew},
		{"syn after an rst from the same side", with(func(e *model.TCPEntry) {
			e.State = model.TCPClose
			e.LastIndex = model.TCPRstSet
		}), seg{flags: "S", seq: 99999, win: 1000}, model.ConnNew},
		{"syn in close after the other side's rst is ignored", with(func(e *model.TCPEntry) {
			e.State = model.TCPClose
			e.LastIndex, e.LastDir = model.TCPRstSet, 1
		}), seg{flags: "S", seq: 99999, win: 1000}, model.ConnEstablished},
		{"syn from the server in close", with(func(e *model.TCPEntry) { e.State = model.TCPClose }), reply(seg{flags: "S", seq: 99999, win: 1000}), model.ConnInvalid},
		{"challenge ack in last_ack", with(func(e *model.TCPEntry) {
			e.State = model.TCPLastAck
			e.LastIndex, e.LastDir, e.LastFlags = model.TCPSynSet, 0, model.TCPExpChallengeAck
		}), reply(ack(sISN+1<<30, 12345)), model.ConnEstablished},
		{"last ack out of window", with(func(e *model.TCPEntry) { e.State = model.TCPLastAck }), reply(ack(sISN+1<<30, cISN+1)), model.ConnInvalid},
		{"retransmitted syn", model.TCPEntry{State: model.TCPSynSent, Seen: [2]model.TCPSeen{{End: cISN + 1, MaxEnd: cISN + 1, MaxWin: 1000}},
			LastIndex: model.TCPSynSet}, seg{flags: "S", seq: cISN, win: 1000}, model.ConnNew},
		{"ack before the synack", model.TCPEntry{State: model.TCPSynSent, Seen: [2]model.TCPSeen{{End: cISN + 1, MaxEnd: cISN + 1, MaxWin: 1000}}},
			ack(cISN+1, sISN+1), model.ConnInvalid},
		{"synack answering the syn", model.TCPEntry{State: model.TCPSynSent, Seen: [2]model.TCPSeen{{End: cISN + 1, MaxEnd: cISN + 1, MaxWin: 1000}}},
			reply(seg{flags: "SA", seq: sISN, ack: cISN + 1, win: 1000}), model.ConnEstablished},
		{"synack acknowledging more than the syn", model.TCPEntry{State: model.TCPSynSent, Seen: [2]model.TCPSeen{{End: cISN + 1, MaxEnd: cISN + 1, MaxWin: 1000}}},
			reply(seg{flags: "SA", seq: sISN, ack: cISN + 2, win: 1000}), model.ConnInvalid},
		{"rst answering the syn", model.TCPEntry{State: model.TCPSynSent, Seen: [2]model.TCPSeen{{End: cISN + 1, MaxEnd: cISN + 1, MaxWin: 1000}}},
			reply(seg{flags: "RA", seq: 0, ack: cISN + 1}), model.ConnEstablished},
		{"rst answering an ignored syn skips the window", with(func(e *model.TCPEntry) {
			e.LastIndex, e.LastDir, e.LastEnd = model.TCPSynSet, 0, 778
		}), reply(seg{flags: "RA", seq: sISN + 1<<30, ack: 778}), model.ConnEstablished},
		{"rst from the side of the ignored syn does not (upstream direction check)", with(func(e *model.TCPEntry) {
			e.LastIndex, e.LastDir, e.LastEnd = model.TCPSynSet, 0, 778
		}), seg{flags: "RA", seq: cISN + 1<<30, ack: 778}, model.ConnInvalid},
		{"rst answering an ack let through on a half-open entry", model.TCPEntry{State: model.TCPSynSent, Status: model.IPSSeenReply,
			Seen: [2]model.TCPSeen{{End: cISN + 1, MaxEnd: cISN + 1, MaxWin: 1000}}, LastIndex: model.TCPAckSet, LastDir: 1, LastEnd: 8000, LastAck: cISN + 1},
			reply(seg{flags: "RA", seq: 999999, ack: 8000}), model.ConnEstablished},
		{"synack 2^31 after td_end starts the window again", model.TCPEntry{State: model.TCPSynSent, Status: model.IPSSeenReply,
			Seen: [2]model.TCPSeen{{End: cISN + 1, MaxEnd: cISN + 1, MaxWin: 1000}, {End: sISN, MaxEnd: sISN, MaxWin: 1}}},
			reply(seg{flags: "SA", seq: sISN + 1<<31 - 1, ack: cISN + 1, win: 1000}), model.ConnEstablished},
		{"synack answering an ignored syn", with(func(e *model.TCPEntry) {
			e.LastIndex, e.LastDir, e.LastEnd, e.LastWin = model.TCPSynSet, 0, 77777, 500
		}), reply(seg{flags: "SA", seq: 424242, ack: 77777, win: 1000}), model.ConnEstablished},
		{"synack answering an ignored syn, sack past it", with(func(e *model.TCPEntry) {
			e.LastIndex, e.LastDir, e.LastEnd, e.LastWin, e.LastFlags = model.TCPSynSet, 0, 77777, 500, model.TCPFlagSackPerm
		}), reply(seg{flags: "SA", seq: 424242, ack: 77777, win: 1000, opts: []layers.TCPOption{nop, nop, sackBlock(77777, 77800)}}), model.ConnInvalid},
		{"picked up: the reply sets its window", model.TCPEntry{State: model.TCPEstablished,
			Seen: [2]model.TCPSeen{{End: cISN + 1, MaxEnd: cISN + 1001, MaxWin: 1000, Flags: model.TCPFlagSackPerm | model.TCPFlagBeLiberal}, {Flags: model.TCPFlagSackPerm | model.TCPFlagBeLiberal}}},
			reply(ack(sISN+1, cISN+1+1<<30)), model.ConnEstablished},
		{"picked up, not liberal: the window scale counts", model.TCPEntry{State: model.TCPEstablished, Reply: false,
			Seen: [2]model.TCPSeen{{Scale: 3}, {End: sISN + 1, MaxEnd: sISN + 1001, MaxWin: 1000}}},
			seg{flags: "A", seq: cISN + 1, ack: sISN + 1, win: 10, data: 1}, model.ConnNew},
		{"unreplied entry, original direction, in window", with(func(e *model.TCPEntry) { e.Status = 0 }), ack(cISN+1, sISN+1), model.ConnNew},
		{"expected entry", with(func(e *model.TCPEntry) { e.Status = model.IPSExpected }), ack(cISN+1, sISN+1), model.ConnRelated},
		{"expected entry, out of window", with(func(e *model.TCPEntry) { e.Status = model.IPSExpected }), ack(cISN+1<<30, sISN+1), model.ConnInvalid},
		{"first fragment: the datagram's length is unknown", established(), seg{flags: "A", seq: cISN + 1, ack: sISN + 1, win: 1000, firstFrag: true}, model.ConnUnknown},
		{"nat sequence adjustment", with(func(e *model.TCPEntry) { e.Status |= model.IPSSeqAdjust }), ack(cISN+1, sISN+1), model.ConnUnknown},
	} {
		t.Run(c.name, func(t *testing.T) {
			pkt, err := model.Decode(frame(c.seg), model.Meta{})
			if err != nil {
				t.Fatal(err)
			}
			e := c.entry
			e.Reply = c.seg.reply
			if got := pkt.ConntrackTCP(e); got != c.want {
				t.Errorf("state %s, want %s", got, c.want)
			}
		})
	}
}
