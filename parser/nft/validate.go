package nft

import (
	"math/big"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	"bpfwall/rules"
)

// nft checks what a rule says before the kernel sees it: the keys of its
// selectors, the types and ranges of its values. bpfwall reads some rules
// it does not compile, so that check and fmt can read a whole rule set and
// the compile error names the construct. Those rules must still be ones
// nft takes: validate refuses what nft's parser and evaluator refuse, with
// their reasons, whether or not bpfwall compiles the construct.

// valueSpec is the type of a selector's value, as nft's evaluator checks
// a constant on the right-hand side.
type valueSpec struct {
	kind valueKind
	// bits bounds an integer: values above 1<<bits - 1 are out of range.
	bits uint
	// syms are the symbolic constants of the type, besides integers.
	syms []string
	// what names the type in "Could not parse ..." (nft's datatype
	// description).
	what string
	// maxLen bounds a string, counting its terminating NUL.
	maxLen int
	// maxInt, when set, bounds an integer below 1<<bits - 1.
	maxInt uint64
	// constOnly: a statement's value is constants, never an expression,
	// so a word that is no symbol is refused there too.
	constOnly bool
	// names: a word may be a name from a file of the host's that nft
	// reads (connlabel.conf), which is not checked here.
	names bool
}

type valueKind uint8

const (
	vInteger valueKind = iota
	vString
	vTime // a duration: 30s, 1m, 1d2h, or seconds
	vWord // one of the symbols only
	vHour // "HH:MM[:SS]"
	vDate // "YYYY-MM-DD[ HH:MM[:SS]]", or seconds since the epoch
)

// ctKeys are conntrack's keys, as nft's grammar and ct templates have
// them: whether they take a direction (original, reply) and the type of
// their value. A key missing here is one nft does not know.
var ctKeys = map[string]struct {
	dir  ctDir
	spec *valueSpec // nil: not checked here
}{
	"state":       {dirNone, nil}, // ctState checks the value
	"direction":   {dirNone, &valueSpec{bits: 8, syms: []string{"original", "reply"}, what: "conntrack direction"}},
	"status":      {dirNone, &valueSpec{bits: 32, syms: []string{"expected", "seen-reply", "assured", "confirmed", "snat", "dnat", "dying"}, what: "conntrack status"}},
	"mark":        {dirNone, &valueSpec{bits: 32, what: "packet mark"}},
	"expiration":  {dirNone, &valueSpec{kind: vTime, bits: 32, what: "relative time"}},
	"helper":      {dirNone, &valueSpec{kind: vString, maxLen: 16}},
	"label":       {dirNone, &valueSpec{bits: 7, what: "conntrack label", names: true}},
	"event":       {dirNone, &valueSpec{bits: 32, syms: []string{"new", "related", "destroy", "reply", "assured", "protoinfo", "helper", "mark", "seqadj", "secmark", "label"}, what: "conntrack event bits", constOnly: true}},
	"secmark":     {dirNone, nil},
	"id":          {dirNone, &valueSpec{bits: 32, what: "integer"}},
	"count":       {dirNone, nil},
	"timeout":     {dirNone, nil},
	"expectation": {dirNone, nil},
	"l3proto":     {dirOptional, &valueSpec{bits: 8, syms: []string{"ipv4", "ipv6", "ip", "ip6", "inet", "arp", "bridge", "netdev"}, what: "netfilter protocol"}},
	"protocol":    {dirOptional, nil},
	"bytes":       {dirOptional, &valueSpec{bits: 64, what: "integer"}},
	"packets":     {dirOptional, &valueSpec{bits: 64, what: "integer"}},
	"avgpkt":      {dirOptional, &valueSpec{bits: 64, what: "integer"}},
	"zone":        {dirOptional, &valueSpec{bits: 16, what: "integer"}},
	"saddr":       {dirRequired, nil},
	"daddr":       {dirRequired, nil},
	"proto-src":   {dirRequired, &valueSpec{bits: 16, what: "integer"}},
	"proto-dst":   {dirRequired, &valueSpec{bits: 16, what: "integer"}},
}

type ctDir uint8

const (
	dirNone ctDir = iota
	dirOptional
	dirRequired
)

// keySpecs are the value types of other keys whose constants nft checks
// and bpfwall may not otherwise read.
var keySpecs = map[string]*valueSpec{
	"vlan id":            {bits: 12, what: "integer"},
	"vlan dei":           {bits: 1, what: "integer"},
	"vlan cfi":           {bits: 1, what: "integer"},
	"vlan pcp":           {bits: 3, what: "integer"},
	"ip hdrlength":       {bits: 4, what: "integer"},
	"ip version":         {bits: 4, what: "integer"},
	"ip6 version":        {bits: 4, what: "integer"},
	"ip6 flowlabel":      {bits: 20, what: "integer"},
	"socket transparent": {bits: 1, what: "integer"},
	"socket wildcard":    {bits: 1, what: "integer"},
	"srh flags":          {bits: 8, what: "integer"},
	"srh last-entry":     {bits: 8, what: "integer"},
	"srh tag":            {bits: 16, what: "integer"},
	"dccp option":        {bits: 8, what: "integer"},
	"ip dscp":            dscpSpec,
	"ip6 dscp":           dscpSpec,
	"ip ecn":             ecnSpec,
	"ip6 ecn":            ecnSpec,
	"osf name":           {kind: vString, maxLen: 16},
	"osf version":        {kind: vString, maxLen: 16},
	"osf ttl":            {kind: vWord, syms: []string{"loose", "skip"}, what: "ttl option"},
	"meta day":           daySpec,
	"day":                daySpec,
	"meta hour":          {kind: vHour, what: "hour"},
	"hour":               {kind: vHour, what: "hour"},
	"meta time":          {kind: vDate, what: "date"},
	"time":               {kind: vDate, what: "date"},
}

var (
	dscpSpec = &valueSpec{bits: 6, what: "Differentiated Services Code Point", syms: []string{
		"cs0", "cs1", "cs2", "cs3", "cs4", "cs5", "cs6", "cs7", "df", "be", "lephb",
		"af11", "af12", "af13", "af21", "af22", "af23", "af31", "af32", "af33", "af41", "af42", "af43", "va", "ef", "le"}}
	ecnSpec = &valueSpec{bits: 2, what: "Explicit Congestion Notification", syms: []string{"not-ect", "ect1", "ect0", "ce"}}
	daySpec = &valueSpec{bits: 3, maxInt: 6, what: "Day of week of packet reception", syms: []string{
		"Sunday", "Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday"}}
)

