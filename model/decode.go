package model

import (
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"

	"bpfwall/rules"
)

const (
	etherTypeIPv4  = 0x0800
	etherTypeIPv6  = 0x86dd
	etherTypeVLAN  = 0x8100 // 802.1Q
	etherTypeQinQ  = 0x88a8 // 802.1ad
	ethHeaderLen   = 14
	vlanTagLen     = 4
	maxVLANTags    = 2
	ipv4HeaderLen  = 20
	ipv6HeaderLen  = 40
	ipv6MaxPayload = 0xffff
)

// IP protocol numbers, as the IP layer and conntrack know them.
const (
	ProtoICMP    = 1
	ProtoTCP     = 6
	ProtoUDP     = 17
	ProtoDCCP    = 33
	ProtoAH      = 51 // the authentication header, an IPv6 extension header too
	ProtoICMPv6  = 58
	ProtoSCTP    = 132
	ProtoUDPLite = 136
)

// IPv6 next-header values that ipv6_ext_hdr knows.
const (
	nextHopByHop = 0
	nextRouting  = 43
	nextFragment = 44
	nextAuth     = ProtoAH
	nextNone     = 59
	nextDestOpts = 60
)

// Decode parses an Ethernet frame into the Packet that ip_tables or
// ip6_tables would see on the receive path, with meta for what the bytes do
// not say.
//
// Up to two VLAN tags (802.1ad, 802.1Q) are skipped; a frame with more, or
// with an ethertype other than IPv4 and IPv6, is NotIP. The IP layer's
// checks before the PREROUTING hook are applied, and a packet that fails
// them is returned with Invalid set: ip_rcv_core (version, IHL, header
// checksum, total length; packets for other hosts), ip6_rcv_core (version,
// payload length, loopback and multicast addresses, with the interface
// called "lo" as the loopback device) and ipv6_parse_hopopts
// with the default sysctls (at most 8 options, IOAM disabled, no CALIPSO
// domain configured). IPv4 options are skipped, not validated: the kernel
// checks them after PREROUTING. Only a frame shorter than an Ethernet header
// is an error.
func Decode(frame []byte, meta Meta) (*Packet, error) {
	if len(frame) < ethHeaderLen {
		return nil, fmt.Errorf("decode: frame of %d bytes is shorter than an Ethernet header", len(frame))
	}
	p := &Packet{Meta: meta, SrcMAC: net.HardwareAddr(append([]byte(nil), frame[6:12]...))}
	etherType := binary.BigEndian.Uint16(frame[12:])
	off := ethHeaderLen
	for tags := 0; etherType == etherTypeVLAN || etherType == etherTypeQinQ; tags++ {
		if tags == maxVLANTags || len(frame) < off+vlanTagLen {
			p.NotIP = true
			return p, nil
		}
		etherType = binary.BigEndian.Uint16(frame[off+2:])
		off += vlanTagLen
		p.VLANTagged = true
	}
	switch etherType {
	case etherTypeIPv4:
		p.Family = rules.IPv4
		p.Invalid = decodeIPv4(p, frame[off:])
	case etherTypeIPv6:
		p.Family = rules.IPv6
		p.Invalid = decodeIPv6(p, frame[off:])
	default:
		p.NotIP = true
		return p, nil
	}
	// ip_rcv_core and ip6_rcv_core drop what a promiscuous interface
	// picked up for other hosts before anything else.
	if p.Invalid == "" && meta.PktType == PacketOtherHost {
		p.Invalid = "packet for another host"
	}
	return p, nil
}

// decodeIPv4 applies ip_rcv_core's checks, trims the packet to its total
// length and decodes it; it returns why the packet is dropped, or "".
func decodeIPv4(p *Packet, b []byte) string {
	if len(b) < ipv4HeaderLen {
		return fmt.Sprintf("ipv4 header cut short at %d bytes", len(b))
	}
	if v := b[0] >> 4; v != 4 {
		return fmt.Sprintf("ip version %d in an ipv4 packet", v)
	}
	ihl := int(b[0]&0x0f) * 4
	if ihl < ipv4HeaderLen {
		return fmt.Sprintf("ipv4 header length %d is below 20", ihl)
	}
	if len(b) < ihl {
		return fmt.Sprintf("ipv4 header of %d bytes cut short at %d", ihl, len(b))
	}
	if checksum(b[:ihl]) != 0xffff {
		return "bad ipv4 header checksum"
	}
	total := int(binary.BigEndian.Uint16(b[2:]))
	if total > len(b) {
		return fmt.Sprintf("ipv4 total length %d is beyond the %d bytes received", total, len(b))
	}
	if total < ihl {
		return fmt.Sprintf("ipv4 total length %d is shorter than the header", total)
	}
	b = b[:total] // pskb_trim_rcsum: link-layer padding is not part of the packet

	p.Src = netip.AddrFrom4([4]byte(b[12:16]))
	p.Dst = netip.AddrFrom4([4]byte(b[16:20]))
	p.Length = total
	p.TTL = arrivedTTL(b[8], p.Forwarded)
	p.DSCP = b[1] >> 2
	p.Proto = b[9]
	frag := binary.BigEndian.Uint16(b[6:])
	p.FragOffset = (frag & 0x1fff) * 8
	p.MoreFragments = frag&0x2000 != 0
	decodeL4(p, b[ihl:])
	return ""
}

