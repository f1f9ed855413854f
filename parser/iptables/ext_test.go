package iptables_test

import (
	"fmt"
	"strings"
	"testing"

	"bpfwall/parser/iptables"
	"bpfwall/rules"
)

// extCase is one rule parsed in a one-rule input: it must save as want, or
// fail with an error containing wantErr.
type extCase struct {
	name    string
	family  rules.Family
	table   string // default filter
	chain   string // default INPUT
	rule    string
	want    string // "=" for the rule itself
	wantErr string
}

// saveRule parses rule in chain of table and returns it as saved after
// "-A CHAIN ".
func saveRule(c extCase, sets map[string]*rules.IPSet) (string, error) {
	table, chain := c.table, c.chain
	if table == "" {
		table = "filter"
	}
	if chain == "" {
		chain = "INPUT"
	}
	src := "*" + table + "\n"
	if !strings.Contains(strings.Join(rules.BuiltinChains[table], " ")+" ", chain+" ") {
		src += ":" + chain + " - [0:0]\n"
	}
	src += fmt.Sprintf("-A %s %s\nCOMMIT\n", chain, c.rule)
	rs, err := iptables.Parse("test", []byte(src), iptables.Options{Family: c.family, ForceFamily: true, Sets: sets})
	if err != nil {
		return "", err
	}
	for _, l := range strings.Split(string(rs.Save(rules.SaveOptions{})), "\n") {
		if rest, ok := strings.CutPrefix(l, "-A "+chain+" "); ok {
			return rest, nil
		}
	}
	return "", fmt.Errorf("rule not saved")
}

func runExtCases(t *testing.T, cases []extCase, sets map[string]*rules.IPSet) {
	t.Helper()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := saveRule(c, sets)
			if c.wantErr != "" {
				if err == nil {
					t.Fatalf("%s: accepted as %q, want error containing %q", c.rule, got, c.wantErr)
				}
				if !strings.Contains(err.Error(), c.wantErr) {
					t.Fatalf("%s: error %q, want it to contain %q", c.rule, err, c.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("%s: %v", c.rule, err)
			}
			want := c.want
			if want == "=" {
				want = c.rule
			}
			if got != want {
				t.Errorf("%s\nsaved as %s\nwant     %s", c.rule, got, want)
			}
		})
	}
}

func TestTCPUDP(t *testing.T) {
	runExtCases(t, []extCase{
		{name: "service name", rule: "-p tcp --dport ssh", want: "-p tcp -m tcp --dport 22"},
		{name: "service of the other protocol", rule: "-p tcp --dport bootps", wantErr: `--dport: invalid port "bootps"`},
		{name: "udp takes any service", rule: "-p udp --dport ssh", want: "-p udp -m udp --dport 22"},
		{name: "udp ports are decimal", rule: "-p udp --dport 010", want: "-p udp -m udp --dport 10"},
		{name: "udp hex port", rule: "-p udp --dport 0x10", wantErr: `--dport: invalid port "0x10"`},
		{name: "udp out of range", rule: "-p udp --dport 65536", wantErr: `--dport: invalid port "65536"`},
		{name: "hex port", rule: "-p tcp --sport 0x16", want: "-p tcp -m tcp --sport 22"},
		{name: "octal port", rule: "-p tcp --sport 026", want: "-p tcp -m tcp --sport 22"},
		{name: "long names", rule: "-p tcp --source-port 1 --destination-port 2", want: "-p tcp -m tcp --sport 1 --dport 2"},
		{name: "synonyms once", rule: "-p tcp --sport 1 --source-port 2", wantErr: "only one --source-port"},
		{name: "out of range", rule: "-p tcp --dport 65536", wantErr: `test:2:25: --dport: invalid port "65536"`},
		{name: "reversed", rule: "-p udp --dport 9:8", wantErr: "min > max"},
		{name: "inverted any", rule: "-p udp ! --dport :", want: "-p udp -m udp ! --dport 0:65535"},
		{name: "all flags", rule: "-p tcp --tcp-flags ALL NONE", want: "-p tcp -m tcp --tcp-flags FIN,SYN,RST,PSH,ACK,URG NONE"},
		{name: "flags any case", rule: "-p tcp ! --tcp-flags syn,ack,,fin ack", want: "-p tcp -m tcp ! --tcp-flags FIN,SYN,ACK ACK"},
		{name: "inverted syn", rule: "-p tcp ! --syn", want: "-p tcp -m tcp ! --tcp-flags FIN,SYN,RST,ACK SYN"},
		{name: "flags one arg", rule: "-p tcp --tcp-flags SYN -j DROP", wantErr: "--tcp-flags requires two arguments"},
		{name: "flags three args", rule: "-p tcp --tcp-flags SYN SYN SYN", wantErr: "--tcp-flags requires two arguments"},
		{name: "unknown flag", rule: "-p tcp --tcp-flags SYN,ECE SYN", wantErr: `unknown TCP flag "ECE"`},
		{name: "syn and flags", rule: "-p tcp --syn --tcp-flags SYN SYN", wantErr: "only one of --syn or --tcp-flags"},
		{name: "tcp option", rule: "-p tcp ! --tcp-option 8 --dport 80", want: "-p tcp -m tcp --dport 80 ! --tcp-option 8"},
		{name: "tcp option 0", rule: "-p tcp --tcp-option 0", wantErr: "--tcp-option: invalid option number"},
		{name: "inverted protocol", rule: "! -p tcp -m tcp --dport 1", wantErr: "-m tcp needs -p tcp"},
		{name: "other protocol", rule: "-p udp -m tcp", wantErr: "-m tcp needs -p tcp"},
		{name: "ipv6", family: rules.IPv6, rule: "-p udp --sport 53", want: "-p udp -m udp --sport 53"},
	}, nil)
}

