package difftest

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"bpfwall/rules"
)

// GenerateNFT returns a random nft -f script, the same for the same seed:
// an inet table (or the family's own ip or ip6 table) with a base chain on
// the forward hook, with either policy, sometimes a second one at a later
// priority, and up to three regular chains reached by jumps and gotos. The
// rules combine the constructs parser/nft supports: addresses, prefixes,
// ranges, anonymous and named sets; ports, port ranges, sets and
// comparisons; protocols; ICMP types and codes; TCP flags in every form;
// interface names and wildcards; TTL or hop limit, length, mark, packet
// type, MAC address and conntrack state; iif and oif; concatenations of
// address and port in anonymous and named sets and verdict maps; log;
// verdict maps and every verdict; empty sets, concatenations and verdict
// maps, a data map looked up as a set, negated protocol sets and meta
// length.
// In an inet table some rules test the other family, which its packets
// never match. opts.XDP leaves out what the xdp hook cannot compile, as
// GenerateRules does: oifname, meta mark and pkttype, ct state, and reject
// (drop instead).
func GenerateNFT(seed uint64, opts GenOptions) []byte {
	g := &nftGen{ruleGen: ruleGen{rng: rand.New(rand.NewPCG(seed, 0x6e66746e6674)), extra: rand.New(rand.NewPCG(seed, 0x6e6578747261)), GenOptions: opts}}
	g.ct = seed%2 == 0 // from the seed: the random stream stays as it was
	for range 1 + g.rng.IntN(3) {
		g.bases = append(g.bases, g.randomAddr())
	}
	g.ports = []uint16{0, 1, 22, 53, 80, 443, 1023, 1024, 65534, 65535}
	for range 4 {
		g.ports = append(g.ports, uint16(g.rng.IntN(65536)))
	}
	g.tfam = "inet"
	if g.chance(3) {
		g.tfam = "ip"
		if opts.Family == rules.IPv6 {
			g.tfam = "ip6"
		}
	}
	g.table = g.tfam + " bw"
	var b strings.Builder
	w := func(format string, args ...any) { fmt.Fprintf(&b, format+"\n", args...) }
	w("add table %s", g.table)
	bases := []string{"fwchain"}
	w("add chain %s fwchain { type filter hook forward priority 0; policy %s; }", g.table, g.oneOf("accept", "drop"))
	if g.chance(4) {
		bases = append(bases, "fwchain2")
		w("add chain %s fwchain2 { type filter hook forward priority %d; policy %s; }", g.table, 1+g.rng.IntN(20), g.oneOf("accept", "drop"))
	}
	g.users = g.rng.IntN(4)
	for i := range g.users {
		w("add chain %s uc%d", g.table, i)
	}
	for i := range 1 + g.rng.IntN(2) {
		g.sets = append(g.sets, fmt.Sprintf("s%d", i))
		typ := "ipv4_addr"
		if opts.Family == rules.IPv6 {
			typ = "ipv6_addr"
		}
		w("add set %s s%d { type %s; flags interval; elements = { %s }; }", g.table, i, typ, g.addrElems(1+g.rng.IntN(4)))
	}
	if g.chance(2) {
		g.csets = append(g.csets, "cs0")
		typ := "ipv4_addr"
		if opts.Family == rules.IPv6 {
			typ = "ipv6_addr"
		}
		w("add set %s cs0 { type %s . inet_service; flags interval; elements = { %s }; }", g.table, typ, strings.Join(g.concatElems(opts.Family, 1+g.rng.IntN(4), false), ", "))
	}
	// Empty sets and maps, a data map looked up as a set, negated
	// protocol sets, meta length: drawn from a stream of their own, so
	// that the rest of a seed's rule set stays as it was, and written at
	// the end of the first base chain, where they judge what the rules
	// before them leave.
	x := rand.New(rand.NewPCG(seed, 0x656d707479))
	var tail []string
	if x.IntN(2) == 0 {
		ip, addr := "ip", "ipv4_addr"
		if opts.Family == rules.IPv6 {
			ip, addr = "ip6", "ipv6_addr"
		}
		w("add set %s e0 { type %s; }", g.table, addr)
		w("add set %s ce0 { type %s . inet_service; }", g.table, addr)
		w("add map %s ev0 { type inet_service : verdict; }", g.table)
		w("add map %s dm0 { type %s : mark; elements = { %s : 0x1 }; }", g.table, addr, g.bases[0])
		verdict := func() string { return []string{"drop", "accept"}[x.IntN(2)] }
		for range 1 + x.IntN(3) {
			tail = append(tail, []string{
				ip + " saddr @e0 drop",
				ip + " daddr != @e0 counter",
				ip + " saddr . tcp dport @ce0 drop",
				ip + " saddr . udp dport != @ce0 " + verdict(),
				"tcp dport vmap @ev0",
				ip + " saddr @dm0 " + verdict(),
				"meta l4proto != { tcp, udp } " + verdict(),
				ip + " daddr != @dm0 meta l4proto != { icmp, ipv6-icmp, tcp } drop",
			}[x.IntN(8)])
		}
		if !g.ct && x.IntN(2) == 0 {
			tail = append(tail, fmt.Sprintf("meta length %d-%d drop", 40+x.IntN(40), 80+x.IntN(60)))
		}
	}
	// Catch-all elements, from a stream of their own too.
	y := rand.New(rand.NewPCG(seed, 0x6361746368))
	if y.IntN(3) == 0 {
		ip, addr := "ip", "ipv4_addr"
		if opts.Family == rules.IPv6 {
			ip, addr = "ip6", "ipv6_addr"
		}
		port := func() int { return []int{22, 53, 80, 443}[y.IntN(4)] }
		w("add set %s ca0 { type %s; flags interval; elements = { %s, * }; }", g.table, addr, g.addrElem(opts.Family))
		w("add set %s cap0 { type inet_service; elements = { %d, * }; }", g.table, port())
		w("add map %s cav0 { type inet_service : verdict; elements = { %d : accept, * : drop }; }", g.table, port())
		for range 1 + y.IntN(2) {
			tail = append(tail, []string{
				ip + " saddr != @ca0 drop",
				ip + " daddr @ca0 counter",
				"udp dport != @cap0 drop",
				fmt.Sprintf("tcp dport vmap { %d : drop, * : continue }", port()),
				fmt.Sprintf("%s saddr vmap { %s : drop, * : continue }", ip, g.addrElem(opts.Family)),
				"tcp dport @cap0 " + []string{"accept", "drop"}[y.IntN(2)],
				"udp dport vmap @cav0",
			}[y.IntN(7)])
		}
	}
	for _, c := range bases {
		for range 2 + g.rng.IntN(9) {
			w("add rule %s %s %s", g.table, c, g.rule(-1))
		}
		for _, r := range tail {
			w("add rule %s %s %s", g.table, c, r)
		}
		tail = nil
	}
	for i := range g.users {
		for range 1 + g.rng.IntN(6) {
			w("add rule %s uc%d %s", g.table, i, g.rule(i))
		}
	}
	return []byte(b.String())
}