// checksum is the ones' complement sum of b, folded to 16 bits; a valid IPv4
// header sums to 0xffff.
func checksum(b []byte) uint16 {
	var sum uint32
	for i := 0; i+1 < len(b); i += 2 {
		sum += uint32(binary.BigEndian.Uint16(b[i:]))
	}
	if len(b)%2 == 1 {
		sum += uint32(b[len(b)-1]) << 8
	}
	for sum > 0xffff {
		sum = sum>>16 + sum&0xffff
	}
	return uint16(sum)
}

var ipv6Loopback = netip.IPv6Loopback()

// decodeIPv6 applies ip6_rcv_core's checks and ipv6_parse_hopopts, trims
// the packet to its payload length and decodes it; it returns why the packet
// is dropped, or "".
func decodeIPv6(p *Packet, b []byte) string {
	if len(b) < ipv6HeaderLen {
		return fmt.Sprintf("ipv6 header cut short at %d bytes", len(b))
	}
	if v := b[0] >> 4; v != 6 {
		return fmt.Sprintf("ip version %d in an ipv6 packet", v)
	}
	p.Src = netip.AddrFrom16([16]byte(b[8:24]))
	p.Dst = netip.AddrFrom16([16]byte(b[24:40]))
	loopbackDev := p.InIface == "lo"
	// ipv6_addr_loopback and ipv6_addr_is_multicast: ::1 and ff00::/8 only.
	// (netip's IsLoopback and IsMulticast also take the IPv4-mapped forms
	// of 127/8 and 224/4, which the kernel does not.)
	srcLoop, dstLoop := p.Src == ipv6Loopback, p.Dst == ipv6Loopback
	srcMcast, dstMcast := b[8] == 0xff, b[24] == 0xff
	switch {
	case (srcLoop || dstLoop) && !loopbackDev:
		return "ipv6 loopback address on a non-loopback interface"
	case dstMcast && b[25]&0x0f == 1 && !loopbackDev && p.PktType != PacketLoopback:
		return "ipv6 interface-local multicast destination from another node"
	case dstMcast && b[25]&0x0f == 0:
		return "ipv6 multicast destination with reserved scope 0"
	case srcMcast:
		return "ipv6 multicast source address"
	}
	payload := int(binary.BigEndian.Uint16(b[4:]))
	next := b[6]
	// A zero payload length is left for a jumbo payload option to set.
	if payload != 0 || next != nextHopByHop {
		if ipv6HeaderLen+payload > len(b) {
			return fmt.Sprintf("ipv6 payload length %d is beyond the %d bytes received", payload, len(b)-ipv6HeaderLen)
		}
		b = b[:ipv6HeaderLen+payload]
	}
	if next == nextHopByHop {
		var why string
		if b, why = parseHopByHop(b); why != "" {
			return why
		}
	}
	p.Length = payload + ipv6HeaderLen
	p.TTL = arrivedTTL(b[7], p.Forwarded)
	p.DSCP = (b[0]&0x0f)<<2 | b[1]>>6

	p.AuthHeader = reachesAuth(b)
	p.FragmentHeader = reachesFragment(b)
	proto, thoff, fragOff, ok := findUpperHeader(b)
	if !ok {
		p.BadExtHeaders = true
		return ""
	}
	p.Proto = proto
	p.FragOffset = fragOff
	// For a non-first fragment ipv6_find_hdr leaves the offset nft takes
	// as its transport header at 0: nft's loads read the IPv6 header.
	if fragOff != 0 {
		thoff = 0
	}
	if thoff <= len(b) {
		decodeL4(p, b[thoff:])
	}
	return ""
}

