package rules

import (
	"net"
	"net/netip"
	"testing"
)

func TestSaveExtensions(t *testing.T) {
	mac, _ := net.ParseMAC("00:1A:2b:3c:4D:5e")
	tests := []struct {
		name string
		rule Rule
		want string
	}{
		{"tcp any ports print nothing",
			Rule{Proto: 6, Matches: []Match{&TCP{SrcPorts: AnyPort, DstPorts: AnyPort}}},
			"-p tcp -m tcp"},
		{"tcp inverted any port",
			Rule{Proto: 6, Matches: []Match{&TCP{SrcPorts: AnyPort, DstPorts: AnyPort, DstNeg: true}}},
			"-p tcp -m tcp ! --dport 0:65535"},
		{"tcp everything",
			Rule{Proto: 6, Matches: []Match{&TCP{
				SrcPorts: PortRange{1024, 65535}, DstPorts: PortRange{22, 22}, SrcNeg: true,
				Option: 2, OptionNeg: true, FlagMask: 0x3f, FlagComp: 0, FlagsNeg: true}}},
			"-p tcp -m tcp ! --sport 1024:65535 --dport 22 ! --tcp-option 2 ! --tcp-flags FIN,SYN,RST,PSH,ACK,URG NONE"},
		{"udp",
			Rule{Proto: 17, Matches: []Match{&UDP{SrcPorts: PortRange{53, 53}, DstPorts: AnyPort}}},
			"-p udp -m udp --sport 53"},
		{"multiport",
			Rule{Proto: 6, Matches: []Match{&Multiport{Dir: MultiportBoth, Ports: []PortRange{{80, 80}, {1000, 2000}}, Neg: true}}},
			"-p tcp -m multiport ! --ports 80,1000:2000"},
		{"iprange",
			Rule{Matches: []Match{&IPRange{
				Dst: &AddrRange{netip.MustParseAddr("2001:db8::1"), netip.MustParseAddr("2001:db8::a")}, DstNeg: true}}},
			"-m iprange ! --dst-range 2001:db8::1-2001:db8::a"},
		{"icmp any",
			Rule{Proto: 1, Matches: []Match{&ICMP{Type: 255, CodeMax: 255}}},
			"-p icmp -m icmp --icmp-type any"},
		{"icmp 255/255 is not any",
			Rule{Proto: 1, Matches: []Match{&ICMP{Type: 255, CodeMin: 255, CodeMax: 255}}},
			"-p icmp -m icmp --icmp-type 255/255"},
		{"icmpv6 type 255 is a number",
			Rule{Proto: 58, Matches: []Match{&ICMP{V6: true, Type: 255, CodeMax: 255, Neg: true}}},
			"-p ipv6-icmp -m icmp6 ! --icmpv6-type 255"},
		{"icmpv6 code range",
			Rule{Proto: 58, Matches: []Match{&ICMP{V6: true, Type: 1, CodeMin: 3, CodeMax: 4}}},
			"-p ipv6-icmp -m icmp6 --icmpv6-type 1/3:4"},
		{"comment quoted",
			Rule{Matches: []Match{&Comment{Text: `a "b" 'c' \d`}}},
			`-m comment --comment "a \"b\" \'c\' \\d"`},
		{"conntrack",
			Rule{Matches: []Match{&Conntrack{State: CTDnat | CTEstablished | CTNew | CTInvalid, StateNeg: true,
				Other: []Option{{Name: "ctproto", Args: []string{"6"}}, {Name: "ctorigsrcport", Neg: true, Args: []string{"1:2"}}}}}},
			"-m conntrack ! --ctstate INVALID,NEW,ESTABLISHED,DNAT --ctproto 6 ! --ctorigsrcport 1:2"},
		{"conntrack without state",
			Rule{Matches: []Match{&Conntrack{Other: []Option{{Name: "ctorigsrc", Args: []string{"10.0.0.1/8"}}}}}},
			"-m conntrack --ctorigsrc 10.0.0.1/8"},
		{"state",
			Rule{Matches: []Match{&State{State: CTUntracked | CTRelated}}},
			"-m state --state RELATED,UNTRACKED"},
		{"set",
			Rule{Matches: []Match{&Set{SetName: "blocked", Dirs: []SetDir{SetSrc, SetDst, SetSrc}, Neg: true,
				Other: []Option{{Name: "return-nomatch"}, {Name: "bytes-lt", Args: []string{"100"}}}}}},
			"-m set ! --match-set blocked src,dst,src --return-nomatch --bytes-lt 100"},
		{"length single",
			Rule{Matches: []Match{&Length{Min: 40, Max: 40}}},
			"-m length --length 40"},
		{"length full inverted",
			Rule{Matches: []Match{&Length{Min: 0, Max: 65535, Neg: true}}},
			"-m length ! --length 0:65535"},
		{"ttl ne",
			Rule{Matches: []Match{&TTL{Op: OpNe, Value: 1}}},
			"-m ttl ! --ttl-eq 1"},
		{"hl gt",
			Rule{Matches: []Match{&HL{Op: OpGt, Value: 254}}},
			"-m hl --hl-gt 254"},
		{"mac lower case",
			Rule{Matches: []Match{&MAC{Addr: mac, Neg: true}}},
			"-m mac ! --mac-source 00:1a:2b:3c:4d:5e"},
		{"mark full mask",
			Rule{Matches: []Match{&Mark{Value: 0xfeedcafe, Mask: 0xffffffff}}},
			"-m mark --mark 0xfeedcafe"},
		{"mark masked",
			Rule{Matches: []Match{&Mark{Value: 0, Mask: 0xff0, Neg: true}}},
			"-m mark ! --mark 0x0/0xff0"},
		{"limit per day",
			Rule{Matches: []Match{&Limit{Avg: 864000, Burst: 5}}},
			"-m limit --limit 1000/day"},
		{"limit inexact rate in the unit print_rate picks",
			Rule{Matches: []Match{&Limit{Avg: 600000 / 7, Burst: 10}}},
			"-m limit --limit 7/min --limit-burst 10"},
		{"limit infinite",
			Rule{Matches: []Match{&Limit{Avg: 0, Burst: 5}}},
			"-m limit --limit inf"},
		{"pkttype",
			Rule{Matches: []Match{&PktType{Type: PacketBroadcast, Neg: true}}},
			"-m pkttype ! --pkt-type broadcast"},
		{"pkttype without a name",
			Rule{Matches: []Match{&PktType{Type: PacketOutgoing}}},
			"-m pkttype --pkt-type 4"},
		{"addrtype",
			Rule{Matches: []Match{&AddrType{Src: AddrLocal | AddrUnspec, Dst: AddrXResolve, DstNeg: true, LimitIfaceOut: true}}},
			"-m addrtype --src-type UNSPEC,LOCAL ! --dst-type XRESOLVE --limit-iface-out"},
		{"reject",
			Rule{Target: &Reject{With: "icmp6-adm-prohibited"}},
			"-j REJECT --reject-with icmp6-adm-prohibited"},
		{"log default",
			Rule{Target: &Log{Level: 4}},
			"-j LOG"},
		{"log everything",
			Rule{Target: &Log{Level: 0, Prefix: "drop: ", Flags: LogTCPSeq | LogTCPOpt | LogIPOpt | LogUID | LogMACDecode}},
			`-j LOG --log-prefix "drop: " --log-level 0 --log-tcp-sequence --log-tcp-options --log-ip-options --log-uid --log-macdecode`},
		{"matches in order, then the target",
			Rule{Proto: 6, Matches: []Match{
				&Comment{Text: "ssh"}, &TCP{SrcPorts: AnyPort, DstPorts: PortRange{22, 22}}},
				Target: &Log{Level: 4, Prefix: "ssh"}},
			"-p tcp -m comment --comment ssh -m tcp --dport 22 -j LOG --log-prefix ssh"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.rule.Spec(); got != tt.want {
				t.Errorf("got  %s\nwant %s", got, tt.want)
			}
			// Into a buffer that holds something already.
			if got := string(tt.rule.AppendSpec([]byte("-A X "))); got != "-A X "+tt.want {
				t.Errorf("AppendSpec = %q, want %q", got, "-A X "+tt.want)
			}
		})
	}
}

