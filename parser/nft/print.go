package nft

import (
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"bpfwall/rules"
)

// Print writes a model read from nftables as nft text that Parse, for
// the same family, reads back into a model that prints the same and means
// the same (the tests compare models through it; fmt --nft prints the
// script itself, with Format): one table of the model's family per model table
// ("table ip filter", "table ip6 mangle", "table netdev netdev"), one base
// chain per builtin chain, and the user chains. Chain types and
// priorities, counters, netdev devices and the names of sets are not in
// the model and are not printed; anonymous sets are written inline.
//
// A construct the model holds but nft text cannot say the same way (a rule
// read from iptables, a generic match) is an error naming the rule's
// position.
func Print(rs *rules.Ruleset) ([]byte, error) {
	p := &printer{rs: rs, ip: "ip", family: "ip"}
	if rs.Family == rules.IPv6 {
		p.ip, p.family = "ip6", "ip6"
	}
	for _, t := range rs.Tables {
		for _, c := range t.Chains {
			for _, r := range c.Rules {
				if !r.NFT {
					return nil, rules.Errorf(r.Pos, "rule read from iptables: its matches do not mean in nft what they mean in iptables")
				}
			}
		}
	}
	var err error
	if p.names, err = chainNames(rs); err != nil {
		return nil, err
	}
	// In the order Parse makes them.
	tables := slices.Clone(rs.Tables)
	order := []string{"filter", "mangle", "netdev"}
	slices.SortStableFunc(tables, func(a, b *rules.Table) int {
		ia, ib := slices.Index(order, a.Name), slices.Index(order, b.Name)
		if ia < 0 {
			ia = len(order)
		}
		if ib < 0 {
			ib = len(order)
		}
		return ia - ib
	})
	for _, t := range tables {
		p.table(t)
	}
	if len(p.errs) > 0 {
		return nil, p.errs.Err()
	}
	return []byte(p.b.String()), nil
}

type printer struct {
	rs     *rules.Ruleset
	ip     string // "ip" or "ip6": the address keys
	family string // the tables' family
	names  map[*rules.Chain]string
	cur    *rules.Table // the table being printed
	b      strings.Builder
	errs   rules.ErrorList
}

func (p *printer) errorf(pos rules.Pos, format string, args ...any) {
	p.errs = append(p.errs, rules.Errorf(pos, format, args...))
}

// chainNames gives user chains the names Parse gives them back: a name
// in more than one table is qualified, as the builder qualifies names
// found in several nft tables, and characters nft does not take in a
// chain name (the builder's "@" and "/") become "_".
func chainNames(rs *rules.Ruleset) (map[*rules.Chain]string, error) {
	tables := map[string][]string{}
	for _, t := range rs.Tables {
		for _, c := range t.Chains {
			if !slices.Contains(tables[c.Name], t.Name) {
				tables[c.Name] = append(tables[c.Name], t.Name)
			}
		}
	}
	fam := "ip"
	if rs.Family == rules.IPv6 {
		fam = "ip6"
	}
	out := map[*rules.Chain]string{}
	owner := map[string]string{} // printed name -> model table and name
	for _, t := range rs.Tables {
		for _, c := range t.Chains {
			name := c.Name
			if !c.Builtin {
				if len(tables[c.Name]) > 1 {
					name = fam + "." + t.Name + "." + name
				}
				name = chainWord(name)
			}
			if o, ok := owner[name]; ok && o != t.Name+" "+c.Name {
				return nil, rules.Errorf(c.Pos, "chains %s and %s both print as %s", o, t.Name+" "+c.Name, name)
			}
			owner[name] = t.Name + " " + c.Name
			out[c] = name
		}
	}
	return out, nil
}

// chainWord makes s a word both nft's scanner and Parse's lexer read as
// one name.
func chainWord(s string) string {
	b := []byte(s)
	for i, c := range b {
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c == '_':
		case c >= '0' && c <= '9', c == '-', c == '.':
			if i == 0 {
				b[i] = '_'
			}
		default:
			b[i] = '_'
		}
	}
	if n := len(b); n > 0 && (b[n-1] == '-' || b[n-1] == '.') {
		b[n-1] = '_'
	}
	return string(b)
}