type nftGen struct {
	ruleGen
	tfam, table string
	users       int
	sets        []string
	csets       []string // sets of address . port
	// ct: the rule set may test the conntrack state, and so has no length
	// match (see the length rule in rule).
	ct bool
}

// concatElems returns n elements "address . port" of family f, addresses
// or prefixes and ports or ranges, no two of which overlap unless asked
// (nft refuses overlapping elements in a named set or a map, not in an
// anonymous set). An overlapping element is a host of an earlier one's
// network.
func (g *nftGen) concatElems(f rules.Family, n int, overlap bool) []string {
	type span struct {
		alo, ahi netip.Addr
		plo, phi uint16
	}
	var out []string
	var taken []span
	for range 4 * n {
		if len(out) == n {
			break
		}
		a := g.addrIn(f).String()
		if g.chance(3) {
			a = netip.PrefixFrom(g.addrIn(f), f.Bits()/2+g.rng.IntN(f.Bits()/2+1)).Masked().String()
		}
		plo := g.port()
		phi := plo
		if g.chance(3) {
			phi = uint16(min(int(plo)+g.rng.IntN(100), 65535))
		}
		pt := fmt.Sprint(plo)
		if phi != plo {
			pt = fmt.Sprintf("%d-%d", plo, phi)
		}
		if overlap && len(out) > 0 {
			// A host of an earlier element's addresses with ports around
			// the earlier one's: they share packets, and neither end of
			// the new element lies in the old one, which the kernel's
			// concatenated interval sets refuse (nft_pipapo_insert).
			pa, pp, _ := strings.Cut(out[g.rng.IntN(len(out))], " . ")
			lo, hi := elemRange(pa)
			a = g.oneOf(lo.String(), hi.String())
			first, last, ok := strings.Cut(pp, "-")
			if !ok {
				last = first
			}
			p1, _ := strconv.Atoi(first)
			p2, _ := strconv.Atoi(last)
			if p1 == 0 || p2 == 65535 {
				continue
			}
			plo, phi = uint16(max(p1-1-g.rng.IntN(50), 0)), uint16(min(p2+1+g.rng.IntN(50), 65535))
			pt = fmt.Sprintf("%d-%d", plo, phi)
			h := netip.MustParseAddr(a)
			if slices.ContainsFunc(taken, func(t span) bool {
				in := func(p uint16) bool { return !h.Less(t.alo) && !t.ahi.Less(h) && t.plo <= p && p <= t.phi }
				return in(plo) || in(phi)
			}) {
				continue
			}
		}
		alo, ahi := elemRange(a)
		if !overlap && slices.ContainsFunc(taken, func(t span) bool {
			return !ahi.Less(t.alo) && !t.ahi.Less(alo) && plo <= t.phi && t.plo <= phi
		}) {
			continue
		}
		taken = append(taken, span{alo, ahi, plo, phi})
		out = append(out, a+" . "+pt)
	}
	return out
}

