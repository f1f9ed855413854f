package bench

import (
	"bytes"
	"fmt"
	"io"
	"math/rand/v2"
	"net/netip"
	"os"
	"path/filepath"
	"strings"

	"bpfwall/internal/topology"
)

// Workload is one rule set of a family and the frames that measure it.
// Every frame is an Ethernet frame from the topology's sender to the
// firewall's ingress veth, forwarded to the receiver unless dropped.
type Workload struct {
	Family string
	// N is the number of rules.
	N int
	// Rules is iptables-restore text of the filter table; the rules are in
	// Chain.
	Rules []byte
	Chain string
	// NoMatch matches no rule: it walks them all to the policy. Last is
	// decided by the last rule. Either is nil when the family has none.
	NoMatch, Last []byte
	// Flood is the frame sent end to end: dropped, after the longest walk.
	Flood []byte
	// Netfilter says the micro benchmark runs the chain at its netfilter
	// hook (bpf_prog_test_run_nf, on lo), not at xdp: a FORWARD chain
	// that tests -o, which xdp does not know.
	Netfilter bool
}

// Family generates workloads of one shape.
type Family struct {
	Name, Desc string
	// Fixed families have a size of their own; they ignore the sizes asked
	// for.
	Fixed bool
	gen   func(n int, rng *rand.Rand) (*Workload, error)
}

// Generate returns the family's workload of n rules (of its own size when
// Fixed), the same for the same seed.
func (f Family) Generate(n int, seed uint64) (*Workload, error) {
	if n < 1 && !f.Fixed {
		return nil, fmt.Errorf("family %s: %d rules: need at least 1", f.Name, n)
	}
	w, err := f.gen(n, rand.New(rand.NewPCG(seed, uint64(n))))
	if err != nil {
		return nil, fmt.Errorf("family %s: %w", f.Name, err)
	}
	w.Family = f.Name
	return w, nil
}

// sizesOf returns the sizes to generate the family at: its own for a
// fixed family.
func (f Family) sizesOf(sizes []int) []int {
	if f.Fixed {
		return []int{0}
	}
	return sizes
}

// SaveRules writes the rule set of every family at every size into dir,
// as FAMILY-N.rules, and names each file on out: the files bench measures,
// for restore, compile --dump or the kernel's iptables-restore.
func SaveRules(dir string, fams []Family, sizes []int, seed uint64, out io.Writer) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for _, fam := range fams {
		for _, n := range fam.sizesOf(sizes) {
			w, err := fam.Generate(n, seed)
			if err != nil {
				return err
			}
			name := filepath.Join(dir, fmt.Sprintf("%s-%d.rules", fam.Name, w.N))
			if err := os.WriteFile(name, w.Rules, 0o644); err != nil {
				return err
			}
			fmt.Fprintf(out, "%s\t%s %d rules in %s\n", name, fam.Name, w.N, w.Chain)
		}
	}
	return nil
}

// TUMDump is the file name of the real rule set the tum family loads.
const TUMDump = "tum-netintum-iptables-save-2016-06-27"

// Families returns every family, in the order of the reports; the tum
// family loads the file tum.
func Families(tum string) []Family {
	return []Family{
		{Name: "bpfilter", Desc: "-s X/32 -p udp --dport P -j DROP ×(N-1), then -p udp --dport 1500 -j DROP", gen: genBPFilter},
		{Name: "blocklist", Desc: "-s PREFIX -j DROP ×N, disjoint prefixes of mixed lengths", gen: genBlocklist},
		{Name: "allowlist", Desc: "tcp/udp port, range and multiport ACCEPTs, policy DROP", gen: genAllowlist},
		{Name: "mixed", Desc: "six rule shapes interleaved at random", gen: genMixed},
		{Name: "realistic", Desc: "ESTABLISHED,RELATED first, jumps to user chains (limit, REJECT), then service ACCEPTs, multiport, REJECTs, blocks, negations, tcp flags and icmp interleaved, policy DROP", gen: genRealistic},
		{Name: "tum", Desc: "the TUM chair's 5,556-rule dump (2016), FORWARD", Fixed: true, gen: func(int, *rand.Rand) (*Workload, error) { return loadTUM(tum) }},
	}
}

