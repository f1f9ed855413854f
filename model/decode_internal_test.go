package model

import (
	"encoding/binary"
	"strings"
	"testing"
)

// ipv6With returns an IPv6 header with next header first and the payload
// length of ext, followed by ext.
func ipv6With(first uint8, ext ...byte) []byte {
	b := make([]byte, ipv6HeaderLen, ipv6HeaderLen+len(ext))
	b[0] = 0x60
	binary.BigEndian.PutUint16(b[4:], uint16(len(ext)))
	b[6] = first
	return append(b, ext...)
}

func TestParseHopByHop(t *testing.T) {
	const tcp = 6
	for _, tc := range []struct {
		name string
		hbh  []byte // the hop-by-hop header
		want string // a word of the reason, or "" for a packet that passes
	}{
		{"pad1 only", []byte{tcp, 0, 0, 0, 0, 0, 0, 0}, ""},
		{"padn", []byte{tcp, 0, 1, 4, 0, 0, 0, 0}, ""},
		{"router alert", []byte{tcp, 0, 5, 2, 0, 0, 1, 0}, ""},
		{"router alert of length 3", []byte{tcp, 0, 5, 3, 0, 0, 0, 0}, "router alert"},
		{"padn with data", []byte{tcp, 0, 1, 4, 0, 1, 0, 0}, "non-zero"},
		{"padding longer than 7 bytes", []byte{tcp, 1, 1, 12, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}, "padding"},
		{"pad1 run longer than 7 bytes", []byte{tcp, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}, "padding"},
		{"option past the header", []byte{tcp, 0, 0x3e, 9, 0, 0, 0, 0}, "runs past"},
		{"unknown option to skip", []byte{tcp, 0, 0x3e, 4, 0, 0, 0, 0}, ""},
		{"unknown option to drop", []byte{tcp, 0, 0x7e, 4, 0, 0, 0, 0}, "unknown"},
		{"unknown option to drop with icmp", []byte{tcp, 0, 0xbe, 4, 0, 0, 0, 0}, "unknown"},
		{"misaligned ioam", []byte{tcp, 0, 49, 4, 0, 0, 0, 0}, "IOAM"},
		{"aligned ioam", []byte{tcp, 0, 0, 0, 49, 2, 0, 0}, ""},
		{"calipso", []byte{tcp, 1, 7, 10, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}, "CALIPSO"},
		{"jumbo with a payload length", []byte{tcp, 0, 0xc2, 4, 0, 1, 0, 0}, "jumbo"},
		{"nine options", []byte{tcp, 2,
			0x3e, 0, 0x3e, 0, 0x3e, 0, 0x3e, 0, 0x3e, 0, 0x3e, 0, 0x3e, 0, 0x3e, 0, 0x3e, 0, 0, 0, 0, 0}, "more than 8"},
		{"eight options", []byte{tcp, 2,
			0x3e, 0, 0x3e, 0, 0x3e, 0, 0x3e, 0, 0x3e, 0, 0x3e, 0, 0x3e, 0, 0x3e, 0, 1, 4, 0, 0, 0, 0}, ""},
		{"cut short", []byte{tcp, 1, 1, 4, 0, 0, 0, 0}, "cut short"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, why := parseHopByHop(ipv6With(nextHopByHop, tc.hbh...))
			if (why == "") != (tc.want == "") || !strings.Contains(why, tc.want) {
				t.Errorf("reason %q, want one mentioning %q", why, tc.want)
			}
		})
	}
}

func TestFindUpperHeader(t *testing.T) {
	const tcp, udp = 6, 17
	for _, tc := range []struct {
		name    string
		pkt     []byte
		proto   uint8
		thoff   int
		fragOff uint16
		ok      bool
	}{
		{"no extension headers", ipv6With(tcp), tcp, 40, 0, true},
		{"destination options", ipv6With(nextDestOpts, udp, 0, 1, 4, 0, 0, 0, 0), udp, 48, 0, true},
		{"authentication header", ipv6With(nextAuth, tcp, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0), tcp, 52, 0, true},
		{"first fragment", ipv6With(nextFragment, tcp, 0, 0, 1, 0, 0, 0, 1), tcp, 48, 0, true},
		{"non-first fragment", ipv6With(nextFragment, udp, 0, 0x01, 0x41, 0, 0, 0, 1), udp, 0, 320, true},
		{"non-first fragment of no next header", ipv6With(nextFragment, nextNone, 0, 0x01, 0x40, 0, 0, 0, 1), nextNone, 0, 320, true},
		{"non-first fragment before an extension header", ipv6With(nextFragment, nextDestOpts, 0, 0x01, 0x40, 0, 0, 0, 1), 0, 0, 0, false},
		{"no next header", ipv6With(nextNone), nextNone, 40, 0, true},
		{"esp is an upper layer", ipv6With(50, 0, 0, 0, 0), 50, 40, 0, true},
		{"header cut in its first bytes", ipv6With(nextDestOpts, udp), 0, 0, 0, false},
		{"routing header cut in its first four bytes", ipv6With(nextRouting, udp, 0, 0), 0, 0, 0, false},
		{"header longer than the packet", ipv6With(nextDestOpts, udp, 1, 0, 0), udp, 56, 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			proto, thoff, fragOff, ok := findUpperHeader(tc.pkt)
			if ok != tc.ok || (ok && (proto != tc.proto || thoff != tc.thoff || fragOff != tc.fragOff)) {
				t.Errorf("got proto %d, offset %d, fragment offset %d, ok %v; want %d, %d, %d, %v",
					proto, thoff, fragOff, ok, tc.proto, tc.thoff, tc.fragOff, tc.ok)
			}
		})
	}
}

func TestParseHopByHopJumbo(t *testing.T) {
	// A jumbo payload option needs a payload over 65535 bytes: build one.
	const tcp, n = 6, 70000
	hbh := []byte{tcp, 0, 0xc2, 4, 0, 0, 0, 0} // jumbo at offset 42, 4n+2 from the IPv6 header
	binary.BigEndian.PutUint32(hbh[4:], n)
	b := ipv6With(nextHopByHop, hbh...)
	binary.BigEndian.PutUint16(b[4:], 0)
	b = append(b, make([]byte, n-len(hbh)+5)...) // and 5 bytes of link-layer padding
	got, why := parseHopByHop(b)
	if why != "" {
		t.Fatalf("dropped: %s", why)
	}
	if len(got) != ipv6HeaderLen+n {
		t.Errorf("trimmed to %d bytes, want %d", len(got), ipv6HeaderLen+n)
	}
	binary.BigEndian.PutUint32(b[ipv6HeaderLen+4:], 65535)
	if _, why := parseHopByHop(b); !strings.Contains(why, "below 65536") {
		t.Errorf("jumbo length 65535: reason %q", why)
	}
	binary.BigEndian.PutUint32(b[ipv6HeaderLen+4:], n+6)
	if _, why := parseHopByHop(b); !strings.Contains(why, "beyond") {
		t.Errorf("jumbo length past the frame: reason %q", why)
	}
}
