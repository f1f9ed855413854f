// Package nflog formats a logged packet as the kernel's LOG target prints
// it (net/netfilter/nf_log_syslog.c), field by field, from the packet's
// bytes.
package nflog

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"strings"
)

// Flags of a LOG rule, as in xt_LOG.h.
const (
	TCPSeq    = 0x01
	TCPOpt    = 0x02
	IPOpt     = 0x04
	UID       = 0x08
	MACDecode = 0x20
)

// Packet is a logged packet and where it was seen.
type Packet struct {
	// In and Out are the interfaces netfilter would name; In is set on
	// the input path, where the line shows the MAC header.
	In, Out string
	// NotEther is set when In is not an Ethernet device (ARPHRD_ETHER):
	// --log-macdecode then prints MAC= as without it.
	NotEther bool
	// NoMAC is set when netfilter has no MAC header to print for the
	// packet (the device's hard_header_len is 0, or skb->mac_header is
	// unset or equal to the network header): the line says "MAC= ".
	// Frame's first 14 bytes then only give the ethertype.
	NoMAC bool
	// Frame is the packet from its Ethernet header, possibly cut short:
	// Len is the whole frame's length.
	Frame []byte
	Len   int
	Mark  uint32
	// Owner is the packet's socket's file's fsuid and fsgid, which
	// --log-uid prints; nil when it has none (nf_log_dump_sk_uid_gid).
	Owner *Owner
}

// Owner is the fsuid and fsgid of a socket's file.
type Owner struct{ UID, GID uint32 }

// Rule is what the LOG rule says.
type Rule struct {
	Prefix string
	Level  uint8
	Flags  uint8
}

// ErrShortCapture is returned, wrapped, with a line that needed packet
// bytes beyond those captured: the line stops where they were needed.
var ErrShortCapture = errors.New("packet headers beyond the captured bytes")

// ErrNotIP is returned for a frame that carries neither IPv4 nor IPv6.
var ErrNotIP = errors.New("not an IP packet")

// ErrVLAN is returned, wrapped, with the line of a frame that carries a
// VLAN tag: netfilter sees it on the VLAN's device, whose name the line
// cannot know.
var ErrVLAN = errors.New("VLAN-tagged frame: netfilter names the VLAN device")

// logBufSize is S_SIZE of nf_log.c: the line, with the two bytes of its
// printk level, is cut to one byte less than this.
const logBufSize = 1024 - (4 + 1)

// Line returns the text the kernel prints for p under r: what dmesg shows
// after the timestamp.
func Line(p Packet, r Rule) (string, error) {
	l3, etype, ok := l3Offset(p.Frame)
	if !ok || (etype != 0x0800 && etype != 0x86dd) {
		return "", ErrNotIP
	}
	w := &writer{}
	// The level is two bytes of the buffer (KERN_SOH and the digit).
	w.b.WriteString("\x01" + string(rune('0'+r.Level)))
	w.add("%sIN=%s OUT=%s ", r.Prefix, p.In, p.Out)
	if p.In != "" {
		w.mac(p, r.Flags, l3, etype)
	}
	d := &dumper{w: w, flags: r.Flags, mark: p.Mark, owner: p.Owner, pkt: p.Frame[l3:]}
	// skb->len at the hook: the IP layer has cut the frame to the
	// datagram's length.
	d.skbLen = p.Len - l3
	if etype == 0x0800 {
		if len(d.pkt) >= 4 {
			if tot := int(binary.BigEndian.Uint16(d.pkt[2:])); tot != 0 && tot < d.skbLen {
				d.skbLen = tot
			}
		}
		d.ipv4(0)
	} else {
		if len(d.pkt) >= 6 {
			if pl := int(binary.BigEndian.Uint16(d.pkt[4:])); pl != 0 && pl+40 < d.skbLen {
				d.skbLen = pl + 40
			}
		}
		d.ipv6(0, true)
	}
	s := w.b.String()
	if len(s) >= logBufSize {
		s = s[:logBufSize-1]
	}
	s = s[2:]
	if d.short {
		return s, fmt.Errorf("format logged packet: %w (%d of %d bytes)", ErrShortCapture, len(p.Frame), p.Len)
	}
	if l3 != 14 {
		return s, fmt.Errorf("format logged packet: %w", ErrVLAN)
	}
	return s, nil
}