func TestMultiport(t *testing.T) {
	ports := func(n int) string {
		var s []string
		for i := 1; i <= n; i++ {
			s = append(s, fmt.Sprint(i))
		}
		return strings.Join(s, ",")
	}
	runExtCases(t, []extCase{
		{name: "15 ports", rule: "-p tcp -m multiport --dports " + ports(15), want: "="},
		{name: "16 ports", rule: "-p tcp -m multiport --dports " + ports(16), wantErr: "too many ports"},
		{name: "range takes two slots", rule: "-p tcp -m multiport --ports 1:2," + ports(13), want: "="},
		{name: "range overflows", rule: "-p tcp -m multiport --ports 1:2," + ports(14), wantErr: "too many ports"},
		{name: "one-port range", rule: "-p tcp -m multiport --dports 5:5", wantErr: `invalid port range "5:5"`},
		{name: "open range", rule: "-p tcp -m multiport --dports 5:", wantErr: `invalid port ""`},
		{name: "empty element", rule: "-p tcp -m multiport --dports 1,,2", wantErr: `invalid port ""`},
		{name: "inverted", rule: "-p tcp -m multiport ! --sports http,https", want: "-p tcp -m multiport ! --sports 80,443"},
		{name: "service of the protocol", rule: "-p udp -m multiport --ports ntp,domain", want: "-p udp -m multiport --ports 123,53"},
		{name: "abbreviated option", rule: "-p tcp -m multiport --dport 22", want: "-p tcp -m multiport --dports 22"},
		{name: "two directions", rule: "-p tcp -m multiport --sports 1 --dports 2", wantErr: "only one of --sports, --dports or --ports"},
		{name: "no protocol", rule: "-m multiport --dports 1", wantErr: "-m multiport needs -p tcp"},
		{name: "icmp", rule: "-p icmp -m multiport --dports 1", wantErr: "-m multiport needs -p tcp"},
		{name: "no ports", rule: "-p tcp -m multiport", wantErr: "no ports specified"},
	}, nil)
}

func TestIPRange(t *testing.T) {
	runExtCases(t, []extCase{
		{name: "single address", rule: "-m iprange --src-range 10.0.0.1", want: "-m iprange --src-range 10.0.0.1-10.0.0.1"},
		{name: "reversed accepted", rule: "-m iprange ! --dst-range 10.0.0.9-10.0.0.1", want: "="},
		{name: "both", rule: "-m iprange --dst-range 10.0.0.1-10.0.0.2 --src-range 10.0.1.1-10.0.1.2",
			want: "-m iprange --src-range 10.0.1.1-10.0.1.2 --dst-range 10.0.0.1-10.0.0.2"},
		{name: "ipv6", family: rules.IPv6, rule: "-m iprange --src-range 2001:DB8::1-2001:db8::ff", want: "-m iprange --src-range 2001:db8::1-2001:db8::ff"},
		{name: "wrong family", family: rules.IPv6, rule: "-m iprange --src-range 10.0.0.1-10.0.0.2", wantErr: `--src-range: invalid address "10.0.0.1"`},
		{name: "bad address", rule: "-m iprange --src-range 10.0.0.1-x", wantErr: `invalid address "x"`},
	}, nil)
}