// validate checks the rule's terms as nft would; it reports whether they
// passed.
func (b *ruleBuilder) validate() bool {
	nerr := len(*b.errs)
	terms := b.src.ast.Terms
	if b.src.unread != "" {
		// Of a rule the grammar read in part, the last term read may be
		// cut short ("ct mark or 0x23 == 0x11" reads as "ct mark or"):
		// only its key is checked.
		terms = b.src.partial
		if n := len(terms); n > 0 {
			if m := terms[n-1].Match; m != nil && len(m.Left.Atoms) == 1 {
				b.atomSpec(m.Left.Atoms[0])
				if a := m.Left.Atoms[0]; a.Proto == "ipsec" && m.Right != nil && len(m.Right.Items) == 1 {
					// The grammar reads the word after "ipsec in" as
					// the value, and leaves the rest unread.
					b.validateIpsec(toPos(a.Pos), append([]string{primText(m.Right.Items[0])}, strings.Fields(strings.TrimPrefix(b.src.unread, "… "))...))
				}
			}
			terms = terms[:n-1]
		}
	}
	ctx := protoContext{}
	if f := b.tbl.family; f == "ip" || f == "ip6" {
		ctx.family = f
	}
	if len(terms) > 0 && terms[0].Other != nil && !slices.Contains(leadingWords, terms[0].Other.Keyword) {
		b.errorf(toPos(terms[0].Pos), "syntax error, unexpected %s", terms[0].Other.Keyword)
	}
	for i, t := range terms {
		if i > 0 && t.Other != nil {
			b.validateContinuation(terms[i-1], t.Other)
		}
		switch {
		case t.Counter != nil && t.Counter.Name != nil:
			// "counter name tcp dport map { ... }" reads as the name
			// tcp: a word is a name only when the rule ends after it.
			if n := *t.Counter.Name; strings.HasPrefix(n, `"`) || i+1 == len(terms) || terms[i+1].Verdict != nil {
				b.validateObject(toPos(t.Pos), "counter", n)
			}
		case t.Match != nil:
			b.validateMatch(t.Match, ctx, terms[i+1:])
		case t.Log != nil:
			b.validateLog(t.Log)
		case t.Reject != nil:
			b.validateReject(t.Reject, ctx)
		}
		b.validateStatement(t, ctx)
		if len(*b.errs) > nerr {
			break
		}
		ctx = b.after(ctx, t)
	}
	return len(*b.errs) == nerr
}

func (b *ruleBuilder) validateMatch(m *Match, ctx protoContext, next []*Term) {
	if m.Set != nil && len(m.Set.Parts) > 0 && m.Set.Parts[0].Lo.Set != nil {
		b.errorf(toPos(m.Set.Pos), "a set statement's value cannot be a set")
		return
	}
	a := m.Left.Atoms[0]
	if a.Proto == "fib" {
		flags := []string{a.Field}
		for _, o := range m.Left.Atoms[1:] {
			flags = append(flags, o.text())
		}
		b.validateFib(toPos(a.Pos), flags)
		return
	}
	if len(m.Left.Atoms) != 1 {
		// A part of a concatenation has a fixed length: a conntrack
		// address needs its family.
		for _, p := range m.Left.Atoms {
			if p.Proto == "ct" && (p.Field == "saddr" || p.Field == "daddr") && p.Fam == "" {
				b.errorf(toPos(p.Pos), "specify either ip or ip6 for address matching")
				return
			}
		}
		return // concatenations: concat.go checks their other parts
	}
	key := a.text()
	switch key {
	case "meta ibrname", "meta obrname", "ibrname", "obrname":
		if b.tbl.family != "bridge" {
			b.errorf(toPos(a.Pos), "%s: only in bridge tables", key)
			return
		}
	case "rt nexthop", "rt ip nexthop", "rt ip6 nexthop":
		b.validateNexthop(a, m, ctx)
		return
	case "tcp option":
		if m.Right != nil && len(m.Right.Items) == 1 {
			b.validateTCPOption(toPos(a.Pos), primText(m.Right.Items[0]), next)
		}
	}
	if m.Right != nil && len(m.Right.Items) == 1 && m.Set == nil && m.VMap == nil {
		if v := m.Right.Items[0]; len(v.Parts) == 1 && v.Parts[0].Lo.Ref != nil {
			b.validateSetRef(toPos(v.Pos), key, *v.Parts[0].Lo.Ref)
		}
	}
	if m.Mask != nil && m.Op == "!" {
		b.errorf(toPos(m.Pos), "cannot combine negation with binary expression")
		return
	}
	if m.Set != nil && slices.Contains([]string{"gre", "gretap", "vxlan", "geneve"}, a.Proto) {
		b.errorf(toPos(a.Pos), "%s: the inner headers of a tunnel cannot be set", a.Proto)
		return
	}
	if need, ok := icmpFieldTypes[key]; ok && ctx.icmpType != 0 && !slices.Contains(need, ctx.icmpType-1) {
		b.errorf(toPos(a.Pos), "incompatible icmp match: rule has %d, need %d", ctx.icmpType-1, need[0])
		return
	}
	spec, ok := b.atomSpec(a)
	if !ok {
		return
	}
	if (a.Proto == "ct" && (a.Field == "saddr" || a.Field == "daddr")) || key == "ip saddr" || key == "ip daddr" || key == "ip6 saddr" || key == "ip6 daddr" {
		b.validateAddrs(a, m, ctx)
		return
	}
	if spec == nil {
		return
	}
	if m.Set != nil {
		// A statement's value may be an expression ("ct mark set mark");
		// only its constants are checked.
		b.validateValue(spec, m.Set, true)
		return
	}
	if m.Right != nil && m.Mask == nil && m.VMap == nil {
		for _, v := range m.Right.Items {
			b.validateValue(spec, v, false)
		}
	}
}

