package difftest

import (
	"bytes"
	"fmt"
	"maps"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"

	"bpfwall/codegen"
	"bpfwall/internal/testenv"
	"bpfwall/model"
	"bpfwall/rules"
)

func requireNFT(t *testing.T) {
	t.Helper()
	testenv.RequireRoot(t)
	testenv.RequireTool(t, "ip", "nft")
}

// newNFTBench is a bench for nft cases: netfilter on a topology of its
// own, compared with ir.Eval and the compiled programs' test runs, and
// with ir.Eval on the rule set read back from the kernel (--from-kernel).
// Not attached: loader.NewMeta describes iptables rule sets only.
func newNFTBench(t *testing.T, opts TopologyOptions) *bench {
	t.Helper()
	topo := NewTopology(t, opts)
	return &bench{topo: topo, ref: Netfilter{Topo: topo}, others: []Source{
		Eval{}, TestRun{Opts: codegen.Options{Trace: true, Level: codegen.O0}}, TestRun{},
		TestRun{Opts: codegen.Options{Trace: true, ForceLookups: true}},
		FromKernel{Topo: topo, Inner: Eval{}},
	}}
}

// nftConntrack finds what makes the kernel run conntrack for a table
// (nf_ct_netns_get), reached or not: any ct expression, a nat chain.
// With conntrack running, nf_defrag holds fragments and only the first
// packet of a connection is NEW.
var nftConntrack = regexp.MustCompile(`(?m)^[^#\n]*(\bct\b|\btype nat\b)`)

// nftDefrag finds what turns nf_defrag on without conntrack: tproxy and
// socket expressions (nft_tproxy_init, nft_socket_init), reached or not.
// Defragmentation then holds a lone fragment.
var nftDefrag = regexp.MustCompile(`(?m)^[^#\n]*\b(tproxy|socket)\b`)

// nftCase builds a case of nft text, with conntrack NEW probes when the
// rules test the state, as the iptables cases do, and no fragments where
// the kernel defragments.
func nftCase(name string, fam rules.Family, text []byte, topo *Topology, seed uint64, n int) (*Case, error) {
	c, err := NewCase(CaseOptions{Name: name, Family: fam, Rules: text, NFT: true, InIface: topo.InIface, OutIface: topo.OutIface})
	if err != nil {
		return nil, err
	}
	if UsesConntrack(c.Program) || nftConntrack.Match(text) {
		c.CTState = model.ConnNew
		c.Probes = ProbesWhere(c, seed, n, func(f []byte) bool { return ConntrackNew(c, f) })
	} else if nftDefrag.Match(text) {
		c.Probes = ProbesWhere(c, seed, n, func(f []byte) bool {
			pkt, err := decode(c, f)
			return err == nil && pkt.FragOffset == 0 && !pkt.MoreFragments
		})
	} else {
		c.Probes = Probes(c, seed, n)
	}
	return c, nil
}

// TestRandomNFT loads random nft rule sets (GenerateNFT) into the
// firewall with nft -f and compares what it delivers with ir.Eval of the
// same text through parser/nft, and with the compiled programs where the
// xdp hook can compile them (even seeds leave out what it cannot).
// DIFFTEST_SEEDS rule sets per family
// (default 4, make difftest runs more), DIFFTEST_PROBES probes each
// (default 300), from DIFFTEST_SEED0.
func TestRandomNFT(t *testing.T) {
	requireNFT(t)
	seeds := envInt(t, "DIFFTEST_SEEDS", 4)
	probes := envInt(t, "DIFFTEST_PROBES", 300)
	seed0 := uint64(envInt(t, "DIFFTEST_SEED0", 1))
	b := newNFTBench(t, TopologyOptions{})
	var totals []Totals
	var cover Coverage
	refused := 0
	for _, fam := range []rules.Family{rules.IPv4, rules.IPv6} {
		for seed := seed0; seed < seed0+uint64(seeds); seed++ {
			text := GenerateNFT(seed, GenOptions{Family: fam, InIface: b.topo.InIface, OutIface: b.topo.OutIface, XDP: seed%2 == 0})
			name := fmt.Sprintf("nft-%s-seed-%d", fam, seed)
			c, err := nftCase(name, fam, text, b.topo, seed, probes)
			if err != nil {
				// What nft refuses too is the generator's fault; what
				// only bpfwall refuses is a bug.
				if kerr := b.topo.LoadNFT(fam, text); kerr == nil {
					t.Errorf("%s: nft accepts what bpfwall refuses: %v\n%s", name, err, text)
				}
				refused++
				continue
			}
			if tot := check(t, c, b.ref, b.others...); tot != nil {
				totals = addTotals(totals, tot)
			}
			cover.Add(MeasureCoverage(c, c.Probes))
		}
	}
	logTotals(t, "random nft", totals)
	t.Logf("difftest random nft: %d rule sets refused by nft and bpfwall alike", refused)
	t.Logf("coverage: %s", cover)
	if len(totals) == 0 || totals[0].Cases == 0 {
		t.Fatal("no random nft rule set was run")
	}
	for _, tot := range totals {
		if tot.Chain < tot.Probes/4 {
			t.Errorf("%s: only %d of %d probes reached the forward hook", tot.Source, tot.Chain, tot.Probes)
		}
	}
}