// LookupFamilies returns the families named, or all for nil.
func LookupFamilies(names []string, tum string) ([]Family, error) {
	all := Families(tum)
	if len(names) == 0 {
		return all, nil
	}
	var out []Family
	for _, n := range names {
		found := false
		for _, f := range all {
			if f.Name == n {
				out, found = append(out, f), true
			}
		}
		if !found {
			var known []string
			for _, f := range all {
				known = append(known, f.Name)
			}
			return nil, fmt.Errorf("unknown family %q (known: %s)", n, strings.Join(known, ", "))
		}
	}
	return out, nil
}

// Values no generated rule matches, which the measuring frames use.
var (
	probeSrc  = topology.SenderAddr                 // no rule's source prefix holds it
	probeDst  = netip.MustParseAddr("198.51.100.1") // no rule's destination prefix holds it
	lastSrc   = netip.MustParseAddr("203.0.113.9")  // only the mixed family's last rule
	lastPort  = uint16(1500)                        // only the last rule's port
	noPort    = uint16(1501)                        // no rule's port
	probePort = uint16(7)                           // no rule's port
	minPort   = 2000                                // rules use ports from here up
)

// ruleset is iptables-restore text being written.
type ruleset struct {
	buf   bytes.Buffer
	chain string
	n     int
}

func newRuleset(policy string) *ruleset {
	rs := &ruleset{chain: "FORWARD"}
	fmt.Fprintf(&rs.buf, "*filter\n:INPUT ACCEPT [0:0]\n:FORWARD %s [0:0]\n:OUTPUT ACCEPT [0:0]\n", policy)
	return rs
}

// add appends a rule to the chain.
func (rs *ruleset) add(format string, args ...any) {
	fmt.Fprintf(&rs.buf, "-A %s ", rs.chain)
	fmt.Fprintf(&rs.buf, format, args...)
	rs.buf.WriteByte('\n')
	rs.n++
}

func (rs *ruleset) workload() *Workload {
	rs.buf.WriteString("COMMIT\n")
	return &Workload{N: rs.n, Rules: rs.buf.Bytes(), Chain: rs.chain}
}

// addrs draws distinct IPv4 addresses from 1.0.0.0 to 126.255.255.255,
// away from every probe address.
type addrs struct {
	rng  *rand.Rand
	seen map[netip.Addr]bool
}

func (a *addrs) next() netip.Addr {
	for {
		ip := netip.AddrFrom4([4]byte{byte(1 + a.rng.IntN(126)), byte(a.rng.IntN(256)), byte(a.rng.IntN(256)), byte(a.rng.IntN(256))})
		if !a.seen[ip] {
			a.seen[ip] = true
			return ip
		}
	}
}

func port(rng *rand.Rand) uint16 { return uint16(minPort + rng.IntN(65536-minPort)) }

func genBPFilter(n int, rng *rand.Rand) (*Workload, error) {
	rs := newRuleset("ACCEPT")
	a := addrs{rng: rng, seen: make(map[netip.Addr]bool)}
	for range n - 1 {
		rs.add("-s %s/32 -p udp -m udp --dport %d -j DROP", a.next(), port(rng))
	}
	rs.add("-p udp -m udp --dport %d -j DROP", lastPort)
	w := rs.workload()
	w.NoMatch = udpFrame(probeSrc, probeDst, probePort, noPort)
	w.Last = udpFrame(probeSrc, probeDst, probePort, lastPort)
	w.Flood = w.Last
	return w, nil
}

// prefixes draws disjoint IPv4 prefixes from 1.0.0.0/8 to 126.0.0.0/8: half
// /32, a fifth /24, the rest /12 to /31.
type prefixes struct {
	rng     *rand.Rand
	used    map[netip.Prefix]bool
	covered map[netip.Prefix]bool // prefixes that hold a used one
}

const minPrefixBits = 12

func (p *prefixes) next() netip.Prefix {
	for {
		bits := 32
		switch r := p.rng.IntN(10); {
		case r < 5:
		case r < 7:
			bits = 24
		default:
			bits = minPrefixBits + p.rng.IntN(32-minPrefixBits)
		}
		ip := netip.AddrFrom4([4]byte{byte(1 + p.rng.IntN(126)), byte(p.rng.IntN(256)), byte(p.rng.IntN(256)), byte(p.rng.IntN(256))})
		pfx := netip.PrefixFrom(ip, bits).Masked()
		if p.covered[pfx] || p.used[pfx] || p.inUsed(ip, bits) {
			continue
		}
		p.used[pfx] = true
		for b := minPrefixBits; b < bits; b++ {
			p.covered[netip.PrefixFrom(ip, b).Masked()] = true
		}
		return pfx
	}
}

