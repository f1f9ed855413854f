package ir

import (
	"bytes"
	"fmt"
	"io"
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
		b = m.appendTo(b, p.Family)
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
func MatchString(fam rules.Family, m Match) string { return string(m.appendTo(nil, fam)) }
