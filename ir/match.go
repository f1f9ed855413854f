package ir

import (
	"fmt"
	"net/netip"
	"strings"

	"bpfwall/rules"
)

// Match is one normalized condition of a rule. The set of kinds is closed;
// each kind documents the kernel code whose semantics it has. Matches of a
// rule are evaluated in order, which matters only for the kinds that can
// drop a packet on their own (L4Header, and Proto in IPv6).
//
//sumtype:decl
type Match interface {
	isMatch()
}

// Dir says which address or port of a packet a match tests.
type Dir uint8

const (
	Src Dir = iota + 1
	Dst
	SrcOrDst // ports only: multiport --ports
)

func (d Dir) String() string {
	switch d {
	case Src:
		return "src"
	case Dst:
		return "dst"
	case SrcOrDst:
		return "src-or-dst"
	}
	return fmt.Sprintf("Dir(%d)", uint8(d))
}

// Addr is -s / -d (ip_packet_match, ip6_packet_match): (address & Mask) ==
// Addr. Mask may be non-contiguous; Addr is already masked. A zero Mask with
// Neg never matches ("! -s 0/0").
type Addr struct {
	Dir        Dir
	Addr, Mask netip.Addr
	Neg        bool
}

// Prefix returns the prefix Addr/Mask and true when Mask is contiguous.
func (m Addr) Prefix() (netip.Prefix, bool) {
	bits := rules.Net{Addr: m.Addr, Mask: m.Mask}.Bits()
	if bits < 0 {
		return netip.Prefix{}, false
	}
	return netip.PrefixFrom(m.Addr, bits), true
}

// AddrRange is -m iprange (iprange_mt4, iprange_mt6): From <= address <= To.
type AddrRange struct {
	Dir      Dir
	From, To netip.Addr
	Neg      bool
}

// AddrSet is -m set over a hash:ip or hash:net ipset with one dimension.
// As in the kernel's hash types, the longest entry containing the address
// decides: the address is in the set when that entry is not a nomatch one.
type AddrSet struct {
	Dir     Dir
	Set     string // the ipset's name
	Entries []SetEntry
	Neg     bool
}

// SetEntry is one prefix of an AddrSet.
type SetEntry struct {
	Prefix  netip.Prefix
	NoMatch bool // an exception inside a shorter entry (hash:net nomatch)
}

// Proto is -p. In IPv4 it tests the header's protocol field. In IPv6 it
// tests the upper-layer header ipv6_find_hdr finds behind the extension
// headers, and drops the packet (hotdrop) when that search fails on a first
// fragment (ip6_packet_match). "-p all" is no match in IPv4; in IPv6 it is
// Proto 0, which tests only that the extension headers can be walked.
type Proto struct {
	Proto uint8
	Neg   bool
}

// Fragment is -f (IPv4 only): the packet is a non-first fragment (its
// fragment offset is not zero). Neg is "! -f".
type Fragment struct{ Neg bool }

// IfaceDir says which interface an Iface match tests.
type IfaceDir uint8

const (
	IfaceIn  IfaceDir = iota + 1 // -i
	IfaceOut                     // -o
)

func (d IfaceDir) String() string {
	if d == IfaceOut {
		return "out"
	}
	return "in"
}

// Iface is -i / -o (ifname_compare_aligned): the interface is called Name,
// or, with Prefix ("eth+"), its name starts with Name. A packet without
// that interface has the empty name, which only "+" (Name "", Prefix)
// matches.
type Iface struct {
	Dir    IfaceDir
	Name   string
	Prefix bool
	Neg    bool
}

// L4Header starts every group of transport-header matches that came from
// one extension (tcp_mt, udp_mt, multiport_mt, icmp_match, icmp6_match). It
// does not match non-first fragments; on a first fragment or an unfragmented
// packet with fewer than Len bytes of transport header it drops the packet
// (hotdrop).
type L4Header struct {
	Len int
	// TinyFragDrop is tcp_mt's extra rule: an IPv4 fragment at offset 8
	// bytes (1 in the header's units) is dropped, since it could rewrite the
	// TCP flags of the first fragment.
	TinyFragDrop bool
}

// L4Proto is nft's "meta l4proto", and the protocol dependency of nft's
// transport expressions, in IPv6 (in IPv4 it is Proto): the protocol
// nft_set_pktinfo_ipv6 finds with ipv6_find_hdr and IP6_FH_F_AUTH, which
// stops at an authentication header. Where that search fails no rule
// testing it matches, whatever Neg; nothing is dropped.
type L4Proto struct {
	Proto uint8
	Neg   bool
}

// Transport guards the transport-header payload loads of an nft rule:
// with fewer than Len bytes of transport header the load fails and the
// rule does not match. Unlike L4Header it never drops the packet, and it
// holds for non-first fragments: the loads nft rules make (ports, flags,
// icmp type and code; 1, 2 or 4 aligned bytes) take
// nft_payload_fast_eval, which reads the fragment from nft's transport
// offset (see Decode) without testing the fragment offset.
type Transport struct{ Len int }

