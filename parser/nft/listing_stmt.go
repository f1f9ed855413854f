package nft

import (
	"fmt"
	"math/bits"
	"net/netip"
	"slices"
	"strconv"
	"strings"
)

// What a listing prints of statements bpfwall reads as tokens (queue,
// nat, counters in another order), and of the forms nft rewrites: tcp
// flags under a mask, an address under a prefix mask, arithmetic on
// marks.

// opWords are nft's operator keywords, listed as symbols.
var opWords = map[string]string{
	"and": "&", "or": "|", "xor": "^", "eq": "==", "ne": "!=", "lt": "<", "gt": ">", "le": "<=", "ge": ">=",
}

// natFlagOrder is the order nft lists nat flags in.
var natFlagOrder = []string{"random", "fully-random", "persistent"}

func (c *ruleCtx) generic(g *Generic) string {
	toks := make([]*RestTok, 0, len(g.Rest)+1)
	_, opFirst := opWords[g.Keyword]
	for i, t := range append([]*RestTok{{Token: g.Keyword}}, g.Rest...) {
		cp := *t
		if sym, ok := opWords[cp.Token]; ok && cp.Nested == nil {
			cp.Token = sym
		}
		if v, ok := varText(c.env, strings.TrimPrefix(cp.Token, "$")); ok && strings.HasPrefix(cp.Token, "$") && cp.Nested == nil {
			cp.Token = v
		}
		// The constants of a mark's arithmetic that goes on from the
		// statement before ("meta mark set mark and 0xff").
		if _, err := strconv.ParseUint(cp.Token, 0, 32); err == nil && c.markCont && opFirst && (i == 0 || toks[i-1].Token != "<<" && toks[i-1].Token != ">>") {
			n, _ := strconv.ParseUint(cp.Token, 0, 32)
			cp.Token = fmt.Sprintf("0x%08x", n)
		}
		toks = append(toks, &cp)
	}
	words := make([]string, len(toks))
	for i, t := range toks {
		words[i] = t.Token
	}
	switch g.Keyword {
	case "time":
		return "meta " + tokensText(toks, c.env)
	case "last":
		if !c.l.counters {
			return "last"
		}
	case "counter":
		return c.counterWords(words[1:])
	case "queue":
		if s, ok := queueText(words[1:]); ok {
			return s
		}
	case "masquerade", "redirect", "snat", "dnat":
		toks = c.natTokens(toks)
	case "mark", "meta", "ct":
		if g.Keyword == "mark" && c.cont {
			break
		}
		if s, ok := markArith(words); ok {
			return s
		}
	}
	return tokensText(toks, c.env)
}

// counterWords prints "counter bytes B packets P", the order nft reads
// but does not list.
func (c *ruleCtx) counterWords(words []string) string {
	if !c.l.counters {
		return "counter"
	}
	vals := map[string]string{"packets": "0", "bytes": "0"}
	for i := 0; i+1 < len(words); i += 2 {
		vals[words[i]] = words[i+1]
	}
	return fmt.Sprintf("counter packets %s bytes %s", vals["packets"], vals["bytes"])
}

// queueText prints "queue [num N] [fanout] [bypass]" as nft lists it:
// "queue [flags bypass,fanout] to N".
func queueText(words []string) (string, bool) {
	to := "0"
	var flags []string
	for i := 0; i < len(words); i++ {
		switch w := words[i]; {
		case (w == "num" || w == "to") && i+1 < len(words):
			to = words[i+1]
			i++
			for i+2 < len(words) && words[i+1] == "-" {
				to += "-" + words[i+2]
				i += 2
			}
		case w == "fanout" || w == "bypass":
			flags = append(flags, w)
		case w == "flags" && i+1 < len(words):
			for i+1 < len(words) && (words[i+1] == "fanout" || words[i+1] == "bypass" || words[i+1] == ",") {
				if words[i+1] != "," {
					flags = append(flags, words[i+1])
				}
				i++
			}
		default:
			return "", false
		}
	}
	slices.Sort(flags) // bypass, fanout: their bit order
	flags = slices.Compact(flags)
	if len(flags) > 0 {
		return fmt.Sprintf("queue flags %s to %s", strings.Join(flags, ","), to), true
	}
	return "queue to " + to, true
}

