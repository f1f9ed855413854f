package nft

import (
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"bpfwall/rules"
)

// A listing is what "nft list ruleset" prints after "nft -f" of a
// script: every table the script leaves, with its objects, sets,
// flowtables and chains, each rule as nft lists it. Format prints the
// script's own structure, not the model bpfwall compiles, so that what
// bpfwall does not compile (a queue, a quota, a bridge table's chains)
// prints too, and the listing loads into nft as the script does.
//
// Rules print as nft 1.1 lists them, the version whose tests
// (tests/py) measure this printer: operators as symbols, implicit "==",
// protocols, ports and user ids as numbers, marks in hex, flag lists in
// bit order, dscp and icmp types by name, times in units, and the
// dependency nft adds itself (the "meta l4proto tcp" before "tcp dport")
// left out where nft leaves it out.

// FormatOptions says how Format prints.
type FormatOptions struct {
	// Counters prints each counter's packets and bytes, as given in the
	// script (0 where it gives none), as "nft list ruleset" does;
	// otherwise counters print as "nft -s list ruleset" prints them.
	Counters bool
	// ReadFile reads included files; nil reads regular files.
	ReadFile func(string) ([]byte, error)
}

// Format reads an nft script and writes the rule set it builds as an
// "nft list ruleset" listing.
func Format(name string, src []byte, opts FormatOptions) ([]byte, error) {
	nrs, err := readRuleset(name, src, opts.ReadFile)
	if err != nil {
		return nil, err
	}
	l := &lister{counters: opts.Counters}
	for _, t := range nrs.tables {
		l.table(t)
	}
	return []byte(l.b.String()), nil
}

type lister struct {
	b        strings.Builder
	counters bool
}

func (l *lister) line(indent int, format string, args ...any) {
	l.b.WriteString(strings.Repeat("\t", indent))
	fmt.Fprintf(&l.b, format, args...)
	l.b.WriteByte('\n')
}

// name prints a table, chain, set or object name: quoted when nft's
// scanner would not read it as one word.
func name(s string) string {
	if !wordRE.MatchString(s) || keywords[s] {
		return strconv.Quote(s)
	}
	return s
}

// wordRE is a name the lexer reads as one word (its Word token).
var wordRE = regexp.MustCompile(`^(?:[a-zA-Z_][a-zA-Z0-9_\-.]*[a-zA-Z0-9_]|[a-zA-Z_])$`)

// keywords are words nft's scanner reads as keywords where a name
// stands; a name spelled so is listed quoted.
var keywords = map[string]bool{"table": true, "chain": true, "set": true, "map": true, "rule": true, "counter": true, "flowtable": true}

func (l *lister) table(t *table) {
	l.line(0, "table %s %s {", t.family, name(t.name))
	first := true
	sep := func() {
		if !first {
			l.b.WriteByte('\n')
		}
		first = false
	}
	if len(t.flags) > 0 {
		l.line(1, "flags %s", strings.Join(t.flags, ","))
		first = false
	}
	if t.comment != nil {
		l.line(1, "comment %s", *t.comment)
		first = false
	}
	for _, o := range t.objDecls {
		if o.words[0] != "flowtable" {
			sep()
			l.object(o)
		}
	}
	for _, n := range t.setOrder {
		if s := t.sets[n]; s != nil {
			sep()
			l.set(s)
		}
	}
	for _, o := range t.objDecls {
		if o.words[0] == "flowtable" {
			sep()
			l.object(o)
		}
	}
	for _, c := range t.chains {
		sep()
		l.chain(t, c)
	}
	l.line(0, "}")
}

// object prints a stateful object or flowtable: its words, then its
// block's statements one per line.
func (l *lister) object(o objDecl) {
	words := slices.Clone(o.words)
	words[len(words)-1] = name(unquote(words[len(words)-1]))
	l.line(1, "%s {", strings.Join(words, " "))
	if o.body != nil {
		for _, stmt := range blockStatements(o.body, o.env) {
			l.line(2, "%s", stmt)
		}
	}
	l.line(1, "}")
}

// blockStatements splits a block's tokens into its statements.
func blockStatements(b *Block, e *env) []string {
	var out []string
	var cur []*RestTok
	flush := func() {
		if len(cur) > 0 {
			out = append(out, tokensText(cur, e))
			cur = nil
		}
	}
	for _, it := range b.Items {
		if it.Nested == nil && (it.Token == ";" || it.Token == "\n") {
			flush()
			continue
		}
		cur = append(cur, &RestTok{Nested: it.Nested, Token: it.Token})
	}
	flush()
	return out
}