// builtinHooks maps the model's builtin chains to nft hooks.
var builtinHooks = map[string]string{
	"INPUT": "input", "FORWARD": "forward", "OUTPUT": "output",
	"PREROUTING": "prerouting", "POSTROUTING": "postrouting", "INGRESS": "ingress",
}

func (p *printer) table(t *rules.Table) {
	fam, name := p.family, t.Name
	if t.Name == "netdev" {
		// "netdev" is a keyword to nft, not a table name.
		fam, name = "netdev", "ingress_filter"
	}
	p.cur = t
	fmt.Fprintf(&p.b, "table %s %s {\n", fam, name)
	// Base chains in hook order, then the others, as Parse makes them.
	chains := slices.Clone(t.Chains)
	hookOrder := []string{"PREROUTING", "INGRESS", "INPUT", "FORWARD", "OUTPUT", "POSTROUTING"}
	rank := func(c *rules.Chain) int {
		if !c.Builtin {
			return len(hookOrder)
		}
		return slices.Index(hookOrder, c.Name)
	}
	slices.SortStableFunc(chains, func(a, b *rules.Chain) int { return rank(a) - rank(b) })
	printed := map[string]*rules.Chain{}
	for _, c := range chains {
		name := p.names[c]
		if prev, ok := printed[name]; ok {
			// The builder makes one model chain for each hook that
			// reaches an nft chain; they are the same chain.
			if !sameRules(prev, c) {
				p.errorf(c.Pos, "two chains called %s in table %s", name, t.Name)
			}
			continue
		}
		printed[name] = c
		fmt.Fprintf(&p.b, "\tchain %s {\n", name)
		if c.Builtin {
			hook, ok := builtinHooks[c.Name]
			if !ok {
				p.errorf(c.Pos, "builtin chain %s has no nft hook", c.Name)
			}
			policy := "accept"
			if c.Policy == rules.PolicyDrop {
				policy = "drop"
			}
			fmt.Fprintf(&p.b, "\t\ttype filter hook %s priority 0; policy %s;\n", hook, policy)
		}
		for i := 0; i < len(c.Rules); i++ {
			rt, ok := p.rule(c.Rules[i])
			if !ok {
				continue
			}
			// nft's "M log L rest" is the model's "M log L" followed by
			// "M rest": written as one rule again.
			base := len(rt.terms) - 1
			for j := i; j+1 < len(c.Rules); j++ {
				if _, isLog := c.Rules[j].Target.(*rules.Log); !isLog {
					break
				}
				// A comment after the log is the rest's only ("log
				// prefix P comment C" reads so).
				next, ok := p.rule(c.Rules[j+1])
				if !ok || len(next.terms) < base || !slices.Equal(next.terms[:base], rt.terms[:base]) || rt.comment != nil && !equalPtr(next.comment, rt.comment) {
					break
				}
				if mergeCandidateText(rt.terms[:base]) && mergeCandidateText(next.terms[base:]) {
					// nft could merge a comparison before the log with
					// one after it (merge.go): two rules, as the model has.
					break
				}
				rt.terms = append(rt.terms, next.terms[base:]...)
				rt.comment = next.comment
				i = j + 1
			}
			fmt.Fprintf(&p.b, "\t\t%s\n", rt.String())
		}
		p.b.WriteString("\t}\n")
	}
	p.b.WriteString("}\n")
}

func sameRules(a, b *rules.Chain) bool {
	return slices.EqualFunc(a.Rules, b.Rules, func(x, y *rules.Rule) bool { return x.Spec() == y.Spec() })
}

// ruleText collects the terms of one rule.
type ruleText struct {
	terms   []string
	comment *string
	// negPort records a "!=" comparison of one port per protocol, which
	// nft would merge with one of the other port into one comparison.
	negPort map[string]bool
}

