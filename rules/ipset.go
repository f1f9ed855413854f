package rules

import "net/netip"

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
// dimensions as written ("tcp:80", an interface, ...).
type IPSetEntry struct {
	Pos     Pos
	Addr    netip.Prefix
	Rest    []string
	NoMatch bool
}
