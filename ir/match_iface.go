package ir

import (
	"fmt"
	"slices"
	"strings"

	"bpfwall/model"
	"bpfwall/rules"
)

// IfaceDir says which interface an Iface match tests.
type IfaceDir uint8

const (
	IfaceIn  IfaceDir = iota + 1 // -i
	IfaceOut                     // -o
)

func (d IfaceDir) String() string {
	if d == IfaceOut {
		return "out"
	}
	return "in"
}

// Iface is -i / -o (ifname_compare_aligned): the interface is called Name,
// or, with Prefix ("eth+"), its name starts with Name. A packet without
// that interface has the empty name, which only "+" (Name "", Prefix)
// matches.
type Iface struct {
	Dir    IfaceDir
	Name   string
	Prefix bool
	Neg    bool
}

func (m Iface) eval(p *Program, st *State, pkt *model.Packet) outcome {
	name := pkt.InIface
	if m.Dir == IfaceOut {
		name = pkt.OutIface
	}
	ok := name == m.Name
	if m.Prefix {
		ok = strings.HasPrefix(name, m.Name)
	}
	return is(ok != m.Neg)
}

// alternatives: a numbered pattern (ifaceNumbers), not negated, is a
// value of FieldIn or FieldOut, its number among the program's numbered
// patterns; any other, or a negation, is a residual match.
func (m Iface) alternatives(p *Program, out []alt, limit int) ([]alt, bool) {
	if m.Neg {
		return out, false
	}
	n := p.ifaceNumbers().number(m.Dir, m.Name, m.Prefix)
	if n == 0 {
		return out, false
	}
	f := FieldIn
	if m.Dir == IfaceOut {
		f = FieldOut
	}
	return append(out, alt{f, prefixOf([]byte{n}, 8)}), true
}

// maxIfaceNumbers is how many patterns of each direction the program
// numbers: the rest are residual matches. (A program tests 64 interface
// patterns at most, and codegen counts a number in six bits, 64 meaning
// none.)
const maxIfaceNumbers = 63

// ifaceNumbering numbers interface patterns the -i and -o matches of a
// program test, each direction from 1: every exact name first, in the
// order of the rules, then every prefix ("vlan+") that no device can
// match as well as a pattern numbered before it. A device then matches
// one numbered pattern at most, and its number is a field of the
// packet: a VLAN router's rules on "vl1x+" and "vl2x+" are keys of one
// table, not a residual match each.
type ifaceNumbering struct {
	patterns [2][]IfacePattern
	numbers  map[ifaceKey]uint8
}

// IfacePattern is a name a device's name is compared with: the whole of
// it, or with Prefix its start.
type IfacePattern struct {
	Name   string
	Prefix bool
}

// overlaps says whether a device's name can match both p and q.
func (p IfacePattern) overlaps(q IfacePattern) bool {
	switch {
	case p.Prefix && q.Prefix:
		return strings.HasPrefix(p.Name, q.Name) || strings.HasPrefix(q.Name, p.Name)
	case p.Prefix:
		return strings.HasPrefix(q.Name, p.Name)
	case q.Prefix:
		return strings.HasPrefix(p.Name, q.Name)
	}
	return p.Name == q.Name
}

type ifaceKey struct {
	dir IfaceDir
	IfacePattern
}

func (n *ifaceNumbering) number(dir IfaceDir, name string, prefix bool) uint8 {
	return n.numbers[ifaceKey{dir, IfacePattern{name, prefix}}]
}

// ifaceNumbers returns the program's numbering, made the first time.
func (p *Program) ifaceNumbers() *ifaceNumbering {
	if p.ifaces != nil {
		return p.ifaces
	}
	n := &ifaceNumbering{numbers: make(map[ifaceKey]uint8)}
	for _, prefixes := range []bool{false, true} {
		for _, r := range p.Rules {
			for _, m := range r.Matches {
				m, ok := m.(Iface)
				// "+", every device, overlaps every other pattern.
				if !ok || m.Neg || m.Prefix != prefixes || m.Name == "" {
					continue
				}
				k := ifaceKey{m.Dir, IfacePattern{m.Name, m.Prefix}}
				d := &n.patterns[m.Dir-IfaceIn]
				if _, seen := n.numbers[k]; seen || len(*d) == maxIfaceNumbers ||
					slices.ContainsFunc(*d, k.IfacePattern.overlaps) {
					continue
				}
				*d = append(*d, k.IfacePattern)
				n.numbers[k] = uint8(len(*d))
			}
		}
	}
	p.ifaces = n
	return n
}

// IfacePatterns are the patterns of direction dir that FieldIn or
// FieldOut number: pattern i has number i+1. No device matches two.
func (p *Program) IfacePatterns(dir IfaceDir) []IfacePattern {
	return p.ifaceNumbers().patterns[dir-IfaceIn]
}

func (m Iface) appendTo(b []byte, fam rules.Family) []byte {
	b = append(b, m.Dir.String()+" "...)
	b = neg(b, m.Neg)
	b = append(b, m.Name...)
	if m.Prefix {
		b = append(b, '+')
	}
	return b
}

func (m Iface) verify(v *verifier, st *ruleState) error {
	if m.Dir != IfaceIn && m.Dir != IfaceOut {
		return fmt.Errorf("interface match with direction %d", m.Dir)
	}
	if len(m.Name) > maxIfaceName || (m.Name == "" && !m.Prefix) {
		return fmt.Errorf("bad interface name %q", m.Name)
	}
	return nil
}

func init() {
	lowers(func(l *lowerer, ms []Match, r *rules.Rule, m *rules.Ifaces, nft bool) []Match {
		return l.lowerIfaces(ms, m)
	})
}

// lowerIfaces lowers nft's interface tests beyond the rule's own -i and -o.
func (l *lowerer) lowerIfaces(ms []Match, m *rules.Ifaces) []Match {
	dir := IfaceIn
	if m.Out {
		dir = IfaceOut
	}
	if !m.Neg && len(m.Names) != 1 {
		l.errorf(m.Pos, "an interface test of %d names that is not negated", len(m.Names))
		return ms
	}
	for _, n := range m.Names {
		ms = l.iface(ms, dir, n, m.Neg)
	}
	return ms
}