// icmpFieldTypes are the ICMP and ICMPv6 header fields that only some
// types have, with those types (nft's icmp and icmp6 dependencies): a
// rule that requires another type first is refused. The first type is
// the one nft names in its error.
var icmpFieldTypes = map[string][]int{
	"icmp id": {8, 0}, "icmp sequence": {8, 0}, "icmp mtu": {3}, "icmp gateway": {5},
	"icmpv6 id": {128, 129}, "icmpv6 sequence": {128, 129}, "icmpv6 mtu": {2},
	"icmpv6 max-delay": {130, 131, 132},
}

// validateIpsec checks what follows "ipsec in" or "ipsec out": an
// optional "spnum N" (N a policy index below 256), then a key.
func (b *ruleBuilder) validateIpsec(pos rules.Pos, words []string) {
	if len(words) > 0 && words[0] == "spnum" {
		if len(words) < 3 {
			b.errorf(pos, "syntax error, unexpected newline, expecting ip or ip6 or spi or reqid")
			return
		}
		if n, ok := parseInteger(words[1]); !ok || n.Cmp(big.NewInt(255)) > 0 {
			b.errorf(pos, "value too large")
			return
		}
		words = words[2:]
	}
	if len(words) == 0 || !slices.Contains([]string{"ip", "ip6", "spi", "reqid"}, words[0]) {
		b.errorf(pos, "syntax error, expecting ip or ip6 or spi or reqid")
	}
}

// validateSetRef checks that a set a rule looks up exists, and holds
// addresses of the selector's family.
func (b *ruleBuilder) validateSetRef(pos rules.Pos, key, ref string) {
	name := strings.TrimPrefix(ref, "@")
	s, ok := b.tbl.sets[name]
	if !ok {
		b.errorf(pos, "Set '%s' does not exist", name)
		return
	}
	if len(s.keyType) != 1 {
		return
	}
	want := map[string]string{"ip saddr": "ipv4_addr", "ip daddr": "ipv4_addr", "ip6 saddr": "ipv6_addr", "ip6 daddr": "ipv6_addr"}[key]
	if got := s.keyType[0]; want != "" && (got == "ipv4_addr" || got == "ipv6_addr") && got != want {
		b.errorf(pos, "datatype mismatch: %s is compared with set %s of type %s", key, name, got)
	}
}

// tcpOptions are the TCP options nft names, with the fields it reads of
// each.
var tcpOptions = map[string][]string{
	"eol": nil, "nop": nil,
	"maxseg": {"length", "size"}, "mss": {"length", "size"},
	"window":    {"length", "count"},
	"sack-perm": {"length"}, "sack-permitted": {"length"},
	"sack": {"length", "left", "right"}, "sack0": {"length", "left", "right"}, "sack1": {"length", "left", "right"},
	"sack2": {"length", "left", "right"}, "sack3": {"length", "left", "right"},
	"timestamp": {"length", "tsval", "tsecr"},
	"md5sig":    {"length"}, "fastopen": {"length"}, "mptcp": {"length", "subtype"},
}

// validateTCPOption checks "tcp option NAME [FIELD ...]": NAME an option
// nft knows or a number of 8 bits, FIELD one of the option's, or exists
// or missing. The grammar reads the field as the next term.
func (b *ruleBuilder) validateTCPOption(pos rules.Pos, name string, next []*Term) {
	fields, known := tcpOptions[name]
	if !known {
		n, ok := parseInteger(name)
		switch {
		case !ok:
			b.errorf(pos, "tcp option %s: unknown option", name)
			return
		case n.Cmp(big.NewInt(255)) > 0:
			b.errorf(pos, "Value %s exceeds valid range 0-255", n)
			return
		}
		fields = []string{"length"}
	}
	if len(next) == 0 || next[0].Other == nil {
		return
	}
	f := next[0].Other.Keyword
	if f != "exists" && f != "missing" && !slices.Contains(fields, f) {
		b.errorf(toPos(next[0].Pos), "tcp option %s has no field %s", name, f)
	}
}

// validateLog checks the log statement's options: group, which logs to
// nflog, takes no level and no flags, and level audit, which logs to the
// audit subsystem, takes no other option.
func (b *ruleBuilder) validateLog(l *Log) {
	var group, level, flags, audit bool
	for _, o := range l.Options {
		switch {
		case o.Flags != nil:
			flags = true
		case o.Key == "group":
			group = true
		case o.Key == "level":
			level = true
			audit = len(o.Value) > 0 && o.Value[0] == "audit"
		}
	}
	switch {
	case audit && len(l.Options) > 1:
		b.errorf(toPos(l.Pos), "log level audit takes no further options")
	case group && level:
		b.errorf(toPos(l.Pos), "level and group are mutually exclusive")
	case group && flags:
		b.errorf(toPos(l.Pos), "flags and group are mutually exclusive")
	}
}

// validateReject checks that an ICMP reply's family is the packet's.
func (b *ruleBuilder) validateReject(r *Reject, ctx protoContext) {
	fam := map[string]string{"icmp": "ip", "icmpv6": "ip6"}[r.With]
	// In an ip or ip6 table, reject says so (rule.go).
	if fam != "" && ctx.family != "" && fam != ctx.family && ctx.family != b.tbl.family {
		b.errorf(toPos(r.Pos), "conflicting protocols specified: %s vs %s", fam, ctx.family)
	}
}