// fam picks the family a rule's network-header matches are for: mostly
// the case's, in an inet table sometimes the other. One rule sticks to one
// family, since nft refuses "ip6 saddr ... ip daddr ..." (conflicting
// protocols).
func (g *nftGen) fam() rules.Family {
	if g.tfam == "inet" && g.chance(8) {
		if g.Family == rules.IPv4 {
			return rules.IPv6
		}
		return rules.IPv4
	}
	return g.Family
}

func (g *nftGen) neq() string {
	if g.chance(4) {
		return "!= "
	}
	return ""
}

// addrIn returns an address of family f: near the bases for the case's
// family, anywhere for the other.
func (g *nftGen) addrIn(f rules.Family) netip.Addr {
	if f == g.Family {
		return g.addr()
	}
	o := ruleGen{rng: g.rng, GenOptions: GenOptions{Family: f}}
	return o.randomAddr()
}

func (g *nftGen) addrElem(f rules.Family) string {
	a, c := g.addrIn(f), g.addrIn(f)
	switch g.rng.IntN(3) {
	case 0:
		return a.String()
	case 1:
		return netip.PrefixFrom(a, g.rng.IntN(f.Bits()+1)).Masked().String()
	}
	if c.Less(a) {
		a, c = c, a
	}
	return fmt.Sprintf("%s-%s", a, c)
}

// addrElems is a set of n disjoint addresses, prefixes and ranges of the
// case's family: nft refuses overlapping intervals in a set.
func (g *nftGen) addrElems(n int) string {
	var elems []string
	var taken [][2]netip.Addr
	for range 4 * n {
		if len(elems) == n {
			break
		}
		e := g.addrElem(g.Family)
		lo, hi := elemRange(e)
		overlaps := false
		for _, t := range taken {
			if !hi.Less(t[0]) && !t[1].Less(lo) {
				overlaps = true
			}
		}
		if !overlaps {
			elems = append(elems, e)
			taken = append(taken, [2]netip.Addr{lo, hi})
		}
	}
	return strings.Join(elems, ", ")
}

// elemRange returns the first and last address of an address set element.
func elemRange(e string) (netip.Addr, netip.Addr) {
	if lo, hi, ok := strings.Cut(e, "-"); ok {
		return netip.MustParseAddr(lo), netip.MustParseAddr(hi)
	}
	if p, err := netip.ParsePrefix(e); err == nil {
		return prefixBounds(p)
	}
	a := netip.MustParseAddr(e)
	return a, a
}

