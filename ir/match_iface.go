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
