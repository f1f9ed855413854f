package packets

import (
	"bytes"
	"strings"
	"testing"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"github.com/gopacket/gopacket/pcapgo"
)

func TestFrame(t *testing.T) {
	tests := []struct {
		line  string
		check func(t *testing.T, p gopacket.Packet)
	}{
		{`{}`, func(t *testing.T, p gopacket.Packet) {
			ip := p.Layer(layers.LayerTypeIPv4).(*layers.IPv4)
			tcp := p.Layer(layers.LayerTypeTCP).(*layers.TCP)
			if ip.SrcIP.String() != "10.0.0.1" || ip.DstIP.String() != "10.0.0.2" || ip.Length != 64 || ip.TTL != 64 {
				t.Errorf("ip %v -> %v len %d ttl %d", ip.SrcIP, ip.DstIP, ip.Length, ip.TTL)
			}
			if tcp.SrcPort != 1234 || tcp.DstPort != 80 || !tcp.SYN || tcp.ACK {
				t.Errorf("tcp %d -> %d syn %v ack %v", tcp.SrcPort, tcp.DstPort, tcp.SYN, tcp.ACK)
			}
		}},
		{`{"proto":"udp","src":"2001:db8::5","dport":53,"len":100}`, func(t *testing.T, p gopacket.Packet) {
			ip := p.Layer(layers.LayerTypeIPv6).(*layers.IPv6)
			udp := p.Layer(layers.LayerTypeUDP).(*layers.UDP)
			if ip.SrcIP.String() != "2001:db8::5" || ip.DstIP.String() != "2001:db8::2" || int(ip.Length)+40 != 100 {
				t.Errorf("ip %v -> %v payload %d", ip.SrcIP, ip.DstIP, ip.Length)
			}
			if udp.DstPort != 53 || udp.SrcPort != 1234 {
				t.Errorf("udp %d -> %d", udp.SrcPort, udp.DstPort)
			}
		}},
		{`{"proto":"icmp","type":8,"code":0,"flags":16}`, func(t *testing.T, p gopacket.Packet) {
			icmp := p.Layer(layers.LayerTypeICMPv4).(*layers.ICMPv4)
			if icmp.TypeCode.Type() != 8 {
				t.Errorf("icmp type %d", icmp.TypeCode.Type())
			}
		}},
		{`{"proto":"50","dst":"192.0.2.9"}`, func(t *testing.T, p gopacket.Packet) {
			ip := p.Layer(layers.LayerTypeIPv4).(*layers.IPv4)
			if ip.Protocol != 50 || ip.DstIP.String() != "192.0.2.9" {
				t.Errorf("ip proto %d dst %v", ip.Protocol, ip.DstIP)
			}
		}},
	}
	for _, tc := range tests {
		d, err := Parse([]byte(tc.line))
		if err != nil {
			t.Fatalf("%s: %v", tc.line, err)
		}
		frame, err := d.Frame()
		if err != nil {
			t.Fatalf("%s: %v", tc.line, err)
		}
		p := gopacket.NewPacket(frame, layers.LayerTypeEthernet, gopacket.Default)
		if el := p.ErrorLayer(); el != nil {
			t.Fatalf("%s: frame does not decode: %v", tc.line, el.Error())
		}
		tc.check(t, p)
	}
}

func TestBadDescriptions(t *testing.T) {
	for _, line := range []string{`{"proto":"bogus"}`, `{"src":"10.0.0.1","dst":"::1"}`, `{"src":"nope"}`, `{"port":1}`} {
		d, err := Parse([]byte(line))
		if err == nil {
			_, err = d.Frame()
		}
		if err == nil {
			t.Errorf("%s: accepted", line)
		}
	}
	if _, err := ReadJSONL(strings.NewReader("{}\n\n# c\n{\"x\":1}\n")); err == nil || !strings.Contains(err.Error(), "line 4") {
		t.Errorf("ReadJSONL error %v, want one naming line 4", err)
	}
}

func TestReadPcap(t *testing.T) {
	frame, err := Desc{}.Frame()
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	w := pcapgo.NewWriter(&buf)
	if err := w.WriteFileHeader(65535, layers.LinkTypeEthernet); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := w.WritePacket(gopacket.CaptureInfo{CaptureLength: len(frame), Length: len(frame)}, frame); err != nil {
			t.Fatal(err)
		}
	}
	frames, err := ReadPcap(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if len(frames) != 2 || !bytes.Equal(frames[1].Frame, frame) || frames[1].Cooked {
		t.Errorf("read %d frames", len(frames))
	}
}

// TestReadCookedPcap: the packets of a tcpdump -i any capture become
// Ethernet frames from the captured link-layer address, with their
// direction.
func TestReadCookedPcap(t *testing.T) {
	frame, err := Desc{}.Frame()
	if err != nil {
		t.Fatal(err)
	}
	for _, lt := range []layers.LinkType{layers.LinkTypeLinuxSLL, layers.LinkTypeLinuxSLL2} {
		var buf bytes.Buffer
		if err := WriteCooked(&buf, lt, []Captured{{Frame: frame}, {Frame: frame, Outgoing: true}}); err != nil {
			t.Fatal(err)
		}
		got, err := ReadPcap(&buf)
		if err != nil {
			t.Fatalf("%s: %v", lt, err)
		}
		if len(got) != 2 || !got[0].Cooked || got[0].Outgoing || !got[1].Outgoing {
			t.Fatalf("%s: %+v", lt, got)
		}
		// The destination MAC is made up; the rest is the packet.
		if f := got[0].Frame; !bytes.Equal(f[6:], frame[6:]) {
			t.Errorf("%s: frame\n% x\nwant\n% x", lt, f, frame)
		}
	}
}

func TestSummary(t *testing.T) {
	flags := uint8(0x12)
	for _, tc := range []struct {
		d    Desc
		want string
	}{
		{Desc{Flags: &flags}, "IP 10.0.0.1.1234 > 10.0.0.2.80: Flags [S.], length 24"},
		{Desc{Proto: "udp", DPort: 53}, "IP 10.0.0.1.1234 > 10.0.0.2.53: UDP, length 36"},
		{Desc{Proto: "icmpv6", Src: "2001:db8::1", Dst: "2001:db8::2", Type: 128}, "IP6 2001:db8::1 > 2001:db8::2: ICMP6 type 128 code 0"},
	} {
		frame, err := tc.d.Frame()
		if err != nil {
			t.Fatal(err)
		}
		if got := Summary(frame); got != tc.want {
			t.Errorf("%+v: %q, want %q", tc.d, got, tc.want)
		}
	}
}
