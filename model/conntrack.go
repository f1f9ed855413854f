package model

import (
	"encoding/binary"
	"fmt"
	"strings"
)

// ConntrackWithoutEntry is the conntrack state bpfwall's xdp or
// tc-ingress program gives pkt when the kernel's conntrack table holds no
// entry its lookups (bpf_xdp_ct_lookup, bpf_skb_ct_lookup) find: what
// nf_conntrack_in makes of the packet with an empty table, where loose is
// the namespace's nf_conntrack_tcp_loose (1 by default; the program reads
// it per packet from the namespace of the device the packet came in on),
// or ConnUnknown for the packets of class U (see Packet.DeferredClass),
// which the program passes to its netfilter stage. Tests set Meta.CTState
// from it, so that ir.Eval and the program agree in a namespace whose
// table is empty.
//
// The model, the same in codegen:
//   - class U: ConnUnknown;
//   - TCP: tcp_error (header length, tcp_valid_flags), then tcp_new: a
//     SYN starts a connection, an ACK picks one up when loose (without
//     it tcp_new refuses every segment but a SYN); anything else is
//     INVALID;
//   - UDP: udp_error's length checks, then NEW.
//
// Checksums are not verified (nf_conntrack_checksum): a packet with a bad
// transport checksum gets the state of a good one.
func (pkt *Packet) ConntrackWithoutEntry(loose bool) ConnState {
	if pkt.NotIP || pkt.Invalid != "" {
		return 0
	}
	if pkt.DeferredClass() {
		return ConnUnknown
	}
	l4 := pkt.L4
	if pkt.Proto == ProtoTCP {
		if len(l4) < 20 || pkt.TCPOptionsTruncated || !tcpValidFlags(pkt.TCPFlags) {
			return ConnInvalid
		}
		if tcpStartsConnection(pkt.TCPFlags, loose) {
			return ConnNew
		}
		return ConnInvalid
	}
	// UDP
	if len(l4) < 8 {
		return ConnInvalid
	}
	if n := int(binary.BigEndian.Uint16(l4[4:])); n < 8 || n > len(l4) {
		return ConnInvalid
	}
	return ConnNew
}

// DeferredClass reports whether pkt is of class U: the packets whose
// conntrack state an xdp or tc-ingress program cannot know, because the
// conntrack kfuncs look up TCP and UDP only and conntrack sees reassembled
// datagrams. Those are protocols other than TCP and UDP (ICMP and ICMPv6
// included, errors and all), fragments (IPv4 MF or offset, an IPv6
// fragment header) and IPv6 packets whose extension headers cannot be
// walked. A program that tests the state passes them to its netfilter
// stage, which runs after conntrack and reads the state conntrack gave
// them; the stage recognizes them by the same bytes, and reassembled
// datagrams by their IPCB.
func (pkt *Packet) DeferredClass() bool {
	return pkt.BadExtHeaders || pkt.IsFragment() || pkt.Proto != ProtoTCP && pkt.Proto != ProtoUDP
}

// tcpValidFlags is tcp_error's tcp_valid_flags, ignoring ECE, CWR and PSH.
func tcpValidFlags(flags uint8) bool {
	switch flags & tcpFlagsTracked {
	case tcpSYN, tcpSYN | tcpURG, tcpSYN | tcpACK, tcpRST, tcpRST | tcpACK,
		tcpFIN | tcpACK, tcpFIN | tcpACK | tcpURG, tcpACK, tcpACK | tcpURG:
		return true
	}
	return false
}

// tcpStartsConnection is tcp_new: the state tcp_conntracks gives a valid
// packet from TCP_CONNTRACK_NONE is not sIV for a SYN (SYN_SENT) and an
// ACK (ESTABLISHED, picked up); it is for SYN-ACK, RST and FIN. A pickup
// needs nf_conntrack_tcp_loose (loose): without it tcp_new returns false
// for anything but SYN_SENT, and nf_conntrack_tcp_packet -NF_ACCEPT
// (INVALID).
func tcpStartsConnection(flags uint8, loose bool) bool {
	f := flags & tcpFlagsTracked
	if f&(tcpRST|tcpFIN) != 0 {
		return false
	}
	return f&(tcpSYN|tcpACK) == tcpSYN || loose && f&(tcpSYN|tcpACK) == tcpACK
}

// TCP flags.
const (
	tcpFIN = 0x01
	tcpSYN = 0x02
	tcpRST = 0x04
	tcpACK = 0x10
	tcpURG = 0x20
	// tcpFlagsTracked are the flags tcp_error looks at: all but PSH, ECE
	// and CWR.
	tcpFlagsTracked = tcpFIN | tcpSYN | tcpRST | tcpACK | tcpURG
)

// ConnState is a set of conntrack states, as conntrack_mt computes it for
// a packet: exactly one of INVALID, ESTABLISHED, RELATED, NEW and
// UNTRACKED, plus SNAT and DNAT when the connection is NATed.
type ConnState uint16

const (
	ConnInvalid ConnState = 1 << iota
	ConnEstablished
	ConnRelated
	ConnNew
	ConnUntracked
	ConnSNAT
	ConnDNAT
	// ConnUnknown is not a conntrack state: it marks a packet whose state
	// bpfwall's program cannot determine (Packet.ConntrackWithoutEntry).
	ConnUnknown
)

var connStateNames = []string{"INVALID", "ESTABLISHED", "RELATED", "NEW", "UNTRACKED", "SNAT", "DNAT", "UNKNOWN"}

func (s ConnState) String() string {
	if s == 0 {
		return "none"
	}
	var names []string
	for i, n := range connStateNames {
		if s&(1<<i) != 0 {
			names = append(names, n)
		}
	}
	if rest := s &^ (1<<len(connStateNames) - 1); rest != 0 {
		names = append(names, fmt.Sprintf("%#x", uint16(rest)))
	}
	return strings.Join(names, ",")
}