// findUpperHeader is ipv6_find_hdr with target -1: it walks the extension
// headers to the upper-layer header and returns its protocol, offset and the
// fragment offset (in bytes) of a non-first fragment. For a non-first
// fragment the protocol is the fragment header's next header, and the offset
// is meaningless. ok is false where ipv6_find_hdr fails.
func findUpperHeader(b []byte) (proto uint8, thoff int, fragOff uint16, ok bool) {
	next, start := b[6], ipv6HeaderLen
	for {
		if !isExtHeader(next) || next == nextNone {
			return next, start, 0, true
		}
		if start+2 > len(b) { // struct ipv6_opt_hdr
			return 0, 0, 0, false
		}
		var hdrLen int
		switch next {
		case nextRouting:
			if start+4 > len(b) { // struct ipv6_rt_hdr
				return 0, 0, 0, false
			}
			hdrLen = (int(b[start+1]) + 1) * 8
		case nextFragment:
			if start+4 > len(b) { // frag_off of struct frag_hdr
				return 0, 0, 0, false
			}
			off := binary.BigEndian.Uint16(b[start+2:]) &^ 7
			if off != 0 {
				if n := b[start]; !isExtHeader(n) || n == nextNone {
					return n, 0, off, true
				}
				return 0, 0, 0, false
			}
			hdrLen = 8
		case nextAuth:
			hdrLen = (int(b[start+1]) + 2) * 4
		default:
			hdrLen = (int(b[start+1]) + 1) * 8
		}
		next = b[start]
		start += hdrLen
	}
}

// reachesAuth reports whether findUpperHeader's walk reaches an
// authentication header, where nft's walk (IP6_FH_F_AUTH) stops.
func reachesAuth(b []byte) bool {
	next, start := b[6], ipv6HeaderLen
	for {
		switch {
		case next == nextAuth:
			// ipv6_find_hdr reads the header's first two bytes before it
			// stops at an authentication header (IP6_FH_F_AUTH).
			return start+2 <= len(b)
		case !isExtHeader(next) || next == nextNone || start+2 > len(b):
			return false
		}
		var hdrLen int
		switch next {
		case nextRouting:
			if start+4 > len(b) {
				return false
			}
			hdrLen = (int(b[start+1]) + 1) * 8
		case nextFragment:
			if start+4 > len(b) || binary.BigEndian.Uint16(b[start+2:])&^7 != 0 {
				return false
			}
			hdrLen = 8
		default:
			hdrLen = (int(b[start+1]) + 1) * 8
		}
		next = b[start]
		start += hdrLen
	}
}

// reachesFragment reports whether the walk over the extension headers
// meets a fragment header: conntrack sees the reassembled datagram.
func reachesFragment(b []byte) bool {
	next, start := b[6], ipv6HeaderLen
	for {
		switch {
		case next == nextFragment:
			return true
		case !isExtHeader(next) || next == nextNone || start+2 > len(b):
			return false
		}
		hdrLen := (int(b[start+1]) + 1) * 8
		if next == nextAuth {
			hdrLen = (int(b[start+1]) + 2) * 4
		}
		next = b[start]
		start += hdrLen
	}
}

// isExtHeader is ipv6_ext_hdr.
func isExtHeader(next uint8) bool {
	switch next {
	case nextHopByHop, nextRouting, nextFragment, nextAuth, nextNone, nextDestOpts:
		return true
	}
	return false
}

// Hop-by-hop option types ip6_parse_tlv knows.
const (
	tlvPad1        = 0
	tlvPadN        = 1
	tlvRouterAlert = 5
	tlvCALIPSO     = 7
	tlvIOAM        = 49
	tlvJumbo       = 0xc2
	maxHopByHopOps = 8 // net.ipv6.max_hbh_opts_number
)