func (rt *ruleText) add(format string, args ...any) {
	rt.terms = append(rt.terms, fmt.Sprintf(format, args...))
}

// rule writes one model rule's terms, its target the last.
func (p *printer) rule(r *rules.Rule) (*ruleText, bool) {
	nerr := len(p.errs)
	if !r.NFT {
		p.errorf(r.Pos, "rule read from iptables: its matches do not mean in nft what they mean in iptables")
		return nil, false
	}
	rt := &ruleText{negPort: map[string]bool{}}
	if r.Fragment || r.FragmentNeg {
		p.errorf(r.Pos, "-f has no nft form in the model")
	}
	if r.Proto != 0 {
		op := ""
		if r.ProtoNeg {
			op = "!= "
		}
		rt.add("meta l4proto %s%s", op, protoName(r.Proto))
	}
	p.net(rt, r, "saddr", r.Src, r.SrcNeg)
	p.net(rt, r, "daddr", r.Dst, r.DstNeg)
	ifname(rt, ifaceKey(false, r.InByIndex), r.InIface, r.InNeg)
	ifname(rt, ifaceKey(true, r.OutByIndex), r.OutIface, r.OutNeg)
	for _, m := range r.Matches {
		p.match(rt, r, m)
	}
	p.target(rt, r)
	if len(p.errs) > nerr {
		return nil, false
	}
	return rt, true
}

func (rt *ruleText) String() string {
	terms := rt.terms
	if len(terms) == 0 {
		terms = []string{"counter"} // a rule needs a statement
	}
	s := strings.Join(terms, " ")
	if rt.comment != nil {
		s += " comment " + strconv.Quote(*rt.comment)
	}
	return s
}

func equalPtr(a, b *string) bool {
	return a == nil && b == nil || a != nil && b != nil && *a == *b
}

func protoName(p uint8) string {
	switch p {
	case 1:
		return "icmp"
	case 6:
		return "tcp"
	case 17:
		return "udp"
	case 58:
		return "icmpv6"
	case 132:
		return "sctp"
	}
	return strconv.Itoa(int(p))
}

func (p *printer) net(rt *ruleText, r *rules.Rule, key string, n rules.Net, neg bool) {
	if n.IsAny() {
		if neg {
			// Never holds, as in nft.
			zero := "0.0.0.0/0"
			if p.rs.Family == rules.IPv6 {
				zero = "::/0"
			}
			rt.add("%s %s != %s", p.ip, key, zero)
		}
		return
	}
	bits := n.Bits()
	if bits < 0 {
		// A non-contiguous mask, as nft writes it.
		op := "=="
		if neg {
			op = "!="
		}
		rt.add("%s %s & %s %s %s", p.ip, key, n.Mask, op, maskAddrText(n))
		return
	}
	rt.add("%s %s %s%s", p.ip, key, negOp(neg), prefixText(netip.PrefixFrom(n.Addr, bits)))
}

// maskAddrText is n's address with the mask applied.
func maskAddrText(n rules.Net) string {
	a, m := n.Addr.AsSlice(), n.Mask.AsSlice()
	for i := range a {
		a[i] &= m[i]
	}
	addr, _ := netip.AddrFromSlice(a)
	return addr.String()
}

func prefixText(pf netip.Prefix) string {
	if pf.Bits() == pf.Addr().BitLen() {
		return pf.Addr().String()
	}
	return pf.Masked().String()
}

func negOp(neg bool) string {
	if neg {
		return "!= "
	}
	return ""
}

func ifname(rt *ruleText, key, name string, neg bool) {
	if name == "" {
		return
	}
	rt.add("%s %s%s", key, negOp(neg), ifnameText(name))
}

// ifaceKey is the nft key of an interface test: by name, or by index
// (iif, oif).
func ifaceKey(out, byIndex bool) string {
	switch {
	case out && byIndex:
		return "oif"
	case out:
		return "oifname"
	case byIndex:
		return "iif"
	}
	return "iifname"
}

