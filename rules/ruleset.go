package rules

import (
	"net/netip"
	"slices"
	"strconv"
)

// Family is the address family of a rule set.
type Family uint8

const (
	IPv4 Family = iota
	IPv6
)

func (f Family) String() string {
	if f == IPv6 {
		return "ipv6"
	}
	return "ipv4"
}

// Bits is the address length in bits.
func (f Family) Bits() int {
	if f == IPv6 {
		return 128
	}
	return 32
}

// Ruleset is everything read from one iptables-save or ip6tables-save input.
type Ruleset struct {
	Family Family
	Tables []*Table
	// Sets holds the ipset definitions the rules may refer to, by name.
	Sets map[string]*IPSet
	// Warnings are problems that did not stop the input from being read.
	Warnings []*Error
}

// NumRules is how many rules the tables' chains hold.
func (rs *Ruleset) NumRules() int {
	n := 0
	for _, t := range rs.Tables {
		for _, c := range t.Chains {
			n += len(c.Rules)
		}
	}
	return n
}

// Table returns the table called name, or nil.
func (rs *Ruleset) Table(name string) *Table {
	for _, t := range rs.Tables {
		if t.Name == name {
			return t
		}
	}
	return nil
}

// Counters are a packet and a byte count.
type Counters struct {
	Packets, Bytes uint64
}

func (c Counters) String() string { return string(c.AppendTo(nil)) }

// AppendTo appends c as String prints it: Save prints one per rule.
func (c Counters) AppendTo(b []byte) []byte {
	b = append(b, '[')
	b = strconv.AppendUint(b, c.Packets, 10)
	b = append(b, ':')
	b = strconv.AppendUint(b, c.Bytes, 10)
	return append(b, ']')
}

// Policy is the verdict of a builtin chain for packets no rule decided.
type Policy uint8

const (
	PolicyNone Policy = iota // user chains
	PolicyAccept
	PolicyDrop
)

func (p Policy) String() string {
	switch p {
	case PolicyAccept:
		return "ACCEPT"
	case PolicyDrop:
		return "DROP"
	}
	return "-"
}

// BuiltinChains lists, in kernel hook order, the builtin chains of each table.
var BuiltinChains = map[string][]string{
	"filter":   {"INPUT", "FORWARD", "OUTPUT"},
	"nat":      {"PREROUTING", "INPUT", "OUTPUT", "POSTROUTING"},
	"mangle":   {"PREROUTING", "INPUT", "FORWARD", "OUTPUT", "POSTROUTING"},
	"raw":      {"PREROUTING", "OUTPUT"},
	"security": {"INPUT", "FORWARD", "OUTPUT"},
}

// Table is one netfilter table.
type Table struct {
	Name string
	Pos  Pos // the "*name" line that last opened it
	// Chains holds the builtin chains in hook order, then user chains in
	// creation order.
	Chains []*Chain
}

// NewTable returns a table with its builtin chains, policies ACCEPT.
func NewTable(name string, pos Pos) *Table {
	t := &Table{Name: name, Pos: pos}
	for _, c := range BuiltinChains[name] {
		t.Chains = append(t.Chains, &Chain{Name: c, Builtin: true, Policy: PolicyAccept})
	}
	return t
}

// Clone returns a copy of t whose chains and rule lists can be changed
// without changing t. Rules are shared: replace a rule, never modify it.
func (t *Table) Clone() *Table {
	nt := *t
	nt.Chains = make([]*Chain, len(t.Chains))
	for i, c := range t.Chains {
		nc := *c
		nc.Rules = slices.Clone(c.Rules)
		nt.Chains[i] = &nc
	}
	return &nt
}

// Chain returns the chain called name, or nil.
func (t *Table) Chain(name string) *Chain {
	for _, c := range t.Chains {
		if c.Name == name {
			return c
		}
	}
	return nil
}

