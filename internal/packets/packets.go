// Package packets builds test and trace packets: Ethernet frames from the
// one-line JSON descriptions of DESIGN.md, and frames read from pcap files.
package packets

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strconv"
	"strings"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"github.com/gopacket/gopacket/pcapgo"
)

// Desc describes a packet; omitted fields take the defaults of Default.
type Desc struct {
	Proto string `json:"proto,omitempty"` // tcp, udp, icmp, icmpv6, sctp or a number
	Src   string `json:"src,omitempty"`
	Dst   string `json:"dst,omitempty"`
	SPort uint16 `json:"sport,omitempty"`
	DPort uint16 `json:"dport,omitempty"`
	Flags *uint8 `json:"flags,omitempty"` // the TCP flag byte
	Type  uint8  `json:"type,omitempty"`  // ICMP type
	Code  uint8  `json:"code,omitempty"`  // ICMP code
	Iface string `json:"iface,omitempty"`
	TTL   uint8  `json:"ttl,omitempty"`
	// Len is the IP packet length; the payload is padded to reach it.
	Len int `json:"len,omitempty"`
}

// Default is the packet a description starts from.
var Default = Desc{Proto: "tcp", Src: "10.0.0.1", Dst: "10.0.0.2", SPort: 1234, DPort: 80, Iface: "eth0", TTL: 64, Len: 64}

// Complete returns d with its omitted fields filled in, as Frame does.
func (d Desc) Complete() Desc { return d.withDefaults() }

// ProtoNumber is the IP protocol number d.Proto names.
func (d Desc) ProtoNumber() (uint8, error) {
	d = d.withDefaults()
	return protoNumber(d.Proto, strings.Contains(d.Src, ":"))
}

// withDefaults fills in omitted fields. IPv6 addresses select IPv6
// defaults for the other address.
func (d Desc) withDefaults() Desc {
	def := Default
	if strings.Contains(d.Src, ":") || strings.Contains(d.Dst, ":") {
		def.Src, def.Dst = "2001:db8::1", "2001:db8::2"
	}
	if d.Proto == "" {
		d.Proto = def.Proto
	}
	if d.Src == "" {
		d.Src = def.Src
	}
	if d.Dst == "" {
		d.Dst = def.Dst
	}
	if d.SPort == 0 && d.Proto != "icmp" && d.Proto != "icmpv6" {
		d.SPort = def.SPort
	}
	if d.DPort == 0 && d.Proto != "icmp" && d.Proto != "icmpv6" {
		d.DPort = def.DPort
	}
	if d.Flags == nil {
		syn := uint8(2)
		d.Flags = &syn
	}
	if d.Iface == "" {
		d.Iface = def.Iface
	}
	if d.TTL == 0 {
		d.TTL = def.TTL
	}
	if d.Len == 0 {
		d.Len = def.Len
	}
	return d
}

// Parse reads one JSON description.
func Parse(line []byte) (Desc, error) {
	var d Desc
	dec := json.NewDecoder(bytes.NewReader(line))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&d); err != nil {
		return Desc{}, err
	}
	return d, nil
}

// ReadJSONL reads one description per line; blank lines and lines starting
// with '#' are skipped. Errors name the line.
func ReadJSONL(r io.Reader) ([]Desc, error) {
	var out []Desc
	sc := bufio.NewScanner(r)
	for n := 1; sc.Scan(); n++ {
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 || line[0] == '#' {
			continue
		}
		d, err := Parse(line)
		if err != nil {
			return nil, fmt.Errorf("line %d: %w", n, err)
		}
		out = append(out, d)
	}
	return out, sc.Err()
}

var (
	srcMAC = net.HardwareAddr{0x02, 0, 0, 0, 0, 1}
	dstMAC = net.HardwareAddr{0x02, 0, 0, 0, 0, 2}
)