// ifnameText quotes an interface name of the model, its "+" wildcard as
// nft's "*".
func ifnameText(name string) string {
	if strings.HasSuffix(name, "+") {
		name = strings.TrimSuffix(name, "+") + "*"
	}
	return strconv.Quote(name)
}

// port writes one port comparison. A "!=" of one port goes as a range
// when the rule already has one for the other port of the protocol: nft
// merges two such comparisons into NOT(sport == a AND dport == b).
func (rt *ruleText) port(proto, field string, pr rules.PortRange, neg bool) {
	if pr == rules.AnyPort && !neg {
		return
	}
	v := strconv.Itoa(int(pr.Lo))
	if pr.Hi != pr.Lo {
		v += "-" + strconv.Itoa(int(pr.Hi))
	} else if neg {
		if rt.negPort[proto] {
			v += "-" + v
		}
		rt.negPort[proto] = true
	}
	rt.add("%s %s %s%s", proto, field, negOp(neg), v)
}

var flagOrder = []string{"fin", "syn", "rst", "psh", "ack", "urg", "ecn", "cwr"}

// flagsText writes TCP flags as names or-ed: "syn | ack"; 0 is "0x0".
func flagsText(v uint8) string {
	var names []string
	for i, n := range flagOrder {
		if v&(1<<i) != 0 {
			names = append(names, n)
		}
	}
	if len(names) == 0 {
		return "0x0"
	}
	return strings.Join(names, " | ")
}

// flagsList writes TCP flags as a comma list: "syn,ack"; 0 is "0x0".
func flagsList(v uint8) string {
	return strings.ReplaceAll(flagsText(v), " | ", ",")
}