func (l *lister) set(s *set) {
	l.line(1, "%s %s {", s.kind(), name(s.name))
	var keyType, valType string
	var typeof bool
	for _, it := range s.items {
		switch {
		case it.Type != nil:
			keyType, valType = strings.Join(it.Type.Key, " . "), strings.Join(it.Type.Value, " . ")
		case it.Typeof != nil:
			typeof = true
			keyType, valType, _ = strings.Cut(strings.Join(it.Typeof.Tokens, " "), " : ")
		}
	}
	// The declaration's lines as written: what they say is nft's to
	// check, and a listing needs no more of them.
	for _, line := range s.lines {
		l.line(2, "%s", line)
	}
	if len(s.elems) > 0 {
		keys := setKeyTypes(keyType, typeof)
		var els []string
		for i, el := range s.elems {
			els = append(els, l.elem(el, keys, valType, s.elemEnvs[i]))
		}
		l.line(2, "elements = { %s }", strings.Join(els, ", "))
	}
	l.line(1, "}")
}

// setKeyTypes gives the value types of a set's key parts, from its
// "type" (ipv4_addr . inet_service) or "typeof" (ip saddr . tcp dport).
func setKeyTypes(keyType string, typeof bool) []vtype {
	var out []vtype
	for _, part := range strings.Split(keyType, " . ") {
		if typeof {
			out = append(out, selectorType(strings.TrimSpace(part)))
		} else {
			out = append(out, typeNames[strings.TrimSpace(part)])
		}
	}
	return out
}

func (l *lister) chain(t *table, c *chain) {
	l.line(1, "chain %s {", name(c.name))
	if c.comment != nil {
		l.line(2, "comment %s", *c.comment)
	}
	if h := c.hook; h != nil {
		dev := ""
		switch len(h.devices) {
		case 0:
		case 1:
			dev = fmt.Sprintf(" device %s", strconv.Quote(h.devices[0]))
		default:
			var q []string
			for _, d := range h.devices {
				q = append(q, strconv.Quote(d))
			}
			dev = fmt.Sprintf(" devices = { %s }", strings.Join(q, ", "))
		}
		policy := "accept"
		if h.policy == rules.PolicyDrop {
			policy = "drop"
		}
		l.line(2, "type %s hook %s%s priority %s; policy %s;", h.typ, h.hook, dev, priorityText(t.family, h.hook, h.prio), policy)
	}
	if len(c.flags) > 0 {
		l.line(2, "flags %s", strings.Join(c.flags, ","))
	}
	for _, r := range c.rules {
		l.line(2, "%s", l.rule(t, r))
	}
	l.line(1, "}")
}

// priorityText prints a base chain's priority as nft does: the standard
// name of the family and hook within 10 of it, with the offset, or the
// number.
func priorityText(family, hook string, prio int) string {
	type std struct {
		name string
		val  int
		ok   func(hook string) bool
	}
	any := func(string) bool { return true }
	var table []std
	switch family {
	case "bridge":
		table = []std{
			{"dstnat", -300, func(h string) bool { return h == "prerouting" }},
			{"filter", -200, any},
			{"out", 100, func(h string) bool { return h == "output" }},
			{"srcnat", 300, func(h string) bool { return h == "postrouting" }},
		}
	case "netdev", "arp":
		table = []std{{"filter", 0, any}}
	default:
		table = []std{
			{"raw", -300, any}, {"mangle", -150, any},
			{"dstnat", -100, func(h string) bool { return h == "prerouting" }},
			{"filter", 0, any}, {"security", 50, any},
			// nft 1.0 takes dstnat in prerouting and srcnat in
			// postrouting only, newer ones also in output and input:
			// a number reads in both.
			{"srcnat", 100, func(h string) bool { return h == "postrouting" }},
		}
	}
	for _, s := range table {
		off := prio - s.val
		if off < -10 || off > 10 || !s.ok(hook) {
			continue
		}
		switch {
		case off > 0:
			return fmt.Sprintf("%s + %d", s.name, off)
		case off < 0:
			return fmt.Sprintf("%s - %d", s.name, -off)
		}
		return s.name
	}
	return strconv.Itoa(prio)
}