// parseHopByHop is ipv6_parse_hopopts and ip6_parse_tlv for the hop-by-hop
// header right after the IPv6 header. It returns the packet, trimmed by a
// jumbo payload option, or why the kernel drops it.
func parseHopByHop(b []byte) ([]byte, string) {
	if len(b) < ipv6HeaderLen+8 || len(b) < ipv6HeaderLen+(int(b[ipv6HeaderLen+1])+1)*8 {
		return b, "ipv6 hop-by-hop header cut short"
	}
	off := ipv6HeaderLen + 2
	rem := (int(b[ipv6HeaderLen+1])+1)*8 - 2
	padLen, count := 0, 0
	trimmed := b
	for rem > 0 {
		kind := b[off]
		if kind == tlvPad1 {
			if padLen++; padLen > 7 {
				return b, "ipv6 hop-by-hop padding longer than 7 bytes"
			}
			off++
			rem--
			continue
		}
		if rem < 2 || int(b[off+1])+2 > rem {
			return b, "ipv6 hop-by-hop option runs past its header"
		}
		optLen := int(b[off+1]) + 2
		if kind == tlvPadN {
			if padLen += optLen; padLen > 7 {
				return b, "ipv6 hop-by-hop padding longer than 7 bytes"
			}
			for _, c := range b[off+2 : off+optLen] {
				if c != 0 {
					return b, "ipv6 hop-by-hop PadN option with non-zero bytes"
				}
			}
		} else {
			if count++; count > maxHopByHopOps {
				return b, fmt.Sprintf("more than %d ipv6 hop-by-hop options", maxHopByHopOps)
			}
			switch kind {
			case tlvRouterAlert:
				if b[off+1] != 2 {
					return b, "ipv6 router alert option of the wrong length"
				}
			case tlvIOAM:
				// Ignored when IOAM is disabled, but only once aligned.
				if off&3 != 0 {
					return b, "misaligned ipv6 IOAM option"
				}
			case tlvJumbo:
				var why string
				if trimmed, why = jumbo(b, off); why != "" {
					return b, why
				}
			case tlvCALIPSO:
				return b, "ipv6 CALIPSO option without a configured domain"
			default:
				// ip6_tlvopt_unknown: the top two bits say what to do; only
				// 00 skips the option.
				if kind>>6 != 0 {
					return b, fmt.Sprintf("unknown ipv6 hop-by-hop option %#x", kind)
				}
			}
			padLen = 0
		}
		off += optLen
		rem -= optLen
	}
	return trimmed, ""
}

// jumbo is ipv6_hop_jumbo.
func jumbo(b []byte, off int) ([]byte, string) {
	if b[off+1] != 4 || off&3 != 2 {
		return b, "ipv6 jumbo payload option of the wrong length or alignment"
	}
	n := int(binary.BigEndian.Uint32(b[off+2:]))
	switch {
	case n <= ipv6MaxPayload:
		return b, "ipv6 jumbo payload length below 65536"
	case binary.BigEndian.Uint16(b[4:]) != 0:
		return b, "ipv6 jumbo payload option with a payload length"
	case n > len(b)-ipv6HeaderLen:
		return b, "ipv6 jumbo payload length beyond the bytes received"
	}
	return b[:ipv6HeaderLen+n], ""
}

// decodeL4 fills the transport fields from l4, which runs from the
// transport header to the end of the packet. A non-first fragment has no
// transport header, but nft's payload fast path (nft_payload_fast_eval)
// loads from its offset all the same: the fields are what it reads. The
// xtables matches never read them there (L4Header fails first).
func decodeL4(p *Packet, l4 []byte) {
	p.L4Len = len(l4)
	p.L4 = l4
	switch p.Proto {
	case ProtoTCP, ProtoUDP, ProtoUDPLite, ProtoSCTP, ProtoDCCP:
		// Each port as far as the packet holds it: nft loads the
		// source port of a header cut after it.
		if len(l4) >= 2 {
			p.SrcPort = binary.BigEndian.Uint16(l4)
		}
		if len(l4) >= 4 {
			p.DstPort = binary.BigEndian.Uint16(l4[2:])
		}
	}
	switch {
	case p.Proto == ProtoTCP:
		if len(l4) >= 14 {
			p.TCPFlags = l4[13]
		}
		if len(l4) >= 20 && p.FragOffset == 0 {
			hdrLen := int(l4[12]>>4) * 4
			switch {
			case hdrLen < 20 || hdrLen > len(l4):
				p.TCPOptionsTruncated = true
			case hdrLen > 20:
				p.TCPOptions = append([]byte(nil), l4[20:hdrLen]...)
			}
		}
	case p.Proto == ProtoICMP && p.Family == rules.IPv4, p.Proto == ProtoICMPv6 && p.Family == rules.IPv6:
		// nft's "icmp type" loads the type byte alone.
		if len(l4) >= 1 {
			p.ICMPType = l4[0]
		}
		if len(l4) >= 2 {
			p.ICMPCode = l4[1]
		}
	}
}

// arrivedTTL is the TTL (hop limit) a packet arrived with: ttl, or one
// more for a frame seen after forwarding (Meta.Forwarded).
func arrivedTTL(ttl uint8, forwarded bool) uint8 {
	if forwarded && ttl < 255 {
		return ttl + 1
	}
	return ttl
}