func (p *printer) match(rt *ruleText, r *rules.Rule, m rules.Match) {
	switch m := m.(type) {
	case *rules.MaskedAddr:
		key := "saddr"
		if m.Dst {
			key = "daddr"
		}
		p.net(rt, r, key, m.Net, m.Neg)
	case *rules.Ifaces:
		key := ifaceKey(m.Out, m.ByIndex)
		if len(m.Names) == 1 {
			ifname(rt, key, m.Names[0], m.Neg)
			return
		}
		names := make([]string, len(m.Names))
		for i, n := range m.Names {
			names[i] = ifnameText(n)
		}
		rt.add("%s %s{ %s }", key, negOp(m.Neg), strings.Join(names, ", "))
	case *rules.ProtocolsNot:
		names := make([]string, len(m.Protos))
		for i, proto := range m.Protos {
			names[i] = protoName(proto)
		}
		rt.add("meta l4proto != { %s }", strings.Join(names, ", "))
	case *rules.TCP:
		p.tcp(rt, m)
	case *rules.UDP:
		rt.port("udp", "sport", m.SrcPorts, m.SrcNeg)
		rt.port("udp", "dport", m.DstPorts, m.DstNeg)
	case *rules.Multiport:
		p.multiport(rt, r, m)
	case *rules.IPRange:
		for _, x := range []struct {
			key string
			r   *rules.AddrRange
			neg bool
		}{{"saddr", m.Src, m.SrcNeg}, {"daddr", m.Dst, m.DstNeg}} {
			if x.r != nil {
				rt.add("%s %s %s%s-%s", p.ip, x.key, negOp(x.neg), x.r.From, x.r.To)
			}
		}
	case *rules.ICMP:
		p.icmp(rt, m)
	case *rules.Owner:
		p.owner(rt, r, m)
	case *rules.ICMPCode:
		key := "icmp"
		if m.V6 {
			key = "icmpv6"
		}
		rt.add("%s code %s", key, codeText(m.CodeMin, m.CodeMax))
	case *rules.Comment:
		if rt.comment != nil {
			p.errorf(m.Pos, "a second comment: nft keeps one per rule")
			return
		}
		rt.comment = &m.Text
	case *rules.Conntrack:
		if len(m.Other) > 0 {
			p.errorf(m.Pos, "conntrack --%s has no nft form in the model", m.Other[0].Name)
			return
		}
		if m.State != 0 && m.State&^(rules.CTSnat|rules.CTDnat) == 0 {
			p.ctStatus(rt, r, m)
			return
		}
		p.ctState(rt, m.Pos, m.State, m.StateNeg)
	case *rules.State:
		p.ctState(rt, m.Pos, m.State, m.Neg)
	case *rules.Set:
		p.set(rt, m)
	case *rules.Length:
		v := strconv.Itoa(int(m.Min))
		if m.Max != m.Min {
			v += "-" + strconv.Itoa(int(m.Max))
		}
		// The model's length is IPv6's payload length plus 40, which is
		// what meta length gives at the IP hooks.
		key := "ip length"
		if p.rs.Family != rules.IPv4 {
			key = "meta length"
		}
		rt.add("%s %s%s", key, negOp(m.Neg), v)
	case *rules.TTL:
		rt.add("ip ttl %s%d", cmpText(m.Op), m.Value)
	case *rules.HL:
		rt.add("ip6 hoplimit %s%d", cmpText(m.Op), m.Value)
	case *rules.DSCP:
		key := "ip dscp"
		if p.rs.Family != rules.IPv4 {
			key = "ip6 dscp"
		}
		rt.add("%s %s0x%02x", key, negOp(m.Neg), m.Value)
	case *rules.MAC:
		rt.add("ether saddr %s%s", negOp(m.Neg), m.Addr)
	case *rules.Mark:
		if m.Mask == 0xffffffff {
			rt.add("meta mark %s%#x", negOp(m.Neg), m.Value)
		} else {
			op := "=="
			if m.Neg {
				op = "!="
			}
			rt.add("meta mark & %#x %s %#x", m.Mask, op, m.Value)
		}
	case *rules.PktType:
		name := map[uint8]string{rules.PacketHost: "host", rules.PacketBroadcast: "broadcast",
			rules.PacketMulticast: "multicast", rules.PacketOtherHost: "other"}[m.Type]
		if name == "" {
			p.errorf(m.Pos, "packet type %d has no nft name", m.Type)
			return
		}
		rt.add("meta pkttype %s%s", negOp(m.Neg), name)
	case *rules.RateLimit:
		rt.add("limit %s", rateLimitText(m))
	case *rules.Generic:
		if (m.Ext == "limit" || m.Ext == "tproxy") && len(m.Options) == 1 && m.Options[0].Name == "nft" && len(m.Options[0].Args) == 1 {
			rt.add("%s %s", m.Ext, m.Options[0].Args[0])
			return
		}
		p.errorf(m.Pos, "%s is not in the model", m.Ext)
	default:
		p.errorf(m.Position(), "%s match has no nft form in the model", m.Name())
	}
}

// tcp prints -m tcp: ports and flags.
func (p *printer) tcp(rt *ruleText, m *rules.TCP) {
	rt.port("tcp", "sport", m.SrcPorts, m.SrcNeg)
	rt.port("tcp", "dport", m.DstPorts, m.DstNeg)
	if m.Option != 0 || m.OptionNeg {
		p.errorf(m.Pos, "tcp option match has no nft form in the model")
	}
	switch {
	case m.FlagComp&^m.FlagMask != 0 && !m.FlagsNeg:
		// Never equal: "& mask == value" would read back as no
		// rule at all; "value / mask" keeps the value as written.
		rt.add("tcp flags %s / %s", flagsList(m.FlagComp), flagsList(m.FlagMask))
	case m.FlagMask != 0 || m.FlagComp != 0 || m.FlagsNeg:
		op := "=="
		if m.FlagsNeg {
			op = "!="
		}
		mask := "0x0"
		if m.FlagMask != 0 {
			mask = "(" + flagsText(m.FlagMask) + ")"
		}
		rt.add("tcp flags & %s %s %s", mask, op, flagsText(m.FlagComp))
	}
}