// l3Offset finds the network header after up to two VLAN tags, as the
// program's parser does, and its ethertype.
func l3Offset(f []byte) (int, uint16, bool) {
	if len(f) < 14 {
		return 0, 0, false
	}
	off, et := 14, binary.BigEndian.Uint16(f[12:])
	for range 2 {
		if et != 0x8100 && et != 0x88a8 {
			break
		}
		if len(f) < off+4 {
			return 0, 0, false
		}
		et = binary.BigEndian.Uint16(f[off+2:])
		off += 4
	}
	return off, et, true
}

type writer struct{ b strings.Builder }

func (w *writer) add(format string, args ...any) { fmt.Fprintf(&w.b, format, args...) }

// mac is dump_mac_header: the Ethernet header as netfilter sees it on the
// input device, after the VLAN tags have been taken off.
func (w *writer) mac(p Packet, flags uint8, l3 int, etype uint16) {
	f := p.Frame
	if p.NoMAC {
		// dump_mac_header's fallback; with --log-macdecode on an
		// Ethernet device the kernel reads eth_hdr() only if the MAC
		// header was set, and the stage records none for a device
		// whose header is not Ethernet's.
		w.add("MAC= ")
		return
	}
	if flags&MACDecode != 0 && !p.NotEther {
		w.add("MACSRC=%s MACDST=%s ", hexBytes(f[6:12], ":", "%02x"), hexBytes(f[0:6], ":", "%02x"))
		w.add("MACPROTO=%04x ", etype)
		return
	}
	hdr := append(append([]byte{}, f[:12]...), f[l3-2:l3]...)
	w.add("MAC=%s ", hexBytes(hdr, ":", "%02x"))
}

func hexBytes(b []byte, sep, format string) string {
	parts := make([]string, len(b))
	for i, c := range b {
		parts[i] = fmt.Sprintf(format, c)
	}
	return strings.Join(parts, sep)
}

// dumper walks the network and transport headers as dump_ipv4_packet and
// dump_ipv6_packet do. pkt starts at the outer network header.
type dumper struct {
	w      *writer
	flags  uint8
	mark   uint32
	owner  *Owner
	pkt    []byte
	skbLen int
	short  bool // a header the kernel would read was not captured
}

// uid prints the socket's user and group for --log-uid, as
// nf_log_dump_sk_uid_gid does, before the mark.
func (d *dumper) uid() {
	if d.flags&UID != 0 && d.owner != nil {
		d.w.add("UID=%d GID=%d ", d.owner.UID, d.owner.GID)
	}
}

// header is skb_header_pointer: n bytes at off, or nil when the packet
// ends before. Bytes in the packet but not captured set short.
func (d *dumper) header(off, n int) []byte {
	if off < 0 || off+n > d.skbLen {
		return nil
	}
	if off+n > len(d.pkt) {
		d.short = true
		return nil
	}
	return d.pkt[off : off+n]
}

func be16(b []byte) uint16 { return binary.BigEndian.Uint16(b) }
func be32(b []byte) uint32 { return binary.BigEndian.Uint32(b) }

const (
	ipCE     = 0x8000
	ipDF     = 0x4000
	ipMF     = 0x2000
	ipOffset = 0x1fff
)