// Frame builds the Ethernet frame the description stands for.
func (d Desc) Frame() ([]byte, error) {
	d = d.withDefaults()
	src, err := netip.ParseAddr(d.Src)
	if err != nil {
		return nil, fmt.Errorf("src: %w", err)
	}
	dst, err := netip.ParseAddr(d.Dst)
	if err != nil {
		return nil, fmt.Errorf("dst: %w", err)
	}
	if src.Is4() != dst.Is4() {
		return nil, errors.New("src and dst are of different families")
	}
	proto, err := protoNumber(d.Proto, src.Is6())
	if err != nil {
		return nil, err
	}
	eth := &layers.Ethernet{SrcMAC: srcMAC, DstMAC: dstMAC}
	var ip gopacket.NetworkLayer
	var ipLayer gopacket.SerializableLayer
	hdrLen := 20
	if src.Is4() {
		eth.EthernetType = layers.EthernetTypeIPv4
		v4 := &layers.IPv4{Version: 4, TTL: d.TTL, Protocol: layers.IPProtocol(proto), SrcIP: src.AsSlice(), DstIP: dst.AsSlice()}
		ip, ipLayer = v4, v4
	} else {
		eth.EthernetType = layers.EthernetTypeIPv6
		v6 := &layers.IPv6{Version: 6, HopLimit: d.TTL, NextHeader: layers.IPProtocol(proto), SrcIP: src.AsSlice(), DstIP: dst.AsSlice()}
		ip, ipLayer = v6, v6
		hdrLen = 40
	}
	stack := []gopacket.SerializableLayer{eth, ipLayer}
	switch proto {
	case 6:
		tcp := &layers.TCP{SrcPort: layers.TCPPort(d.SPort), DstPort: layers.TCPPort(d.DPort), Window: 64240, DataOffset: 5}
		setTCPFlags(tcp, *d.Flags)
		if err := tcp.SetNetworkLayerForChecksum(ip); err != nil {
			return nil, err
		}
		stack = append(stack, tcp)
		hdrLen += 20
	case 17:
		udp := &layers.UDP{SrcPort: layers.UDPPort(d.SPort), DstPort: layers.UDPPort(d.DPort)}
		if err := udp.SetNetworkLayerForChecksum(ip); err != nil {
			return nil, err
		}
		stack = append(stack, udp)
		hdrLen += 8
	case 132:
		stack = append(stack, &layers.SCTP{SrcPort: layers.SCTPPort(d.SPort), DstPort: layers.SCTPPort(d.DPort)})
		hdrLen += 12
	case 1:
		stack = append(stack, &layers.ICMPv4{TypeCode: layers.CreateICMPv4TypeCode(d.Type, d.Code)})
		hdrLen += 8
	case 58:
		icmp := &layers.ICMPv6{TypeCode: layers.CreateICMPv6TypeCode(d.Type, d.Code)}
		if err := icmp.SetNetworkLayerForChecksum(ip); err != nil {
			return nil, err
		}
		stack = append(stack, icmp, gopacket.Payload(make([]byte, 4)))
		hdrLen += 8
	}
	if pad := d.Len - hdrLen; pad > 0 {
		stack = append(stack, gopacket.Payload(make([]byte, pad)))
	}
	buf := gopacket.NewSerializeBuffer()
	if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true}, stack...); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

func setTCPFlags(t *layers.TCP, f uint8) {
	t.FIN, t.SYN, t.RST, t.PSH = f&1 != 0, f&2 != 0, f&4 != 0, f&8 != 0
	t.ACK, t.URG, t.ECE, t.CWR = f&16 != 0, f&32 != 0, f&64 != 0, f&128 != 0
}

func protoNumber(s string, v6 bool) (uint8, error) {
	switch s {
	case "tcp":
		return 6, nil
	case "udp":
		return 17, nil
	case "sctp":
		return 132, nil
	case "icmp":
		if v6 {
			return 58, nil
		}
		return 1, nil
	case "icmpv6":
		return 58, nil
	}
	n, err := strconv.ParseUint(s, 10, 8)
	if err != nil {
		return 0, fmt.Errorf("unknown proto %q", s)
	}
	return uint8(n), nil
}

// Captured is one packet of a capture, as an Ethernet frame.
type Captured struct {
	Frame []byte
	// Cooked says the capture was a Linux cooked one (tcpdump -i any),
	// which says which way each packet went: Outgoing, it left the host.
	Cooked, Outgoing bool
}