// multiport prints -m multiport as a set of the rule's protocol's ports.
func (p *printer) multiport(rt *ruleText, r *rules.Rule, m *rules.Multiport) {
	proto := map[uint8]string{6: "tcp", 17: "udp", 132: "sctp"}[r.Proto]
	field := map[rules.MultiportDir]string{rules.MultiportSrc: "sport", rules.MultiportDst: "dport"}[m.Dir]
	if proto == "" || field == "" || r.ProtoNeg {
		p.errorf(m.Pos, "multiport match has no nft form here")
		return
	}
	var vs []string
	for _, pr := range m.Ports {
		v := strconv.Itoa(int(pr.Lo))
		if pr.Hi != pr.Lo {
			v += "-" + strconv.Itoa(int(pr.Hi))
		}
		vs = append(vs, v)
	}
	if m.Neg && len(vs) == 1 && !strings.Contains(vs[0], "-") {
		// A one-element set is one value to nft, which it may merge.
		rt.port(proto, field, m.Ports[0], true)
		return
	}
	rt.add("%s %s %s{ %s }", proto, field, negOp(m.Neg), strings.Join(vs, ", "))
}

// icmp prints -m icmp and -m icmp6: the type, and the codes.
func (p *printer) icmp(rt *ruleText, m *rules.ICMP) {
	key := "icmp"
	if m.V6 {
		key = "icmpv6"
	}
	if !m.V6 && m.Type == 0xff {
		p.errorf(m.Pos, "icmp type any has no nft form in the model")
		return
	}
	rt.add("%s type %s%d", key, negOp(m.Neg), m.Type)
	switch {
	case m.CodeMin == 0 && m.CodeMax == 0xff:
	case m.Neg:
		p.errorf(m.Pos, "icmp type != with a code has no nft form in the model")
	default:
		rt.add("%s code %s", key, codeText(m.CodeMin, m.CodeMax))
	}
}

func cmpText(op rules.CompareOp) string {
	switch op {
	case rules.OpNe:
		return "!= "
	case rules.OpLt:
		return "< "
	case rules.OpGt:
		return "> "
	}
	return ""
}

var ctStateOrder = []string{"invalid", "established", "related", "new", "untracked"}

func (p *printer) ctState(rt *ruleText, pos rules.Pos, st uint16, neg bool) {
	var names []string
	left := st
	for _, n := range ctStateOrder {
		if b := ctStateNames[n]; st&b != 0 {
			names = append(names, n)
			left &^= b
		}
	}
	if left != 0 || len(names) == 0 {
		p.errorf(pos, "conntrack state %#x has no nft name", st)
		return
	}
	if len(names) == 1 {
		rt.add("ct state %s%s", negOp(neg), names[0])
		return
	}
	rt.add("ct state %s{ %s }", negOp(neg), strings.Join(names, ", "))
}

// ctStatus prints the states SNAT and DNAT, flags of the entry's status.
// nft's "! dnat" needs an entry, which --ctstate's negation does not:
// only where r tests for one too (as Parse writes "ct status ! dnat") is
// it the same match.
func (p *printer) ctStatus(rt *ruleText, r *rules.Rule, m *rules.Conntrack) {
	var names []string
	if m.State&rules.CTSnat != 0 {
		names = append(names, "snat")
	}
	if m.State&rules.CTDnat != 0 {
		names = append(names, "dnat")
	}
	if !m.StateNeg {
		rt.add("ct status %s", strings.Join(names, ","))
		return
	}
	if !needsEntry(r.Matches) {
		p.errorf(m.Pos, "conntrack ! --ctstate %s has no nft form: ct status ! %s does not match a packet without an entry",
			strings.ToUpper(strings.Join(names, ",")), strings.Join(names, ","))
		return
	}
	rt.add("ct status ! %s", strings.Join(names, ","))
}