// after is the protocol context after term t; a term that names another
// network protocol than the context's is refused.
func (b *ruleBuilder) after(ctx protoContext, t *Term) protoContext {
	if t.Match == nil || len(t.Match.Left.Atoms) != 1 {
		return ctx
	}
	m := t.Match
	a := m.Left.Atoms[0]
	key := a.text()
	fam := ""
	switch {
	case a.Proto == "ip" || a.Proto == "ip6":
		fam = a.Proto
	case a.Proto == "ct" && a.Fam != "":
		fam = a.Fam
	case (key == "meta protocol" || key == "protocol" || key == "ether type") && (b.tbl.family == "bridge" || b.tbl.family == "netdev"):
		// There the link layer's protocol is the network protocol's
		// dependency: it sets the context.
		if m.Right != nil && len(m.Right.Items) == 1 && normOp(m.Op) != "!=" {
			fam = map[string]string{"ip": "ip", "ip6": "ip6"}[primText(m.Right.Items[0])]
		}
	case (key == "meta nfproto" || key == "nfproto") && b.tbl.family != "inet":
		if b.tbl.family == "ip" || b.tbl.family == "ip6" {
			b.errorf(toPos(a.Pos), "meta nfproto is only useful in the inet family")
		}
	case key == "meta nfproto" || key == "nfproto":
		// meta protocol, the link layer's, may name another family than
		// the table's: it never matches.
		// It sets the context, and conflicts with nothing before it:
		// "ip saddr 1.2.3.4 meta nfproto ipv6" never matches, and what
		// follows it is of ipv6 (a reject's ICMP type).
		if m.Right != nil && len(m.Right.Items) == 1 && normOp(m.Op) != "!=" {
			if f := map[string]string{"ipv4": "ip", "ip": "ip", "ipv6": "ip6", "ip6": "ip6"}[primText(m.Right.Items[0])]; f != "" {
				ctx.family = f
			}
		}
	}
	if fam != "" {
		if ctx.family != "" && fam != ctx.family {
			b.errorf(toPos(a.Pos), "conflicting protocols specified: %s vs. %s", ctx.family, fam)
		}
		ctx.family = fam
	}
	switch {
	case key == "ether type" && m.Right != nil && len(m.Right.Items) == 1:
		ctx.etherType = primText(m.Right.Items[0])
	case a.Proto == "vlan" && ctx.etherType != "" && !slices.Contains([]string{"vlan", "8021q", "8021ad", "0x8100", "0x88a8"}, ctx.etherType):
		b.errorf(toPos(a.Pos), "conflicting protocols specified: ether vs. vlan")
	}
	switch a.Proto {
	case "tcp", "udp", "udplite", "sctp", "dccp", "th":
		ctx.l4 = true
	}
	if key == "udp dport" {
		ctx.udpDport = true
	}
	if (key == "icmp type" || key == "icmpv6 type") && m.Right != nil && len(m.Right.Items) == 1 && (m.Op == "" || normOp(m.Op) == "==") {
		names := icmpTypes
		if a.Proto == "icmpv6" {
			names = icmpv6Types
		}
		if t, err := lookupByte(names, primText(m.Right.Items[0])); err == nil && primText(m.Right.Items[0]) != "" {
			ctx.icmpType = int(t) + 1
		}
	}
	if key == "meta l4proto" || key == "l4proto" || key == "ip protocol" || key == "ip6 nexthdr" {
		ctx.l4 = true
	}
	return ctx
}

// atomSpec checks a selector's key and returns its value's type: nil when
// nft's checks of it are not kept here, false when the key is refused.
func (b *ruleBuilder) atomSpec(a *SelAtom) (*valueSpec, bool) {
	pos := toPos(a.Pos)
	switch {
	case a.Proto == "gre" && (a.Field == "ether" || a.Field == "vlan"):
		b.errorf(pos, "gre carries no Ethernet header: gretap does")
		return nil, false
	case a.Proto == "ipsec" && a.Field != "in" && a.Field != "out":
		b.errorf(pos, "ipsec %s: expected in or out", a.Field)
		return nil, false
	}
	if a.Proto != "ct" {
		if a.Dir != "" {
			b.errorf(pos, "%s %s: only conntrack keys take a direction", a.Proto, a.Dir)
			return nil, false
		}
		return keySpecs[a.Proto+" "+a.Field], true
	}
	k, known := ctKeys[a.Field]
	switch {
	case !known:
		b.errorf(pos, "ct %s: unknown conntrack key", a.Field)
		return nil, false
	case a.Dir != "" && k.dir == dirNone:
		b.errorf(pos, "ct %s %s: the key takes no direction", a.Dir, a.Field)
		return nil, false
	case a.Dir == "" && k.dir == dirRequired:
		b.errorf(pos, "ct %s: the key needs a direction, original or reply", a.Field)
		return nil, false
	case a.Fam != "" && a.Field != "saddr" && a.Field != "daddr":
		b.errorf(pos, "ct %s %s: only addresses take ip or ip6", a.Fam, a.Field)
		return nil, false
	}
	return k.spec, true
}

// validateValue checks the constants of v against spec. In a statement
// (stmt) a word may be an expression, not a constant.
func (b *ruleBuilder) validateValue(spec *valueSpec, v *Value, stmt bool) {
	if len(v.Parts) != 1 {
		return
	}
	u := v.Parts[0]
	if u.Mask != nil {
		return
	}
	lo, okLo := b.validatePrim(spec, u.Lo, stmt)
	for _, p := range u.Or {
		b.validatePrim(spec, p, stmt)
	}
	if u.Hi == nil {
		return
	}
	hi, okHi := b.validatePrim(spec, u.Hi, stmt)
	if okLo && okHi && lo.Cmp(hi) > 0 {
		b.errorf(toPos(u.Pos), "Range has zero or negative size")
	}
}

// validatePrim checks one constant; it returns its value when it is a
// number.
func (b *ruleBuilder) validatePrim(spec *valueSpec, p *Prim, stmt bool) (*big.Int, bool) {
	pos := toPos(p.Pos)
	switch {
	case p.Set != nil:
		for _, e := range p.Set.Elems {
			if e.Key != nil {
				b.validateValue(spec, e.Key, stmt)
			}
		}
		return nil, false
	case p.Atom == nil:
		return nil, false // a variable, a set reference, an expression
	}
	atom := *p.Atom
	switch spec.kind {
	case vWord:
		if !slices.Contains(spec.syms, atom) && (!stmt || !isWord(atom)) {
			b.errorf(pos, "invalid %s", spec.what)
		}
		return nil, false
	case vHour:
		if !validHour(unquote(atom)) {
			b.errorf(pos, "wrong time format")
		}
		return nil, false
	case vDate:
		if _, ok := parseInteger(atom); !ok && !validDate(unquote(atom)) {
			b.errorf(pos, "Cannot parse date")
		}
		return nil, false
	}
	if spec.kind == vString {
		s := unquote(atom)
		switch {
		case s == "":
			b.errorf(pos, "Empty string is not allowed")
		case len(s) >= spec.maxLen:
			b.errorf(pos, "String exceeds maximum length of %d", spec.maxLen)
		}
		return nil, false
	}
	if slices.Contains(spec.syms, unquote(atom)) {
		return nil, false
	}
	var n *big.Int
	var ok bool
	if spec.kind == vTime {
		n, ok = parseTime(atom)
	} else {
		n, ok = parseInteger(atom)
	}
	if !ok {
		// In a statement a word may start an expression ("ct mark set
		// mark").
		if stmt && !spec.constOnly || spec.names && isWord(atom) || !isWord(atom) && !strings.HasPrefix(atom, `"`) && spec.kind != vTime {
			return nil, false
		}
		b.errorf(pos, "Could not parse %s", spec.what)
		return nil, false
	}
	maxV := new(big.Int).Sub(new(big.Int).Lsh(big.NewInt(1), spec.bits), big.NewInt(1))
	if spec.maxInt != 0 {
		maxV.SetUint64(spec.maxInt)
	}
	if n.Cmp(maxV) > 0 {
		b.errorf(pos, "Value %s exceeds valid range 0-%s", n, maxV)
		return nil, false
	}
	return n, true
}