// TestGenerateNFT: a seed always gives the same script, different seeds
// differ, and bpfwall reads nearly all of them for both families (nft
// itself is asked in TestRandomNFT).
func TestGenerateNFT(t *testing.T) {
	opts := GenOptions{Family: rules.IPv4, InIface: "fwin", OutIface: "fwout"}
	a, b, c := GenerateNFT(7, opts), GenerateNFT(7, opts), GenerateNFT(8, opts)
	if !bytes.Equal(a, b) {
		t.Errorf("seed 7 gave two scripts:\n%s\n%s", a, b)
	}
	if bytes.Equal(a, c) {
		t.Errorf("seeds 7 and 8 gave the same script:\n%s", a)
	}
	const n = 200
	for _, fam := range []rules.Family{rules.IPv4, rules.IPv6} {
		bad := 0
		for seed := uint64(1); seed <= n; seed++ {
			opts.Family = fam
			text := GenerateNFT(seed, opts)
			if _, err := NewCase(CaseOptions{Name: "gen", Family: fam, Rules: text, NFT: true}); err != nil {
				if bad++; bad <= 3 {
					t.Logf("%s seed %d: %v\n%s", fam, seed, err, text)
				}
			}
		}
		if bad > n/20 {
			t.Errorf("%s: bpfwall refuses %d of %d generated scripts", fam, bad, n)
		}
	}
}

// fragment returns a non-first fragment (offset 16 bytes) from the sender
// to beyond the firewall, of UDP data that starts with ports 22 and dport.
// In IPv6 the flow label is dport: the IPv6 header's bytes 2 and 3.
func fragment(t *testing.T, fam rules.Family, dport uint16, flowLabel uint32) []byte {
	t.Helper()
	data := gopacket.Payload(append([]byte{0, 22, byte(dport >> 8), byte(dport)}, make([]byte, 20)...))
	eth := &layers.Ethernet{SrcMAC: senderMAC, DstMAC: fwInMAC}
	var ls []gopacket.SerializableLayer
	if fam == rules.IPv4 {
		eth.EthernetType = layers.EthernetTypeIPv4
		ip := &layers.IPv4{Version: 4, IHL: 5, TTL: 64, Protocol: layers.IPProtocolUDP, FragOffset: 2,
			SrcIP: net.IP{203, 0, 113, 5}, DstIP: net.IP{198, 51, 100, 7}}
		ls = []gopacket.SerializableLayer{eth, ip, data}
	} else {
		eth.EthernetType = layers.EthernetTypeIPv6
		ip := &layers.IPv6{Version: 6, HopLimit: 64, NextHeader: layers.IPProtocolIPv6Fragment, FlowLabel: flowLabel,
			SrcIP: net.ParseIP("2001:db8:1::5"), DstIP: net.ParseIP("2001:db8:2::7")}
		frag := &layers.IPv6Fragment{NextHeader: layers.IPProtocolUDP, FragmentOffset: 2, Identification: 7}
		ls = []gopacket.SerializableLayer{eth, ip, frag, data}
	}
	buf := gopacket.NewSerializeBuffer()
	if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true}, ls...); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// truncated returns a datagram from the sender to beyond the firewall of
