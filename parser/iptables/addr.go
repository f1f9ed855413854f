package iptables

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"

	"bpfwall/rules"
)

// parseNet parses one address of -s/-d: "addr", "addr/len" or, for IPv4,
// "addr/dotted.mask". As libxtables does, a short IPv4 address ("10.1")
// is completed with zeros. Host names are not resolved.
func parseNet(s string, fam rules.Family) (rules.Net, error) {
	addrPart, maskPart, hasMask := strings.Cut(s, "/")
	addr, err := parseAddr(addrPart, fam)
	if err != nil {
		return rules.Net{}, err
	}
	bitLen := fam.Bits()
	mask := rules.MaskOf(bitLen, bitLen)
	if hasMask {
		if n, err := strconv.Atoi(maskPart); err == nil && maskPart != "" && maskPart[0] != '+' && maskPart[0] != '-' {
			if n < 0 || n > bitLen {
				return rules.Net{}, fmt.Errorf("invalid mask %q specified", maskPart)
			}
			mask = rules.MaskOf(bitLen, n)
		} else {
			m, err := netip.ParseAddr(maskPart)
			if err != nil || m.BitLen() != bitLen || m.Zone() != "" {
				return rules.Net{}, fmt.Errorf("invalid mask %q specified", maskPart)
			}
			mask = m
		}
	}
	a, m := addr.As16(), mask.As16()
	for i := range a {
		a[i] &= m[i]
	}
	if fam == rules.IPv4 {
		return rules.Net{Addr: netip.AddrFrom4([4]byte(a[12:])), Mask: mask}, nil
	}
	return rules.Net{Addr: netip.AddrFrom16(a), Mask: mask}, nil
}

// parseAddr parses a numeric address of the family.
func parseAddr(s string, fam rules.Family) (netip.Addr, error) {
	if fam == rules.IPv4 {
		if a, ok := parseIPv4(s); ok {
			return a, nil
		}
		return netip.Addr{}, fmt.Errorf("host/network %q not found", s)
	}
	a, err := netip.ParseAddr(s)
	if err != nil || !a.Is6() || a.Zone() != "" {
		return netip.Addr{}, fmt.Errorf("host/network %q not found", s)
	}
	return a, nil
}

// parseIPv4 accepts one to four dotted decimal bytes, completing a short
// address with zero bytes as libxtables' numeric_to_ipaddr does.
func parseIPv4(s string) (netip.Addr, bool) {
	var b [4]byte
	for i := 0; ; i++ {
		p, rest, more := strings.Cut(s, ".")
		if i == 4 || p == "" || len(p) > 3 {
			return netip.Addr{}, false
		}
		n, err := strconv.ParseUint(p, 10, 8)
		if err != nil {
			return netip.Addr{}, false
		}
		b[i] = byte(n)
		if !more {
			return netip.AddrFrom4(b), true
		}
		s = rest
	}
}

// protoNumbers maps the protocol names iptables accepts with -p (its own
// list and the usual /etc/protocols entries) to numbers.
var protoNumbers = map[string]uint8{
	"all": 0, "ip": 0, "icmp": 1, "igmp": 2, "ipencap": 4, "tcp": 6, "egp": 8, "pup": 12,
	"udp": 17, "idp": 22, "dccp": 33, "ipv6": 41, "rsvp": 46, "gre": 47, "esp": 50,
	"ah": 51, "icmpv6": 58, "ipv6-icmp": 58, "ospf": 89, "ipip": 94, "pim": 103,
	"ipcomp": 108, "vrrp": 112, "l2tp": 115, "sctp": 132, "mh": 135,
	"mobility-header": 135, "ipv6-mh": 135, "udplite": 136,
}

// parseProto parses the argument of -p: a name or a number 0-255.
func parseProto(s string) (uint8, error) {
	if n, ok := protoNumbers[s]; ok {
		return n, nil
	}
	if n, err := strconv.ParseUint(s, 10, 8); err == nil {
		return uint8(n), nil
	}
	if n, ok := protoNumbers[strings.ToLower(s)]; ok {
		return n, nil
	}
	return 0, fmt.Errorf("unknown protocol %q specified", s)
}

// maxIfaceLen is IFNAMSIZ-1.
const maxIfaceLen = 15

func checkIface(s string) error {
	if len(s) > maxIfaceLen {
		return fmt.Errorf("interface name %q must be shorter than IFNAMSIZ (16)", s)
	}
	return nil
}