// Ports tests the transport ports (the first four bytes of the transport
// header) against a list of ranges: xt_tcpudp's port_match with one range,
// xt_multiport's ports_match_v1 with up to 15. With SrcOrDst either port may
// be in a range.
type Ports struct {
	Dir    Dir
	Ranges []rules.PortRange
	Neg    bool
}

// TCPFlags is --tcp-flags / --syn: (flags & Mask) == Comp.
type TCPFlags struct {
	Mask, Comp uint8
	Neg        bool
}

// TCPOption is --tcp-option (tcp_find_option): an option of kind Kind is
// present. Options beyond the end of the packet drop it (hotdrop).
type TCPOption struct {
	Kind uint8
	Neg  bool
}

// ICMP is -m icmp / -m icmp6 (icmp_match, icmp6_match): the type is Type
// and the code is in CodeMin..CodeMax. Any tests no type: IPv4's type
// "any", which matches every type and code (CodeMin 0, CodeMax 255), or
// nft's "icmp code" without a type.
type ICMP struct {
	Any              bool
	Type             uint8
	CodeMin, CodeMax uint8
	Neg              bool
}

// Length is -m length (length_mt, length_mt6): the IPv4 total length, or
// the IPv6 payload length plus 40, is in Min..Max.
type Length struct {
	Min, Max uint16
	Neg      bool
}

// CompareOp is the comparison of a TTL match.
type CompareOp uint8

const (
	CmpEq CompareOp = iota + 1
	CmpNe
	CmpLt
	CmpGt
)

func (op CompareOp) String() string {
	switch op {
	case CmpEq:
		return "=="
	case CmpNe:
		return "!="
	case CmpLt:
		return "<"
	case CmpGt:
		return ">"
	}
	return fmt.Sprintf("CompareOp(%d)", uint8(op))
}

// TTL is -m ttl (IPv4 TTL) and -m hl (IPv6 hop limit), as ttl_mt / hl_mt6:
// the field compared with Value.
type TTL struct {
	Op    CompareOp
	Value uint8
}

// SrcMAC is -m mac --mac-source (mac_mt). A packet without an Ethernet
// header never matches, even when Neg is set.
type SrcMAC struct {
	Addr [6]byte
	Neg  bool
}

// Mark is -m mark (mark_mt): (mark & Mask) == Value.
type Mark struct {
	Value, Mask uint32
	Neg         bool
}

// CTState is -m conntrack --ctstate and -m state --state (conntrack_mt,
// state_mt): the packet's conntrack state is one of States.
type CTState struct {
	States ConnState
	Neg    bool
}

// PktType is -m pkttype (pkttype_mt).
type PktType struct {
	Type PacketType
	Neg  bool
}

func (TProxyTo) isMatch()  {}
func (Addr) isMatch()      {}
func (AddrRange) isMatch() {}
func (AddrSet) isMatch()   {}
func (Proto) isMatch()     {}
func (Fragment) isMatch()  {}
func (Iface) isMatch()     {}
func (L4Header) isMatch()  {}
func (L4Proto) isMatch()   {}
func (Transport) isMatch() {}
func (Ports) isMatch()     {}
func (TCPFlags) isMatch()  {}
func (TCPOption) isMatch() {}
func (ICMP) isMatch()      {}
func (Length) isMatch()    {}
func (TTL) isMatch()       {}
func (SrcMAC) isMatch()    {}
func (Mark) isMatch()      {}
func (CTState) isMatch()   {}
func (PktType) isMatch()   {}

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

// PacketType is the link-layer class of a packet (skb->pkt_type, as in
// linux/if_packet.h).
type PacketType uint8

const (
	PacketHost      PacketType = 0
	PacketBroadcast PacketType = 1
	PacketMulticast PacketType = 2
	PacketOtherHost PacketType = 3
	PacketOutgoing  PacketType = 4
	// PacketLoopback is a multicast or broadcast packet looped back to
	// ourselves; pkttype_mt reports it as multicast or broadcast.
	PacketLoopback PacketType = 5
)

var packetTypeNames = []string{"host", "broadcast", "multicast", "otherhost", "outgoing", "loopback"}

func (t PacketType) String() string {
	if int(t) < len(packetTypeNames) {
		return packetTypeNames[t]
	}
	return fmt.Sprintf("PacketType(%d)", uint8(t))
}

// TProxyTo is nft's tproxy statement (nft_tproxy_eval): it holds when the
// socket on Addr:Port of protocol Proto exists (Addr invalid: the address
// the packet arrived on), and makes it the packet's socket, which the
// verdict then delivers (accept) or not (drop); without a socket the rule
// does not match. It is the last match of its rule. Eval assumes the
// socket exists.
type TProxyTo struct {
	Proto uint8 // 6 or 17
	Addr  netip.Addr
	Port  uint16
}