// isWord reports whether s is a word token: a name, not a number, an
// address or a string.
func isWord(s string) bool {
	return s != "" && (s[0] == '_' || s[0] >= 'a' && s[0] <= 'z' || s[0] >= 'A' && s[0] <= 'Z') && !strings.Contains(s, ":")
}

// parseInteger reads a decimal or hexadecimal number.
func parseInteger(s string) (*big.Int, bool) {
	n, ok := new(big.Int).SetString(s, 0)
	if !ok || n.Sign() < 0 || strings.HasPrefix(s, "0b") || strings.HasPrefix(s, "0o") {
		return nil, false
	}
	return n, true
}

// parseTime reads nft's time: seconds, or a sequence of numbers with the
// units d, h, m, s and ms, in milliseconds.
func parseTime(s string) (*big.Int, bool) {
	if n, err := strconv.ParseUint(s, 10, 64); err == nil {
		return new(big.Int).SetUint64(n * 1000), true
	}
	var total uint64
	rest := s
	for rest != "" {
		i := 0
		for i < len(rest) && rest[i] >= '0' && rest[i] <= '9' {
			i++
		}
		j := i
		for j < len(rest) && (rest[j] < '0' || rest[j] > '9') {
			j++
		}
		if i == 0 || j == i {
			return nil, false
		}
		n, err := strconv.ParseUint(rest[:i], 10, 64)
		if err != nil {
			return nil, false
		}
		unit := map[string]uint64{"d": 86_400_000, "h": 3_600_000, "m": 60_000, "s": 1000, "ms": 1}[rest[i:j]]
		if unit == 0 {
			return nil, false
		}
		total += n * unit
		rest = rest[j:]
	}
	return new(big.Int).SetUint64(total), true
}

// protoContext is what the terms before a statement say of the packet's
// protocols, as nft's evaluator tracks them: the network family (ip, ip6
// or "") and whether a transport protocol is known.
type protoContext struct {
	family    string
	l4        bool
	etherType string // the value of an "ether type" match
	udpDport  bool   // a udp dport match: vxlan and geneve headers follow
	// icmpType is the type one "icmp type" or "icmpv6 type" match
	// requires, +1; 0 when none does.
	icmpType int
}

// primText is the text of a value that is one word or number, else "".
func primText(v *Value) string {
	if len(v.Parts) != 1 || v.Parts[0].Hi != nil || v.Parts[0].Mask != nil || v.Parts[0].Or != nil || v.Parts[0].Lo.Atom == nil {
		return ""
	}
	return *v.Parts[0].Lo.Atom
}

// addrFamily is "ip" or "ip6" for an address literal, else "".
func addrFamily(s string) string {
	s = strings.Trim(s, "[]")
	if a, err := netip.ParseAddr(s); err == nil {
		if a.Is4() {
			return "ip"
		}
		return "ip6"
	}
	if _, err := netip.ParsePrefix(s); err == nil {
		return addrFamily(s[:strings.IndexByte(s, '/')])
	}
	return ""
}

// statementWords start a statement: one after a terminal statement has no
// effect.
var statementWords = []string{"accept", "drop", "return", "continue", "jump", "goto", "counter", "log", "reject", "queue", "limit", "quota", "notrack"}

// validateStatement checks a statement term t in the protocol context
// of the terms before it.
func (b *ruleBuilder) validateStatement(t *Term, ctx protoContext) {
	switch {
	case t.Tproxy != nil:
		b.validateTproxy(t.Tproxy, ctx)
	case t.Other != nil:
		g := t.Other
		var toks []string
		for _, r := range g.Rest {
			if r.Nested != nil {
				toks = append(toks, "{")
			} else {
				toks = append(toks, r.Token)
			}
		}
		switch g.Keyword {
		case "masquerade", "redirect", "snat", "dnat":
			b.validateNAT(g, toks, ctx)
		case "queue":
			b.validateQueue(g, toks)
		case "tproxy":
			b.errorf(toPos(g.Pos), "tproxy needs an address or a port: tproxy to ADDR[:PORT]")
		case "ct":
			b.validateCtWords(g, toks)
		case "fib":
			var flags []string
			for i := 0; i < len(toks); i += 2 {
				flags = append(flags, toks[i])
				if i+1 >= len(toks) || toks[i+1] != "." {
					break
				}
			}
			b.validateFib(toPos(g.Pos), flags)
		case "vxlan", "geneve", "gretap", "gre":
			b.validateTunnel(g, toks, ctx)
		case "osf":
			if len(toks) < 2 {
				b.errorf(toPos(g.Pos), "osf: expected a value")
			}
		case "last":
			if len(toks) >= 1 && toks[0] == "used" {
				ok := len(toks) >= 2 && toks[1] == "never"
				if !ok && len(toks) >= 2 {
					_, ok = parseTime(toks[1])
				}
				if !ok {
					b.errorf(toPos(g.Pos), "last used: wrong time format")
				}
			}
		case "quota", "synproxy":
			if len(toks) == 2 && toks[0] == "name" {
				b.validateObject(toPos(g.Pos), g.Keyword, toks[1])
			}
		case "limit":
			if len(toks) == 2 && toks[0] == "name" {
				b.validateObject(toPos(g.Pos), g.Keyword, toks[1])
			}
			if len(toks) >= 3 && toks[0] == "rate" && isWord(toks[2]) && toks[2] != "over" && toks[2] != "/" {
				b.errorf(toPos(g.Pos), "Wrong rate format")
			}
		case "reset":
			if len(toks) >= 3 && toks[0] == "tcp" && toks[1] == "option" {
				b.validateTCPOption(toPos(g.Pos), toks[2], nil)
			}
		}
	}
}