// ReadPcap returns the packets of a pcap or pcapng file with Ethernet
// link type, or Linux cooked captures (SLL and SLL2, what tcpdump -i any
// writes), whose packets become Ethernet frames: from the cooked
// header's link-layer address, if it has six bytes, to a made-up one.
func ReadPcap(r io.Reader) ([]Captured, error) {
	br := bufio.NewReader(r)
	magic, err := br.Peek(4)
	if err != nil {
		return nil, fmt.Errorf("read pcap: %w", err)
	}
	type source interface {
		ReadPacketData() ([]byte, gopacket.CaptureInfo, error)
		LinkType() layers.LinkType
	}
	var src source
	if bytes.Equal(magic, []byte{0x0a, 0x0d, 0x0d, 0x0a}) {
		ng, err := pcapgo.NewNgReader(br, pcapgo.DefaultNgReaderOptions)
		if err != nil {
			return nil, fmt.Errorf("read pcapng: %w", err)
		}
		src = ng
	} else {
		pr, err := pcapgo.NewReader(br)
		if err != nil {
			return nil, fmt.Errorf("read pcap: %w", err)
		}
		src = pr
	}
	lt := src.LinkType()
	if lt != layers.LinkTypeEthernet && lt != layers.LinkTypeLinuxSLL && lt != layers.LinkTypeLinuxSLL2 {
		return nil, fmt.Errorf("read pcap: link type %s, want Ethernet or Linux cooked (SLL, SLL2)", lt)
	}
	var out []Captured
	for n := 1; ; n++ {
		data, _, err := src.ReadPacketData()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("read pcap: %w", err)
		}
		c := Captured{Frame: bytes.Clone(data)}
		if lt != layers.LinkTypeEthernet {
			if c, err = uncook(lt, data); err != nil {
				return nil, fmt.Errorf("read pcap: packet %d: %w", n, err)
			}
		}
		out = append(out, c)
	}
}

// uncook turns a Linux cooked capture's packet into an Ethernet frame.
func uncook(lt layers.LinkType, data []byte) (Captured, error) {
	var (
		proto   layers.EthernetType
		ptype   layers.LinuxSLLPacketType
		addr    []byte
		payload []byte
	)
	if lt == layers.LinkTypeLinuxSLL {
		var h layers.LinuxSLL
		if err := h.DecodeFromBytes(data, gopacket.NilDecodeFeedback); err != nil {
			return Captured{}, err
		}
		proto, ptype, addr, payload = h.EthernetType, h.PacketType, h.Addr, h.Payload
	} else {
		var h layers.LinuxSLL2
		if err := h.DecodeFromBytes(data, gopacket.NilDecodeFeedback); err != nil {
			return Captured{}, err
		}
		proto, ptype, addr, payload = h.ProtocolType, layers.LinuxSLLPacketType(h.PacketType), h.Addr, h.Payload
	}
	src := net.HardwareAddr{0x02, 0, 0, 0, 0, 1}
	if len(addr) == 6 {
		src = net.HardwareAddr(addr)
	}
	frame := make([]byte, 14, 14+len(payload))
	copy(frame, []byte{0x02, 0, 0, 0, 0, 2})
	copy(frame[6:], src)
	frame[12], frame[13] = byte(proto>>8), byte(proto)
	return Captured{Frame: append(frame, payload...), Cooked: true, Outgoing: ptype == layers.LinuxSLLPacketTypeOutgoing}, nil
}

