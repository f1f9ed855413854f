package difftest

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"strings"

	"bpfwall/rules"
)

// GenOptions shape a random rule set.
type GenOptions struct {
	Family rules.Family
	// InIface and OutIface are the firewall's interfaces, which -i and -o
	// name (exactly, by a prefix, or not at all).
	InIface, OutIface string
	// XDP leaves out what the xdp hook cannot compile: -m mark and
	// -m pkttype, and REJECT (DROP instead); and -o, which a program at
	// ingress cannot know before the routing decision.
	XDP bool
}

// GenerateRules returns a random filter table as iptables-save text, the
// same for the same seed: a FORWARD chain with either policy, up to three
// user chains reached by jumps and gotos, and rules that combine
// prefixes of every length, address ranges, negations, protocols, ports,
// port ranges and lists, TCP flags and options, ICMP types and codes,
// interfaces, fragments, lengths, TTLs, DSCPs, MAC addresses and marks.
func GenerateRules(seed uint64, opts GenOptions) []byte {
	g := &ruleGen{rng: rand.New(rand.NewPCG(seed, 0x6469666674657374)), extra: rand.New(rand.NewPCG(seed, 0x6578747261)), GenOptions: opts}
	for range 1 + g.rng.IntN(3) {
		g.bases = append(g.bases, g.randomAddr())
	}
	g.ports = []uint16{0, 1, 22, 53, 80, 443, 1023, 1024, 65534, 65535}
	for range 4 {
		g.ports = append(g.ports, uint16(g.rng.IntN(65536)))
	}
	users := g.rng.IntN(4)
	var b strings.Builder
	b.WriteString("*filter\n:INPUT ACCEPT [0:0]\n")
	fmt.Fprintf(&b, ":FORWARD %s [0:0]\n", g.oneOf("ACCEPT", "DROP"))
	b.WriteString(":OUTPUT ACCEPT [0:0]\n")
	for i := range users {
		fmt.Fprintf(&b, ":uc%d - [0:0]\n", i)
	}
	for range 3 + g.rng.IntN(10) {
		fmt.Fprintf(&b, "-A FORWARD%s\n", g.rule(-1, users))
	}
	for i := range users {
		for range 1 + g.rng.IntN(6) {
			fmt.Fprintf(&b, "-A uc%d%s\n", i, g.rule(i, users))
		}
	}
	b.WriteString("COMMIT\n")
	return []byte(b.String())
}

type ruleGen struct {
	GenOptions
	rng *rand.Rand
	// extra draws the matches added after a generator's first version
	// (dscp), so that the rest of a seed's rule set stays as it was.
	extra *rand.Rand
	bases []netip.Addr
	ports []uint16
}

func (g *ruleGen) oneOf(s ...string) string { return s[g.rng.IntN(len(s))] }

func (g *ruleGen) chance(n int) bool { return g.rng.IntN(n) == 0 }

func (g *ruleGen) not() string {
	if g.chance(4) {
		return " !"
	}
	return ""
}

func (g *ruleGen) randomAddr() netip.Addr {
	var b [16]byte
	binary.BigEndian.PutUint64(b[:8], g.rng.Uint64())
	binary.BigEndian.PutUint64(b[8:], g.rng.Uint64())
	if g.Family == rules.IPv4 {
		return netip.AddrFrom4([4]byte(b[:4]))
	}
	return netip.AddrFrom16(b)
}

// addr is near one of the rule set's base addresses, so that rules
// overlap, or anywhere.
func (g *ruleGen) addr() netip.Addr {
	if g.chance(5) {
		return g.randomAddr()
	}
	a := g.bases[g.rng.IntN(len(g.bases))].AsSlice()
	a[len(a)-1] ^= byte(g.rng.IntN(4))
	if g.chance(2) {
		a[len(a)-2] ^= byte(g.rng.IntN(256))
	}
	out, _ := netip.AddrFromSlice(a)
	return out
}

func (g *ruleGen) prefix() string {
	bits := g.rng.IntN(g.Family.Bits() + 1)
	p := netip.PrefixFrom(g.addr(), bits).Masked()
	if g.Family == rules.IPv4 && g.chance(12) {
		// A non-contiguous mask, which iptables-save prints dotted.
		m := g.randomAddr()
		return fmt.Sprintf("%s/%s", g.addr(), m)
	}
	return p.String()
}