func prefixBounds(p netip.Prefix) (netip.Addr, netip.Addr) {
	b := p.Masked().Addr().AsSlice()
	for i := p.Bits(); i < len(b)*8; i++ {
		b[i/8] |= 0x80 >> (i % 8)
	}
	hi, _ := netip.AddrFromSlice(b)
	return p.Masked().Addr(), hi
}

func (g *nftGen) addrMatch(f rules.Family, dir string) string {
	key := "ip " + dir
	if f == rules.IPv6 {
		key = "ip6 " + dir
	}
	switch {
	case f == g.Family && len(g.sets) > 0 && g.chance(5):
		return fmt.Sprintf(" %s %s@%s", key, g.neq(), g.sets[g.rng.IntN(len(g.sets))])
	case f == g.Family && g.chance(4):
		return fmt.Sprintf(" %s %s{ %s }", key, g.neq(), g.addrElems(1+g.rng.IntN(4)))
	}
	return fmt.Sprintf(" %s %s%s", key, g.neq(), g.addrElem(f))
}

// maskedAddr is "ip saddr & MASK == VALUE" (or !=), VALUE an address of
// the case masked, MASK often not a prefix: OpenWrt's fw4 writes a
// zone's subnet-mask matches so, beside other tests of the address.
func (g *nftGen) maskedAddr(f rules.Family, dir string) string {
	key := "ip " + dir
	masks := []string{"255.255.0.255", "0.0.0.255", "255.255.255.0", "255.0.255.0"}
	if f == rules.IPv6 {
		key = "ip6 " + dir
		masks = []string{"::ffff", "ffff::ffff", "ffff:ffff::", "::ff:0:ffff"}
	}
	m := netip.MustParseAddr(masks[g.rng.IntN(len(masks))])
	a, mb := g.addrIn(f).AsSlice(), m.AsSlice()
	for i := range a {
		a[i] &= mb[i]
	}
	v, _ := netip.AddrFromSlice(a)
	return fmt.Sprintf(" %s & %s %s %s", key, m, g.oneOf("==", "!="), v)
}

func (g *nftGen) ifaceMatch(key, name string) string {
	quote := func() string {
		n := g.iface(name)
		if strings.HasSuffix(n, "+") {
			n = strings.TrimSuffix(n, "+") + "*"
		}
		if n == "*" {
			n = name[:1] + "*"
		}
		return `"` + n + `"`
	}
	if g.chance(4) {
		a, b := quote(), quote()
		if g.chance(2) && a != b {
			// None of them: overlapping wildcards are fine here.
			return fmt.Sprintf(" %s != { %s, %s }", key, a, b)
		}
		if a == b || strings.HasSuffix(a, `*"`) || strings.HasSuffix(b, `*"`) {
			return fmt.Sprintf(" %s %s", key, a)
		}
		return fmt.Sprintf(" %s { %s, %s }", key, a, b)
	}
	return fmt.Sprintf(" %s %s%s", key, g.neq(), quote())
}

func (g *nftGen) portExpr() string {
	p := func() string {
		a, b := g.port(), g.port()
		if g.chance(2) {
			return fmt.Sprint(a)
		}
		return fmt.Sprintf("%d-%d", min(a, b), max(a, b))
	}
	switch g.rng.IntN(6) {
	case 0:
		return fmt.Sprintf("%s %d", g.oneOf("<", ">", "<=", ">="), g.port())
	case 1:
		// Elements of an interval set may not overlap.
		seen := map[uint16]bool{}
		var elems []string
		for range 1 + g.rng.IntN(4) {
			if q := g.port(); !seen[q] {
				seen[q] = true
				elems = append(elems, fmt.Sprint(q))
			}
		}
		return fmt.Sprintf("%s{ %s }", g.neq(), strings.Join(elems, ", "))
	}
	return g.neq() + p()
}

var nftTCPFlags = []string{"fin", "syn", "rst", "psh", "ack", "urg", "ecn", "cwr"}