// TestNetString checks addresses as iptables-save prints them: masked,
// with a length where the mask is contiguous and the mask where not.
func TestNetString(t *testing.T) {
	a := netip.MustParseAddr
	tests := []struct {
		n    Net
		want string
	}{
		{Net{}, "0.0.0.0/0"},
		{Net{Addr: a("10.1.2.3")}, "10.1.2.3/0"},
		{Net{Addr: a("10.1.2.3"), Mask: a("255.255.255.255")}, "10.1.2.3/32"},
		{Net{Addr: a("10.1.2.3"), Mask: a("255.255.0.0")}, "10.1.0.0/16"},
		{Net{Addr: a("10.1.2.3"), Mask: a("255.0.255.0")}, "10.0.2.0/255.0.255.0"},
		{Net{Addr: a("0.0.0.0"), Mask: a("0.0.0.0")}, "0.0.0.0/0"},
		{Net{Addr: a("2001:db8::1"), Mask: a("ffff:ffff::")}, "2001:db8::/32"},
		{Net{Addr: a("2001:db8::1"), Mask: a("ffff::ffff")}, "2001::1/ffff::ffff"},
		{Net{Addr: a("fe80::1%eth0"), Mask: a("ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff")}, "fe80::1/128"},
	}
	for _, tt := range tests {
		if got := tt.n.String(); got != tt.want {
			t.Errorf("%v %v: %q, want %q", tt.n.Addr, tt.n.Mask, got, tt.want)
		}
		if got := string(appendNet([]byte("x"), "-s", tt.n, true)); got != "x ! -s "+tt.want {
			t.Errorf("appendNet: %q", got)
		}
	}
}