func (d *dumper) ipv4(off int) {
	w := d.w
	ih := d.header(off, 20)
	if ih == nil {
		w.add("TRUNCATED")
		return
	}
	src, dst := netip.AddrFrom4([4]byte(ih[12:16])), netip.AddrFrom4([4]byte(ih[16:20]))
	w.add("SRC=%s DST=%s ", src, dst)
	totLen := int(be16(ih[2:]))
	if totLen == 0 && off == 0 {
		totLen = d.skbLen // iph_totlen of a BIG TCP packet
	}
	w.add("LEN=%d TOS=0x%02X PREC=0x%02X TTL=%d ID=%d ", totLen, ih[1]&0x1e, ih[1]&0xe0, ih[8], be16(ih[4:]))
	fo := be16(ih[6:])
	if fo&ipCE != 0 {
		w.add("CE ")
	}
	if fo&ipDF != 0 {
		w.add("DF ")
	}
	if fo&ipMF != 0 {
		w.add("MF ")
	}
	frag := int(fo & ipOffset)
	if frag != 0 {
		w.add("FRAG:%d ", frag)
	}
	ihl := int(ih[0]&0x0f) * 4
	if d.flags&IPOpt != 0 && ihl > 20 {
		op := d.header(off+20, ihl-20)
		if op == nil {
			w.add("TRUNCATED")
			return
		}
		w.add("OPT (%s) ", hexBytes(op, "", "%02X"))
	}
	th := off + ihl
	switch proto := ih[9]; proto {
	case 6:
		if d.tcp(frag != 0, th) {
			return
		}
	case 17, 136:
		if d.udp(proto, frag != 0, th) {
			return
		}
	case 1:
		w.add("PROTO=ICMP ")
		if frag != 0 {
			break
		}
		ich := d.header(th, 8)
		if ich == nil {
			w.add("INCOMPLETE [%d bytes] ", d.skbLen-th)
			break
		}
		typ, code := ich[0], ich[1]
		w.add("TYPE=%d CODE=%d ", typ, code)
		if int(typ) < len(icmpRequiredLen) && icmpRequiredLen[typ] != 0 && d.skbLen-th < icmpRequiredLen[typ] {
			w.add("INCOMPLETE [%d bytes] ", d.skbLen-th)
			break
		}
		switch typ {
		case 0, 8:
			w.add("ID=%d SEQ=%d ", be16(ich[4:]), be16(ich[6:]))
		case 12:
			w.add("PARAMETER=%d ", ich[4])
		case 5, 3, 4, 11:
			if typ == 5 {
				w.add("GATEWAY=%s ", netip.AddrFrom4([4]byte(ich[4:8])))
			}
			if off == 0 {
				w.add("[")
				d.ipv4(th + 8)
				w.add("] ")
			}
			if typ == 3 && code == 4 {
				w.add("MTU=%d ", be16(ich[6:]))
			}
		}
	case 51:
		if frag != 0 {
			break
		}
		w.add("PROTO=AH ")
		ah := d.header(th, 12)
		if ah == nil {
			w.add("INCOMPLETE [%d bytes] ", d.skbLen-th)
			break
		}
		w.add("SPI=0x%x ", be32(ah[4:]))
	case 50:
		w.add("PROTO=ESP ")
		if frag != 0 {
			break
		}
		eh := d.header(th, 8)
		if eh == nil {
			w.add("INCOMPLETE [%d bytes] ", d.skbLen-th)
			break
		}
		w.add("SPI=0x%x ", be32(eh))
	default:
		w.add("PROTO=%d ", proto)
	}
	if off == 0 {
		d.uid()
	}
	if off == 0 && d.mark != 0 {
		w.add("MARK=0x%x ", d.mark)
	}
}

// icmpRequiredLen is required_len of dump_ipv4_packet, by ICMP type.
var icmpRequiredLen = [19]int{0: 4, 3: 28, 4: 28, 5: 28, 8: 4, 11: 28, 12: 28, 13: 20, 14: 20, 17: 12, 18: 12}

// tcp is nf_log_dump_tcp_header; it reports whether the line ends there.
func (d *dumper) tcp(fragment bool, off int) bool {
	w := d.w
	w.add("PROTO=TCP ")
	if fragment {
		return false
	}
	th := d.header(off, 20)
	if th == nil {
		w.add("INCOMPLETE [%d bytes] ", d.skbLen-off)
		return true
	}
	w.add("SPT=%d DPT=%d ", be16(th[0:]), be16(th[2:]))
	if d.flags&TCPSeq != 0 {
		w.add("SEQ=%d ACK=%d ", be32(th[4:]), be32(th[8:]))
	}
	w.add("WINDOW=%d ", be16(th[14:]))
	w.add("RES=0x%02x ", (th[12]&0x0e)<<2)
	if th[12]&0x01 != 0 {
		w.add("AE ")
	}
	for _, f := range []struct {
		bit  byte
		name string
	}{{0x80, "CWR"}, {0x40, "ECE"}, {0x20, "URG"}, {0x10, "ACK"}, {0x08, "PSH"}, {0x04, "RST"}, {0x02, "SYN"}, {0x01, "FIN"}} {
		if th[13]&f.bit != 0 {
			w.add("%s ", f.name)
		}
	}
	w.add("URGP=%d ", be16(th[18:]))
	if doff := int(th[12]>>4) * 4; d.flags&TCPOpt != 0 && doff > 20 {
		op := d.header(off+20, doff-20)
		if op == nil {
			w.add("OPT (TRUNCATED)")
			return true
		}
		w.add("OPT (%s) ", hexBytes(op, "", "%02X"))
	}
	return false
}

// udp is nf_log_dump_udp_header.
func (d *dumper) udp(proto byte, fragment bool, off int) bool {
	w := d.w
	if proto == 17 {
		w.add("PROTO=UDP ")
	} else {
		w.add("PROTO=UDPLITE ")
	}
	if fragment {
		return false
	}
	uh := d.header(off, 8)
	if uh == nil {
		w.add("INCOMPLETE [%d bytes] ", d.skbLen-off)
		return true
	}
	w.add("SPT=%d DPT=%d LEN=%d ", be16(uh[0:]), be16(uh[2:]), be16(uh[4:]))
	return false
}

