package rules

import (
	"net/netip"
	"slices"
	"strconv"
	"strings"
)

// SaveOptions control how a rule set is printed.
type SaveOptions struct {
	// Counters prints "[packets:bytes]" before every rule, as iptables-save -c.
	Counters bool
	// Fragment prints an input for iptables-restore -n: a builtin chain's
	// policy line only where the input declared it, since applied with -n
	// every policy line sets the policy.
	Fragment bool
}

// Save prints rs as iptables-save does: per table the chain lines (builtin
// chains in hook order, then user chains by name), the rules chain by chain,
// and COMMIT.
func (rs *Ruleset) Save(opts SaveOptions) []byte {
	// About 64 bytes a rule: a buffer grown from nothing copied a large
	// rule set's text again at every growth.
	b := make([]byte, 0, 64*rs.NumRules()+1024)
	for _, t := range rs.Tables {
		b = append(b, '*')
		b = append(b, t.Name...)
		b = append(b, '\n')
		chains := t.SaveOrder()
		for _, c := range chains {
			if opts.Fragment && c.Builtin && c.Pos == (Pos{}) {
				continue
			}
			b = append(b, ':')
			b = append(b, c.Name...)
			b = append(b, ' ')
			b = append(b, c.Policy.String()...)
			b = append(b, ' ')
			b = c.Counters.AppendTo(b)
			b = append(b, '\n')
		}
		for _, c := range chains {
			for _, r := range c.Rules {
				if opts.Counters {
					b = r.Counters.AppendTo(b)
					b = append(b, ' ')
				}
				b = append(b, "-A "...)
				b = append(b, c.Name...)
				b = r.appendSpec(b)
				b = append(b, '\n')
			}
		}
		b = append(b, "COMMIT\n"...)
	}
	return b
}

// SaveOrder returns the chains in the order iptables-save prints them:
// builtin chains in hook order, then user chains sorted by name.
func (t *Table) SaveOrder() []*Chain {
	var builtin, user []*Chain
	for _, c := range t.Chains {
		if c.Builtin {
			builtin = append(builtin, c)
		} else {
			user = append(user, c)
		}
	}
	slices.SortFunc(user, func(a, b *Chain) int { return strings.Compare(a.Name, b.Name) })
	return append(builtin, user...)
}

// Spec is the rule as iptables-save prints it after "-A CHAIN", without the
// leading space.
func (r *Rule) Spec() string {
	return string(r.AppendSpec(nil))
}

// AppendSpec appends Spec to b: a caller that prints many rules reuses
// one buffer.
func (r *Rule) AppendSpec(b []byte) []byte {
	n := len(b)
	b = r.appendSpec(b)
	if len(b) > n && b[n] == ' ' {
		b = append(b[:n], b[n+1:]...)
	}
	return b
}

func (r *Rule) String() string { return r.Spec() }

func (r *Rule) appendSpec(b []byte) []byte {
	b = appendNet(b, "-s", r.Src, r.SrcNeg)
	b = appendNet(b, "-d", r.Dst, r.DstNeg)
	b = appendIface(b, "-i", r.InIface, r.InNeg)
	b = appendIface(b, "-o", r.OutIface, r.OutNeg)
	if r.Proto != 0 || r.ProtoNeg {
		b = appendNeg(b, r.ProtoNeg)
		b = append(b, " -p "...)
		b = append(b, ProtoName(r.Proto)...)
	}
	if r.Fragment {
		b = appendNeg(b, r.FragmentNeg)
		b = append(b, " -f"...)
	}
	for _, m := range r.Matches {
		b = append(b, " -m "...)
		b = append(b, m.Name()...)
		b = m.appendSave(b)
	}
	if r.Target != nil {
		b = r.Target.appendSave(b)
	}
	return b
}

func appendNeg(b []byte, neg bool) []byte {
	if neg {
		b = append(b, " !"...)
	}
	return b
}

func appendNet(b []byte, flag string, n Net, neg bool) []byte {
	if n.IsAny() && !neg {
		return b
	}
	b = appendNeg(b, neg)
	b = append(b, ' ')
	b = append(b, flag...)
	b = append(b, ' ')
	return n.appendTo(b)
}

func appendIface(b []byte, flag, name string, neg bool) []byte {
	if name == "" || (name == "+" && !neg) {
		return b
	}
	b = appendNeg(b, neg)
	b = append(b, ' ')
	b = append(b, flag...)
	b = append(b, ' ')
	return append(b, quoteIfNeeded(name)...)
}