func (g *ruleGen) port() uint16 {
	if g.chance(4) {
		return uint16(g.rng.IntN(65536))
	}
	return g.ports[g.rng.IntN(len(g.ports))]
}

func (g *ruleGen) portRange() string {
	a, b := g.port(), g.port()
	if g.chance(2) {
		return fmt.Sprint(a)
	}
	return fmt.Sprintf("%d:%d", min(a, b), max(a, b))
}

func (g *ruleGen) iface(name string) string {
	switch g.rng.IntN(6) {
	case 0:
		return name[:1+g.rng.IntN(len(name))] + "+"
	case 1:
		return "+"
	case 2:
		return "eth0"
	case 3:
		return name + "0"
	}
	return name
}

// rule returns the matches and target of a rule of chain self (-1 for
// FORWARD); jumps go only to later user chains, so there are no loops.
func (g *ruleGen) rule(self, users int) string {
	var b strings.Builder
	w := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	if g.chance(2) {
		w("%s -s %s", g.not(), g.prefix())
	}
	if g.chance(3) {
		w("%s -d %s", g.not(), g.prefix())
	}
	if g.chance(5) {
		w("%s -i %s", g.not(), g.iface(g.InIface))
	}
	if g.chance(6) && !g.XDP {
		w("%s -o %s", g.not(), g.iface(g.OutIface))
	}
	if g.Family == rules.IPv4 && g.chance(10) {
		w("%s -f", g.not())
	}
	proto := g.oneOf("", "", "tcp", "tcp", "udp", "udp", "icmp", "sctp", "47", "0")
	if proto == "icmp" && g.Family == rules.IPv6 {
		proto = "ipv6-icmp"
	}
	l4 := proto != "" && proto != "47" && proto != "0" && !g.chance(4)
	negProto := false
	if proto != "" {
		// Extensions need a plain -p; "! -p 0" would never match, which
		// iptables refuses.
		negProto = !l4 && proto != "0" && g.chance(4)
		if negProto {
			w(" !")
		}
		w(" -p %s", proto)
	}
	if l4 {
		switch proto {
		case "tcp", "udp", "sctp":
			w(" -m %s", proto)
			if g.chance(2) {
				w("%s --sport %s", g.not(), g.portRange())
			}
			if g.chance(2) {
				w("%s --dport %s", g.not(), g.portRange())
			}
			if proto == "tcp" {
				g.tcpExtras(w)
			}
		case "icmp":
			t := fmt.Sprint(g.rng.IntN(20))
			switch {
			case g.chance(8):
				t = "any"
			case g.chance(2):
				t += fmt.Sprintf("/%d", g.rng.IntN(17))
			}
			w(" -m icmp%s --icmp-type %s", g.not(), t)
		case "ipv6-icmp":
			t := fmt.Sprint(g.oneOf("1", "2", "3", "4", "128", "129", "133", "135", "136", fmt.Sprint(g.rng.IntN(256))))
			if g.chance(2) {
				t += fmt.Sprintf("/%d", g.rng.IntN(8))
			}
			w(" -m icmp6%s --icmpv6-type %s", g.not(), t)
		}
		if proto != "icmp" && proto != "ipv6-icmp" && g.chance(3) {
			w(" -m multiport%s --%s %s", g.not(), g.oneOf("sports", "dports", "ports"), g.portList())
		}
	}
	if g.chance(6) {
		a, c := g.addr(), g.addr()
		if c.Less(a) {
			a, c = c, a
		}
		w(" -m iprange%s --%s %s-%s", g.not(), g.oneOf("src-range", "dst-range"), a, c)
	}
	if g.chance(10) {
		lo := g.rng.IntN(120)
		w(" -m length%s --length %d:%d", g.not(), lo, lo+g.rng.IntN(60))
	}
	if g.chance(8) {
		v := g.oneOf("0", "1", "2", "63", "64", "65", "254", "255", fmt.Sprint(g.rng.IntN(256)))
		if g.Family == rules.IPv4 {
			w(" -m ttl --ttl-%s %s", g.oneOf("eq", "lt", "gt"), v)
		} else {
			w(" -m hl --hl-%s %s", g.oneOf("eq", "lt", "gt"), v)
		}
	}
	if g.extra.IntN(8) == 0 {
		neg := []string{"", " !"}[g.extra.IntN(2)]
		if g.extra.IntN(3) == 0 {
			classes := []string{"CS0", "CS1", "AF11", "af41", "EF", "BE"}
			w(" -m dscp%s --dscp-class %s", neg, classes[g.extra.IntN(len(classes))])
		} else {
			values := []string{"0", "0x0a", "0x2e", "63", "1", fmt.Sprint(g.extra.IntN(64))}
			w(" -m dscp%s --dscp %s", neg, values[g.extra.IntN(len(values))])
		}
	}
	if g.chance(20) {
		w(" -m mac%s --mac-source %s", g.not(), g.oneOf(senderMAC.String(), "02:00:00:00:00:09"))
	}
	if g.chance(20) && !g.XDP {
		w(" -m pkttype%s --pkt-type %s", g.not(), g.oneOf("unicast", "broadcast", "multicast"))
	}
	if g.chance(20) && !g.XDP {
		w(" -m mark%s --mark %s", g.not(), g.oneOf("0", "0x1", "0x0/0xff"))
	}
	if negProto {
		proto = "" // REJECT --reject-with tcp-reset needs -p tcp
	}
	w("%s", g.target(self, users, proto))
	return b.String()
}