// ipv6Ext reports whether nexthdr is an extension header for
// nf_ip6_ext_hdr.
func ipv6Ext(h byte) bool {
	switch h {
	case 0, 43, 44, 50, 51, 59, 60:
		return true
	}
	return false
}

func ipv6String(b []byte) string {
	parts := make([]string, 8)
	for i := range parts {
		parts[i] = fmt.Sprintf("%04x", be16(b[2*i:]))
	}
	return strings.Join(parts, ":")
}

func (d *dumper) ipv6(off int, recurse bool) {
	w := d.w
	ih := d.header(off, 40)
	if ih == nil {
		w.add("TRUNCATED")
		return
	}
	w.add("SRC=%s DST=%s ", ipv6String(ih[8:24]), ipv6String(ih[24:40]))
	first := be32(ih)
	w.add("LEN=%d TC=%d HOPLIMIT=%d FLOWLBL=%d ", int(be16(ih[4:]))+40, (first&0x0ff00000)>>20, ih[7], first&0x000fffff)
	ipopt := d.flags&IPOpt != 0
	fragment := false
	ptr := off + 40
	cur := ih[6]
	for cur != 59 && ipv6Ext(cur) {
		hp := d.header(ptr, 2)
		if hp == nil {
			w.add("TRUNCATED")
			return
		}
		if ipopt {
			w.add("OPT ( ")
		}
		var hdrlen int
		switch cur {
		case 44:
			w.add("FRAG:")
			fh := d.header(ptr, 8)
			if fh == nil {
				w.add("TRUNCATED ")
				return
			}
			fo := be16(fh[2:])
			w.add("%d ", fo&0xfff8)
			if fo&1 != 0 {
				w.add("INCOMPLETE ")
			}
			w.add("ID:%08x ", be32(fh[4:]))
			if fo&0xfff8 != 0 {
				fragment = true
			}
			hdrlen = 8
		case 60, 43, 0:
			if fragment {
				if ipopt {
					w.add(")")
				}
				return
			}
			hdrlen = (int(hp[1]) + 1) << 3
		case 51:
			if ipopt {
				w.add("AH ")
				if fragment {
					w.add(")")
					return
				}
				ah := d.header(ptr, 12)
				if ah == nil {
					w.add("INCOMPLETE [%d bytes] )", d.skbLen-ptr)
					return
				}
				w.add("SPI=0x%x ", be32(ah[4:]))
			}
			hdrlen = (int(hp[1]) + 2) << 2
		case 50:
			if ipopt {
				w.add("ESP ")
				if fragment {
					w.add(")")
					return
				}
				eh := d.header(ptr, 8)
				if eh == nil {
					w.add("INCOMPLETE [%d bytes] )", d.skbLen-ptr)
					return
				}
				w.add("SPI=0x%x )", be32(eh))
			}
			return
		}
		if ipopt {
			w.add(") ")
		}
		cur = hp[0]
		ptr += hdrlen
	}
	switch cur {
	case 6:
		if d.tcp(fragment, ptr) {
			return
		}
	case 17, 136:
		if d.udp(cur, fragment, ptr) {
			return
		}
	case 58:
		w.add("PROTO=ICMPv6 ")
		if fragment {
			break
		}
		ic := d.header(ptr, 8)
		if ic == nil {
			w.add("INCOMPLETE [%d bytes] ", d.skbLen-ptr)
			return
		}
		typ := ic[0]
		w.add("TYPE=%d CODE=%d ", typ, ic[1])
		switch typ {
		case 128, 129:
			w.add("ID=%d SEQ=%d ", be16(ic[4:]), be16(ic[6:]))
		case 130, 131, 132:
		case 4, 1, 2, 3:
			if typ == 4 {
				w.add("POINTER=%08x ", be32(ic[4:]))
			}
			if recurse {
				w.add("[")
				d.ipv6(ptr+8, false)
				w.add("] ")
			}
			if typ == 2 {
				w.add("MTU=%d ", be32(ic[4:]))
			}
		}
	default:
		w.add("PROTO=%d ", cur)
	}
	if recurse {
		d.uid()
	}
	if recurse && d.mark != 0 {
		w.add("MARK=0x%x ", d.mark)
	}
}