// WriteCooked writes the Ethernet frames of packets as a Linux cooked
// capture (SLL or SLL2) would hold them, each arriving or Outgoing, as
// tcpdump -i any writes one.
func WriteCooked(w io.Writer, lt layers.LinkType, packets []Captured) error {
	pw := pcapgo.NewWriter(w)
	if err := pw.WriteFileHeader(65535, lt); err != nil {
		return err
	}
	for _, c := range packets {
		if len(c.Frame) < 14 {
			return fmt.Errorf("a frame of %d bytes", len(c.Frame))
		}
		mac, proto, payload := c.Frame[6:12], c.Frame[12:14], c.Frame[14:]
		ptype := byte(layers.LinuxSLLPacketTypeHost)
		if c.Outgoing {
			ptype = byte(layers.LinuxSLLPacketTypeOutgoing)
		}
		var h []byte
		if lt == layers.LinkTypeLinuxSLL {
			// type, ARPHRD_ETHER, address length, address (8), protocol
			h = append([]byte{0, ptype, 0, 1, 0, 6}, mac...)
			h = append(append(h, 0, 0), proto...)
		} else {
			// protocol, reserved, ifindex, ARPHRD_ETHER, type, address length, address (8)
			h = append(append([]byte{}, proto...), 0, 0, 0, 0, 0, 1, 0, 1, ptype, 6)
			h = append(append(h, mac...), 0, 0)
		}
		pkt := append(h, payload...)
		if err := pw.WritePacket(gopacket.CaptureInfo{CaptureLength: len(pkt), Length: len(pkt)}, pkt); err != nil {
			return err
		}
	}
	return nil
}

// Summary is a one-line description of an Ethernet frame's packet, as
// tcpdump writes one: addresses, ports, TCP flags, ICMP type and code.
func Summary(frame []byte) string {
	pkt := gopacket.NewPacket(frame, layers.LayerTypeEthernet, gopacket.DecodeOptions{Lazy: true, NoCopy: true})
	var src, dst, proto string
	switch ip := pkt.NetworkLayer().(type) {
	case *layers.IPv4:
		src, dst, proto = ip.SrcIP.String(), ip.DstIP.String(), "IP"
		if ip.Flags&layers.IPv4MoreFragments != 0 || ip.FragOffset != 0 {
			return fmt.Sprintf("IP %s > %s: fragment offset %d%s, proto %s", src, dst, int(ip.FragOffset)*8, map[bool]string{true: "+"}[ip.Flags&layers.IPv4MoreFragments != 0], ip.Protocol)
		}
	case *layers.IPv6:
		src, dst, proto = ip.SrcIP.String(), ip.DstIP.String(), "IP6"
	default:
		if eth, ok := pkt.LinkLayer().(*layers.Ethernet); ok {
			return fmt.Sprintf("%s > %s, ethertype %s, length %d", eth.SrcMAC, eth.DstMAC, eth.EthernetType, len(frame))
		}
		return fmt.Sprintf("length %d, not Ethernet", len(frame))
	}
	switch l := pkt.TransportLayer().(type) {
	case *layers.TCP:
		flags := ""
		for _, f := range []struct {
			on bool
			c  string
		}{{l.SYN, "S"}, {l.FIN, "F"}, {l.RST, "R"}, {l.PSH, "P"}, {l.ACK, "."}, {l.URG, "U"}, {l.ECE, "E"}, {l.CWR, "W"}} {
			if f.on {
				flags += f.c
			}
		}
		return fmt.Sprintf("%s %s.%d > %s.%d: Flags [%s], length %d", proto, src, l.SrcPort, dst, l.DstPort, flags, len(l.Payload))
	case *layers.UDP:
		return fmt.Sprintf("%s %s.%d > %s.%d: UDP, length %d", proto, src, l.SrcPort, dst, l.DstPort, len(l.Payload))
	case *layers.SCTP:
		return fmt.Sprintf("%s %s.%d > %s.%d: SCTP", proto, src, l.SrcPort, dst, l.DstPort)
	}
	if icmp, ok := pkt.Layer(layers.LayerTypeICMPv4).(*layers.ICMPv4); ok {
		return fmt.Sprintf("%s %s > %s: ICMP type %d code %d", proto, src, dst, icmp.TypeCode.Type(), icmp.TypeCode.Code())
	}
	if icmp, ok := pkt.Layer(layers.LayerTypeICMPv6).(*layers.ICMPv6); ok {
		return fmt.Sprintf("%s %s > %s: ICMP6 type %d code %d", proto, src, dst, icmp.TypeCode.Type(), icmp.TypeCode.Code())
	}
	return fmt.Sprintf("%s %s > %s: length %d", proto, src, dst, len(frame)-14)
}
