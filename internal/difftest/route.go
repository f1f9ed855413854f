package difftest

import (
	"encoding/binary"
	"fmt"
	"net/netip"

	"bpfwall/model"
	"bpfwall/rules"
)

// Forwarded returns "" when the firewall's routing hands pkt to the
// FORWARD chain, or why it does not. It models what happens between
// Decode's checks and the FORWARD hook for the topology's routes: one
// local address, a default route to the receiver, rp_filter off.
//
// IPv4 (ip_route_input_slow, fib_validate_source, ip_forward): martian
// sources (0.0.0.0, 127/8, multicast, limited broadcast, a local address)
// and destinations (0.0.0.0, 127/8) are dropped; multicast is not forwarded; the
// limited broadcast and the local address go to INPUT; a TTL of 1 or less
// expires. IPv6 (ip6_route_input, ip6_forward): multicast and link-local
// destinations are not forwarded, link-local and unspecified sources are
// dropped, a hop limit of 1 or less expires.
func Forwarded(pkt *model.Packet, frame []byte) string {
	switch {
	case pkt.NotIP:
		return "not an IP packet"
	case pkt.Invalid != "":
		return "dropped by the IP layer: " + pkt.Invalid
	}
	if pkt.Family == rules.IPv4 {
		return forwarded4(pkt, frame)
	}
	return forwarded6(pkt)
}

var (
	loopback4  = netip.MustParsePrefix("127.0.0.0/8")
	multicast4 = netip.MustParsePrefix("224.0.0.0/4")
	limitedBC  = netip.MustParseAddr("255.255.255.255")
	linkLocal6 = netip.MustParsePrefix("fe80::/10")
)

func forwarded4(pkt *model.Packet, frame []byte) string {
	src, dst := pkt.Src, pkt.Dst
	switch {
	case multicast4.Contains(src) || src == limitedBC:
		return fmt.Sprintf("martian source %s", src)
	case dst == limitedBC:
		return "limited broadcast goes to INPUT"
	case multicast4.Contains(dst):
		return fmt.Sprintf("multicast %s is not forwarded", dst)
	// ipv4_is_zeronet is only 0.0.0.0 since Linux 5.3, which made the
	// rest of 0/8 unicast.
	case src.IsUnspecified():
		return fmt.Sprintf("martian source %s", src)
	case dst.IsUnspecified() || loopback4.Contains(dst):
		return fmt.Sprintf("martian destination %s", dst)
	case loopback4.Contains(src):
		return fmt.Sprintf("martian source %s", src)
	case src == fwAddr:
		return fmt.Sprintf("martian source %s: a local address", src)
	case dst == fwAddr:
		return "for the firewall itself: goes to INPUT"
	case dst == senderAddr:
		return "routed back to the sender"
	case !plainOptions(frame):
		return unmodeled + "ipv4 options other than NOP and EOL"
	case pkt.TTL <= 1:
		return fmt.Sprintf("ttl %d expires in forwarding", pkt.TTL)
	}
	return ""
}

func forwarded6(pkt *model.Packet) string {
	switch {
	// ipv6_addr_is_multicast: ff00::/8 only (netip's IsMulticast also
	// takes the IPv4-mapped form of 224/4, which IPv6 routes as unicast).
	case pkt.Dst.As16()[0] == 0xff:
		return fmt.Sprintf("multicast %s is not forwarded", pkt.Dst)
	case linkLocal6.Contains(pkt.Dst):
		return fmt.Sprintf("link-local destination %s is not forwarded", pkt.Dst)
	case linkLocal6.Contains(pkt.Src) || pkt.Src.IsUnspecified():
		return fmt.Sprintf("source %s is not forwarded", pkt.Src)
	case pkt.TTL <= 1:
		return fmt.Sprintf("hop limit %d expires in forwarding", pkt.TTL)
	}
	return ""
}

// unmodeled starts the reason of a probe the model cannot predict; such
// probes are sent but not compared.
const unmodeled = "unmodeled: "

// plainOptions reports whether the IPv4 header in frame has no options
// but NOP and EOL, which ip_options_compile accepts and forwarding leaves
// alone.
func plainOptions(frame []byte) bool {
	ip := ipPacket(frame)
	if ip == nil || int(ip[0]&0x0f)*4 > len(ip) {
		return true // the IP layer drops it, or it has no options
	}
	for _, b := range ip[20 : int(ip[0]&0x0f)*4] {
		if b > 1 {
			return false
		}
	}
	return true
}

// vlanTagged reports whether frame carries a VLAN tag with a VLAN id
// other than 0 before its payload.
func vlanTagged(frame []byte) bool {
	for off := 12; off+4 <= len(frame); off += 4 {
		switch binary.BigEndian.Uint16(frame[off:]) {
		case 0x8100, 0x88a8:
			if binary.BigEndian.Uint16(frame[off+2:])&0x0fff != 0 {
				return true
			}
		default:
			return false
		}
	}
	return false
}
