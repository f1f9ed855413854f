package ir

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"

	"bpfwall/rules"
)

// maxSetEntriesShown bounds how much of an address set a dump prints.
const maxSetEntriesShown = 8

// String returns the program as Format prints it.
func (p *Program) String() string {
	var b bytes.Buffer
	p.Format(&b)
	return b.String()
}

// Format prints the program for people and golden files: a header line,
// then per chain its rules, each with its ID, source line, matches and
// action:
//
//	chain INPUT policy DROP
//	  r0 rules.v4:5  src 10.0.0.0/8  proto tcp  l4hdr 20 frag8-drop  dport 22  -> ACCEPT
//
// The output depends only on the program.
func (p *Program) Format(w io.Writer) error {
	var b []byte
	b = fmt.Appendf(b, "%s table %s\n", p.Family, p.Table)
	for i, c := range p.Chains {
		b = append(b, "chain "...)
		b = append(b, c.Name...)
		if i == 0 {
			b = append(b, " policy "...)
			b = append(b, c.Policy.String()...)
		}
		b = append(b, '\n')
		for _, r := range c.Rules {
			b = p.appendRule(b, r)
			b = append(b, '\n')
		}
	}
	for _, rm := range p.Removed {
		b = append(b, "removed, covered by r"...)
		b = strconv.AppendInt(b, int64(rm.CoveredBy.ID), 10)
		b = append(b, ":\n"...)
		b = p.appendRule(b, rm.Rule)
		b = append(b, '\n')
	}
	_, err := w.Write(b)
	return err
}

func (p *Program) appendRule(b []byte, r *Rule) []byte {
	b = fmt.Appendf(b, "  r%d %s:%d", r.ID, posFile(r.Pos), r.Pos.Line)
	for _, m := range r.Matches {
		b = append(b, "  "...)
		b = appendMatch(b, p.Family, m)
	}
	b = append(b, "  -> "...)
	return p.appendAction(b, r.Action)
}

func posFile(p rules.Pos) string {
	if p.File == "" {
		return "-"
	}
	return p.File
}

func (p *Program) appendAction(b []byte, a Action) []byte {
	chainName := func(i int) string {
		if i >= 0 && i < len(p.Chains) {
			return p.Chains[i].Name
		}
		return fmt.Sprintf("#%d", i)
	}
	switch a := a.(type) {
	case Accept:
		return append(b, "ACCEPT"...)
	case Drop:
		return append(b, "DROP"...)
	case Reject:
		return append(b, "REJECT "+a.With...)
	case Return:
		return append(b, "RETURN"...)
	case Jump:
		return append(b, "jump "+chainName(a.Chain)...)
	case Goto:
		return append(b, "goto "+chainName(a.Chain)...)
	case Log:
		b = fmt.Appendf(b, "LOG level %d", a.Level)
		if a.Prefix != "" {
			b = append(b, " prefix "...)
			b = strconv.AppendQuote(b, a.Prefix)
		}
		if a.Flags != 0 {
			b = fmt.Appendf(b, " flags %#x", a.Flags)
		}
		return b
	case TProxy:
		b = fmt.Appendf(b, "TPROXY %s", rules.ProtoName(a.Proto))
		if a.Addr.IsValid() {
			b = append(b, " "+a.Addr.String()...)
		}
		return fmt.Appendf(b, " port %d", a.Port)
	case None:
		return append(b, "count"...)
	}
	return fmt.Appendf(b, "%T", a)
}

func neg(b []byte, n bool) []byte {
	if n {
		b = append(b, '!')
	}
	return b
}

