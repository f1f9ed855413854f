package ir

import (
	"errors"
	"fmt"
	"slices"
	"strconv"

	"bpfwall/model"
	"bpfwall/rules"
)

// Ports tests the transport ports (the first four bytes of the transport
// header) against a list of ranges: xt_tcpudp's port_match with one range,
// xt_multiport's ports_match_v1 with up to 15. With SrcOrDst either port may
// be in a range.
type Ports struct {
	// The slice first: Dir and Neg then share its last word's padding,
	// and a Ports is 32 bytes, not 48.
	Ranges []rules.PortRange
	Dir    Dir
	Neg    bool
}

func (m Ports) eval(p *Program, st *State, pkt *model.Packet) outcome {
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
			var buf [2*16 - 2]fieldPrefix
			lo := []byte{byte(pr.Lo >> 8), byte(pr.Lo)}
			hi := []byte{byte(pr.Hi >> 8), byte(pr.Hi)}
			for _, fp := range rangePrefixes(buf[:0], lo, hi) {
				out = append(out, alt{field, fp})
			}
		}
	}
	return out, true
}

func init() {
	lowers(func(l *lowerer, ms []Match, r *rules.Rule, m *rules.TCP, nft bool) []Match {
		return l.lowerTCP(ms, r, m, nft)
	})
	lowers(func(l *lowerer, ms []Match, r *rules.Rule, m *rules.UDP, nft bool) []Match {
		return l.lowerUDP(ms, r, m, nft)
	})
	lowers(func(l *lowerer, ms []Match, r *rules.Rule, m *rules.SCTP, nft bool) []Match {
		return l.lowerSCTP(ms, r, m)
	})
	lowers(func(l *lowerer, ms []Match, r *rules.Rule, m *rules.Multiport, nft bool) []Match {
		return l.lowerMultiport(ms, r, m, nft)
	})
}

// lowerTCP lowers -m tcp: its ports, flags and option, after the transport header they need.
func (l *lowerer) lowerTCP(ms []Match, r *rules.Rule, m *rules.TCP, nft bool) []Match {
	if !l.needProto(r, m, "tcp", model.ProtoTCP) {
		return ms
	}
	switch {
	case !nft:
		ms = l4Header(ms, 20, true)
	case m.FlagMask != 0 || m.FlagComp != 0 || m.FlagsNeg:
		ms = transport(ms, 14) // th + 13, one byte
	case m.DstPorts != rules.AnyPort || m.DstNeg:
		ms = transport(ms, 4)
	case m.SrcPorts != rules.AnyPort || m.SrcNeg:
		ms = transport(ms, 2) // nft loads the source port alone
	}
	if nft && m.Option != 0 {
		l.errorf(m.Pos, "tcp option match is not supported in nft rules")
		return ms
	}
	ms = l.ports(ms, m, Src, m.SrcPorts, m.SrcNeg)
	ms = l.ports(ms, m, Dst, m.DstPorts, m.DstNeg)
	// A zero mask and comparison always hold, and never when negated;
	// a zero mask with flags to compare never holds (tcp_mt compares
	// flags & mask with them).
	if m.FlagMask != 0 || m.FlagComp != 0 || m.FlagsNeg {
		ms = append(ms, TCPFlags{Mask: m.FlagMask, Comp: m.FlagComp, Neg: m.FlagsNeg})
	}
	if m.Option != 0 {
		ms = append(ms, TCPOption{Kind: m.Option, Neg: m.OptionNeg})
	}
	return ms
}

// lowerUDP lowers -m udp: its ports, after the transport header they need.
func (l *lowerer) lowerUDP(ms []Match, r *rules.Rule, m *rules.UDP, nft bool) []Match {
	if !l.needProto(r, m, "udp", model.ProtoUDP) {
		return ms
	}
	switch {
	case !nft:
		ms = l4Header(ms, 8, false)
	case m.SrcPorts != rules.AnyPort || m.SrcNeg:
		if m.DstPorts == rules.AnyPort && !m.DstNeg {
			ms = transport(ms, 2) // nft loads the source port alone
			break
		}
		fallthrough
	default:
		ms = transport(ms, 4)
	}
	ms = l.ports(ms, m, Src, m.SrcPorts, m.SrcNeg)
	ms = l.ports(ms, m, Dst, m.DstPorts, m.DstNeg)
	return ms
}

// lowerSCTP lowers -m sctp's ports, after its 12-byte common header
// (sctp_mt: no non-first fragment matches, a first one too short for the
// header drops); its chunk types are refused.
func (l *lowerer) lowerSCTP(ms []Match, r *rules.Rule, m *rules.SCTP) []Match {
	if !l.needProto(r, m, "sctp", model.ProtoSCTP) {
		return ms
	}
	if m.Chunks != "" {
		l.errorf(m.Pos, "sctp --chunk-types is not supported")
		return ms
	}
	ms = l4Header(ms, 12, false)
	ms = l.ports(ms, m, Src, m.SrcPorts, m.SrcNeg)
	return l.ports(ms, m, Dst, m.DstPorts, m.DstNeg)
}

// lowerMultiport lowers -m multiport, which needs a protocol with ports.
func (l *lowerer) lowerMultiport(ms []Match, r *rules.Rule, m *rules.Multiport, nft bool) []Match {
	if !l.needProto(r, m, "tcp, udp, udplite, sctp or dccp", model.ProtoTCP, model.ProtoUDP, model.ProtoUDPLite, model.ProtoSCTP, model.ProtoDCCP) {
		return ms
	}
	return l.multiport(ms, m, nft)
}

func (l *lowerer) ports(ms []Match, m rules.Match, dir Dir, r rules.PortRange, neg bool) []Match {
	if r == rules.AnyPort && !neg {
		return ms
	}
	if r.Lo > r.Hi {
		l.errorf(m.Position(), "port range %d:%d is empty", r.Lo, r.Hi)
		return ms
	}
	k := portsKey{dir, r, neg}
	boxed, ok := l.portBoxes[k]
	if !ok {
		if l.portBoxes == nil {
			l.portBoxes = make(map[portsKey]Match)
		}
		boxed = Ports{Dir: dir, Ranges: []rules.PortRange{r}, Neg: neg}
		l.portBoxes[k] = boxed
	}
	return append(ms, boxed)
}

// portsKey is a Ports match of one range.
type portsKey struct {
	dir Dir
	r   rules.PortRange
	neg bool
}

func (l *lowerer) multiport(ms []Match, m *rules.Multiport, nft bool) []Match {
	var dir Dir
	switch m.Dir {
	case rules.MultiportSrc:
		dir = Src
	case rules.MultiportDst:
		dir = Dst
	case rules.MultiportBoth:
		dir = SrcOrDst
	default:
		l.errorf(m.Pos, "multiport match without a direction")
		return ms
	}
	if len(m.Ports) == 0 {
		l.errorf(m.Pos, "multiport match without ports")
		return ms
	}
	for _, r := range m.Ports {
		if r.Lo > r.Hi {
			l.errorf(m.Pos, "port range %d:%d is empty", r.Lo, r.Hi)
			return ms
		}
	}
	// multiport_mt reads only the two port fields; nft loads the one it
	// compares.
	switch {
	case nft && dir == Src:
		ms = transport(ms, 2)
	case nft:
		ms = transport(ms, 4)
	default:
		ms = l4Header(ms, 4, false)
	}
	return append(ms, Ports{Dir: dir, Ranges: slices.Clone(m.Ports), Neg: m.Neg})
}