// protocol proto whose transport header is its first n bytes: 0, 22,
// then zeros. nft's loads of a field past them fail and the rule does not
// match.
func truncated(t *testing.T, fam rules.Family, proto layers.IPProtocol, n int) []byte {
	t.Helper()
	data := gopacket.Payload(append([]byte{0, 22}, make([]byte, 20)...)[:n])
	eth := &layers.Ethernet{SrcMAC: senderMAC, DstMAC: fwInMAC}
	var ip gopacket.SerializableLayer
	if fam == rules.IPv4 {
		eth.EthernetType = layers.EthernetTypeIPv4
		ip = &layers.IPv4{Version: 4, IHL: 5, TTL: 64, Protocol: proto, SrcIP: net.IP{203, 0, 113, 5}, DstIP: net.IP{198, 51, 100, 7}}
	} else {
		eth.EthernetType = layers.EthernetTypeIPv6
		ip = &layers.IPv6{Version: 6, HopLimit: 64, NextHeader: proto, SrcIP: net.ParseIP("2001:db8:1::5"), DstIP: net.ParseIP("2001:db8:2::7")}
	}
	buf := gopacket.NewSerializeBuffer()
	if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true}, eth, ip, data); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// TestFragmentsNFT: nft's transport loads match non-first fragments, as
// xtables' matches never do. nft_payload_fast_eval reads the fragment's
// data as the transport header in IPv4, and in IPv6 the IPv6 header
// itself (ipv6_find_hdr leaves nft's transport offset at 0).
func TestFragmentsNFT(t *testing.T) {
	requireNFT(t)
	b := newNFTBench(t, TopologyOptions{})
	for _, tc := range []struct {
		fam   rules.Family
		probe []byte
		want  bool // delivered
	}{
		{rules.IPv4, fragment(t, rules.IPv4, 53, 0), false},
		{rules.IPv4, fragment(t, rules.IPv4, 54, 0), true},
		{rules.IPv6, fragment(t, rules.IPv6, 54, 53), false},
		{rules.IPv6, fragment(t, rules.IPv6, 53, 54), true},
	} {
		text := []byte("add table inet bw\nadd chain inet bw fwchain { type filter hook forward priority 0; policy accept; }\nadd rule inet bw fwchain udp dport 53 drop\n")
		c, err := NewCase(CaseOptions{Name: "fragments", Family: tc.fam, Rules: text, NFT: true, InIface: b.topo.InIface, OutIface: b.topo.OutIface})
		if err != nil {
			t.Fatal(err)
		}
		c.Probes = [][]byte{tc.probe}
		got, err := b.ref.Outcomes(c)
		if err != nil {
			t.Fatal(err)
		}
		if got[0].Delivered != tc.want {
			t.Errorf("%s fragment %s: netfilter delivered %v, want %v", tc.fam, Summary(c, tc.probe), got[0].Delivered, tc.want)
		}
		check(t, c, b.ref, b.others...)
	}
}

// hookSwap exchanges the input and forward hooks of nft text, so that the
// probes, which cross the forward hook, meet the input chains.
var hookSwap = regexp.MustCompile(`\bhook(\s+)(input|forward)\b`)

func asForwardNFT(text []byte, hook string) []byte {
	if hook == "forward" {
		return text
	}
	return hookSwap.ReplaceAllFunc(text, func(m []byte) []byte {
		if bytes.HasSuffix(m, []byte("input")) {
			return []byte("hook forward")
		}
		return []byte("hook input")
	})
}