func TestICMP(t *testing.T) {
	runExtCases(t, []extCase{
		{name: "alias", rule: "-p icmp --icmp-type ping", want: "-p icmp -m icmp --icmp-type 8"},
		{name: "code name", rule: "-p icmp --icmp-type port-unreachable", want: "-p icmp -m icmp --icmp-type 3/3"},
		{name: "prefix", rule: "-p icmp --icmp-type echo-req", want: "-p icmp -m icmp --icmp-type 8"},
		{name: "any case", rule: "-p icmp --icmp-type tos-host-redirect", want: "-p icmp -m icmp --icmp-type 5/3"},
		{name: "ambiguous", rule: "-p icmp --icmp-type echo", wantErr: `ambiguous type "echo"`},
		{name: "inverted", rule: "-p icmp ! --icmp-type 3/4", want: "-p icmp -m icmp ! --icmp-type 3/4"},
		{name: "code range", rule: "-p icmp --icmp-type 3/1:4", want: "-p icmp -m icmp --icmp-type 3/1:4"},
		{name: "full code range", rule: "-p icmp --icmp-type 3/0:255", want: "-p icmp -m icmp --icmp-type 3"},
		{name: "one-type range", rule: "-p icmp --icmp-type 3:3", want: "-p icmp -m icmp --icmp-type 3"},
		{name: "type range", rule: "-p icmp --icmp-type 3:4", wantErr: "type ranges are not supported"},
		{name: "bad code", rule: "-p icmp --icmp-type 3/256", wantErr: `invalid code "256"`},
		{name: "unknown", rule: "-p icmp --icmp-type bogus", wantErr: `unknown type "bogus"`},
		{name: "needs protocol", rule: "-p udp -m icmp --icmp-type 8", wantErr: "-m icmp needs -p icmp"},
		{name: "icmpv6 protocol name", family: rules.IPv6, rule: "-p icmpv6 --icmpv6-type neighbor-solicitation",
			want: "-p ipv6-icmp -m icmp6 --icmpv6-type 135"},
		{name: "icmp6 code", family: rules.IPv6, rule: "-p ipv6-icmp -m icmp6 ! --icmpv6-type port-unreachable",
			want: "-p ipv6-icmp -m icmp6 ! --icmpv6-type 1/4"},
		{name: "icmp6 type required", family: rules.IPv6, rule: "-p ipv6-icmp -m icmp6", wantErr: "--icmpv6-type required"},
		{name: "icmp6 needs protocol", family: rules.IPv6, rule: "-p tcp -m icmp6 --icmpv6-type 1", wantErr: "-m icmp6 needs -p ipv6-icmp"},
	}, nil)
}