func (g *nftGen) flagSet() []string {
	var s []string
	for _, f := range nftTCPFlags {
		if g.chance(3) {
			s = append(s, f)
		}
	}
	if len(s) == 0 {
		s = []string{g.oneOf(nftTCPFlags...)}
	}
	return s
}

func (g *nftGen) tcpFlags() string {
	switch g.rng.IntN(6) {
	case 0:
		return " tcp flags " + strings.Join(g.flagSet(), ",")
	case 1:
		return fmt.Sprintf(" tcp flags & (%s) %s%s", strings.Join(g.flagSet(), "|"), g.oneOf("== ", "!= "), strings.Join(g.flagSet(), "|"))
	case 2:
		// nft 1.0 wants a list of two flags or more after the slash.
		mask := g.flagSet()
		if len(mask) < 2 {
			mask = append(mask, g.oneOf(slices.DeleteFunc(slices.Clone(nftTCPFlags), func(f string) bool { return f == mask[0] })...))
		}
		return fmt.Sprintf(" tcp flags %s%s / %s", g.neq(), strings.Join(g.flagSet(), ","), strings.Join(mask, ","))
	case 3:
		return fmt.Sprintf(" tcp flags { %s, %s }", strings.Join(g.flagSet(), "|"), strings.Join(g.flagSet(), "|"))
	case 4:
		return " tcp flags == " + strings.Join(g.flagSet(), "|")
	}
	return " tcp flags != " + g.oneOf(nftTCPFlags...)
}

func (g *nftGen) icmpMatch(v6 bool) string {
	key, types := "icmp", []string{"echo-request", "echo-reply", "destination-unreachable", "time-exceeded", "3", "11", fmt.Sprint(g.rng.IntN(255))}
	if v6 {
		key, types = "icmpv6", []string{"echo-request", "echo-reply", "destination-unreachable", "packet-too-big", "nd-neighbor-solicit", "1", fmt.Sprint(g.rng.IntN(256))}
	}
	switch g.rng.IntN(5) {
	case 0:
		a, b := g.oneOf(types...), g.oneOf(types...)
		if a == b {
			return fmt.Sprintf(" %s type %s", key, a)
		}
		return fmt.Sprintf(" %s type { %s, %s }", key, a, b)
	case 1:
		return fmt.Sprintf(" %s type != %s", key, g.oneOf(types...))
	case 2:
		return fmt.Sprintf(" %s type %s %s code %d", key, g.oneOf(types...), key, g.rng.IntN(5))
	case 3:
		// A code of any type.
		return fmt.Sprintf(" %s code %s", key, g.oneOf("0", "1", "!= 0", "{ 0, 3 }", "1-4", "!= { 1-2, 4 }"))
	}
	return fmt.Sprintf(" %s type %s", key, g.oneOf(types...))
}