// TestRealNFT loads the forward and input base chains (the latter moved
// to the forward hook) of every nft-real and nft-dumps file that lowers into the
// firewall with nft -f, for each family, with the firewall's interfaces
// named as the rules expect, and compares netfilter with ir.Eval.
// Files with chains on other hooks the probes cross (prerouting,
// postrouting, ingress: nat, mangle) are left out; the model lowers one
// hook. DIFFTEST_PROBES sets the probes per case (default 300).
func TestRealNFT(t *testing.T) {
	requireNFT(t)
	dir := filepath.Dir(testenv.Corpus(t, "nft-real"))
	var files []string
	for _, sub := range []string{"nft-real", "nft-dumps"} {
		err := filepath.WalkDir(filepath.Join(dir, sub), func(p string, d os.DirEntry, err error) error {
			if err == nil && !d.IsDir() && strings.HasSuffix(p, ".nft") {
				files = append(files, p)
			}
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	probes := envInt(t, "DIFFTEST_PROBES", 300)
	benches := map[dumpCase]*bench{}
	parent := t
	var totals []Totals
	skipped := map[string]int{}
	for _, f := range files {
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		base := strings.TrimPrefix(f, dir+"/")
		for _, fam := range []rules.Family{rules.IPv4, rules.IPv6} {
			for _, hook := range []string{"forward", "input"} {
				text := asForwardNFT(src, hook)
				probe, err := NewCase(CaseOptions{Name: f, Family: fam, Rules: text, NFT: true})
				switch {
				case err != nil:
					skipped["does not lower: "+firstLine(err)]++
					continue
				case probe.Ruleset.Table("mangle") != nil || probe.Ruleset.Table("netdev") != nil:
					skipped["chains on other hooks"]++
					continue
				case len(probe.Program.Rules) == 0:
					continue // nothing on the hook for this family
				}
				for _, dc := range dumpCases(probe.Program, "FORWARD") {
					name := fmt.Sprintf("%s/%s/%s/%s-%s", base, fam, hook, dc.inIface, dc.outIface)
					t.Run(name, func(t *testing.T) {
						key := dumpCase{inIface: dc.inIface, outIface: dc.outIface}
						if benches[key] == nil {
							benches[key] = newNFTBench(parent, TopologyOptions{InIface: dc.inIface, OutIface: dc.outIface})
						}
						b := benches[key]
						if err := b.topo.LoadNFT(fam, text); err != nil {
							t.Skipf("nft -f refuses the file here: %v", firstLine(err))
						}
						c, err := nftCase(name, fam, text, b.topo, 1, probes)
						if err != nil {
							t.Fatal(err)
						}
						tot := check(t, c, b.ref, b.others...)
						if tot != nil {
							totals = addTotals(totals, tot)
						}
						logTotals(t, name, tot)
					})
				}
			}
		}
	}
	logTotals(t, "nft-real and nft-dumps", totals)
	for _, k := range slices.Sorted(maps.Keys(skipped)) {
		t.Logf("skipped %d cases: %s", skipped[k], k)
	}
	if len(totals) == 0 || totals[0].Cases == 0 {
		t.Fatal("no nft-real or nft-dumps file was run")
	}
}

// TestConstructsNFT compares netfilter with the model and the programs
// on single nft rules the issues found wrong. A set with no element
// matches no packet, and "!=" one every packet whose keys nft can load,
// concatenations too: a transport key restricts the rule to its
// protocol, a network key to its family. "tcp flags ! a,b" is how nft
// lists --tcp-flags A,B NONE. nft takes ct states as numbers of the
// kernel's bits, and MAC octets of one digit. meta length is what -m
// length tests at the IP hooks. "ip saddr & MASK == VALUE" is -s with a
// mask that need not be a prefix. A map is a set of its keys. "ip
// frag-off & 0x1fff != 0" is how iptables-translate writes -f. "th
// dport" (and its raw form @th,16,16) is the port of the protocol an
// earlier term makes the rule's;
// "icmp code" without a type tests the code of every type. A
// concatenation's elements may overlap.
func TestConstructsNFT(t *testing.T) {
	requireNFT(t)
	b := newNFTBench(t, TopologyOptions{})
	const head = "add table inet bw\n" +
		"add set inet bw pair { type ipv4_addr . ipv4_addr; }\n" +
		"add set inet bw svc { type ipv4_addr . inet_service; }\n" +
		"add set inet bw svc6 { type ipv6_addr . inet_service; }\n" +
		"add set inet bw port { type inet_service; }\n" +
		"add set inet bw addr { type ipv4_addr; }\n" +
		"add map inet bw vm { type ipv4_addr : verdict; elements = { 10.0.0.1 : drop, 10.0.2.2 : accept } }\n" +
		"add map inet bw pm { type inet_service : ipv4_addr; elements = { 80 : 10.0.0.1, 443 : 10.0.0.2 } }\n" +
		"add set inet bw ca { type ipv4_addr; elements = { 10.0.0.1, * } }\n" +
		"add set inet bw caport { type inet_service; elements = { 22, * } }\n" +
		"add set inet bw cacat { type ipv4_addr . inet_service; elements = { 10.0.0.1 . 22, * } }\n" +
		"add map inet bw cavm { type ipv4_addr : verdict; elements = { 10.0.2.2 : accept, * : drop } }\n" +
		"add set inet bw camark { type mark; elements = { 0x1, * } }\n" +
		"add chain inet bw fwchain { type filter hook forward priority 0; policy accept; }\n"
	for _, rule := range []string{
		"ip saddr . ip daddr @pair drop",
		"ip saddr . tcp dport @svc drop",
		"ip saddr . tcp dport != @svc drop",
		"ip6 saddr . udp dport != @svc6 drop",
		"ip saddr . ip daddr != @pair drop",
		"tcp dport != @port drop",
		"udp dport @port drop",
		"ip saddr != @addr drop",
		"tcp flags ! syn,rst drop",
		"tcp flags ! fin drop",
		"ct state 8 drop",
		"ether saddr 0:1:2:3:4:5 drop",
		"meta length 60-100 drop",
		"meta length < 80 drop",
		"ip saddr & 255.0.255.0 == 10.0.2.0 drop",
		"ip daddr & 255.255.0.255 != 10.0.0.2 drop",
		"ip6 saddr & ffff::ffff == 2001::1 drop",
		"ip saddr @vm drop",
		"tcp dport @pm drop",
		"ip frag-off & 0x1fff != 0 drop",
		"ip frag-off & 0x1fff == 0 drop",
		"ct state == 6 drop",
		"ct state != 6 drop",
		"tcp dport vmap { 1-100 : drop, 101-200 : accept }",
		"meta l4proto != { tcp, udp } drop",
		"ip protocol != { tcp, icmp, 47 } drop",
		"meta l4proto != tcp meta l4proto != udp drop",
		"ip6 saddr != 2001:db8::/32 meta l4proto != { udp, ipv6-icmp } drop",
		"tcp dport 0-65535 drop",
		"udp sport 0-65535 drop",
		"udp sport 22 drop",
		"tcp sport != 22 drop",
		// catch-all elements: every key is in the set
		"ip saddr @ca drop",
		"ip saddr != @ca drop",
		"tcp dport @caport drop",
		"udp dport != @caport drop",
		"ip saddr . tcp dport @cacat drop",
		"ip saddr vmap { 10.0.0.1 : accept, * : drop }",
		"tcp dport vmap { 22 : accept, 1-10 : drop, * : drop }",
		"udp dport vmap { * : drop }",
		"ip saddr vmap @cavm",
		"meta mark @camark drop",
		"meta mark != @camark drop",
		// th: the ports of whichever protocol an earlier term admits
		"meta l4proto { tcp, udp } th dport 53 drop",
		"meta l4proto { tcp, udp, sctp } th sport != 22 drop",
		"meta l4proto udp th dport { 1-100, 200 } drop",
		"ip protocol . th dport { tcp . 22, udp . 67 } drop",
		"meta l4proto . th dport vmap { tcp . 22 : drop, udp . 53 : accept }",
		"meta l4proto { tcp, udp } @th,16,16 53 drop",
		"meta l4proto tcp @th,0,16 { 1-10, 22 } drop",
		// overlapping elements: iptables-translate's --ports 10, and a
		// host within a network
		"tcp sport . tcp dport { 0-65535 . 10, 10 . 0-65535 } drop",
		"ip saddr . udp dport { 10.0.0.0/8 . 53, 10.0.0.1 . 50-60 } drop",
		// icmp codes without a type, negated, as sets and ranges
		"icmp code 3 drop",
		"icmp code != 0 drop",
		"icmp code { 1, 3-4, 2 } drop",
		"icmp type 3 icmp code != 1 drop",
		"icmp type { echo-request, 11 } icmp code 0-1 drop",
		"icmpv6 code 0 drop",
		"icmpv6 code != { 0, 4 } drop",
	} {
		for _, fam := range []rules.Family{rules.IPv4, rules.IPv6} {
			text := []byte(head + "add rule inet bw fwchain " + rule + "\n")
			if err := b.topo.LoadNFT(fam, text); err != nil {
				t.Fatalf("nft -f: %v", err)
			}
			c, err := nftCase(rule, fam, text, b.topo, 1, 200)
			if err != nil {
				t.Fatalf("%s: %v", rule, err)
			}
			if !nftConntrack.Match(text) {
				// Non-first fragments, which frag-off tells apart (with
				// conntrack the kernel holds them for reassembly).
				c.Probes = append(c.Probes, fragment(t, fam, 53, 0), fragment(t, fam, 54, 53))
			}
			if !nftConntrack.Match(text) {
				// Transport headers too short for the ports. (Conntrack
				// finds no tuple in them: INVALID, where the probes of
				// a rule that tests the state are all NEW.)
				for _, proto := range []layers.IPProtocol{layers.IPProtocolTCP, layers.IPProtocolUDP} {
					for _, n := range []int{0, 2, 3} {
						c.Probes = append(c.Probes, truncated(t, fam, proto, n))
					}
				}
			}
			logTotals(t, fmt.Sprintf("%s (%s)", rule, fam), check(t, c, b.ref, b.others...))
		}
	}
}