func TestConntrackState(t *testing.T) {
	runExtCases(t, []extCase{
		{name: "state prefixes", rule: "-m conntrack --ctstate est,rel,n", want: "-m conntrack --ctstate NEW,RELATED,ESTABLISHED"},
		{name: "bad state", rule: "-m conntrack --ctstate NEW,", wantErr: `--ctstate: bad state ""`},
		{name: "canonical order", rule: "-m conntrack --ctdir reply --ctexpire 10: ! --ctproto udp --ctstate NEW",
			want: "-m conntrack --ctstate NEW ! --ctproto 17 --ctexpire 10:4294967295 --ctdir REPLY"},
		{name: "status", rule: "-m conntrack ! --ctstatus none,assured,expected", want: "-m conntrack ! --ctstatus EXPECTED,ASSURED"},
		{name: "status none", rule: "-m conntrack --ctstatus n", want: "-m conntrack --ctstatus NONE"},
		{name: "address", rule: "-m conntrack --ctorigsrc 10.0.0.1/32 --ctrepldst 10.1.2.3/255.255.0.0",
			want: "-m conntrack --ctorigsrc 10.0.0.1 --ctrepldst 10.1.2.3/16"},
		{name: "odd mask is a full mask", rule: "-m conntrack ! --ctreplsrc 10.1.2.3/255.0.255.0", want: "-m conntrack ! --ctreplsrc 10.1.2.3"},
		{name: "inet_aton address", rule: "-m conntrack --ctorigsrc 10.1/0x8", want: "-m conntrack --ctorigsrc 10.0.0.1/8"},
		{name: "ipv6 address", family: rules.IPv6, rule: "-m conntrack --ctorigdst 2001:db8::1/64", want: "="},
		{name: "host name", rule: "-m conntrack --ctorigdst example.org", wantErr: "host names are not resolved"},
		{name: "ports", rule: "-m conntrack --ctorigdstport https --ctreplsrcport 10:20", want: "-m conntrack --ctorigdstport 443 --ctreplsrcport 10:20"},
		{name: "open port range", rule: "-m conntrack ! --ctrepldstport 1024:", want: "-m conntrack ! --ctrepldstport 1024:65535"},
		{name: "port three parts", rule: "-m conntrack --ctorigsrcport 1:2:3", wantErr: `invalid port "2:3"`},
		{name: "direction inverted", rule: "-m conntrack ! --ctdir REPLY", wantErr: "--ctdir"},
		{name: "bad direction", rule: "-m conntrack --ctdir sideways", wantErr: `bad direction "sideways"`},
		{name: "expire reversed", rule: "-m conntrack --ctexpire 5:4", wantErr: "min > max"},
		{name: "state", rule: "-m state ! --state new,INVALID", want: "-m state ! --state INVALID,NEW"},
		{name: "state has no SNAT", rule: "-m state --state SNAT", wantErr: `--state: bad state "SNAT"`},
		{name: "state required", rule: "-m state", wantErr: "--state required"},
	}, nil)
}

func TestSet(t *testing.T) {
	sets := map[string]*rules.IPSet{"foo": {Name: "foo", Type: "hash:ip"}}
	runExtCases(t, []extCase{
		{name: "plain", rule: "-m set --match-set foo src,dst", want: "="},
		{name: "deprecated synonym", rule: "-m set --set foo dst", want: "-m set --match-set foo dst"},
		{name: "canonical order", rule: "-m set --bytes-gt 10 ! --update-counters ! --packets-eq 0x10 ! --match-set foo src --return-nomatch",
			want: "-m set ! --match-set foo src --return-nomatch ! --update-counters ! --packets-eq 16 --bytes-gt 10"},
		{name: "update counters is the default", rule: "-m set --match-set foo src --update-counters", want: "-m set --match-set foo src"},
		{name: "three-letter directions", rule: "-m set --match-set foo srcport,dstip", want: "-m set --match-set foo src,dst"},
		{name: "missing set", rule: "-m set --match-set bar src", wantErr: `set "bar" does not exist`},
		{name: "one argument", rule: "-m set --match-set foo -j DROP", wantErr: "--match-set requires two arguments"},
		{name: "bad direction", rule: "-m set --match-set foo both", wantErr: `bad direction "both"`},
		{name: "too many directions", rule: "-m set --match-set foo src,src,src,src,src,src,src", wantErr: "more than 6 directions"},
		{name: "two packet tests", rule: "-m set --match-set foo src --packets-lt 1 --packets-gt 2", wantErr: "only one of --packets-eq"},
		{name: "required", rule: "-m set --return-nomatch", wantErr: "--match-set required"},
	}, sets)
}

