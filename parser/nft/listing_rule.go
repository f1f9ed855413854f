package nft

import (
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// unqualifiedMeta are the meta keys nft lists without "meta".
var unqualifiedMeta = map[string]bool{"iif": true, "oif": true, "iifname": true, "oifname": true, "iifgroup": true, "oifgroup": true}

// atomKey prints one selector atom as nft lists it. cont: the atom goes
// on an expression the term before began, so a bare key is not
// qualified.
func atomKey(a *SelAtom, family string, cont bool) string {
	switch {
	case a.Raw != nil && a.Raw[0] == "@th" && a.Raw[2] == "16" && (a.Raw[1] == "0" || a.Raw[1] == "16"):
		return map[string]string{"0": "th sport", "16": "th dport"}[a.Raw[1]]
	case a.Raw != nil:
		return a.Raw[0] + "," + a.Raw[1] + "," + a.Raw[2]
	case a.Bare != "" && cont:
		return a.Bare
	case a.Proto == "vlan" && a.Field == "cfi":
		return "vlan dei"
	case a.Bare != "":
		if unqualifiedMeta[a.Bare] {
			return a.Bare
		}
		return "meta " + a.Bare
	case a.Proto == "meta":
		switch {
		case unqualifiedMeta[a.Field]:
			return a.Field
		case a.Field == "secpath":
			return "meta ipsec"
		}
		return "meta " + a.Field
	case a.Proto == "ct":
		words := []string{"ct"}
		if a.Dir != "" && a.Field != "protocol" && a.Field != "l3proto" {
			words = append(words, a.Dir)
		}
		fam := a.Fam
		if fam == "" && a.Dir != "" && (a.Field == "saddr" || a.Field == "daddr") && (family == "ip" || family == "ip6") {
			fam = family
		}
		if fam != "" {
			words = append(words, fam)
		}
		return strings.Join(append(words, a.Field), " ")
	case a.Proto == "rt" && a.Field == "nexthop" && a.Fam == "" && (family == "ip" || family == "ip6"):
		return "rt " + family + " nexthop"
	}
	return a.text()
}

// ruleCtx is what printing a rule needs besides its terms.
type ruleCtx struct {
	family string
	env    *env
	l      *lister
	// cont: the term being printed goes on the previous term's value.
	cont bool
	// inSet: the value printed is a set's element, where flags combined
	// are "a | b", not a list.
	inSet bool
	// markCont: the term goes on a mark statement's value, whose
	// constants are marks.
	markCont bool
	// l3 is the network protocol the terms before name ("ip", "ip6"),
	// which a reject's default reply follows.
	l3 string
	// hasTTL: the rule tests "ip ttl".
	hasTTL bool
	// exact: the value printed is compared whole (after "==" or a mask),
	// not as "any of these flags".
	exact bool
}

// rule prints one rule as nft lists it.
func (l *lister) rule(t *table, r *srcRule) string {
	if r.unread != "" {
		return unreadText(substVars(r.raw, r.env))
	}
	c := &ruleCtx{family: t.family, env: r.env, l: l}
	terms := r.ast.Terms
	c.hasTTL = slices.ContainsFunc(terms, func(t *Term) bool {
		return t.Match != nil && len(t.Match.Left.Atoms) == 1 && t.Match.Left.Atoms[0].text() == "ip ttl"
	})
	outs := make([]termOut, 0, len(terms))
	var comment string
	for i := 0; i < len(terms); i++ {
		tm := terms[i]
		if tm.Comment != nil {
			comment = "comment " + *tm.Comment
			continue
		}
		// A statement's value the grammar read as a lone word, "ct"
		// of "ct mark set ct mark | 1", goes on in the next term: that
		// term's key is not a selector of its own.
		c.cont = i > 0 && splitValue(terms[i-1])
		c.markCont = i > 0 && markValue(terms[i-1])
		if i+1 < len(terms) && tm.Match != nil && tm.Match.Set != nil && terms[i+1].Other != nil && len(terms[i+1].Other.Rest) == 1 {
			key := atomKey(tm.Match.Left.Atoms[0], c.family, false)
			if selectorType(key) == tMark {
				if text, ok := foldMark(key, primText(tm.Match.Set), terms[i+1].Other.Keyword, terms[i+1].Other.Rest[0].Token); ok {
					outs = append(outs, termOut{text: text})
					i++
					continue
				}
			}
		}
		outs = append(outs, c.term(tm))
		c.l3 = l3After(c.l3, tm)
	}
	outs = c.implied(outs)
	var j joiner
	for i, o := range outs {
		if o.dep != "" && i+1 < len(outs) && slices.Contains(outs[i+1].needs, o.dep) {
			continue // nft adds this dependency itself and lists it not
		}
		if o.merge != "" && i+1 < len(outs) && outs[i+1].thMatch {
			// "meta l4proto tcp th dport 22" lists as "tcp dport 22".
			outs[i+1].text = o.merge + strings.TrimPrefix(outs[i+1].text, "th")
			continue
		}
		j.add(o.text)
	}
	if comment != "" {
		j.add(comment)
	}
	return j.String()
}

// unreadText prints a rule the grammar does not read in full as
// written, but for the arithmetic on marks nft folds: not knowing its
// structure, a listing changes nothing else of it.
func unreadText(raw string) string {
	words := strings.Fields(raw)
	if len(words) > 0 && !strings.Contains(raw, `"`) {
		mapped := slices.Clone(words)
		for i, w := range mapped {
			if sym, ok := opWords[w]; ok {
				mapped[i] = sym
			}
		}
		arith := len(mapped) <= 6 && !slices.ContainsFunc(mapped[1:], func(w string) bool {
			_, num := strconv.ParseUint(w, 0, 64)
			return num != nil && w != "mark" && !slices.Contains([]string{"&", "|", "^", "==", "!="}, w)
		})
		if s, ok := markArith(mapped); ok && arith {
			return s
		}
	}
	return raw
}

// joiner joins the printed parts of a rule with the spacing nft uses.
type joiner struct {
	b    strings.Builder
	last string
}

func (j *joiner) add(s string) {
	if s == "" {
		return
	}
	if j.b.Len() > 0 {
		first := s
		if k := strings.IndexByte(s, ' '); k > 0 {
			first = s[:k]
		}
		if strings.ContainsAny(first[:1], ",/:)]") {
			first = first[:1]
		}
		if spaced(j.last, first) {
			j.b.WriteByte(' ')
		}
	}
	j.b.WriteString(s)
	j.last = s[strings.LastIndexByte(s, ' ')+1:]
}

func (j *joiner) String() string { return j.b.String() }

// l3After is the network protocol known after term t, as nft's
// evaluator tracks it for a reject.
func l3After(l3 string, t *Term) string {
	if t.Match == nil || t.Match.Set != nil || t.Match.VMap != nil || len(t.Match.Left.Atoms) != 1 {
		return l3
	}
	a := t.Match.Left.Atoms[0]
	switch {
	case a.Proto == "ip" || a.Proto == "ip6":
		return a.Proto
	case a.Proto == "icmp":
		return "ip"
	case a.Proto == "icmpv6":
		return "ip6"
	}
	key := atomKey(a, "", false)
	if (key == "meta nfproto" || key == "meta protocol") && normOp(t.Match.Op) == "" && t.Match.Mask == nil && len(t.Match.Right.Items) == 1 {
		switch primText(t.Match.Right.Items[0]) {
		case "ipv4", "ip":
			return "ip"
		case "ipv6", "ip6":
			return "ip6"
		}
	}
	return l3
}

// markValue says whether t sets a mark to a mark's expression ("meta
// mark set mark and 0xff", "ct mark set 1 or 2"), whose constants the
// next term continues.
func markValue(t *Term) bool {
	if t.Match == nil || t.Match.Set == nil || selectorType(atomKey(t.Match.Left.Atoms[0], "", false)) != tMark {
		return false
	}
	v := primText(t.Match.Set)
	if _, err := strconv.ParseUint(v, 0, 32); err == nil {
		return true
	}
	return v == "mark" || v == "meta" || v == "ct"
}

// splitValue says whether t is a statement whose value the grammar cut
// after its first word.
func splitValue(t *Term) bool {
	var v string
	switch {
	case t.Match != nil && t.Match.Set != nil:
		v = primText(t.Match.Set)
	case t.Counter != nil && t.Counter.Name != nil:
		v = *t.Counter.Name
	default:
		return false
	}
	return v == "ct" || v == "meta" || v == "ip" || v == "ip6" || v == "tcp" || v == "udp"
}

// termOut is one printed term: its text, the dependency it is (a
// protocol match nft would add itself before a term that needs it), and
// the dependencies it needs.
type termOut struct {
	text  string
	key   string // the selector, for a match
	dep   string
	needs []string
	// merge is the transport protocol a "meta l4proto" match names, which
	// a following "th" match takes ("tcp dport").
	merge string
	// thMatch: the term is a match of a "th" selector.
	thMatch bool
}

func (c *ruleCtx) term(t *Term) termOut {
	switch {
	case t.Verdict != nil:
		return termOut{text: verdictText(t.Verdict)}
	case t.Counter != nil:
		return termOut{text: c.counter(t.Counter)}
	case t.Log != nil:
		return termOut{text: logText(t.Log, c.env)}
	case t.Limit != nil:
		return termOut{text: limitText(t.Limit)}
	case t.Reject != nil:
		return termOut{text: c.reject(t.Reject)}
	case t.Tproxy != nil:
		return termOut{text: c.tproxy(t.Tproxy)}
	case t.Xt != nil:
		return termOut{text: fmt.Sprintf("xt %s %s", t.Xt.Kind, t.Xt.Name)}
	case t.TCPOpt != nil:
		return termOut{text: fmt.Sprintf("tcp option %s %s", t.TCPOpt.Kind, t.TCPOpt.Test)}
	case t.Match != nil:
		return c.match(t.Match)
	case t.Other != nil:
		return termOut{text: c.generic(t.Other)}
	}
	return termOut{}
}

func verdictText(v *Verdict) string {
	if v.Jump != "" {
		return v.Jump + " " + name(unquote(v.Chain))
	}
	return v.Kind
}

func (c *ruleCtx) counter(ct *Counter) string {
	switch {
	case ct.Name != nil:
		return "counter name " + *ct.Name
	case !c.l.counters:
		return "counter"
	case ct.Packets != nil:
		return fmt.Sprintf("counter packets %s bytes %s", *ct.Packets, *ct.Bytes)
	}
	return "counter packets 0 bytes 0"
}

// logText prints a log statement with its options in nft's order; the
// default level, warn, is not listed.
func logText(lg *Log, e *env) string {
	opts := map[string]string{}
	var flags []string
	for _, o := range lg.Options {
		if o.Flags != nil {
			switch {
			case o.Flags.TCP != nil:
				flags = append(flags, "tcp "+strings.Join(o.Flags.TCP, ","))
			case o.Flags.IP:
				flags = append(flags, "ip options")
			default:
				flags = append(flags, o.Flags.Word)
			}
			continue
		}
		v := strings.Join(o.Value, ",")
		if strings.HasPrefix(v, "$") {
			if d, ok := e.vars[v[1:]]; ok {
				v = primText(d)
			}
		}
		if o.Key == "prefix" && !strings.HasPrefix(v, `"`) {
			v = strconv.Quote(v)
		}
		opts[o.Key] = v
	}
	words := []string{"log"}
	for _, k := range []string{"prefix", "level", "group", "snaplen", "queue-threshold"} {
		v, ok := opts[k]
		if !ok || (k == "level" && v == "warn") {
			continue
		}
		words = append(words, k, v)
	}
	all := []string{"tcp sequence,options", "ip options", "skuid", "ether"}
	if len(flags) == len(all) && !slices.ContainsFunc(all, func(f string) bool { return !slices.Contains(flags, f) }) || slices.Contains(flags, "all") {
		flags = []string{"all"}
	}
	for _, f := range flags {
		words = append(words, "flags", f)
	}
	return strings.Join(words, " ")
}

// limitText prints a limit as nft does: the rate unit against the
// slash, and a packet limit's burst, 5 unless given.
func limitText(lm *Limit) string {
	words := []string{"limit rate"}
	if lm.Over {
		words = append(words, "over")
	}
	rate := lm.Rate
	if lm.RateUnit != "" {
		rate += " " + lm.RateUnit
	}
	words = append(words, rate+"/"+lm.Per)
	switch {
	case lm.Burst != "" && (lm.BurstUnit == "" || lm.BurstUnit == "packets"):
		if lm.RateUnit != "" {
			words = append(words, "burst", lm.Burst, "bytes")
		} else {
			words = append(words, "burst", lm.Burst, "packets")
		}
	case lm.Burst != "":
		if lm.Burst != "0" {
			words = append(words, "burst", lm.Burst, lm.BurstUnit)
		}
	case lm.RateUnit == "":
		words = append(words, "burst 5 packets")
	}
	return strings.Join(words, " ")
}

// reject prints a reject statement, numeric reasons as names. A plain
// "reject" is icmp or icmpv6 port-unreachable in ip and ip6 tables;
// elsewhere it is icmpx port-unreachable, or, after a term that names the
// network protocol, that protocol's: it lists plain only where it means
// the same when loaded.
func (c *ruleCtx) reject(rj *Reject) string {
	with, def := rj.With, "icmpx"
	switch {
	case c.family == "ip" || c.l3 == "ip":
		def = "icmp"
	case c.family == "ip6" || c.l3 == "ip6":
		def = "icmpv6"
	}
	plainOK := c.family == "ip" || c.family == "ip6" || c.l3 == ""
	if with == "" {
		if plainOK {
			return "reject"
		}
		return "reject with " + def + " port-unreachable"
	}
	if with == "tcp" {
		return "reject with tcp " + rj.Reason
	}
	reason := rj.Reason
	var codes map[string]uint8
	switch rj.With {
	case "icmp":
		codes = icmpCodes
	case "icmpv6":
		codes = icmpv6Codes
	case "icmpx":
		codes = icmpxCodes
	}
	if n, err := strconv.ParseUint(reason, 0, 8); err == nil {
		if s := nameOf(codes, uint8(n)); s != "" {
			reason = s
		}
	}
	if with == def && reason == "port-unreachable" && plainOK {
		return "reject"
	}
	return "reject with " + rj.With + " " + reason
}

var icmpxCodes = map[string]uint8{"no-route": 0, "port-unreachable": 1, "host-unreachable": 2, "admin-prohibited": 3}

// nameOf finds the name of value v in names; of several names, the
// shortest, then the first in order.
func nameOf[V comparable](names map[string]V, v V) string {
	best := ""
	for n, x := range names {
		if x == v && (best == "" || len(n) < len(best) || len(n) == len(best) && n < best) {
			best = n
		}
	}
	return best
}

func (c *ruleCtx) tproxy(tp *Tproxy) string {
	words := []string{"tproxy"}
	if tp.Family != "" && c.family != "ip" && c.family != "ip6" {
		words = append(words, tp.Family)
	}
	to := ""
	if tp.Addr != nil {
		to = c.prim(tp.Addr, tRaw)
	}
	if tp.Port != nil {
		to += ":" + c.prim(tp.Port, tService)
	}
	return strings.Join(append(words, "to", to), " ")
}

// thProtos are the transport protocols whose ports "th" reads.
var thProtos = map[string]uint8{"tcp": 6, "udp": 17, "udplite": 136, "sctp": 132, "dccp": 33}

// protoNeeds are the protocol numbers a transport header's selectors
// need.
var protoNeeds = map[string]uint8{
	"tcp": 6, "udp": 17, "udplite": 136, "sctp": 132, "dccp": 33, "icmp": 1, "icmpv6": 58,
	"ah": 51, "esp": 50, "comp": 108,
}

func (c *ruleCtx) match(m *Match) termOut {
	var keys []string
	var types []vtype
	for _, a := range m.Left.Atoms {
		k := atomKey(a, c.family, c.cont)
		keys = append(keys, k)
		types = append(types, selectorType(k))
	}
	key := strings.Join(keys, " . ")
	out := termOut{key: key}
	if len(m.Left.Atoms) == 1 {
		out.needs = c.needs(m.Left.Atoms[0])
		out.thMatch = strings.HasPrefix(key, "th ") && m.Set == nil && m.VMap == nil
	}
	typ := tRaw
	if len(types) == 1 {
		typ = types[0]
	}
	words := []string{key}
	vc := c // prints the mask and the value
	if m.Mask != nil || normOp(m.Op) == "==" {
		cp := *c
		cp.exact = true
		vc = &cp
	}
	if m.Mask != nil {
		words = append(words, "&", vc.prim(m.Mask, typ))
	}
	switch {
	case m.Set != nil:
		val := c.value(m.Set, types)
		if v := primText(m.Set); v == "mark" {
			val = "meta mark" // a key, not a word
		}
		return termOut{text: strings.Join(append(words, "set", val), " ")}
	case m.VMap != nil:
		return termOut{text: strings.Join(append(words, "vmap", c.prim(m.VMap, tRaw, types...)), " ")}
	}
	if typ == tTCPFlags && m.Right != nil {
		if text, ok := tcpFlagsText(m); ok {
			out.text = text
			return out
		}
	}
	op := normOp(m.Op)
	if typ == tAddr4 && m.Mask != nil && (op == "" || op == "==") && len(m.Right.Items) == 1 {
		if text, ok := prefixMaskText(key, c.prim(m.Mask, typ), c.value(m.Right.Items[0], types)); ok {
			out.text = text
			return out
		}
	}
	if typ == tMark && m.Mask == nil && (op == "" || op == "==") && len(m.Right.Items) == 1 && len(m.Right.Items[0].Parts) == 1 {
		if u := m.Right.Items[0].Parts[0]; u.Mask != nil && u.Lo.Atom != nil && u.Mask.Atom != nil {
			v, err1 := strconv.ParseUint(*u.Lo.Atom, 0, 32)
			n, err2 := strconv.ParseUint(*u.Mask.Atom, 10, 8)
			if err1 == nil && err2 == nil && n <= 32 {
				mask := uint64(0xffffffff) << (32 - n) & 0xffffffff
				out.text = fmt.Sprintf("%s & 0x%08x == 0x%08x", key, mask, v&mask)
				return out
			}
		}
	}
	switch op {
	case "==":
		// On flags "==" compares the whole value, and without it any
		// of the flags matches.
		if m.Mask == nil && !isFlagType(typ) && key != "ct label" {
			op = ""
		}
	}
	if op != "" {
		words = append(words, op)
	}
	words = append(words, vc.list(m.Right, types))
	out.text = strings.Join(words, " ")
	if op == "" && m.Mask == nil && len(m.Right.Items) == 1 && len(m.Right.Items[0].Parts) == 1 {
		u := m.Right.Items[0].Parts[0]
		if u.Hi == nil && u.Mask == nil && u.Or == nil && u.Lo.Atom != nil {
			v := unquote(*u.Lo.Atom)
			out.dep = c.depOf(key, v)
			if p, err := parseProto(v); err == nil && key == "meta l4proto" {
				out.merge = nameOf(thProtos, p)
			}
		}
	}
	return out
}

// depOf says which dependency a match "key value" is, "" if none: nft
// adds "meta l4proto" (or "ip protocol" in an ip table) before a
// transport header's selectors itself, and "meta nfproto" or "meta
// protocol" before a network header's.
func (c *ruleCtx) depOf(key, v string) string {
	switch key {
	case "meta l4proto":
		if p, err := parseProto(v); err == nil {
			return "l4:" + strconv.Itoa(int(p))
		}
	case "ip protocol":
		// nft merges a written "ip protocol" with the "ip ttl" beside it
		// in the header into one comparison; the one it adds itself it
		// does not.
		if c.family == "ip" && !c.hasTTL {
			if p, err := parseProto(v); err == nil {
				return "l4:" + strconv.Itoa(int(p))
			}
		}
	case "meta nfproto":
		if c.family == "inet" {
			return map[string]string{"ipv4": "l3:ip", "ipv6": "l3:ip6"}[v]
		}
	case "meta protocol":
		if c.family == "ip" || c.family == "ip6" {
			return map[string]string{"ip": "l3:ip", "ip6": "l3:ip6"}[v]
		}
	case "ether type":
		if v == "vlan" || v == "8021q" {
			return "l2:vlan"
		}
	}
	return ""
}

// needs lists the dependencies of a selector's header.
func (c *ruleCtx) needs(a *SelAtom) []string {
	var out []string
	if p, ok := protoNeeds[a.Proto]; ok {
		// Of icmp in an inet, netdev or bridge table nft adds the network
		// protocol too: the transport protocol alone is not what it adds.
		icmpElsewhere := (a.Proto == "icmp" || a.Proto == "icmpv6") && c.family != "ip" && c.family != "ip6" &&
			c.l3 != map[string]string{"icmp": "ip", "icmpv6": "ip6"}[a.Proto]
		if !icmpElsewhere {
			out = append(out, "l4:"+strconv.Itoa(int(p)))
		}
		switch {
		case a.Proto == "icmp":
			out = append(out, "l3:ip")
		case a.Proto == "icmpv6":
			out = append(out, "l3:ip6")
		case c.family == "ip":
			out = append(out, "l3:ip")
		case c.family == "ip6":
			out = append(out, "l3:ip6")
		}
	}
	switch a.Proto {
	case "ip", "ip6":
		out = append(out, "l3:"+a.Proto)
	case "vlan":
		out = append(out, "l2:vlan")
	}
	return out
}

// implied adds what nft lists before an icmp echo's id or sequence: the
// types that have them.
func (c *ruleCtx) implied(outs []termOut) []termOut {
	for i := 0; i < len(outs); i++ {
		o := outs[i]
		var typ, types string
		switch o.key {
		case "icmp id", "icmp sequence":
			typ, types = "icmp type", "icmp type { echo-reply, echo-request }"
		case "icmpv6 id", "icmpv6 sequence":
			typ, types = "icmpv6 type", "icmpv6 type { echo-request, echo-reply }"
		default:
			continue
		}
		if slices.ContainsFunc(outs[:i], func(p termOut) bool { return p.key == typ }) {
			continue
		}
		outs = slices.Insert(outs, i, termOut{text: types, key: typ})
		i++
	}
	return outs
}

// list prints a right-hand side: a value, or a comma list of flags.
func (c *ruleCtx) list(l *List, types []vtype) string {
	typ := tRaw
	if len(types) == 1 {
		typ = types[0]
	}
	var parts []string
	for _, v := range l.Items {
		parts = append(parts, c.value(v, types))
	}
	if len(parts) > 1 && isFlagType(typ) {
		return strings.Join(sortFlags(typ, parts), ",")
	}
	return strings.Join(parts, ",")
}

// value prints a value, a concatenation of units whose parts have types.
func (c *ruleCtx) value(v *Value, types []vtype) string {
	var parts []string
	for i, u := range v.Parts {
		typ := tRaw
		switch {
		case len(v.Parts) == 1 && len(types) == 1:
			typ = types[0]
		case i < len(types) && len(v.Parts) == len(types):
			typ = types[i]
		}
		parts = append(parts, c.unit(u, typ, types))
	}
	return strings.Join(parts, " . ")
}

func (c *ruleCtx) unit(u *Unit, typ vtype, types []vtype) string {
	lo := c.prim(u.Lo, typ, types...)
	switch {
	case u.Hi != nil:
		if typ == tTime {
			return timeSeconds(lo) + "-" + timeSeconds(c.prim(u.Hi, typ))
		}
		if u.Lo.Atom != nil && u.Hi.Atom != nil {
			// nft's scanner reads "af33-cs5" as one word: a range lists
			// in numbers.
			return rangeAtom(*u.Lo.Atom, typ) + "-" + rangeAtom(*u.Hi.Atom, typ)
		}
		return lo + "-" + c.prim(u.Hi, typ)
	case u.Mask != nil:
		return lo + "/" + c.prim(u.Mask, tRaw)
	case u.Or != nil:
		parts := []string{lo}
		for _, p := range u.Or {
			parts = append(parts, c.prim(p, typ))
		}
		if isFlagType(typ) && !c.inSet {
			return strings.Join(sortFlags(typ, parts), ",")
		}
		return strings.Join(parts, " | ")
	}
	return lo
}

// prim prints a primary of type typ; a set's elements have types set
// (a concatenation's parts).
func (c *ruleCtx) prim(p *Prim, typ vtype, set ...vtype) string {
	if len(set) == 0 {
		set = []vtype{typ}
	}
	switch {
	case p.Set != nil:
		var els []string
		for _, el := range p.Set.Elems {
			els = append(els, c.l.elem(el, set, "", c.env))
		}
		if len(els) == 0 {
			return "{ }"
		}
		return "{ " + strings.Join(els, ", ") + " }"
	case p.Paren != nil:
		var items []string
		pc := *c
		pc.inSet = true // flags combined in parentheses are "a | b"
		for _, v := range p.Paren.Items {
			items = append(items, pc.value(v, []vtype{typ}))
		}
		return "(" + strings.Join(items, " | ") + ")"
	case p.Var != nil:
		name := (*p.Var)[1:]
		if d, ok := c.env.vars[name]; ok {
			inner := *c
			inner.env = c.env.envs[name]
			return inner.value(d, set)
		}
		return *p.Var
	case p.Ref != nil:
		return *p.Ref
	case p.Bracket != nil:
		return "[" + formatAtom(*p.Bracket, typ) + "]"
	case p.Atom != nil:
		if _, err := strconv.ParseUint(*p.Atom, 0, 64); err == nil && isFlagType(typ) && (c.inSet || c.exact) {
			// A number of flags is one value there; as names it would
			// be a list of values ("syn,ack") or "any of these".
			return *p.Atom
		}
		return formatAtom(*p.Atom, typ)
	}
	return ""
}

// elem prints a set element with its options and map value.
func (l *lister) elem(el *Elem, keys []vtype, valType string, e *env) string {
	c := &ruleCtx{env: e, l: l, inSet: true}
	var s string
	if el.CatchAll {
		s = "*"
	} else {
		// Nested sets are flattened into the set that holds them.
		if len(el.Key.Parts) == 1 && el.Key.Parts[0].Lo.Set != nil && el.Key.Parts[0].Hi == nil && el.Key.Parts[0].Mask == nil {
			inner := c.prim(el.Key.Parts[0].Lo, tRaw, keys...)
			s = strings.TrimSuffix(strings.TrimPrefix(inner, "{ "), " }")
		} else {
			s = c.value(el.Key, keys)
		}
	}
	for _, o := range el.Options {
		switch {
		case o.Key == "counter" && !l.counters:
			s += " counter"
		case o.Key == "counter":
			p, b := o.Packets, o.Bytes
			if p == "" {
				p, b = "0", "0"
			}
			s += fmt.Sprintf(" counter packets %s bytes %s", p, b)
		default:
			s += " " + o.Key + " " + o.Value
		}
	}
	switch {
	case el.Value != nil && len(keys) == 1 && keys[0] == tPriority && valType == "":
		// "bcad:dada" is one priority, major:minor, which the grammar
		// reads as a map element.
		s += ":" + c.value(el.Value, nil)
	case el.Verdict != nil:
		s += " : " + verdictText(el.Verdict)
	case el.Value != nil:
		s += " : " + c.value(el.Value, setKeyTypes(valType, false))
	}
	return s
}

// tokensText prints tokens nft reads without interpreting them here, as
// nft spaces them: lists and ranges tight, concatenations and blocks
// spaced; inside braces ", " between elements and " : " in map pairs.
func tokensText(toks []*RestTok, e *env) string { return tokensIn(toks, e, false) }

func tokensIn(toks []*RestTok, e *env, braces bool) string {
	var b strings.Builder
	var prev string
	for i, t := range toks {
		tok := t.Token
		if t.Nested != nil {
			var inner []*RestTok
			for _, it := range t.Nested.Items {
				inner = append(inner, &RestTok{Nested: it.Nested, Token: it.Token})
			}
			tok = "{ " + tokensIn(inner, e, true) + " }"
		} else if strings.HasPrefix(tok, "$") && e != nil {
			if v, ok := varText(e, tok[1:]); ok {
				tok = v
			}
		}
		switch {
		case i == 0:
		case braces && tok == ":", braces && prev == ":", braces && prev == ",":
			b.WriteByte(' ')
		case tok == ":" && strings.Contains(prev, ":"), prev == ":" && i > 1 && strings.Contains(toks[i-2].Token, ":"):
			// "2001:db8::1 : 80": joined, the port would be part of the
			// address.
			b.WriteByte(' ')
		case spaced(prev, tok):
			b.WriteByte(' ')
		}
		b.WriteString(tok)
		prev = tok
	}
	return b.String()
}

// varText prints the value of the variable name defined in e.
func varText(e *env, name string) (string, bool) {
	d, ok := e.vars[name]
	if !ok {
		return "", false
	}
	c := &ruleCtx{env: e.envs[name], l: &lister{}}
	return c.value(d, nil), true
}

// substVars writes the variables of text as written (a line the grammar
// does not read) as their values.
func substVars(text string, e *env) string {
	if e == nil || !strings.Contains(text, "$") {
		return text
	}
	return varRE.ReplaceAllStringFunc(text, func(v string) string {
		if s, ok := varText(e, v[1:]); ok {
			return s
		}
		return v
	})
}

var varRE = regexp.MustCompile(`\$[a-zA-Z_][a-zA-Z0-9_]*`)

// spaced says whether nft puts a space between two tokens.
func spaced(prev, tok string) bool {
	if prev == "to" {
		return true // "redirect to :80"
	}
	// A range's "-" joins values; beside a word it would make one word.
	value := func(s string) bool { return s != "" && (s[0] >= '0' && s[0] <= '9' || strings.Contains(s, ":")) }
	switch tok {
	case ",", "/", ":", ")", "]":
		return false
	case "-":
		return !value(prev)
	}
	switch prev {
	case ",", "/", ":", "(", "[":
		return false
	case "-":
		return !value(tok)
	}
	return true
}