// natTokens orders a nat statement's flags as nft lists them, and in an
// inet table names the family of the address it maps to.
func (c *ruleCtx) natTokens(toks []*RestTok) []*RestTok {
	out := slices.Clone(toks)
	for i := 0; i < len(out); i++ {
		if !slices.Contains(natFlagOrder, out[i].Token) {
			continue
		}
		j := i
		var flags []string
		for j < len(out) && slices.Contains(natFlagOrder, out[j].Token) {
			flags = append(flags, out[j].Token)
			if j+1 < len(out) && out[j+1].Token == "," {
				j += 2
				continue
			}
			j++
			break
		}
		slices.SortFunc(flags, func(a, b string) int { return slices.Index(natFlagOrder, a) - slices.Index(natFlagOrder, b) })
		var repl []*RestTok
		for k, f := range flags {
			if k > 0 {
				repl = append(repl, &RestTok{Token: ","})
			}
			repl = append(repl, &RestTok{Token: f})
		}
		out = slices.Replace(out, i, j, repl...)
		i += len(repl)
	}
	if c.family == "inet" && (toks[0].Token == "snat" || toks[0].Token == "dnat") && len(out) > 2 && out[1].Token == "to" {
		if a, err := netip.ParseAddr(strings.Trim(out[2].Token, "[]")); err == nil {
			fam := "ip"
			if a.Is6() {
				fam = "ip6"
			}
			out = slices.Insert(out, 1, &RestTok{Token: fam})
		}
	}
	return out
}

// markArith folds what nft folds in a mark's arithmetic: "meta mark xor
// A == B" compares with A^B, and constants print in hex.
func markArith(words []string) (string, bool) {
	key := words[0]
	rest := words[1:]
	switch {
	case key == "mark":
		key = "mark"
	case len(words) > 1 && words[1] == "mark":
		key, rest = words[0]+" mark", words[2:]
	default:
		return "", false
	}
	if key == "mark" || key == "meta mark" {
		key = "meta mark"
	}
	num := func(s string) (uint64, bool) {
		n, err := strconv.ParseUint(s, 0, 32)
		return n, err == nil
	}
	hex := func(n uint64) string { return fmt.Sprintf("0x%08x", n) }
	if len(rest) == 4 && rest[0] == "^" && (rest[2] == "==" || rest[2] == "!=") {
		a, ok1 := num(rest[1])
		b, ok2 := num(rest[3])
		if ok1 && ok2 {
			if rest[2] == "!=" {
				return key + " != " + hex(a^b), true
			}
			return key + " " + hex(a^b), true
		}
	}
	out := []string{key}
	for i, w := range rest {
		if n, ok := num(w); ok && (i == 0 || rest[i-1] != "<<" && rest[i-1] != ">>") {
			w = hex(n)
		}
		out = append(out, w)
	}
	return strings.Join(out, " "), true
}

// foldMark folds "KEY set A OP B" of a mark's constants, which the
// grammar reads as a statement and a term "OP B".
func foldMark(key, a, op, b string) (string, bool) {
	x, err1 := strconv.ParseUint(a, 0, 32)
	y, err2 := strconv.ParseUint(b, 0, 32)
	if err1 != nil || err2 != nil {
		return "", false
	}
	var v uint64
	switch op {
	case "and", "&":
		v = x & y
	case "or", "|":
		v = x | y
	case "xor", "^":
		v = x ^ y
	default:
		return "", false
	}
	return fmt.Sprintf("%s set 0x%08x", key, v), true
}