// inUsed reports whether a shorter used prefix holds ip.
func (p *prefixes) inUsed(ip netip.Addr, bits int) bool {
	for b := minPrefixBits; b < bits; b++ {
		if p.used[netip.PrefixFrom(ip, b).Masked()] {
			return true
		}
	}
	return false
}

// host returns an address in pfx, not its first.
func host(rng *rand.Rand, pfx netip.Prefix) netip.Addr {
	a := pfx.Addr().As4()
	free := 32 - pfx.Bits()
	if free == 0 {
		return pfx.Addr()
	}
	v := uint32(a[0])<<24 | uint32(a[1])<<16 | uint32(a[2])<<8 | uint32(a[3])
	v |= 1 + uint32(rng.Uint64N(uint64(1)<<free-1))
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
}

func genBlocklist(n int, rng *rand.Rand) (*Workload, error) {
	rs := newRuleset("ACCEPT")
	p := prefixes{rng: rng, used: make(map[netip.Prefix]bool), covered: make(map[netip.Prefix]bool)}
	var last netip.Prefix
	for range n {
		last = p.next()
		rs.add("-s %s -j DROP", last)
	}
	w := rs.workload()
	w.NoMatch = udpFrame(probeSrc, probeDst, probePort, noPort)
	w.Last = udpFrame(host(rng, last), probeDst, probePort, noPort)
	w.Flood = w.Last
	return w, nil
}

func genAllowlist(n int, rng *rand.Rand) (*Workload, error) {
	rs := newRuleset("DROP")
	protos := []string{"tcp", "udp"}
	for range n - 1 {
		proto := protos[rng.IntN(2)]
		switch r := rng.IntN(10); {
		case r < 7:
			rs.add("-p %s -m %s --dport %d -j ACCEPT", proto, proto, port(rng))
		case r < 9:
			lo := port(rng)
			hi := min(65535, int(lo)+1+rng.IntN(255))
			rs.add("-p %s -m %s --dport %d:%d -j ACCEPT", proto, proto, lo, hi)
		default:
			list := make([]string, 2+rng.IntN(4))
			for i := range list {
				list[i] = fmt.Sprint(port(rng))
			}
			rs.add("-p %s -m multiport --dports %s -j ACCEPT", proto, strings.Join(list, ","))
		}
	}
	rs.add("-p tcp -m tcp --dport %d -j ACCEPT", lastPort)
	w := rs.workload()
	w.NoMatch = tcpFrame(probeSrc, probeDst, probePort, noPort)
	w.Last = tcpFrame(probeSrc, probeDst, probePort, lastPort)
	w.Flood = w.NoMatch
	return w, nil
}

func genMixed(n int, rng *rand.Rand) (*Workload, error) {
	rs := newRuleset("ACCEPT")
	a := addrs{rng: rng, seen: make(map[netip.Addr]bool)}
	p := prefixes{rng: rng, used: make(map[netip.Prefix]bool), covered: make(map[netip.Prefix]bool)}
	for range n - 1 {
		switch rng.IntN(6) {
		case 0:
			rs.add("-s %s -j DROP", p.next())
		case 1:
			rs.add("-d %s -p tcp -m tcp --dport %d -j DROP", p.next(), port(rng))
		case 2:
			rs.add("-p udp -m udp --sport %d -j ACCEPT", port(rng))
		case 3:
			rs.add("-s %s/32 -d %s -j DROP", a.next(), netip.PrefixFrom(a.next(), 24).Masked())
		case 4:
			lo := port(rng)
			rs.add("-p tcp -m tcp --dport %d:%d --tcp-flags FIN,SYN,RST,ACK SYN -j DROP", lo, min(65535, int(lo)+rng.IntN(1000)))
		case 5:
			rs.add("-s %s -p icmp -m icmp --icmp-type 8 -j DROP", p.next())
		}
	}
	rs.add("-s %s/32 -p udp -m udp --dport %d -j DROP", lastSrc, lastPort)
	w := rs.workload()
	w.NoMatch = udpFrame(probeSrc, probeDst, probePort, noPort)
	w.Last = udpFrame(lastSrc, probeDst, probePort, lastPort)
	w.Flood = w.Last
	return w, nil
}