func TestSmallMatches(t *testing.T) {
	runExtCases(t, []extCase{
		{name: "length open", rule: "-m length ! --length 100:", want: "-m length ! --length 100:65535"},
		{name: "length reversed", rule: "-m length --length 10:5", wantErr: "min > max"},
		{name: "length three parts", rule: "-m length --length 1:2:3", wantErr: `invalid value "2:3"`},
		{name: "ttl ne", rule: "-m ttl ! --ttl-eq 64", want: "="},
		{name: "ttl two", rule: "-m ttl --ttl-lt 5 --ttl-gt 3", wantErr: "only one of --ttl-eq"},
		{name: "ttl lt not invertible", rule: "-m ttl ! --ttl-lt 5", wantErr: "--ttl-lt"},
		{name: "hl hex", family: rules.IPv6, rule: "-m hl --hl-lt 0xff", want: "-m hl --hl-lt 255"},
		{name: "mac lower case", chain: "FORWARD", rule: "-m mac ! --mac-source AA:bb:C:0d:EE:FF", want: "-m mac ! --mac-source aa:bb:0c:0d:ee:ff"},
		{name: "mac in PREROUTING", table: "raw", chain: "PREROUTING", rule: "-m mac --mac-source 00:11:22:33:44:55", want: "="},
		{name: "mac in user chain", chain: "mine", rule: "-m mac --mac-source 00:11:22:33:44:55", want: "="},
		{name: "mac in OUTPUT", chain: "OUTPUT", rule: "-m mac --mac-source 00:11:22:33:44:55", wantErr: "only valid in the PREROUTING, INPUT and FORWARD chains"},
		{name: "mac in POSTROUTING", table: "mangle", chain: "POSTROUTING", rule: "-m mac --mac-source 00:11:22:33:44:55", wantErr: "not POSTROUTING"},
		{name: "mac bad group", rule: "-m mac --mac-source 00:11:22:33:44:555", wantErr: "invalid MAC address"},
		{name: "mark decimal", rule: "-m mark --mark 16", want: "-m mark --mark 0x10"},
		{name: "mark mask", rule: "-m mark ! --mark 0x10/0xFF", want: "-m mark ! --mark 0x10/0xff"},
		{name: "mark full mask", rule: "-m mark --mark 1/0xffffffff", want: "-m mark --mark 0x1"},
		{name: "mark two slashes", rule: "-m mark --mark 1/2/3", wantErr: `invalid mask "2/3"`},
		{name: "pkttype alias", rule: "-m pkttype ! --pkt-type HOST", want: "-m pkttype ! --pkt-type unicast"},
		{name: "pkttype otherhost", rule: "-m pkttype --pkt-type OtherHost", want: "-m pkttype --pkt-type otherhost"},
		{name: "pkttype outgoing", rule: "-m pkttype --pkt-type outgoing", wantErr: `bad packet type "outgoing"`},
		{name: "comment quoted", rule: `-m comment --comment "a \"b\" c\\d"`, want: `-m comment --comment "a \"b\" c\\d"`},
		{name: "comment empty", rule: `-m comment --comment ""`, want: `-m comment --comment ""`},
		{name: "comment cut", rule: "-m comment --comment " + strings.Repeat("c", 300), want: "-m comment --comment " + strings.Repeat("c", 255)},
		{name: "comment required", rule: "-m comment", wantErr: "--comment required"},
	}, nil)
}

func TestLimit(t *testing.T) {
	runExtCases(t, []extCase{
		{name: "default", rule: "-m limit", want: "-m limit --limit 3/hour"},
		{name: "unit prefix", rule: "-m limit --limit 5/m", want: "-m limit --limit 5/min"},
		{name: "per second by default", rule: "-m limit --limit 25 --limit-burst 100", want: "-m limit --limit 25/sec --limit-burst 100"},
		{name: "rounded to a coarser unit", rule: "-m limit --limit 120/min", want: "-m limit --limit 2/sec"},
		{name: "atoi", rule: "-m limit --limit 7x/minute", want: "-m limit --limit 7/min"},
		{name: "default burst omitted", rule: "-m limit --limit-burst 5 --limit 1/h", want: "-m limit --limit 1/hour"},
		{name: "kernel overflow", rule: "-m limit --limit 1/day", wantErr: "overflow"},
		{name: "small burst", rule: "-m limit --limit 1/day --limit-burst 1", want: "-m limit --limit 1/day --limit-burst 1"},
		{name: "too fast", rule: "-m limit --limit 10001/s", wantErr: "too fast"},
		{name: "bad unit", rule: "-m limit --limit 1/fortnight", wantErr: "bad rate"},
		{name: "zero", rule: "-m limit --limit 0/s", wantErr: "bad rate"},
		{name: "zero burst", rule: "-m limit --limit-burst 0", wantErr: "overflow"},
		{name: "burst too large", rule: "-m limit --limit-burst 10001", wantErr: "invalid burst"},
		{name: "not invertible", rule: "-m limit ! --limit 1/s", wantErr: "--limit"},
	}, nil)
}

