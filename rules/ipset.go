package rules

import (
	"net/netip"
	"slices"
	"strings"
)

// IPSet is an ipset definition read from "ipset save" output.
type IPSet struct {
	Name string
	Pos  Pos
	// Type is the set type as written, e.g. "hash:ip" or "hash:net,port".
	Type    string
	Family  Family
	Options []string // create options other than family, as written
	Entries []IPSetEntry
}

// IPSetEntry is one "add" line. Addr is the address element of the entry
// (a single address is a full-length prefix); Rest holds the other
// dimensions as written ("tcp:80", an interface, ...), and Options the
// words after the element other than nomatch ("timeout 60", "comment x").
type IPSetEntry struct {
	Pos     Pos
	Addr    netip.Prefix
	Rest    []string
	Options []string
	NoMatch bool
}

// SaveSets prints sets as "ipset save" does, by name: what ParseIPSets
// reads back to the same sets (address ranges as the prefixes that cover
// them).
func SaveSets(sets map[string]*IPSet) []byte {
	names := make([]string, 0, len(sets))
	for name := range sets {
		names = append(names, name)
	}
	slices.Sort(names)
	var b strings.Builder
	for _, name := range names {
		s := sets[name]
		family := "inet"
		if s.Family == IPv6 {
			family = "inet6"
		}
		b.WriteString("create " + s.Name + " " + s.Type + " family " + family)
		for _, o := range s.Options {
			b.WriteString(" " + o)
		}
		b.WriteByte('\n')
		for _, e := range s.Entries {
			elem := e.Rest
			if e.Addr.IsValid() {
				addr := e.Addr.String()
				if e.Addr.IsSingleIP() {
					addr = e.Addr.Addr().String()
				}
				elem = append([]string{addr}, e.Rest...)
			}
			b.WriteString("add " + s.Name + " " + strings.Join(elem, ","))
			for _, o := range e.Options {
				b.WriteString(" " + o)
			}
			if e.NoMatch {
				b.WriteString(" nomatch")
			}
			b.WriteByte('\n')
		}
	}
	return []byte(b.String())
}
