package ir

import (
	"fmt"
	"net/netip"

	"bpfwall/model"
	"bpfwall/rules"
)

// AddrSet is -m set over a hash:ip or hash:net ipset with one dimension.
// As in the kernel's hash types, the longest entry containing the address
// decides: the address is in the set when that entry is not a nomatch one.
type AddrSet struct {
	Dir     Dir
	Set     string // the ipset's name
	Entries []SetEntry
	Neg     bool
}

// SetEntry is one prefix of an AddrSet.
type SetEntry struct {
	Prefix  netip.Prefix
	NoMatch bool // an exception inside a shorter entry (hash:net nomatch)
}

func (m AddrSet) eval(p *Program, st *State, pkt *model.Packet) outcome {
	a := pkt.Src
	if m.Dir == Dst {
		a = pkt.Dst
	}
	// The hash types look the address up from the longest prefix
	// length down; the first entry found decides.
	best, in := -1, false
	for _, e := range m.Entries {
		if e.Prefix.Bits() > best && e.Prefix.Contains(a) {
			best, in = e.Prefix.Bits(), !e.NoMatch
		}
	}
	return is(in != m.Neg)
}

func (m AddrSet) appendTo(b []byte, fam rules.Family) []byte {
	b = append(b, m.Dir.String()+"-set "...)
	b = neg(b, m.Neg)
	b = append(b, m.Set...)
	b = append(b, '{')
	for i, e := range m.Entries {
		if i == maxSetEntriesShown {
			b = fmt.Appendf(b, ",...%d more", len(m.Entries)-i)
			break
		}
		if i > 0 {
			b = append(b, ',')
		}
		b = neg(b, e.NoMatch)
		b = append(b, e.Prefix.String()...)
	}
	return append(b, '}')
}

func (m AddrSet) verify(v *verifier, st *ruleState) error {
	if err := v.dir(m.Dir, false); err != nil {
		return err
	}
	for i, e := range m.Entries {
		if err := v.addr(e.Prefix.Addr()); err != nil {
			return fmt.Errorf("set %s: %w", m.Set, err)
		}
		if e.Prefix.Masked() != e.Prefix {
			return fmt.Errorf("set %s: prefix %s is not masked", m.Set, e.Prefix)
		}
		if i > 0 && m.Entries[i-1].Prefix == e.Prefix {
			return fmt.Errorf("set %s: prefix %s appears twice", m.Set, e.Prefix)
		}
	}
	return nil
}

func (m AddrSet) alternatives(p *Program, out []alt, limit int) ([]alt, bool) {
	if m.Neg || len(m.Entries) > limit {
		return nil, false
	}
	for _, e := range m.Entries {
		if e.NoMatch {
			return nil, false
		}
		out = append(out, alt{addrField(m.Dir), prefixOf(e.Prefix.Addr().AsSlice(), e.Prefix.Bits())})
	}
	return out, true
}