// rule returns the text of a rule of chain self (-1 for a base chain);
// jumps go only to later regular chains, so there are no loops.
func (g *nftGen) rule(self int) string {
	var b strings.Builder
	w := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	fam := g.fam()
	if g.chance(2) {
		w("%s", g.addrMatch(fam, "saddr"))
	}
	if g.chance(3) {
		w("%s", g.addrMatch(fam, "daddr"))
	}
	if g.chance(6) {
		w("%s", g.maskedAddr(fam, g.oneOf("saddr", "daddr")))
	}
	// iif and oif name interfaces that exist when nft loads the rules.
	// A rule may test an interface twice.
	switch {
	case g.chance(5):
		w("%s", g.ifaceMatch("iifname", g.InIface))
		if g.chance(3) {
			w("%s", g.ifaceMatch("iifname", g.InIface))
		}
	case g.chance(10):
		w(" iif %s%q", g.neq(), g.oneOf(g.InIface, g.OutIface, "lo"))
	}
	switch {
	case g.XDP:
	case g.chance(6):
		w("%s", g.ifaceMatch("oifname", g.OutIface))
	case g.chance(12):
		w(" oif %s%q", g.neq(), g.oneOf(g.OutIface, g.InIface, "lo"))
	}
	proto := g.oneOf("", "", "tcp", "tcp", "udp", "udp", "icmp", "sctp", "gre")
	if proto == "icmp" && fam == rules.IPv6 {
		proto = "icmpv6"
	}
	l4 := (proto == "tcp" || proto == "udp" || proto == "sctp" || strings.HasPrefix(proto, "icmp")) && !g.chance(4)
	// nft refuses "reject with tcp reset" unless the protocol is tcp alone.
	rejectProto := proto
	if proto != "" && (!l4 || g.chance(3)) {
		switch {
		case !l4 && g.chance(4):
			w(" meta l4proto != %s", proto)
			rejectProto = ""
		case !l4 && g.chance(4):
			w(" meta l4proto { %s, %s }", proto, g.oneOf("tcp", "udp", "47", "132"))
			rejectProto = ""
		case g.Family == rules.IPv4 && g.tfam != "inet" && g.chance(2):
			w(" ip protocol %s", proto)
		default:
			w(" meta l4proto %s", proto)
		}
	}
	var vmapKey string
	ipKey := "ip"
	if fam == rules.IPv6 {
		ipKey = "ip6"
	}
	if l4 {
		switch proto {
		case "tcp", "udp", "sctp":
			switch {
			case proto != "sctp" && fam == g.Family && len(g.csets) > 0 && g.chance(6):
				w(" %s saddr . %s dport %s@%s", ipKey, proto, g.neq(), g.csets[0])
			case proto != "sctp" && g.chance(6):
				w(" %s saddr . %s dport { %s }", ipKey, proto, strings.Join(g.concatElems(fam, 1+g.rng.IntN(3), g.chance(3)), ", "))
			}
			if proto != "sctp" && g.chance(8) {
				// th reads the port of each protocol the set admits; nft
				// refuses a tcp or udp key after it ("conflicting
				// protocols").
				w(" meta l4proto { tcp, udp } th %s %s", g.oneOf("sport", "dport"), g.portExpr())
				rejectProto = ""
				break
			}
			if g.chance(2) {
				w(" %s sport %s", proto, g.portExpr())
			}
			if g.chance(2) {
				w(" %s dport %s", proto, g.portExpr())
			}
			if proto == "tcp" && g.chance(3) {
				w("%s", g.tcpFlags())
			}
			vmapKey = proto + " dport"
			if proto != "sctp" && g.chance(3) {
				vmapKey = ipKey + " saddr . " + proto + " dport"
			}
		default:
			// The rule's family: "icmp type 8 ip6 hoplimit 1" conflicts.
			w("%s", g.icmpMatch(fam == rules.IPv6))
		}
	}
	if g.chance(8) {
		v := g.oneOf("0", "1", "2", "63", "64", "65", "254", "255", fmt.Sprint(g.rng.IntN(256)))
		key := "ip ttl"
		if fam == rules.IPv6 {
			key = "ip6 hoplimit"
		}
		switch g.rng.IntN(3) {
		case 0:
			w(" %s %s%s", key, g.oneOf("", "!= ", "< ", "> ", "<= ", ">= "), v)
		case 1:
			lo := g.rng.IntN(200)
			w(" %s %d-%d", key, lo, lo+g.rng.IntN(56))
		default:
			w(" %s %s", key, v)
		}
	}
	if g.extra.IntN(8) == 0 {
		key := "ip dscp"
		if fam == rules.IPv6 {
			key = "ip6 dscp"
		}
		values := []string{"0", "cs1", "af11", "ef", "0x2e", "63", "lephb", fmt.Sprint(g.extra.IntN(64))}
		v := values[g.extra.IntN(len(values))]
		switch g.extra.IntN(4) {
		case 0:
			w(" %s != %s", key, v)
		case 1:
			w(" %s %s{ %s, %s }", key, []string{"", "!= "}[g.extra.IntN(2)], "cs0", "af41")
		case 2:
			lo := g.extra.IntN(60)
			w(" %s %d-%d", key, lo, lo+g.extra.IntN(4))
		default:
			w(" %s %s", key, v)
		}
	}
	// A rule set with a ct state turns nf_defrag on: its chains see
	// reassembled datagrams, whose length Lower refuses.
	if fam == rules.IPv4 && !g.ct && g.chance(10) {
		lo := 20 + g.rng.IntN(100)
		w(" ip length %s", g.oneOf(fmt.Sprintf("%d-%d", lo, lo+g.rng.IntN(60)), fmt.Sprintf("> %d", lo), fmt.Sprintf("!= %d", lo)))
	}
	if g.chance(20) {
		w(" ether saddr %s%s", g.neq(), g.oneOf(senderMAC.String(), "02:00:00:00:00:09"))
	}
	if g.chance(25) && !g.XDP {
		w(" meta pkttype %s%s", g.neq(), g.oneOf("host", "broadcast", "multicast"))
	}
	if g.chance(20) && !g.XDP {
		w(" meta mark %s", g.oneOf("0", "!= 0x1", "& 0xff == 0", "0x1"))
	}
	if g.ct && g.chance(15) && !g.XDP {
		w(" ct state %s", g.oneOf("new", "established", "{ new, untracked }", "!= established", "new,related"))
	}
	useVmap := vmapKey != "" && g.chance(5)
	// Last of the matches: nft refuses "meta nfproto ipv6 ip saddr", and
	// so a verdict map keyed by an address after it.
	if g.tfam == "inet" && g.chance(15) && !(useVmap && strings.Contains(vmapKey, "saddr")) {
		w(" meta nfproto %s", g.oneOf("ipv4", "ipv6"))
	}
	if g.chance(3) {
		w(" counter")
	}
	// log goes on to the rest of the rule; the xdp hook cannot write a
	// FORWARD chain's line (it names the output interface).
	if g.chance(12) && !g.XDP {
		w(" log prefix %q", "bwdt-nft ")
	}
	if useVmap {
		var elems []string
		if strings.Contains(vmapKey, ".") {
			for _, e := range g.concatElems(fam, 1+g.rng.IntN(3), false) {
				elems = append(elems, fmt.Sprintf("%s : %s", e, g.verdict(self, proto, true)))
			}
		} else {
			seen := map[uint16]bool{}
			for range 1 + g.rng.IntN(3) {
				if p := g.port(); !seen[p] {
					seen[p] = true
					elems = append(elems, fmt.Sprintf("%d : %s", p, g.verdict(self, proto, true)))
				}
			}
		}
		w(" %s vmap { %s }", vmapKey, strings.Join(elems, ", "))
		if g.chance(3) {
			// Reached after a "continue" element only.
			w("%s", g.verdict(self, "", false))
		}
		return b.String()
	}
	w("%s", g.verdict(self, rejectProto, false))
	if b.Len() == 0 {
		return " counter" // a rule needs a statement
	}
	return b.String()
}