// DeleteChain removes the chain called name.
func (t *Table) DeleteChain(name string) {
	t.Chains = slices.DeleteFunc(t.Chains, func(c *Chain) bool { return c.Name == name })
}

// Chain is a builtin or user-defined chain.
type Chain struct {
	Name     string
	Pos      Pos // where it was declared; zero for builtins never mentioned
	Builtin  bool
	Policy   Policy
	Counters Counters // policy counters of builtin chains
	Rules    []*Rule
}

// Rule is one rule: standard matches, extension matches in the order they
// were loaded, and an optional target.
type Rule struct {
	Pos      Pos // the command line the rule came from, column of the command
	Counters Counters

	Src, Dst       Net
	SrcNeg, DstNeg bool
	// Proto is the IP protocol number; 0 means any ("-p all").
	Proto    uint8
	ProtoNeg bool
	// ProtoGiven is set when -p was given, even as "-p all". ip6tables then
	// looks for the upper-layer header (IP6T_F_PROTO) and drops packets
	// whose extension headers it cannot walk; iptables-save does not show
	// "-p all".
	ProtoGiven bool
	// InIface and OutIface are interface names as written; a trailing '+'
	// matches every name with that prefix. Empty means any.
	InIface, OutIface string
	InNeg, OutNeg     bool
	// InByIndex and OutByIndex mark nft's "iif" and "oif", which nft
	// resolves to an interface index when it loads the rule; bpfwall
	// resolves the name when it attaches (the ifaces map is keyed by index
	// and filled then), so the name match is the same test.
	InByIndex, OutByIndex bool
	// Fragment is -f (non-first IPv4 fragments); FragmentNeg is ! -f.
	Fragment, FragmentNeg bool

	Matches []Match
	Target  Target // nil: the rule only counts

	// NFT marks a rule read from nftables. Its protocol and transport
	// matches have nft's semantics: a header that cannot be found or is
	// cut short makes the rule not match, where the xtables matches drop
	// the packet (hotdrop).
	NFT bool
}

// Net is an address with a mask, as iptables stores -s and -d. The zero
// value matches every address.
type Net struct {
	Addr netip.Addr
	Mask netip.Addr
}

// IsAny reports whether n matches every address.
func (n Net) IsAny() bool { return !n.Mask.IsValid() || n.Mask.IsUnspecified() }

// Bits returns the prefix length of the mask, or -1 if the mask is not
// contiguous.
func (n Net) Bits() int {
	if !n.Mask.IsValid() {
		return 0
	}
	bits, seenZero := 0, false
	for _, b := range n.Mask.AsSlice() {
		for i := 7; i >= 0; i-- {
			if b&(1<<i) != 0 {
				if seenZero {
					return -1
				}
				bits++
			} else {
				seenZero = true
			}
		}
	}
	return bits
}

// Contains reports whether a, of the same family, is in n.
func (n Net) Contains(a netip.Addr) bool {
	if n.IsAny() {
		return true
	}
	if a.BitLen() != n.Addr.BitLen() {
		return false
	}
	x, m, y := a.AsSlice(), n.Mask.AsSlice(), n.Addr.AsSlice()
	for i := range x {
		if x[i]&m[i] != y[i]&m[i] {
			return false
		}
	}
	return true
}

// NetFromPrefix returns the masked network of p.
func NetFromPrefix(p netip.Prefix) Net {
	p = p.Masked()
	return Net{Addr: p.Addr(), Mask: MaskOf(p.Addr().BitLen(), p.Bits())}
}

// MaskOf returns the mask with the first bits of a bitLen-bit address set;
// bitLen is 32 or 128.
func MaskOf(bitLen, bits int) netip.Addr {
	var b [16]byte
	for i := 0; i < bits/8; i++ {
		b[i] = 0xff
	}
	if bits%8 != 0 {
		b[bits/8] = 0xff << (8 - bits%8)
	}
	if bitLen == 32 {
		return netip.AddrFrom4([4]byte(b[:4]))
	}
	return netip.AddrFrom16(b)
}
