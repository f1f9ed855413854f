package rules

import "strings"

// Ifaces is nft's test of an interface name besides the rule's own -i or
// -o, which hold one each: a second "iifname" of a rule, or "iifname != {
// a, b }", none of the names. Names end in "+" for a prefix, as -i's do.
// iptables has no option for it, so it prints as bpfwall's own "-m
// nft-iface [!] --in a,b" (--out for oifname).
type Ifaces struct {
	Located
	Out     bool
	ByIndex bool // nft's iif and oif, as Rule.InByIndex
	// Names: with Neg, none of them; else the one name.
	Names []string
	Neg   bool
}

func (m *Ifaces) Name() string { return "nft-iface" }

func (m *Ifaces) appendSave(b []byte) []byte {
	if m.Neg {
		b = append(b, " !"...)
	}
	if m.Out {
		b = append(b, " --out "...)
	} else {
		b = append(b, " --in "...)
	}
	return append(b, strings.Join(m.Names, ",")...)
}