// verdict returns a rule's verdict, or nothing (the rule only counts);
// inMap asks for one that a verdict map may hold.
func (g *nftGen) verdict(self int, proto string, inMap bool) string {
	space := " "
	if inMap {
		space = ""
	}
	switch n := g.rng.IntN(13); {
	case n < 3:
		return space + "accept"
	case n < 5:
		return space + "drop"
	case n < 6 && !inMap:
		switch {
		case g.XDP:
			return " drop"
		case proto == "tcp" && g.chance(2):
			return " reject with tcp reset"
		case g.chance(2) && g.tfam == "inet":
			return " reject with icmpx type " + g.oneOf("admin-prohibited", "port-unreachable", "no-route", "host-unreachable")
		case g.chance(2) && g.tfam == "ip":
			return " reject with icmp type " + g.oneOf("admin-prohibited", "port-unreachable", "host-unreachable", "net-prohibited")
		case g.chance(2) && g.tfam == "ip6":
			return " reject with icmpv6 type " + g.oneOf("admin-prohibited", "port-unreachable", "no-route", "addr-unreachable")
		}
		return " reject"
	case n < 7:
		return space + "return"
	case n < 10 && self+1 < g.users:
		c := self + 1 + g.rng.IntN(g.users-self-1)
		if g.chance(3) {
			return fmt.Sprintf("%sgoto uc%d", space, c)
		}
		return fmt.Sprintf("%sjump uc%d", space, c)
	case n < 11 && !inMap:
		return "" // counts and goes on
	case n < 12:
		return space + "continue"
	}
	return space + "accept"
}