// validateNAT checks snat, dnat, masquerade and redirect: the family of
// their addresses, a transport protocol for their ports, flags after the
// addresses, and nothing after them, as they end the rule.
func (b *ruleBuilder) validateNAT(g *Generic, toks []string, ctx protoContext) {
	pos := toPos(g.Pos)
	i := 0
	fam := ""
	// "to" may be left out before the address unless a family or prefix
	// precedes it (nft's nat_stmt_args): "dnat 10.0.0.2:22", as OpenWrt's
	// fw4 writes it.
	implicitTo := false
	if g.Keyword == "snat" || g.Keyword == "dnat" {
		if i < len(toks) && (toks[i] == "ip" || toks[i] == "ip6") {
			fam = toks[i]
			i++
		}
		prefix := i < len(toks) && toks[i] == "prefix"
		if prefix {
			i++
		}
		if i >= len(toks) || toks[i] != "to" {
			if fam != "" || prefix || i >= len(toks) || slices.Contains(statementWords, toks[i]) {
				b.errorf(pos, "%s: expected to", g.Keyword)
				return
			}
			implicitTo = true
		}
	}
	fam, ok := b.statementFamily(pos, g.Keyword, fam, ctx)
	if !ok {
		return
	}
	if implicitTo {
		b.validateNATTo(g, toks[i:], fam, ctx)
	}
	flags := false
	for ; i < len(toks); i++ {
		tok := toks[i]
		switch {
		case slices.Contains(statementWords, tok):
			b.errorf(pos, "Statement after terminal statement has no effect")
			return
		case tok == "random" || tok == "persistent" || tok == "fully-random" || tok == ",":
			flags = true
		case tok == "to" && flags:
			b.errorf(pos, "%s: the flags come after to", g.Keyword)
			return
		case tok == "to":
			b.validateNATTo(g, toks[i+1:], fam, ctx)
		}
	}
}

// validateNATTo checks what follows "to": an address of the family, and
// ports only with a transport protocol.
func (b *ruleBuilder) validateNATTo(g *Generic, toks []string, fam string, ctx protoContext) {
	pos := toPos(g.Pos)
	if len(toks) == 0 {
		b.errorf(pos, "%s to: expected an address or a port", g.Keyword)
		return
	}
	j := 0
	if af := addrFamily(toks[0]); af != "" {
		switch {
		case fam == "":
			b.errorf(pos, "specify `%s ip` or '%s ip6' in inet table to disambiguate", g.Keyword, g.Keyword)
			return
		case af != fam:
			b.errorf(pos, "Could not resolve hostname: Address family for hostname not supported")
			return
		}
		j++
		for j+1 < len(toks) && (toks[j] == "-" || toks[j] == "/") {
			j += 2
		}
	} else if toks[0] == "{" || isWord(toks[0]) && toks[0] != "to" {
		// A map: its data may carry ports.
		if fam == "" && g.Keyword != "redirect" && g.Keyword != "masquerade" {
			b.errorf(pos, "specify `%s ip` or '%s ip6' in inet table to disambiguate", g.Keyword, g.Keyword)
			return
		}
		b.validateNATMap(g, fam, ctx)
		return
	}
	if j >= len(toks) || toks[j] != ":" {
		return
	}
	ports := toks[j+1:]
	if len(ports) > 0 && isWord(ports[0]) {
		return // a port from an expression: "to :tcp dport map { ... }"
	}
	if !ctx.l4 {
		b.errorf(pos, "transport protocol mapping is only valid after transport protocol match")
		return
	}
	for k := 0; k < len(ports) && (k == 0 || ports[k-1] == "-"); k += 2 {
		if n, ok := parseInteger(ports[k]); ok && n.Cmp(big.NewInt(65535)) > 0 {
			b.errorf(pos, "Value %s exceeds valid range 0-65535", n)
			return
		}
	}
}

// validateNATMap checks the data of an anonymous map a NAT statement
// takes its address from: addresses of the statement's family, and an
// address and port ("addr . port") only with a transport protocol.
func (b *ruleBuilder) validateNATMap(g *Generic, fam string, ctx protoContext) {
	var blk *Block
	for i, r := range g.Rest {
		if r.Nested != nil && i > 0 && g.Rest[i-1].Token == "map" {
			blk = r.Nested
			break
		}
		// A key of a transport protocol ("tcp dport") brings its
		// protocol match along; th does not.
		if slices.Contains([]string{"tcp", "udp", "udplite", "sctp", "dccp"}, r.Token) {
			ctx.l4 = true
		}
	}
	if blk == nil {
		return
	}
	pos := toPos(g.Pos)
	var elem []string
	check := func() bool {
		defer func() { elem = elem[:0] }()
		colon := slices.Index(elem, ":")
		if colon < 0 || colon+1 >= len(elem) {
			return true
		}
		data := elem[colon+1:]
		if af := addrFamily(data[0]); af != "" && fam != "" && af != fam {
			b.errorf(pos, "Could not resolve hostname: Address family for hostname not supported")
			return false
		}
		if slices.Contains(data, ".") && !ctx.l4 {
			b.errorf(pos, "transport protocol mapping is only valid after transport protocol match")
			return false
		}
		return true
	}
	for _, it := range blk.Items {
		switch {
		case it.Nested != nil:
			return // nested braces: not a plain element list
		case it.Token == ",":
			if !check() {
				return
			}
		default:
			elem = append(elem, it.Token)
		}
	}
	check()
}

