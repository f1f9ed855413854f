package ir

import (
	"errors"
	"fmt"
	"strconv"

	"bpfwall/rules"
)

// Ports tests the transport ports (the first four bytes of the transport
// header) against a list of ranges: xt_tcpudp's port_match with one range,
// xt_multiport's ports_match_v1 with up to 15. With SrcOrDst either port may
// be in a range.
type Ports struct {
	Dir    Dir
	Ranges []rules.PortRange
	Neg    bool
}

func (m Ports) eval(p *Program, st *State, pkt *Packet) outcome {
	in := func(port uint16) bool {
		for _, r := range m.Ranges {
			if r.Contains(port) {
				return true
			}
		}
		return false
	}
	var ok bool
	switch m.Dir {
	case Src:
		ok = in(pkt.SrcPort)
	case Dst:
		ok = in(pkt.DstPort)
	default:
		ok = in(pkt.SrcPort) || in(pkt.DstPort)
	}
	return is(ok != m.Neg)
}

func (m Ports) appendTo(b []byte, fam rules.Family) []byte {
	switch m.Dir {
	case Src:
		b = append(b, "sport "...)
	case Dst:
		b = append(b, "dport "...)
	default:
		b = append(b, "port "...)
	}
	b = neg(b, m.Neg)
	for i, r := range m.Ranges {
		if i > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendUint(b, uint64(r.Lo), 10)
		if r.Hi != r.Lo {
			b = append(b, ':')
			b = strconv.AppendUint(b, uint64(r.Hi), 10)
		}
	}
	return b
}

func (m Ports) verify(v *verifier, st *ruleState) error {
	// The source port is the first two bytes of the header.
	need := 4
	if m.Dir == Src {
		need = 2
	}
	if err := errors.Join(v.dir(m.Dir, true), st.needs(need, "ports match")); err != nil {
		return err
	}
	if len(m.Ranges) == 0 {
		return fmt.Errorf("ports match without ranges")
	}
	for _, r := range m.Ranges {
		if r.Lo > r.Hi {
			return fmt.Errorf("empty port range %d:%d", r.Lo, r.Hi)
		}
	}
	return nil
}

func (m Ports) alternatives(p *Program, out []alt, limit int) ([]alt, bool) {
	if m.Neg {
		return nil, false
	}
	for _, d := range []Dir{Src, Dst} {
		if m.Dir != d && m.Dir != SrcOrDst {
			continue
		}
		field := FieldSport
		if d == Dst {
			field = FieldDport
		}
		for _, pr := range m.Ranges {
			lo := []byte{byte(pr.Lo >> 8), byte(pr.Lo)}
			hi := []byte{byte(pr.Hi >> 8), byte(pr.Hi)}
			for _, fp := range rangePrefixes(lo, hi) {
				out = append(out, alt{field, fp})
			}
		}
	}
	return out, true
}
