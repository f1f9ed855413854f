package model

import (
	"fmt"
	"net"
	"net/netip"

	"bpfwall/rules"
)

// Meta is what netfilter knows about a packet besides its bytes.
type Meta struct {
	// InIface and OutIface name the packet's interfaces; empty when it has
	// none (no input interface in OUTPUT, no output interface in INPUT).
	InIface, OutIface string
	Mark              uint32
	// CTState is the packet's conntrack state; zero means no conntrack
	// entry, which conntrack_mt and state_mt see as INVALID. ConnUnknown
	// is a state bpfwall's compiled program cannot determine: a CTState
	// match drops the packet (see Packet.ConntrackWithoutEntry).
	CTState ConnState
	PktType PacketType
	// Socket is the socket the owner match sees (skb_to_full_sk): nil
	// for a packet without one, as a forwarded packet is.
	Socket *Socket
	// Forwarded is set for a frame seen leaving after ip_forward
	// decremented its TTL (hop limit), as a FORWARD program at tc-egress
	// sees it: Decode adds the one back, so that TTL is as the packet
	// arrived, which is what FORWARD's TTL matches test (Program.Forward).
	Forwarded bool
}

// Socket is a local packet's socket, as the owner match sees it.
type Socket struct {
	// File is set for a socket that has a file: a process's socket, not
	// one of the kernel's own (which send RSTs and ICMP errors).
	File bool
	// UID and GID are the file's fsuid and fsgid, its creator's.
	UID, GID uint32
}

// Packet is a packet as ip_tables or ip6_tables see it: the fields their
// matches read, after the IP layer's checks and trimming. Decode builds one
// from an Ethernet frame; tests may also fill one in directly.
type Packet struct {
	Meta

	// NotIP is set for frames that are neither IPv4 nor IPv6 (ARP, ...):
	// netfilter's ip and ip6 tables never see them.
	NotIP bool
	// Invalid, when not empty, says why the kernel's IP layer drops the
	// packet before netfilter sees it (ip_rcv_core, ip6_rcv_core,
	// ipv6_parse_hopopts).
	Invalid string

	Family   rules.Family
	Src, Dst netip.Addr
	// SrcMAC is the Ethernet source address; nil when the packet has no
	// Ethernet header, which mac_mt never matches.
	SrcMAC net.HardwareAddr
	// Length is what xt_length compares: the IPv4 total length, or the
	// IPv6 payload length plus 40.
	Length int
	TTL    uint8 // IPv4 TTL or IPv6 hop limit
	// DSCP is the six high bits of the IPv4 TOS byte or of the IPv6
	// traffic class.
	DSCP uint8

	// Proto is the IPv4 protocol field, or the IPv6 upper-layer protocol
	// ipv6_find_hdr finds behind the extension headers.
	Proto uint8
	// BadExtHeaders is set when ipv6_find_hdr fails: an extension header is
	// cut short, or a non-first fragment's next header is another extension
	// header. Every rule that tests the protocol then drops the packet.
	BadExtHeaders bool
	// AuthHeader is set when that walk meets an IPv6 authentication
	// header before the upper-layer header; nft's walk (IP6_FH_F_AUTH)
	// stops there and reports protocol 51.
	AuthHeader bool
	// FragOffset is the fragment offset in bytes; it is not zero for
	// non-first fragments only.
	FragOffset    uint16
	MoreFragments bool
	// FragmentHeader is set when the IPv6 extension headers include a
	// fragment header.
	FragmentHeader bool
	// VLANTagged is set when the frame carries a VLAN tag: netfilter sees
	// the packet on the VLAN's device.
	VLANTagged bool

	// L4Len is the number of bytes from the transport header to the end of
	// the packet; matches that need more drop the packet (hotdrop).
	L4Len int
	// SrcPort and DstPort are the first four bytes of the transport header
	// of TCP, UDP, UDP-Lite, SCTP and DCCP packets. In a non-first
	// fragment, these fields, TCPFlags and the ICMP ones are what nft reads
	// at its transport offset: the fragment's data in IPv4, the IPv6
	// header itself in IPv6 (ipv6_find_hdr leaves the offset at 0).
	SrcPort, DstPort uint16
	TCPFlags         uint8
	// TCPOptions are the bytes between the fixed TCP header and the data
	// offset. TCPOptionsTruncated is set when the data offset is below 5 or
	// points past the end of the packet: a --tcp-option test then drops the
	// packet.
	TCPOptions          []byte
	TCPOptionsTruncated bool
	ICMPType, ICMPCode  uint8
	// L4 is the transport header and what follows, to the end of the
	// packet (L4Len bytes): conntrack's checks read it.
	L4 []byte
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

// IsFragment reports whether pkt is a fragment: IPv4 MF or a fragment
// offset, or an IPv6 fragment header.
func (pkt *Packet) IsFragment() bool {
	return pkt.FragOffset != 0 || pkt.MoreFragments || pkt.FragmentHeader
}