// validateTproxy checks tproxy's address family and its need of a
// transport protocol.
func (b *ruleBuilder) validateTproxy(t *Tproxy, ctx protoContext) {
	pos := toPos(t.Pos)
	fam, ok := b.statementFamily(pos, "tproxy", t.Family, ctx)
	if !ok {
		return
	}
	if !ctx.l4 {
		b.errorf(pos, "Transparent proxy support requires transport protocol match")
		return
	}
	if t.Addr == nil || t.Addr.Atom == nil && t.Addr.Bracket == nil {
		return
	}
	a := ""
	if t.Addr.Atom != nil {
		a = *t.Addr.Atom
	} else {
		a = *t.Addr.Bracket
	}
	switch af := addrFamily(a); {
	case af == "":
	case fam == "":
		b.errorf(pos, "Family has to be specified when an address is given")
	case af != fam:
		b.errorf(pos, "Could not resolve hostname: Address family for hostname not supported")
	}
}

// validateQueue checks the queue numbers, 16 bits: "num" takes a number
// or a range, "to" an expression too, but not with fanout, which spreads
// over a range.
func (b *ruleBuilder) validateQueue(g *Generic, toks []string) {
	pos := toPos(g.Pos)
	fanout := slices.Contains(toks, "fanout")
	for i, tok := range toks {
		if tok != "num" && tok != "to" && tok != "offset" && tok != "-" {
			continue
		}
		if i+1 >= len(toks) {
			b.errorf(pos, "queue %s: expected a number", tok)
			return
		}
		next := toks[i+1]
		n, ok := parseInteger(next)
		switch {
		case strings.HasPrefix(next, "$"):
			// a variable, checked where it is defined
		case ok && n.Cmp(big.NewInt(65535)) > 0:
			b.errorf(pos, "Value %s exceeds valid range 0-65535", n)
			return
		case ok:
		case tok == "num" || tok == "offset":
			b.errorf(pos, "queue %s takes a number", tok)
			return
		case fanout:
			b.errorf(pos, "fanout flag is not supported with an expression")
			return
		case !slices.Contains(toks[i+1:], "mod") && !slices.Contains(toks[i+1:], "map"):
			b.errorf(pos, "queue to %s: expected a number, a range, a hash or a map", next)
			return
		}
	}
}

// validateCtWords checks a ct expression the grammar did not read as a
// selector: its key must be one nft knows.
func (b *ruleBuilder) validateCtWords(g *Generic, toks []string) {
	i := 0
	if i < len(toks) && (toks[i] == "original" || toks[i] == "reply") {
		i++
	}
	if i < len(toks) && (toks[i] == "ip" || toks[i] == "ip6") {
		i++
	}
	if i >= len(toks) {
		b.errorf(toPos(g.Pos), "ct: expected a conntrack key")
		return
	}
	if _, ok := ctKeys[toks[i]]; !ok {
		b.errorf(toPos(g.Pos), "ct %s: unknown conntrack key", toks[i])
	}
}

// validHour reports whether s is a time of day as nft reads it: HH:MM or
// HH:MM:SS, a leap second allowed.
func validHour(s string) bool {
	v, ok := hourParts(s)
	return ok && v[0] <= 23 && v[1] <= 59 && v[2] <= 60
}

// hourParts reads "HH:MM[:SS]" into its numbers, seconds 0 when left out.
func hourParts(s string) ([3]int, bool) {
	var v [3]int
	parts := strings.Split(s, ":")
	if len(parts) < 2 || len(parts) > 3 {
		return v, false
	}
	for i, p := range parts {
		n, err := strconv.Atoi(p)
		if err != nil || n < 0 {
			return v, false
		}
		v[i] = n
	}
	return v, true
}

// validDate reports whether s is a date as nft reads it: "YYYY-MM-DD",
// with a time of day or not.
func validDate(s string) bool {
	for _, layout := range []string{"2006-01-02 15:04:05", "2006-01-02 15:04", "2006-01-02"} {
		if _, err := time.Parse(layout, s); err == nil {
			return true
		}
	}
	return false
}

// validateTunnel checks a tunnel's inner header: read after its outer
// header's match (vxlan and geneve after udp dport), never written, and
// gre carries no Ethernet header.
func (b *ruleBuilder) validateTunnel(g *Generic, toks []string, ctx protoContext) {
	pos := toPos(g.Pos)
	switch {
	case slices.Contains(toks, "set"):
		b.errorf(pos, "%s: the inner headers of a tunnel cannot be set", g.Keyword)
	case (g.Keyword == "vxlan" || g.Keyword == "geneve") && !ctx.udpDport:
		b.errorf(pos, "%s needs a udp dport match before it", g.Keyword)
	case g.Keyword == "gre" && len(toks) > 0 && (toks[0] == "ether" || toks[0] == "vlan"):
		b.errorf(pos, "gre carries no Ethernet header: gretap does")
	}
}

// validateNexthop checks "rt [ip|ip6] nexthop ADDR": the family is the
// table's, or in an inet table named or known from the terms before, and
// the address's.
func (b *ruleBuilder) validateNexthop(a *SelAtom, m *Match, ctx protoContext) {
	pos := toPos(a.Pos)
	fam := a.Fam
	switch {
	case fam == "" && ctx.family != "":
		fam = ctx.family
	case fam == "" && b.tbl.family == "inet":
		b.errorf(pos, "rt nexthop: specify rt ip nexthop or rt ip6 nexthop in an inet table")
		return
	case fam == "":
		fam = b.tbl.family
	case b.tbl.family != "inet" && fam != b.tbl.family:
		b.errorf(pos, "conflicting protocols specified: %s vs. %s", b.tbl.family, fam)
		return
	}
	if m.Right == nil || len(m.Right.Items) != 1 {
		return
	}
	if af := addrFamily(primText(m.Right.Items[0])); af != "" && af != fam {
		b.errorf(pos, "Could not resolve hostname: Address family for hostname not supported")
	}
}