func appendMatch(b []byte, fam rules.Family, m Match) []byte {
	switch m := m.(type) {
	case Addr:
		b = append(b, m.Dir.String()+" "...)
		b = neg(b, m.Neg)
		return append(b, rules.Net{Addr: m.Addr, Mask: m.Mask}.String()...)
	case AddrRange:
		b = append(b, m.Dir.String()+"-range "...)
		b = neg(b, m.Neg)
		return append(b, m.From.String()+"-"+m.To.String()...)
	case AddrSet:
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
	case Proto:
		b = append(b, "proto "...)
		b = neg(b, m.Neg)
		return append(b, rules.ProtoName(m.Proto)...)
	case Fragment:
		b = neg(b, m.Neg)
		return append(b, "frag"...)
	case Iface:
		b = append(b, m.Dir.String()+" "...)
		b = neg(b, m.Neg)
		b = append(b, m.Name...)
		if m.Prefix {
			b = append(b, '+')
		}
		return b
	case L4Header:
		b = fmt.Appendf(b, "l4hdr %d", m.Len)
		if m.TinyFragDrop {
			b = append(b, " frag8-drop"...)
		}
		return b
	case L4Proto:
		b = append(b, "l4proto "...)
		b = neg(b, m.Neg)
		return strconv.AppendUint(b, uint64(m.Proto), 10)
	case Transport:
		return fmt.Appendf(b, "transport %d", m.Len)
	case Ports:
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
	case TCPFlags:
		b = append(b, "tcp-flags "...)
		b = neg(b, m.Neg)
		return append(b, tcpFlagNames(m.Mask)+"="+tcpFlagNames(m.Comp)...)
	case TCPOption:
		b = append(b, "tcp-option "...)
		b = neg(b, m.Neg)
		return strconv.AppendUint(b, uint64(m.Kind), 10)
	case ICMP:
		if fam == rules.IPv6 {
			b = append(b, "icmpv6-type "...)
		} else {
			b = append(b, "icmp-type "...)
		}
		b = neg(b, m.Neg)
		if m.Any {
			b = append(b, "any"...)
		} else {
			b = strconv.AppendUint(b, uint64(m.Type), 10)
		}
		switch {
		case m.CodeMin == 0 && m.CodeMax == 0xff:
		case m.CodeMin == m.CodeMax:
			b = fmt.Appendf(b, "/%d", m.CodeMin)
		default:
			b = fmt.Appendf(b, "/%d:%d", m.CodeMin, m.CodeMax)
		}
		return b
	case Length:
		b = append(b, "length "...)
		b = neg(b, m.Neg)
		if m.Min == m.Max {
			return strconv.AppendUint(b, uint64(m.Min), 10)
		}
		return fmt.Appendf(b, "%d:%d", m.Min, m.Max)
	case TTL:
		name := "ttl"
		if fam == rules.IPv6 {
			name = "hl"
		}
		return fmt.Appendf(b, "%s %s %d", name, m.Op, m.Value)
	case SrcMAC:
		b = append(b, "mac-src "...)
		b = neg(b, m.Neg)
		return append(b, net.HardwareAddr(m.Addr[:]).String()...)
	case Mark:
		b = append(b, "mark "...)
		b = neg(b, m.Neg)
		b = fmt.Appendf(b, "%#x", m.Value)
		if m.Mask != 0xffffffff {
			b = fmt.Appendf(b, "/%#x", m.Mask)
		}
		return b
	case CTState:
		b = append(b, "ctstate "...)
		b = neg(b, m.Neg)
		return append(b, m.States.String()...)
	case PktType:
		b = append(b, "pkttype "...)
		b = neg(b, m.Neg)
		return append(b, m.Type.String()...)
	case TProxyTo:
		b = fmt.Appendf(b, "tproxy %s", rules.ProtoName(m.Proto))
		if m.Addr.IsValid() {
			b = append(b, " "+m.Addr.String()...)
		}
		return fmt.Appendf(b, " port %d", m.Port)
	case Limit:
		return append(b, m.String()...)
	case RateLimit:
		return append(b, m.String()...)
	case HashLimit:
		return append(b, m.String()...)
	case Recent:
		return append(b, m.String()...)
	}
	return fmt.Appendf(b, "%T", m)
}

var tcpFlagBits = []string{"FIN", "SYN", "RST", "PSH", "ACK", "URG", "ECE", "CWR"}

func tcpFlagNames(f uint8) string {
	if f == 0 {
		return "NONE"
	}
	var names []string
	for i, n := range tcpFlagBits {
		if f&(1<<i) != 0 {
			names = append(names, n)
		}
	}
	return strings.Join(names, ",")
}

// MatchString prints a match as Format does, for dumps and messages.
func MatchString(fam rules.Family, m Match) string { return string(appendMatch(nil, fam, m)) }