func (g *ruleGen) tcpExtras(w func(string, ...any)) {
	flags := []string{"FIN", "SYN", "RST", "PSH", "ACK", "URG"}
	set := func() string {
		if g.chance(8) {
			return g.oneOf("ALL", "NONE")
		}
		var s []string
		for _, f := range flags {
			if g.chance(2) {
				s = append(s, f)
			}
		}
		if len(s) == 0 {
			return "NONE"
		}
		return strings.Join(s, ",")
	}
	switch {
	case g.chance(4):
		w("%s --tcp-flags %s %s", g.not(), set(), set())
	case g.chance(6):
		w("%s --syn", g.not())
	case g.chance(6):
		w("%s --tcp-option %s", g.not(), g.oneOf("1", "2", "3", "4", "8", fmt.Sprint(g.rng.IntN(256))))
	}
}

// portList is a multiport list: up to 15 ports, a range counting two.
func (g *ruleGen) portList() string {
	var s []string
	for used := 0; used < 15; {
		r := g.portRange()
		if lo, hi, ok := strings.Cut(r, ":"); ok && lo == hi {
			r = lo // multiport refuses a range of one port
		}
		if strings.Contains(r, ":") {
			if used+2 > 15 {
				break
			}
			used += 2
		} else {
			used++
		}
		s = append(s, r)
		if g.chance(3) {
			break
		}
	}
	return strings.Join(s, ",")
}

func (g *ruleGen) target(self, users int, proto string) string {
	switch n := g.rng.IntN(12); {
	case n < 3:
		return " -j ACCEPT"
	case n < 5:
		return " -j DROP"
	case n < 6 && g.XDP:
		return " -j DROP"
	case n < 6:
		with := g.oneOf("", "icmp-net-unreachable", "icmp-host-prohibited", "icmp-admin-prohibited")
		if g.Family == rules.IPv6 {
			with = g.oneOf("", "icmp6-no-route", "icmp6-adm-prohibited", "icmp6-port-unreachable")
		}
		if proto == "tcp" && g.chance(2) {
			with = "tcp-reset"
		}
		if with == "" {
			return " -j REJECT"
		}
		return " -j REJECT --reject-with " + with
	case n < 7:
		return " -j RETURN"
	case n < 10 && self+1 < users:
		c := self + 1 + g.rng.IntN(users-self-1)
		if g.chance(3) {
			return fmt.Sprintf(" -g uc%d", c)
		}
		return fmt.Sprintf(" -j uc%d", c)
	case n < 11:
		return "" // counts and goes on
	}
	return " -j ACCEPT"
}
