package ir

import (
	"fmt"
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

// alternatives: an exact name, not negated, is a value of FieldIn or
// FieldOut, its number among the program's names; a prefix or a negation
// is a residual match.
func (m Iface) alternatives(p *Program, out []alt, limit int) ([]alt, bool) {
	if m.Neg || m.Prefix {
		return out, false
	}
	n := p.ifaceNumbers().number(m.Dir, m.Name)
	if n == 0 {
		return out, false
	}
	f := FieldIn
	if m.Dir == IfaceOut {
		f = FieldOut
	}
	return append(out, alt{f, prefixOf([]byte{n}, 8)}), true
}

// maxIfaceNumbers is how many names of each direction the program
// numbers: the rest are residual matches. (A program tests 64 interface
// patterns at most, and codegen counts a number in six bits, 64 meaning
// none.)
const maxIfaceNumbers = 63

// ifaceNumbering numbers the exact names the -i and -o matches of a
// program test, each direction from 1 in the order of the rules.
type ifaceNumbering struct {
	names   [2][]string
	numbers map[ifaceName]uint8
}

type ifaceName struct {
	dir  IfaceDir
	name string
}

func (n *ifaceNumbering) number(dir IfaceDir, name string) uint8 {
	return n.numbers[ifaceName{dir, name}]
}

// ifaceNumbers returns the program's numbering, made the first time.
func (p *Program) ifaceNumbers() *ifaceNumbering {
	if p.ifaces != nil {
		return p.ifaces
	}
	n := &ifaceNumbering{numbers: make(map[ifaceName]uint8)}
	for _, r := range p.Rules {
		for _, m := range r.Matches {
			m, ok := m.(Iface)
			if !ok || m.Neg || m.Prefix || m.Name == "" {
				continue
			}
			k := ifaceName{m.Dir, m.Name}
			d := &n.names[m.Dir-IfaceIn]
			if _, seen := n.numbers[k]; seen || len(*d) == maxIfaceNumbers {
				continue
			}
			*d = append(*d, m.Name)
			n.numbers[k] = uint8(len(*d))
		}
	}
	p.ifaces = n
	return n
}

// IfaceNames are the exact names of direction dir that FieldIn or
// FieldOut number: name i has number i+1.
func (p *Program) IfaceNames(dir IfaceDir) []string {
	return p.ifaceNumbers().names[dir-IfaceIn]
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
		ms = iface(ms, dir, n, m.Neg)
	}
	return ms
}