func TestAddrType(t *testing.T) {
	runExtCases(t, []extCase{
		{name: "prefixes", rule: "-m addrtype ! --dst-type loc,multi", want: "-m addrtype ! --dst-type LOCAL,MULTICAST"},
		{name: "order", rule: "-m addrtype --limit-iface-in --dst-type LOCAL --src-type UNICAST", want: "-m addrtype --src-type UNICAST --dst-type LOCAL --limit-iface-in"},
		{name: "in and out", chain: "FORWARD", rule: "-m addrtype --src-type LOCAL --limit-iface-in --limit-iface-out", wantErr: "cannot be used together"},
		{name: "out in INPUT", rule: "-m addrtype --src-type LOCAL --limit-iface-out", wantErr: "not valid in the INPUT chain"},
		{name: "in in POSTROUTING", table: "nat", chain: "POSTROUTING", rule: "-m addrtype --src-type LOCAL --limit-iface-in", wantErr: "not valid in the POSTROUTING chain"},
		{name: "in in FORWARD", chain: "FORWARD", rule: "-m addrtype --src-type LOCAL --limit-iface-in", want: "="},
		{name: "ipv6 broadcast", family: rules.IPv6, rule: "-m addrtype --dst-type BROADCAST", wantErr: "IPv6 has no BROADCAST"},
		{name: "ipv6 nat", family: rules.IPv6, rule: "-m addrtype --src-type NAT", wantErr: "IPv6 has no PROHIBIT"},
		{name: "bad type", rule: "-m addrtype --src-type LOCAL,", wantErr: `bad address type ""`},
	}, nil)
}

func TestRejectLog(t *testing.T) {
	runExtCases(t, []extCase{
		{name: "alias", rule: "-p tcp -j REJECT --reject-with tcp-rst", want: "-p tcp -j REJECT --reject-with tcp-reset"},
		{name: "prefix", rule: "-j REJECT --reject-with host-prohib", want: "-j REJECT --reject-with icmp-host-prohibited"},
		{name: "first prefix wins", rule: "-j REJECT --reject-with icmp-h", want: "-j REJECT --reject-with icmp-host-unreachable"},
		{name: "ipv6 prefix", family: rules.IPv6, rule: "-j REJECT --reject-with icmp6-adm", want: "-j REJECT --reject-with icmp6-adm-prohibited"},
		{name: "ipv6 name in ipv4", rule: "-j REJECT --reject-with no-route", wantErr: `unknown reject type "no-route"`},
		{name: "tcp reset needs tcp", rule: "! -p tcp -j REJECT --reject-with tcp-reset", wantErr: "tcp-reset needs -p tcp"},
		{name: "filter only", table: "mangle", rule: "-j REJECT", wantErr: "only valid in the filter table"},
		{name: "user chain", chain: "mine", rule: "-j REJECT", want: "-j REJECT --reject-with icmp-port-unreachable"},
		{name: "log defaults", rule: "-j LOG --log-level warning", want: "-j LOG"},
		{name: "log order", rule: "-j LOG --log-uid --log-macdecode --log-level debug --log-ip-options --log-tcp-options --log-tcp-sequence --log-prefix x",
			want: "-j LOG --log-prefix x --log-level 7 --log-tcp-sequence --log-tcp-options --log-ip-options --log-uid --log-macdecode"},
		{name: "log prefix quoting", rule: `-j LOG --log-prefix "it's \"x\" "`, want: `-j LOG --log-prefix "it\'s \"x\" "`},
		{name: "log prefix escaped quote", rule: `-j LOG --log-prefix "it\'s"`, want: "="},
		{name: "log prefix 29", rule: "-j LOG --log-prefix " + strings.Repeat("p", 29), want: "="},
		{name: "log prefix cut", rule: "-j LOG --log-prefix " + strings.Repeat("p", 30), want: "-j LOG --log-prefix " + strings.Repeat("p", 29)},
		{name: "log prefix empty", rule: `-j LOG --log-prefix ""`, wantErr: "empty prefix"},
		{name: "log level range", rule: "-j LOG --log-level 8", wantErr: `unknown log level "8"`},
		{name: "log level case", rule: "-j LOG --log-level Alert", wantErr: `unknown log level "Alert"`},
		{name: "log level deprecated name", rule: "-j LOG --log-level panic", want: "-j LOG --log-level 0"},
	}, nil)
}