// validateAddrs checks the addresses an address key is compared with:
// each of the key's family, which a conntrack address in an inet table
// must be told (ct original ip saddr) or know from the terms before.
func (b *ruleBuilder) validateAddrs(a *SelAtom, m *Match, ctx protoContext) {
	pos := toPos(a.Pos)
	fam := a.Fam
	if a.Proto == "ip" || a.Proto == "ip6" {
		fam = a.Proto
	}
	if fam == "" {
		fam = ctx.family
	}
	if fam == "" {
		b.errorf(pos, `cannot determine ip protocol version, use "ip saddr" or "ip6 saddr" instead`)
		return
	}
	var vals []*Value
	if m.Right != nil {
		vals = m.Right.Items
	}
	if m.VMap != nil && m.VMap.Set != nil {
		for _, e := range m.VMap.Set.Elems {
			vals = append(vals, e.Key)
		}
	}
	var check func(v *Value)
	check = func(v *Value) {
		if v == nil || len(v.Parts) != 1 {
			return
		}
		u := v.Parts[0]
		for _, p := range []*Prim{u.Lo, u.Hi} {
			switch {
			case p == nil:
			case p.Set != nil:
				for _, e := range p.Set.Elems {
					check(e.Key)
				}
			case p.Atom != nil || p.Bracket != nil:
				text := ""
				if p.Atom != nil {
					text = *p.Atom
				} else {
					text = *p.Bracket
				}
				if !strings.Contains(text, ":") && addrFamily(text) == "" {
					continue // a name nft resolves, or no address
				}
				if af := addrFamily(text); af != fam {
					b.errorf(toPos(p.Pos), "Could not resolve hostname: %s is no %s address", text, map[string]string{"ip": "IPv4", "ip6": "IPv6"}[fam])
				}
			}
		}
	}
	for _, v := range vals {
		check(v)
	}
}

// leadingWords are the words that may start a rule where the grammar
// reads no selector: statements, and expressions of nft's it does not
// read as one.
var leadingWords = []string{
	"add", "update", "delete", "dnat", "snat", "masquerade", "redirect", "dup", "fwd",
	"gretap", "gre", "vxlan", "geneve", "srh", "last", "limit", "notrack", "queue", "quota",
	"reset", "synproxy", "time", "day", "hour", "ct", "fib", "osf", "tproxy", "flow", "meter",
	"numgen", "jhash", "symhash", "secmark", "meta", "socket", "ipsec", "exthdr", "set",
	"nftrace", "destroy", "tunnel",
}

// validateFib checks a fib expression's flags: saddr or daddr, one of
// them, and iif or oif, not both.
func (b *ruleBuilder) validateFib(pos rules.Pos, flags []string) {
	has := func(f string) bool { return slices.Contains(flags, f) }
	switch {
	case has("saddr") && has("daddr"):
		b.errorf(pos, "fib: saddr and daddr are mutually exclusive")
	case !has("saddr") && !has("daddr"):
		b.errorf(pos, "fib: need either saddr or daddr")
	case has("iif") && has("oif"):
		b.errorf(pos, "fib: iif and oif are mutually exclusive")
	}
}

// validateContinuation checks a term the grammar read apart from the
// term before it, of which it is part: the constants of "ip dscp set ip
// dscp & 0x4f", of "osf ttl skip version V", of "ct event set new or
// related".
func (b *ruleBuilder) validateContinuation(prev *Term, g *Generic) {
	m := prev.Match
	if m == nil || len(m.Left.Atoms) != 1 {
		return
	}
	a := m.Left.Atoms[0]
	var toks []*Prim
	for _, r := range g.Rest {
		if r.Nested == nil {
			tok := r.Token
			toks = append(toks, &Prim{Pos: g.Pos, Atom: &tok})
		}
	}
	if m.Set != nil && primText(m.Set) == "ct" && (g.Keyword == "original" || g.Keyword == "reply") && len(toks) >= 2 {
		// "meta mark set ct original saddr map { ... }": a conntrack
		// address as a map's key, alone or in a concatenation, has a
		// fixed length: it needs its family.
		if f, next := *toks[0].Atom, *toks[1].Atom; (f == "saddr" || f == "daddr") && (next == "map" || next == ".") {
			b.errorf(toPos(g.Pos), "specify either ip or ip6 for address matching")
		}
		return
	}
	if g.Keyword == "or" && m.Set != nil {
		// "ct event set new or related": constants of the set
		// statement's key.
		if spec, ok := b.atomSpec(a); ok && spec != nil && spec.constOnly {
			for _, p := range toks {
				if *p.Atom != "or" {
					b.validatePrim(spec, p, true)
				}
			}
		}
		return
	}
	// The protocol the continuation's field belongs to: the selector's
	// ("osf ttl skip" then "version ..."), or the word a set statement's
	// value ends in ("ip dscp set ip" then "dscp & 0x4f").
	proto := a.Proto
	if m.Set != nil {
		// Only a value of the statement's own key has that key's type:
		// "meta mark set ip dscp | 0x40" is a mark.
		proto = primText(m.Set)
		if a.text() != proto+" "+g.Keyword {
			return
		}
	}
	spec := keySpecs[proto+" "+g.Keyword]
	if spec == nil || len(toks) == 0 {
		return
	}
	if op := *toks[0].Atom; op == "&" || op == "|" || op == "^" {
		toks = toks[1:]
	}
	if len(toks) > 0 {
		b.validatePrim(spec, toks[0], m.Set != nil && *toks[0].Atom != "" && isWord(*toks[0].Atom))
	}
}

// statementFamily is the family a statement's addresses are of: the one
// it names (snat ip, tproxy ip6), which must be the table's and the
// context's, or else the context's ("" when nothing says).
func (b *ruleBuilder) statementFamily(pos rules.Pos, stmt, named string, ctx protoContext) (string, bool) {
	switch {
	case named != "" && b.tbl.family != "inet" && named != b.tbl.family:
		b.errorf(pos, "%s %s in a table of family %s", stmt, named, b.tbl.family)
		return "", false
	case named != "" && ctx.family != "" && named != ctx.family:
		b.errorf(pos, "conflicting protocols specified: %s vs. %s", ctx.family, named)
		return "", false
	case named == "":
		return ctx.family, true
	}
	return named, true
}

// validateObject checks that a rule names an object its table declares:
// nft -f fails on one it does not (the kernel's ENOENT). A name from a map
// ("counter name tcp dport map { ... }") is not checked here.
func (b *ruleBuilder) validateObject(pos rules.Pos, kind, name string) {
	if !strings.HasPrefix(name, `"`) && !isWord(name) {
		return
	}
	if !b.tbl.objects[kind+" "+unquote(name)] {
		b.errorf(pos, "%s %s does not exist in table %s %s", kind, unquote(name), b.tbl.family, b.tbl.name)
	}
}