func (p *printer) set(rt *ruleText, m *rules.Set) {
	s := p.rs.Sets[m.SetName]
	if s == nil || len(m.Dirs) != 1 || len(m.Other) > 0 || (s.Type != "hash:net" && s.Type != "hash:ip") {
		p.errorf(m.Pos, "set match on %s has no nft form in the model", m.SetName)
		return
	}
	key := "saddr"
	if m.Dirs[0] == rules.SetDst {
		key = "daddr"
	}
	if len(s.Entries) == 0 {
		// Not in an empty set: every packet of the table's family; in
		// one: none, written as net writes it.
		if !m.Neg {
			zero := "0.0.0.0/0"
			if p.rs.Family == rules.IPv6 {
				zero = "::/0"
			}
			rt.add("%s %s != %s", p.ip, key, zero)
		}
		return
	}
	var vs []string
	for _, e := range s.Entries {
		if e.NoMatch {
			p.errorf(m.Pos, "set %s has a nomatch entry", m.SetName)
			return
		}
		vs = append(vs, prefixText(e.Addr))
	}
	rt.add("%s %s %s{ %s }", p.ip, key, negOp(m.Neg), strings.Join(vs, ", "))
}

// rejectReasons are nft's names of the model's --reject-with values.
var rejectReasons = map[string]string{
	"icmp-net-unreachable": "icmp type net-unreachable", "icmp-host-unreachable": "icmp type host-unreachable",
	"icmp-proto-unreachable": "icmp type prot-unreachable", "icmp-port-unreachable": "icmp type port-unreachable",
	"icmp-net-prohibited": "icmp type net-prohibited", "icmp-host-prohibited": "icmp type host-prohibited",
	"icmp-admin-prohibited": "icmp type admin-prohibited",
	"icmp6-no-route":        "icmpv6 type no-route", "icmp6-adm-prohibited": "icmpv6 type admin-prohibited",
	"icmp6-addr-unreachable": "icmpv6 type addr-unreachable", "icmp6-port-unreachable": "icmpv6 type port-unreachable",
	"icmp6-policy-fail": "icmpv6 type policy-fail", "icmp6-reject-route": "icmpv6 type reject-route",
	"tcp-reset": "tcp reset",
}

// LogFlagsText prints the log flags f, some but not all of the NF_LOG_*
// bits (the same in rules and in expr), as nft lists them.
func LogFlagsText(f uint8) string {
	var s string
	var tcp []string
	if f&rules.LogTCPSeq != 0 {
		tcp = append(tcp, "sequence")
	}
	if f&rules.LogTCPOpt != 0 {
		tcp = append(tcp, "options")
	}
	if tcp != nil {
		s += " flags tcp " + strings.Join(tcp, ",")
	}
	if f&rules.LogIPOpt != 0 {
		s += " flags ip options"
	}
	if f&rules.LogUID != 0 {
		s += " flags skuid"
	}
	if f&rules.LogMACDecode != 0 {
		s += " flags ether"
	}
	return s
}

var logLevelNames = []string{"emerg", "alert", "crit", "err", "warn", "notice", "info", "debug"}

func (p *printer) target(rt *ruleText, r *rules.Rule) {
	switch t := r.Target.(type) {
	case nil:
	case *rules.Accept:
		rt.add("accept")
	case *rules.Drop:
		rt.add("drop")
	case *rules.Return:
		rt.add("return")
	case *rules.Jump:
		rt.add("jump %s", p.chainName(t.Chain))
	case *rules.Goto:
		rt.add("goto %s", p.chainName(t.Chain))
	case *rules.Reject:
		if t.With == "" {
			rt.add("reject")
			return
		}
		w, ok := rejectReasons[t.With]
		if !ok {
			p.errorf(t.Pos, "reject with %s has no nft form", t.With)
			return
		}
		rt.add("reject with %s", w)
	case *rules.Log:
		s := "log"
		if t.Prefix != "" {
			s += " prefix " + strconv.Quote(t.Prefix)
		}
		if t.Level != 4 {
			if int(t.Level) >= len(logLevelNames) {
				p.errorf(t.Pos, "log level %d has no nft name", t.Level)
				return
			}
			s += " level " + logLevelNames[t.Level]
		}
		all := rules.LogTCPSeq | rules.LogTCPOpt | rules.LogIPOpt | rules.LogUID | rules.LogMACDecode
		switch f := t.Flags; {
		case f == all:
			s += " flags all"
		case f&^all != 0:
			p.errorf(t.Pos, "log flags %#x have no nft form", f)
			return
		default:
			s += LogFlagsText(f)
		}
		rt.add("%s", s)
	default:
		p.errorf(r.Target.Position(), "%s has no nft form in the model", r.Target.Name())
	}
}