// flagList reads the flag names of a mask or value: a name, "(a | b)",
// "a | b" or a comma list.
func flagList(p *Prim) []string {
	switch {
	case p.Atom != nil:
		return []string{unquote(*p.Atom)}
	case p.Paren != nil:
		var out []string
		for _, v := range p.Paren.Items {
			for _, u := range v.Parts {
				out = append(out, flagList(u.Lo)...)
				for _, o := range u.Or {
					out = append(out, flagList(o)...)
				}
			}
		}
		return out
	}
	return nil
}

// tcpFlagsText prints a tcp flags match under a mask, or in nft's
// "value / mask" form, as nft lists it; ok is false for other forms.
func tcpFlagsText(m *Match) (string, bool) {
	var value, mask []string
	op := normOp(m.Op)
	switch {
	case m.Mask != nil:
		mask = flagList(m.Mask)
		for _, v := range m.Right.Items {
			if len(v.Parts) != 1 || v.Parts[0].Hi != nil || v.Parts[0].Mask != nil || v.Parts[0].Lo.Set != nil {
				return "", false
			}
			value = append(value, flagList(v.Parts[0].Lo)...)
			for _, o := range v.Parts[0].Or {
				value = append(value, flagList(o)...)
			}
		}
	default:
		slash := false
		for _, v := range m.Right.Items {
			if len(v.Parts) != 1 || v.Parts[0].Hi != nil || v.Parts[0].Or != nil || v.Parts[0].Lo.Set != nil {
				return "", false
			}
			u := v.Parts[0]
			switch {
			case u.Mask != nil:
				if slash {
					return "", false
				}
				slash = true
				value = append(value, flagList(u.Lo)...)
				mask = append(mask, flagList(u.Mask)...)
			case slash:
				mask = append(mask, flagList(u.Lo)...)
			default:
				value = append(value, flagList(u.Lo)...)
			}
		}
		if !slash {
			return "", false
		}
	}
	if len(mask) == 0 || slices.ContainsFunc(append(slices.Clone(mask), value...), func(f string) bool { _, ok := tcpFlagNames[f]; return !ok && f != "0" }) {
		return "", false
	}
	if op == "" {
		op = "=="
	}
	if op != "==" && op != "!=" {
		return "", false
	}
	mask = sortFlags(tTCPFlags, mask)
	value = sortFlags(tTCPFlags, slices.DeleteFunc(value, func(f string) bool { return f == "0" }))
	if len(value) == 0 {
		if op == "==" {
			return "tcp flags ! " + strings.Join(mask, ","), true
		}
		return "tcp flags " + strings.Join(mask, ","), true
	}
	if len(mask) == 8 && len(value) == 8 {
		return "tcp flags " + op + " 0xff", true
	}
	mt := strings.Join(mask, " | ")
	if len(mask) > 1 {
		mt = "(" + mt + ")"
	}
	return fmt.Sprintf("tcp flags & %s %s %s", mt, op, strings.Join(value, " | ")), true
}

// prefixText prints "KEY & MASK == VALUE" of an IPv4 address as nft
// does when the mask is a prefix: "KEY VALUE/LEN".
func prefixMaskText(key, mask, value string) (string, bool) {
	m, err1 := netip.ParseAddr(mask)
	v, err2 := netip.ParseAddr(value)
	if err1 != nil || err2 != nil || !m.Is4() || !v.Is4() {
		return "", false
	}
	mb, vb := m.As4(), v.As4()
	mn := uint32(mb[0])<<24 | uint32(mb[1])<<16 | uint32(mb[2])<<8 | uint32(mb[3])
	vn := uint32(vb[0])<<24 | uint32(vb[1])<<16 | uint32(vb[2])<<8 | uint32(vb[3])
	ones := bits.LeadingZeros32(^mn)
	if ones == 0 || mn != ^uint32(0)<<(32-ones) || vn&^mn != 0 {
		return "", false
	}
	return fmt.Sprintf("%s %s/%d", key, value, ones), true
}