// String prints n as iptables-save does: addr/len for contiguous masks,
// addr/mask otherwise, the address always masked.
func (n Net) String() string {
	return string(n.appendTo(nil))
}

// appendTo appends String to b, without a string of its own: a rule
// set's text prints 100k of them.
func (n Net) appendTo(b []byte) []byte {
	if !n.Addr.IsValid() {
		return append(b, "0.0.0.0/0"...)
	}
	addr := n.Addr.WithZone("")
	if n.Mask.IsValid() {
		a := n.Addr.AsSlice()
		m := n.Mask.AsSlice()
		for i := range a {
			a[i] &= m[i]
		}
		addr, _ = netip.AddrFromSlice(a)
	}
	b = addr.AppendTo(b)
	b = append(b, '/')
	if bits := n.Bits(); bits >= 0 {
		return strconv.AppendInt(b, int64(bits), 10)
	}
	return n.Mask.AppendTo(b)
}

// protoNames are the names iptables-save prints for protocol numbers
// (xtables_chain_protos, then /etc/protocols for the rest).
var protoNames = map[uint8]string{
	1: "icmp", 2: "igmp", 4: "ipencap", 6: "tcp", 17: "udp", 33: "dccp", 41: "ipv6",
	47: "gre", 50: "esp", 51: "ah", 58: "ipv6-icmp", 89: "ospf", 103: "pim",
	108: "ipcomp", 112: "vrrp", 132: "sctp", 135: "mobility-header", 136: "udplite",
}

// ProtoName returns the name iptables-save prints for protocol p.
func ProtoName(p uint8) string {
	if p == 0 {
		return "all"
	}
	if n, ok := protoNames[p]; ok {
		return n
	}
	return strconv.Itoa(int(p))
}

// Quote returns s as xtables_save_string prints it: bare when it consists of
// letters, digits, '_' and '-' only, otherwise in double quotes, with
// double quotes, single quotes and backslashes escaped by a backslash.
func Quote(s string) string {
	plain := s != ""
	for i := 0; i < len(s) && plain; i++ {
		c := s[i]
		plain = c == '_' || c == '-' || ('a' <= c && c <= 'z') || ('A' <= c && c <= 'Z') || ('0' <= c && c <= '9')
	}
	if plain {
		return s
	}
	var b strings.Builder
	b.WriteByte('"')
	for i := 0; i < len(s); i++ {
		if s[i] == '"' || s[i] == '\\' || s[i] == '\'' {
			b.WriteByte('\\')
		}
		b.WriteByte(s[i])
	}
	b.WriteByte('"')
	return b.String()
}

// quoteIfNeeded quotes s only if the restore tokenizer would split or
// change it; iptables-save prints such words raw.
func quoteIfNeeded(s string) string {
	if s == "" || strings.ContainsAny(s, " \t\n\"\\") {
		return Quote(s)
	}
	return s
}

// appendOptions prints the options of an extension bpfwall does not
// interpret. Their arguments print as written; only those the tokenizer
// would split or change are quoted.
func appendOptions(b []byte, opts []Option) []byte {
	for _, o := range opts {
		b = appendNeg(b, o.Neg)
		b = append(b, " --"...)
		b = append(b, o.Name...)
		for _, a := range o.Args {
			b = append(b, ' ')
			b = append(b, quoteIfNeeded(a)...)
		}
	}
	return b
}

func (m *Generic) appendSave(b []byte) []byte { return appendOptions(b, m.Options) }

func (t *GenericTarget) appendSave(b []byte) []byte {
	b = append(b, " -j "...)
	b = append(b, t.Target...)
	return appendOptions(b, t.Options)
}

func appendJump(b []byte, name string) []byte {
	b = append(b, " -j "...)
	return append(b, name...)
}

func (t *Accept) appendSave(b []byte) []byte { return appendJump(b, "ACCEPT") }
func (t *Drop) appendSave(b []byte) []byte   { return appendJump(b, "DROP") }
func (t *Return) appendSave(b []byte) []byte { return appendJump(b, "RETURN") }
func (t *Jump) appendSave(b []byte) []byte   { return appendJump(b, t.Chain) }

func (t *Goto) appendSave(b []byte) []byte {
	b = append(b, " -g "...)
	return append(b, t.Chain...)
}
