package ir

import (
	"encoding/binary"

	"bpfwall/rules"
)

// ConntrackWithoutEntry is the conntrack state bpfwall's compiled program
// gives pkt when the kernel's conntrack table holds no entry its lookups
// (bpf_xdp_ct_lookup, bpf_skb_ct_lookup) find: what nf_conntrack_in makes
// of the packet with an empty table, with the default sysctls
// (nf_conntrack_tcp_loose=1), or ConnUnknown where the program cannot
// know it. Tests set Meta.CTState from it, so that ir.Eval and the program
// agree in a namespace whose table is empty.
//
// The model, the same in codegen:
//   - later fragments (an offset), first fragments of protocols other
//     than TCP and UDP, and broken IPv6 extension headers: ConnUnknown,
//     conntrack sees the reassembled datagram; a first TCP or UDP
//     fragment stands for it (its header is the datagram's), except that
//     its UDP length field cannot be checked against the datagram's
//     length;
//   - TCP: tcp_error (header length, tcp_valid_flags), then tcp_new: a
//     SYN starts a connection, an ACK picks one up (loose); anything else
//     is INVALID;
//   - UDP: udp_error's length checks, then NEW;
//   - ICMP and ICMPv6 errors about TCP or UDP: the inverted inner tuple is
//     looked up (nf_conntrack_inet_error): INVALID with an empty table;
//   - ICMPv6 neighbour discovery and MLD: UNTRACKED (noct_valid_new);
//   - ICMP and ICMPv6 informational types that no entry can hold:
//     INVALID;
//   - echo and the other tracked ICMP types, errors about other
//     protocols, other protocols: ConnUnknown, since the kfuncs look up
//     TCP and UDP entries only.
//
// Checksums are not verified (nf_conntrack_checksum): a packet with a bad
// transport checksum gets the state of a good one.
func (pkt *Packet) ConntrackWithoutEntry() ConnState {
	if pkt.NotIP || pkt.Invalid != "" {
		return 0
	}
	if pkt.BadExtHeaders || pkt.FragOffset != 0 {
		return ConnUnknown
	}
	// A first fragment stands for its datagram (fragment.go): its TCP
	// header is the datagram's; its UDP length cannot be checked against
	// the datagram's.
	first := pkt.MoreFragments || pkt.FragmentHeader
	if first && pkt.Proto != protoTCP && pkt.Proto != protoUDP {
		return ConnUnknown
	}
	l4 := pkt.L4
	switch {
	case pkt.Proto == protoTCP:
		if len(l4) < 20 || pkt.TCPOptionsTruncated || !tcpValidFlags(pkt.TCPFlags) {
			return ConnInvalid
		}
		if tcpStartsConnection(pkt.TCPFlags) {
			return ConnNew
		}
		return ConnInvalid
	case pkt.Proto == protoUDP:
		if len(l4) < 8 {
			return ConnInvalid
		}
		if n := int(binary.BigEndian.Uint16(l4[4:])); n < 8 || n > len(l4) && !first {
			return ConnInvalid
		}
		return ConnNew
	case pkt.Proto == protoICMP && pkt.Family == rules.IPv4:
		if len(l4) < 8 || pkt.ICMPType > maxICMPType {
			return ConnInvalid
		}
		if !icmpIsError(pkt.ICMPType) {
			return icmpInformational(pkt.ICMPType)
		}
		return innerWithoutEntry(l4[8:], rules.IPv4)
	case pkt.Proto == protoICMPv6 && pkt.Family == rules.IPv6:
		if len(l4) < 8 {
			return ConnInvalid
		}
		if icmpv6Untracked(pkt.ICMPType) {
			return ConnUntracked
		}
		if pkt.ICMPType >= 128 {
			return icmpv6Informational(pkt.ICMPType)
		}
		return innerWithoutEntry(l4[8:], rules.IPv6)
	}
	return ConnUnknown
}

// innerWithoutEntry is nf_conntrack_inet_error with an empty table for
// the packet inner, embedded in an ICMP error: INVALID when its tuple
// cannot be read or, for TCP and UDP, is not found; ConnUnknown for the
// other protocols.
func innerWithoutEntry(inner []byte, family rules.Family) ConnState {
	var proto uint8
	var l4 int
	if family == rules.IPv4 {
		// ipv4_get_l4proto: a short header or a non-first fragment
		// has no tuple.
		if len(inner) < 20 || binary.BigEndian.Uint16(inner[6:])&0x1fff != 0 {
			return ConnInvalid
		}
		proto, l4 = inner[9], int(inner[0]&0x0f)*4
	} else {
		if len(inner) < 7 {
			return ConnInvalid
		}
		proto, l4 = inner[6], ipv6HeaderLen
		if isExtHeader(proto) {
			return ConnUnknown
		}
	}
	if proto != protoTCP && proto != protoUDP {
		return ConnUnknown
	}
	if l4+4 > len(inner) { // the ports
		return ConnInvalid
	}
	return ConnInvalid // no entry
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

// tcpStartsConnection is tcp_new with nf_conntrack_tcp_loose set: the
// state tcp_conntracks gives a valid packet from TCP_CONNTRACK_NONE is not
// sIV for a SYN (SYN_SENT) and an ACK (ESTABLISHED, picked up); it is for
// SYN-ACK, RST and FIN.
func tcpStartsConnection(flags uint8) bool {
	f := flags & tcpFlagsTracked
	return f&(tcpRST|tcpFIN) == 0 && (f&(tcpSYN|tcpACK) == tcpSYN || f&(tcpSYN|tcpACK) == tcpACK)
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

// maxICMPType is NR_ICMP_TYPES: icmp_error finds a higher type invalid.
const maxICMPType = 18

// icmpIsError is icmp_is_err.
func icmpIsError(t uint8) bool {
	switch t {
	case 3, 4, 5, 11, 12: // unreachable, source quench, redirect, time exceeded, parameter problem
		return true
	}
	return false
}

// icmpInformational is the state of an ICMP message that is not an
// error: the types conntrack tracks (echo, timestamp, information and
// address mask requests and replies) need an ICMP lookup, which the kfuncs
// cannot make; no entry can hold any other type (icmp_invert_tuple has no
// inverse for it), so init_conntrack fails and the packet is INVALID.
func icmpInformational(t uint8) ConnState {
	switch t {
	case 0, 8, 13, 14, 15, 16, 17, 18:
		return ConnUnknown
	}
	return ConnInvalid
}

// icmpv6Informational is icmpInformational for ICMPv6: echo and node
// information queries and replies are tracked; 151 and 152 (multicast
// router discovery) are left unknown, since newer kernels add them to
// noct_valid_new.
func icmpv6Informational(t uint8) ConnState {
	switch t {
	case 128, 129, 139, 140, 151, 152:
		return ConnUnknown
	}
	return ConnInvalid
}

// icmpv6Untracked is icmpv6_error's noct_valid_new: MLD and neighbour
// discovery are never tracked.
func icmpv6Untracked(t uint8) bool {
	switch t {
	case 130, 131, 132, 133, 134, 135, 136, 143:
		return true
	}
	return false
}