// genRealistic writes a router's FORWARD chain as people write them:
// conntrack first, a few jumps to user chains that rate-limit and REJECT,
// then the rules that grow with the rule set, interleaved. (It has no
// LOG rule: xdp cannot print a FORWARD line's OUT=.)
func genRealistic(n int, rng *rand.Rand) (*Workload, error) {
	rs := &ruleset{chain: "FORWARD"}
	rs.buf.WriteString("*filter\n:INPUT ACCEPT [0:0]\n:FORWARD DROP [0:0]\n:OUTPUT ACCEPT [0:0]\n:SSH - [0:0]\n:BLOCKED - [0:0]\n")
	a := addrs{rng: rng, seen: make(map[netip.Addr]bool)}
	p := prefixes{rng: rng, used: make(map[netip.Prefix]bool), covered: make(map[netip.Prefix]bool)}
	head := []string{
		"-m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT",
		"-p tcp -m tcp --tcp-flags FIN,SYN,RST,PSH,ACK,URG NONE -j DROP",
		"-p icmp -m icmp --icmp-type 8 -j ACCEPT",
		fmt.Sprintf("-i %s -p tcp -m tcp --dport 22 -j SSH", inIface),
		fmt.Sprintf("-s %s -j BLOCKED", p.next()),
	}
	if n == 1 {
		// ESTABLISHED,RELATED comes first at every size: one rule is that
		// rule alone, and the policy drops the frames.
		rs.add("%s", head[0])
		addChains(rs, nil)
		w := rs.workload()
		w.NoMatch = udpFrame(probeSrc, probeDst, probePort, noPort)
		w.Flood = w.NoMatch
		return w, nil
	}
	for _, r := range head[:min(n-1, len(head))] {
		rs.add("%s", r)
	}
	for i := len(head); i < n-1; i++ {
		switch r := rng.IntN(20); {
		case r < 7:
			rs.add("-d %s/32 -p tcp -m tcp --dport %d -j ACCEPT", a.next(), port(rng))
		case r < 9:
			rs.add("-d %s/32 -p udp -m multiport --dports %d,%d,%d -j ACCEPT", a.next(), port(rng), port(rng), port(rng))
		case r < 11:
			rs.add("-s %s -p tcp -j REJECT --reject-with tcp-reset", p.next())
		case r < 14:
			rs.add("-s %s -j DROP", p.next())
		case r < 15:
			rs.add("-s %s ! -d 10.0.0.0/8 -j DROP", p.next())
		case r < 16:
			rs.add("-d %s/32 -p tcp -m tcp --dport %d --tcp-flags SYN,RST SYN,RST -j DROP", a.next(), port(rng))
		case r < 17:
			rs.add("-s %s -p icmp -m icmp --icmp-type 13 -j DROP", p.next())
		default:
			rs.add("! -i %s -d %s/32 -p tcp -m tcp --dport %d -j ACCEPT", inIface, a.next(), port(rng))
		}
	}
	rs.add("-s %s/32 -p udp -m udp --dport %d -j DROP", lastSrc, lastPort)
	addChains(rs, &a)
	w := rs.workload()
	w.NoMatch = udpFrame(probeSrc, probeDst, probePort, noPort)
	w.Last = udpFrame(lastSrc, probeDst, probePort, lastPort)
	w.Flood = w.Last
	return w, nil
}

// anonymizedMAC is what the TUM dumps have instead of addresses, and
// iptables rejects.
const anonymizedMAC = "XX:XX:XX:XX:XX:XX"

// addChains appends the realistic family's user chains, SSH with eight
// hosts drawn from a (none when nil), and BLOCKED.
func addChains(rs *ruleset, a *addrs) {
	var ssh []string
	if a != nil {
		for range 8 {
			ssh = append(ssh, fmt.Sprintf("-s %s/32 -j ACCEPT", a.next()))
		}
	}
	// No LOG: xdp cannot print a FORWARD line's OUT=.
	for _, r := range append(ssh, "-m limit --limit 5/min -j RETURN", "-j REJECT --reject-with icmp-port-unreachable") {
		fmt.Fprintf(&rs.buf, "-A SSH %s\n", r)
	}
	rs.buf.WriteString("-A BLOCKED -p tcp -j REJECT --reject-with tcp-reset\n-A BLOCKED -j DROP\n")
}

// loadTUM loads the TUM dump; its frames are found by the caller, which
// knows the compiled rules (see aimFrames).
func loadTUM(path string) (*Workload, error) {
	src, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	src = bytes.ReplaceAll(src, []byte(anonymizedMAC), []byte("02:00:00:00:00:01"))
	n := 0
	for line := range bytes.Lines(src) {
		if bytes.HasPrefix(line, []byte("-A ")) {
			n++
		}
	}
	return &Workload{N: n, Rules: src, Chain: "FORWARD", Netfilter: true}, nil
}