// chainName is the printed name of the chain of the current table a
// jump names.
func (p *printer) chainName(name string) string {
	if c := p.cur.Chain(name); c != nil {
		return p.names[c]
	}
	return name
}

// rateLimitText is a limit statement's text after "limit", in bytes and
// packets as the model keeps them.
func rateLimitText(m *rules.RateLimit) string {
	text := "rate "
	if m.Over {
		text += "over "
	}
	text += strconv.FormatUint(m.Rate, 10)
	if m.Bytes {
		text += " bytes"
	}
	unit := map[uint64]string{1: "second", 60: "minute", 3600: "hour", 86400: "day", 604800: "week"}[m.Unit]
	text += "/" + unit
	if m.Bytes {
		return text + fmt.Sprintf(" burst %d bytes", m.Burst)
	}
	return text + fmt.Sprintf(" burst %d packets", m.Burst)
}

// mergeCandidateText reports whether one of terms may be a comparison nft
// merges with an adjacent one (merge.go): a payload key and one value, or
// a set of one.
func mergeCandidateText(terms []string) bool {
	for _, t := range terms {
		words := strings.Fields(t)
		if len(words) < 3 {
			continue
		}
		if _, ok := payloadFields[words[0]+" "+words[1]]; !ok {
			continue
		}
		v := words[2:]
		if v[0] == "!=" || v[0] == "==" {
			v = v[1:]
		}
		if len(v) == 3 && v[0] == "{" && v[2] == "}" {
			v = v[1:2] // nft turns a one-element set into its value
		}
		if len(v) == 1 && !strings.ContainsAny(v[0], "{-/,") {
			return true
		}
	}
	return false
}

// codeText is an icmp code range as nft writes it: "3" or "1-3".
func codeText(lo, hi uint8) string {
	if lo == hi {
		return strconv.Itoa(int(lo))
	}
	return fmt.Sprintf("%d-%d", lo, hi)
}

// owner prints an owner match as meta skuid and skgid. Their != needs a
// socket with a file, which xt_owner's negation does not: only where the
// rule also tests that there is one (any ID, as Parse writes "meta skuid
// != 1000") is it the same match; that test is then left to the !=.
func (p *printer) owner(rt *ruleText, r *rules.Rule, m *rules.Owner) {
	if m.Socket {
		p.errorf(m.Pos, "owner --socket-exists has no nft form")
		return
	}
	// test is an owner's test of the user or of the group.
	type test struct {
		r   *rules.IDRange
		neg bool
	}
	for _, key := range []string{"meta skuid", "meta skgid"} {
		id := func(o *rules.Owner) test {
			if key == "meta skuid" {
				return test{o.UID, o.UIDNeg}
			}
			return test{o.GID, o.GIDNeg}
		}
		t := id(m)
		if t.r == nil {
			continue
		}
		others := func(want func(test) bool) bool {
			return slices.ContainsFunc(r.Matches, func(x rules.Match) bool {
				o, ok := x.(*rules.Owner)
				return ok && o != m && id(o).r != nil && want(id(o))
			})
		}
		switch {
		case t.neg && !others(func(o test) bool { return !o.neg && *o.r == anyID }):
			p.errorf(m.Pos, "owner ! --%s-owner has no nft form: %s != does not match a packet without a socket", key[len("meta sk"):], key)
			return
		case !t.neg && *t.r == anyID && others(func(o test) bool { return o.neg }):
			continue // the != says it
		}
		rt.add("%s %s%s", key, negOp(t.neg), t.r)
	}
}
