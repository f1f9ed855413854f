package nft

import (
	"bytes"
	"fmt"
	"math/bits"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"github.com/google/nftables/expr"

	"bpfwall/rules"
)

// cond narrows a model rule; it reports false when the rule can then never
// match (ip protocol tcp udp dport 53).
type cond func(r *rules.Rule) bool

// alt is a conjunction of conditions; choice is a disjunction of
// alternatives that no packet satisfies two of at once, so that a rule
// split into one model rule per alternative fires at most once, whatever
// its action.
type (
	alt    []cond
	choice []alt
)

// action is what an nft rule does, before chains are given model names.
type action struct {
	kind   actionKind
	chain  string // jump and goto
	pos    rules.Pos
	target rules.Target // log, reject and unsupported statements
}

type actionKind uint8

const (
	actNone actionKind = iota
	actAccept
	actDrop
	actReturn
	actJump
	actGoto
	actTarget
)

// outRule is one model rule an nft rule became, with its action still to
// be bound to model chains.
type outRule struct {
	rule *rules.Rule
	act  action
}

// ruleBuilder translates the terms of one nft rule for one address family.
type ruleBuilder struct {
	fam   rules.Family
	tbl   *table
	hook  string
	src   *srcRule
	rv    resolver
	errs  *rules.ErrorList
	sets  map[string]*rules.IPSet
	conds []choice
	out   []outRule
	// icmp type and code of the rule, combined into one ICMP match.
	icmp *icmpTerm
	// verdict is set once the rule has a verdict.
	verdict bool
	// rest is set after a statement the model does not interpret: the
	// terms after it may belong to it, and the rule is an error anyway.
	rest bool
	// unsupported is set once the rule has a construct the model cannot
	// express: it must reach lowering, which rejects it, even if another
	// term says it matches nothing.
	hasUnsupported bool
	// negProto is the protocol a "!=" term of the rule excludes: a model
	// rule holds one (! -p), so a second, other one is refused.
	negProto *uint8
	// xt says whether "xt" statements carry their options (Options.xt);
	// they are read as a rule of xtChain (a builtin chain, or "" for a
	// user chain) in xtTable.
	xt               xtOptions
	xtTable, xtChain string
}

type icmpTerm struct {
	v6        bool
	pos       rules.Pos
	typ       *uint8
	typeNeg   bool
	typeNames []uint8 // a set of types: one alternative each
	// codes are the disjoint, ordered code ranges the rule admits, one
	// alternative each; nil if it names no code.
	codes []codeRange
}

type codeRange struct{ lo, hi uint8 }

func (b *ruleBuilder) errorf(pos rules.Pos, format string, args ...any) {
	*b.errs = append(*b.errs, rules.Errorf(pos, format, args...))
}

// unsupported records a construct the model cannot express: it becomes a
// generic match, which lowering rejects at its position.
func (b *ruleBuilder) unsupported(pos rules.Pos, what string) {
	b.hasUnsupported = true
	b.add(always1(func(r *rules.Rule) bool {
		r.Matches = append(r.Matches, &rules.Generic{Located: rules.Located{Pos: pos}, Ext: what})
		return true
	}))
}

func always1(c cond) choice { return choice{alt{c}} }

func (b *ruleBuilder) add(c choice) { b.conds = append(b.conds, c) }

// maxSplit bounds the model rules one nft rule may become.
const maxSplit = 4096

// emit appends the model rules for the conditions so far and action a.
func (b *ruleBuilder) emit(a action) {
	n := 1
	for _, c := range b.conds {
		n *= max(len(c), 1)
		if n > maxSplit {
			b.errorf(b.src.pos, "rule expands to more than %d alternatives", maxSplit)
			return
		}
	}
	idx := make([]int, len(b.conds))
	for {
		r := &rules.Rule{Pos: b.src.pos, NFT: true}
		ok := true
		empty := false
		for i, c := range b.conds {
			if len(c) == 0 && b.hasUnsupported {
				continue // the rule is rejected anyway
			}
			if len(c) == 0 {
				empty = true
				break
			}
			for _, f := range c[idx[i]] {
				if !f(r) {
					ok = false
				}
			}
		}
		if empty {
			return
		}
		if ok {
			b.out = append(b.out, outRule{rule: r, act: a})
		}
		// Next combination.
		i := len(idx) - 1
		for ; i >= 0; i-- {
			idx[i]++
			if idx[i] < len(b.conds[i]) {
				break
			}
			idx[i] = 0
		}
		if i < 0 {
			return
		}
	}
}

// translate turns one nft rule into model rules.
func (b *ruleBuilder) translate() []outRule {
	b.rv = resolver{errs: b.errs, unsupported: b.unsupported}
	nerr := len(*b.errs)
	// nft refuses a rule whose terms its grammar reads as bpfwall's
	// does but does not take, whether or not bpfwall reads the rest.
	if b.src.ast != nil && !b.validate() {
		return nil
	}
	if b.src.unread != "" {
		b.unsupported(b.src.pos, fmt.Sprintf("rule %q, which bpfwall cannot read,", b.src.unread))
		b.emit(action{kind: actNone})
		return b.out
	}
	groups, skip, ok := b.mergeGroups()
	if !ok {
		return nil
	}
	for i, t := range b.src.ast.Terms {
		if b.rest {
			break
		}
		if b.verdict && t.Comment != nil {
			// "accept comment ..." as nft lists it: the rule's comment.
			c := &rules.Comment{Located: rules.Located{Pos: toPos(t.Pos)}, Text: unquote(*t.Comment)}
			for _, o := range b.out {
				o.rule.Matches = append(o.rule.Matches, c)
			}
			continue
		}
		if b.verdict {
			b.errorf(toPos(t.Pos), "statement after the verdict")
			break
		}
		switch {
		case skip[i]:
			// merged by nft into the "!=" chain of an earlier term
		case groups[i] != nil:
			b.negGroup(groups[i])
		default:
			b.term(t)
		}
	}
	b.flushICMP()
	if len(*b.errs) > nerr {
		return nil
	}
	if !b.verdict {
		b.emit(action{kind: actNone})
	}
	return b.out
}

func (b *ruleBuilder) term(t *Term) {
	pos := toPos(t.Pos)
	switch {
	case t.Verdict != nil:
		b.flushICMP()
		b.verdict = true
		b.emit(verdictAction(t.Verdict))
	case t.Counter != nil:
		if t.Counter.Name != nil {
			b.unsupported(pos, "counter name")
		}
		// Anonymous counters count; they do not decide.
	case t.Comment != nil:
		text := unquote(*t.Comment)
		b.add(always1(func(r *rules.Rule) bool {
			r.Matches = append(r.Matches, &rules.Comment{Located: rules.Located{Pos: pos}, Text: text})
			return true
		}))
	case t.Log != nil:
		b.flushICMP()
		if l, ok := b.log(t.Log); ok {
			// log does not end the rule: the model rule that logs is
			// followed by one with the same matches and the rest.
			b.emit(action{kind: actTarget, pos: pos, target: l})
		}
	case t.Limit != nil:
		b.limit(t.Limit)
	case t.Reject != nil:
		b.flushICMP()
		b.reject(t.Reject)
	case t.Tproxy != nil:
		b.flushICMP()
		b.tproxy(t.Tproxy)
	case t.Xt != nil:
		b.flushICMP()
		b.xtExtension(t.Xt)
	case t.TCPOpt != nil:
		b.tcpOptTest(pos, t.TCPOpt)
	case t.Match != nil:
		b.match(t.Match)
	case t.Other != nil:
		b.flushICMP()
		b.verdict, b.rest = true, true
		b.emit(action{kind: actTarget, pos: pos, target: &rules.GenericTarget{Located: rules.Located{Pos: pos}, Target: t.Other.Keyword}})
	}
}

func verdictAction(v *Verdict) action {
	a := action{pos: toPos(v.Pos)}
	switch v.Kind {
	case "accept":
		a.kind = actAccept
	case "drop":
		a.kind = actDrop
	case "return":
		a.kind = actReturn
	case "continue":
		a.kind = actNone
	}
	switch v.Jump {
	case "jump":
		a.kind, a.chain = actJump, unquote(v.Chain)
	case "goto":
		a.kind, a.chain = actGoto, unquote(v.Chain)
	}
	return a
}

var logLevels = map[string]uint8{
	"emerg": 0, "alert": 1, "crit": 2, "err": 3, "warn": 4, "notice": 5, "info": 6, "debug": 7,
}

func (b *ruleBuilder) log(l *Log) (*rules.Log, bool) {
	out := &rules.Log{Located: rules.Located{Pos: toPos(l.Pos)}, Level: 4}
	for _, o := range l.Options {
		pos := toPos(o.Pos)
		switch o.Key {
		case "prefix":
			out.Prefix = unquote(o.Value[0])
		case "level":
			lv, ok := logLevels[o.Value[0]]
			switch {
			case o.Value[0] == "audit":
				// Logs to the audit subsystem, not as LOG does.
				b.unsupported(pos, "log level audit")
				return nil, false
			case !ok:
				b.errorf(pos, "invalid log level %s", o.Value[0])
				return nil, false
			}
			out.Level = lv
		case "":
			f := o.Flags
			switch {
			case f.IP:
				out.Flags |= rules.LogIPOpt
			case f.TCP != nil:
				for _, w := range f.TCP {
					switch w {
					case "sequence":
						out.Flags |= rules.LogTCPSeq
					case "options":
						out.Flags |= rules.LogTCPOpt
					default:
						b.errorf(pos, "unknown log flags tcp %s", w)
						return nil, false
					}
				}
			case f.Word == "all":
				out.Flags |= rules.LogTCPSeq | rules.LogTCPOpt | rules.LogIPOpt | rules.LogUID | rules.LogMACDecode
			case f.Word == "skuid":
				out.Flags |= rules.LogUID
			case f.Word == "ether":
				out.Flags |= rules.LogMACDecode
			default:
				b.errorf(pos, "unknown log flags %s", f.Word)
				return nil, false
			}
		default:
			// nflog groups are another target altogether.
			b.unsupported(pos, "log "+o.Key)
			return nil, false
		}
	}
	return out, true
}

var limitUnits = map[string]uint64{"second": 1, "minute": 60, "hour": 3600, "day": 86400, "week": 604800}

// limitBytes are the multipliers of nft's byte units.
var limitBytes = map[string]uint64{"bytes": 1, "kbytes": 1024, "mbytes": 1024 * 1024}

// limit becomes a rate limit match: nft_limit's token bucket, with the
// rate, unit and burst nft sends to the kernel (a packet limit's burst
// defaults to 5 there, a byte limit's to 0).
func (b *ruleBuilder) limit(l *Limit) {
	pos := toPos(l.Pos)
	rate, err := parseNum(l.Rate, 64)
	per, ok := limitUnits[l.Per]
	if err != nil || !ok || rate == 0 {
		b.errorf(pos, "bad limit rate %s/%s", l.Rate, l.Per)
		return
	}
	m := &rules.RateLimit{Located: rules.Located{Pos: pos}, Unit: per, Over: l.Over, TableFamily: b.tbl.family}
	if l.RateUnit != "" {
		mult := limitBytes[l.RateUnit]
		if rate > ^uint64(0)/mult {
			b.errorf(pos, "limit rate %s %s is too large", l.Rate, l.RateUnit)
			return
		}
		rate *= mult
		m.Bytes = true
	}
	m.Rate = rate
	if l.Burst != "" {
		burst, err := parseNum(l.Burst, 32)
		if err != nil {
			b.errorf(pos, "bad limit burst %s", l.Burst)
			return
		}
		switch {
		case m.Bytes && (l.BurstUnit == "" || l.BurstUnit == "packets"):
			b.errorf(pos, "limit burst of a byte rate must be in bytes, kbytes or mbytes")
			return
		case !m.Bytes && l.BurstUnit != "" && l.BurstUnit != "packets":
			b.errorf(pos, "limit burst of a packet rate must be in packets")
			return
		case m.Bytes:
			mult := limitBytes[l.BurstUnit]
			if burst > 0xFFFFFFFF/mult {
				b.errorf(pos, "limit burst %s %s is too large", l.Burst, l.BurstUnit)
				return
			}
			burst *= mult
		}
		m.Burst = uint32(burst)
	}
	if !m.Bytes && m.Burst == 0 {
		m.Burst = 5 // NFT_LIMIT_PKT_BURST_DEFAULT
	}
	b.add(always1(func(r *rules.Rule) bool { r.Matches = append(r.Matches, m); return true }))
}

// generic adds a construct the model keeps as written, for printing, and
// lowering rejects at pos.
func (b *ruleBuilder) generic(pos rules.Pos, what, text string) {
	m := &rules.Generic{Located: rules.Located{Pos: pos}, Ext: what, Options: []rules.Option{{Name: "nft", Args: []string{text}}}}
	b.add(always1(func(r *rules.Rule) bool { r.Matches = append(r.Matches, m); return true }))
}

func (b *ruleBuilder) reject(rj *Reject) {
	pos := toPos(rj.Pos)
	v6 := b.fam == rules.IPv6
	with := ""
	var ok bool
	switch rj.With {
	case "":
	case "tcp":
		if rj.Reason != "reset" {
			b.errorf(pos, "unknown reject reason tcp %s", rj.Reason)
			return
		}
		with = "tcp-reset"
		// nft adds the dependency "meta l4proto tcp".
		b.add(always1(b.depMsg(6, "you cannot use tcp reset with protocol %s")))
	case "icmp", "icmpv6", "icmpx":
		// nft refuses these in a table of one family, whatever the
		// packets.
		switch tf := b.tbl.family; {
		case rj.With == "icmpx" && (tf == "ip" || tf == "ip6"):
			b.errorf(pos, "reject with icmpx is not supported in an %s table (abstracted ICMP unreachable)", tf)
			return
		case rj.With == "icmp" && tf == "ip6", rj.With == "icmpv6" && tf == "ip":
			b.errorf(pos, "reject with %s in an %s table: conflicting protocols", rj.With, tf)
			return
		}
		if rj.Reason != "" {
			if _, known := rejectCodes[rj.With][rj.Reason]; !known {
				b.errorf(pos, "reject with %s %s: %s has no code %s", rj.With, rj.Reason, rj.With, rj.Reason)
				return
			}
		}
		if (rj.With == "icmp" && v6) || (rj.With == "icmpv6" && !v6) {
			// nft's dependency (meta nfproto) keeps the other family's
			// packets out of the whole rule: nothing counts them.
			b.conds = append(b.conds, choice{})
			b.verdict = true
			return
		}
		if with, ok = rejectWith(rj.With, rj.Reason, v6); !ok {
			b.errorf(pos, "reject with %s %s is not supported", rj.With, rj.Reason)
			return
		}
	default:
		b.errorf(pos, "unknown reject type %s", rj.With)
		return
	}
	b.verdict = true
	b.emit(action{kind: actTarget, pos: pos, target: &rules.Reject{Located: rules.Located{Pos: pos}, With: with}})
}

// rejectCodes are the codes nft names for each reject type, by name and
// number (its icmp_code, icmpv6_code and icmpx_code types), as the model's
// --reject-with names: icmpx's for an IPv4 and an IPv6 packet.
var rejectCodes = map[string]map[string][2]string{
	"icmp": {
		"net-unreachable": {"icmp-net-unreachable"}, "0": {"icmp-net-unreachable"},
		"host-unreachable": {"icmp-host-unreachable"}, "1": {"icmp-host-unreachable"},
		"prot-unreachable": {"icmp-proto-unreachable"}, "2": {"icmp-proto-unreachable"},
		"port-unreachable": {"icmp-port-unreachable"}, "3": {"icmp-port-unreachable"},
		"net-prohibited": {"icmp-net-prohibited"}, "9": {"icmp-net-prohibited"},
		"host-prohibited": {"icmp-host-prohibited"}, "10": {"icmp-host-prohibited"},
		"admin-prohibited": {"icmp-admin-prohibited"}, "13": {"icmp-admin-prohibited"},
	},
	"icmpv6": {
		"no-route": {"", "icmp6-no-route"}, "0": {"", "icmp6-no-route"},
		"admin-prohibited": {"", "icmp6-adm-prohibited"}, "1": {"", "icmp6-adm-prohibited"},
		"addr-unreachable": {"", "icmp6-addr-unreachable"}, "3": {"", "icmp6-addr-unreachable"},
		"port-unreachable": {"", "icmp6-port-unreachable"}, "4": {"", "icmp6-port-unreachable"},
		"policy-fail": {"", "icmp6-policy-fail"}, "5": {"", "icmp6-policy-fail"},
		"reject-route": {"", "icmp6-reject-route"}, "6": {"", "icmp6-reject-route"},
	},
	"icmpx": {
		"no-route": {"icmp-net-unreachable", "icmp6-no-route"}, "0": {"icmp-net-unreachable", "icmp6-no-route"},
		"port-unreachable": {"icmp-port-unreachable", "icmp6-port-unreachable"}, "1": {"icmp-port-unreachable", "icmp6-port-unreachable"},
		"host-unreachable": {"icmp-host-unreachable", "icmp6-addr-unreachable"}, "2": {"icmp-host-unreachable", "icmp6-addr-unreachable"},
		"admin-prohibited": {"icmp-admin-prohibited", "icmp6-adm-prohibited"}, "3": {"icmp-admin-prohibited", "icmp6-adm-prohibited"},
	},
}

// rejectWith maps nft's reject type and code to the model's --reject-with
// name for a packet of family v6.
func rejectWith(typ, reason string, v6 bool) (string, bool) {
	w, ok := rejectCodes[typ][reason]
	if typ == "icmp" {
		return w[0], ok
	}
	if typ == "icmpv6" {
		return w[1], ok
	}
	if v6 {
		return w[1], ok
	}
	return w[0], ok
}

// tproxy is kept as a generic match named "tproxy" with its text: nft's
// statement is not a verdict (nft_tproxy_eval assigns the socket and the
// rule goes on, or breaks the rule when there is none), unlike xt_TPROXY,
// which drops the packet then. Lowering rejects it.
func (b *ruleBuilder) tproxy(t *Tproxy) {
	pos := toPos(t.Pos)
	if t.Family == "ip" && b.fam == rules.IPv6 || t.Family == "ip6" && b.fam == rules.IPv4 {
		b.add(choice{}) // the other family's packets: the rule breaks
		return
	}
	text := "to "
	if t.Family != "" {
		text = t.Family + " to "
	}
	if t.Addr != nil {
		a, _, ok := b.rv.atom(t.Addr, b.src.env, 0)
		if !ok {
			b.errorf(pos, "bad tproxy address")
			return
		}
		if ad, err := netip.ParseAddr(a); err == nil && ad.Is6() {
			a = "[" + a + "]"
		}
		text += a
	}
	if t.Port != nil {
		p, _, ok := b.rv.atom(t.Port, b.src.env, 0)
		port, err := parsePort(p)
		if !ok || err != nil {
			b.errorf(pos, "bad tproxy port")
			return
		}
		text += fmt.Sprintf(":%d", port)
	}
	b.generic(pos, "tproxy", text)
}

// needProto is the dependency of a transport-header expression: the rule
// tests protocol p.
// dep is needProto for the protocol a payload key or statement depends
// on: nft refuses a rule whose protocol is another one ("conflicting
// protocols specified").
func (b *ruleBuilder) dep(p uint8) cond {
	return b.depMsg(p, fmt.Sprintf("conflicting protocols specified: %%s vs. %s", rules.ProtoName(p)))
}

// depMsg is dep with the error message, which formats the rule's protocol.
func (b *ruleBuilder) depMsg(p uint8, msg string) cond {
	need := needProto(p)
	return func(r *rules.Rule) bool {
		if r.Proto != 0 && !r.ProtoNeg && r.Proto != p {
			b.errorf(b.src.pos, msg, rules.ProtoName(r.Proto))
			return false
		}
		return need(r)
	}
}

func needProto(p uint8) cond {
	return func(r *rules.Rule) bool {
		switch {
		case r.Proto == 0 && !r.ProtoNeg:
			r.Proto, r.ProtoGiven = p, true
			return true
		case r.ProtoNeg && r.Proto != p:
			// "!= udp" and "== tcp" is "== tcp".
			r.Proto, r.ProtoNeg, r.ProtoGiven = p, false, true
			return true
		}
		return r.Proto == p && !r.ProtoNeg
	}
}

// match translates "selector [op] value" and its statement forms.
func (b *ruleBuilder) match(m *Match) {
	pos := toPos(m.Pos)
	var keys []string
	for _, a := range m.Left.Atoms {
		keys = append(keys, a.text())
	}
	key := strings.Join(keys, " . ")
	if m.Set != nil {
		b.flushICMP()
		b.verdict, b.rest = true, true
		b.emit(action{kind: actTarget, pos: pos, target: &rules.GenericTarget{Located: rules.Located{Pos: pos}, Target: key + " set"}})
		return
	}
	if m.VMap != nil {
		b.vmap(m, keys, pos)
		return
	}
	op := normOp(m.Op)
	b.rv.keepCatchAll = true
	val, ok := b.rv.list(m.Right, b.src.env)
	b.rv.keepCatchAll = false
	if !ok {
		return
	}
	if ca := b.catchAllOf(val); ca != nil {
		b.catchAllLookup(pos, keys, op, m.Mask != nil)
		return
	}
	if len(keys) > 1 {
		if m.Mask != nil {
			b.unsupported(pos, "concatenation &")
			return
		}
		b.concat(pos, keys, op, val)
		return
	}
	if slices.ContainsFunc(val.elems, func(e elem) bool { return e.parts != nil }) {
		if !knownKeys[key] {
			b.unsupported(pos, key)
		} else {
			b.errorf(pos, "%s is one key, the value a concatenation", key)
		}
		return
	}
	var mask *rhs
	if m.Mask != nil {
		mv, ok := b.rv.value(&Value{Pos: m.Mask.Pos, Parts: []*Unit{{Pos: m.Mask.Pos, Lo: m.Mask}}}, b.src.env, 0)
		if !ok {
			return
		}
		mask = &mv
	}
	b.relation(pos, key, op, mask, val)
}

func normOp(op string) string {
	switch op {
	case "eq":
		return "=="
	case "ne":
		return "!="
	case "lt":
		return "<"
	case "gt":
		return ">"
	case "le":
		return "<="
	case "ge":
		return ">="
	}
	return op
}

// vmap expands "key vmap { v1 : verdict1, ... }" into one model rule per
// element: keys are distinct, so at most one of them fires.
func (b *ruleBuilder) vmap(m *Match, keys []string, pos rules.Pos) {
	var elems []elem
	var catchAll *elem
	switch {
	case m.VMap.Set != nil:
		b.rv.keepCatchAll = true
		r, ok := b.rv.value(&Value{Pos: m.VMap.Pos, Parts: []*Unit{{Pos: m.VMap.Pos, Lo: m.VMap}}}, b.src.env, 0)
		b.rv.keepCatchAll = false
		if !ok {
			return
		}
		elems, catchAll = r.elems, r.catchAll
	case m.VMap.Ref != nil:
		s := b.tbl.sets[(*m.VMap.Ref)[1:]]
		if s == nil || !s.isMap {
			b.errorf(pos, "map %s does not exist", *m.VMap.Ref)
			return
		}
		for i, el := range s.elems {
			if el.CatchAll {
				catchAll = &elem{pos: toPos(el.Pos), verdict: el.Verdict}
				continue
			}
			r, ok := b.rv.value(el.Key, s.elemEnvs[i], 0)
			if !ok {
				return
			}
			for j := range r.elems {
				r.elems[j].verdict = el.Verdict
			}
			elems = append(elems, r.elems...)
		}
	default:
		b.errorf(pos, "bad verdict map")
		return
	}
	b.flushICMP()
	if len(keys) > 1 && !b.disjointTuples(pos, keys, elems) {
		return
	}
	if len(keys) == 1 && !b.disjointKeys(keys[0], elems) {
		return
	}
	// A key in the map ends the rule with the element's verdict, but for
	// "continue", which goes on to the rule's next statement; a key not
	// in it breaks the rule (nft_lookup_eval).
	base := b.conds
	var cont choice
	for _, el := range elems {
		if el.verdict == nil {
			b.errorf(el.pos, "verdict map element without a verdict")
			b.conds = base
			return
		}
		var alts choice
		if len(keys) > 1 {
			var ok bool
			if alts, ok = b.tuple(keys, el); !ok {
				b.conds = base
				return
			}
		} else {
			if el.parts != nil {
				b.errorf(el.pos, "%s is one key, the element a concatenation", keys[0])
				b.conds = base
				return
			}
			b.conds = nil
			b.relation(el.pos, keys[0], "", nil, rhs{elems: []elem{el}})
			b.flushICMP()
			alts = product(b.conds)
		}
		a := verdictAction(el.verdict)
		if a.kind == actNone {
			cont = append(cont, alts...)
			continue
		}
		b.conds = append(slices.Clone(base), alts)
		b.emit(a)
	}
	if catchAll != nil {
		// The catch-all element takes every key the others do not.
		if catchAll.verdict == nil {
			b.errorf(catchAll.pos, "verdict map element without a verdict")
			b.conds = base
			return
		}
		b.conds = nil
		b.catchAllRest(catchAll.pos, keys, elems)
		alts := product(b.conds)
		if a := verdictAction(catchAll.verdict); a.kind == actNone {
			cont = append(cont, alts...)
		} else {
			b.conds = append(slices.Clone(base), alts)
			b.emit(a)
		}
	}
	b.conds = append(slices.Clone(base), cont)
}

// catchAllKey reports whether a lookup of key in a set with a catch-all
// element compiles: keys whose loads keyLoaded says exactly, the
// addresses (of every packet of the family), the TCP and UDP ports (of
// every packet whose transport header holds the port) and the mark.
func catchAllKey(key string) bool {
	switch key {
	case "ip saddr", "ip daddr", "ip6 saddr", "ip6 daddr", "tcp sport", "tcp dport", "udp sport", "udp dport", "meta mark", "mark":
		return true
	}
	return false
}

// catchAllOf returns the catch-all element of the set val is, a set
// literal (which the resolver kept) or a named set; nil when it has
// none.
func (b *ruleBuilder) catchAllOf(val rhs) *elem {
	if val.catchAll != nil {
		return val.catchAll
	}
	if len(val.elems) != 1 || val.elems[0].ref == "" {
		return nil
	}
	s := b.tbl.sets[val.elems[0].ref]
	if s == nil || slices.Contains(s.flags, "timeout") || slices.Contains(s.flags, "dynamic") {
		return nil // refused by setElems
	}
	for _, el := range s.elems {
		if el.CatchAll {
			return &elem{pos: toPos(el.Pos), verdict: el.Verdict}
		}
	}
	return nil
}

// catchAllLookup translates a lookup of keys in a set with a catch-all
// element (nft_lookup_eval, nft_set_catchall_lookup): every key is in
// it, so "==" holds for every packet whose keys nft loads, "!=" for
// none.
func (b *ruleBuilder) catchAllLookup(pos rules.Pos, keys []string, op string, masked bool) {
	for _, k := range keys {
		if !catchAllKey(k) {
			b.unsupported(pos, k+" in a set with a catch-all element *")
			return
		}
	}
	switch {
	case masked:
		b.unsupported(pos, "a masked key in a set with a catch-all element *")
	case op == "" || op == "==":
		for _, k := range keys {
			b.keyLoaded(k)
		}
	case op == "!=":
		b.add(choice{})
	default:
		b.unsupported(pos, "a set with a catch-all element * under "+op)
	}
}

// catchAllRest adds the condition of a verdict map's catch-all element:
// the key loads and is none of elems.
func (b *ruleBuilder) catchAllRest(pos rules.Pos, keys []string, elems []elem) {
	if len(keys) != 1 || !catchAllKey(keys[0]) {
		b.unsupported(pos, strings.Join(keys, " . ")+" in a verdict map with a catch-all element *")
		return
	}
	if len(elems) == 0 {
		b.keyLoaded(keys[0])
		return
	}
	b.relation(pos, keys[0], "!=", nil, rhs{elems: elems, set: true})
	b.flushICMP()
}

// disjointKeys refuses a verdict map two of whose keys overlap, as nft
// does ("conflicting intervals"). Keys it cannot place are left to the
// model.
func (b *ruleBuilder) disjointKeys(key string, elems []elem) bool {
	for i, x := range elems {
		xl, xh, ok := partRange(key, x)
		if !ok {
			continue
		}
		for _, y := range elems[i+1:] {
			yl, yh, ok := partRange(key, y)
			if ok && bytes.Compare(xh, yl) >= 0 && bytes.Compare(yh, xl) >= 0 {
				b.errorf(y.pos, "conflicting intervals in the verdict map: %s overlaps %s", elemText(y), elemText(x))
				return false
			}
		}
	}
	return true
}

func elemText(e elem) string {
	switch {
	case e.hasRange:
		return e.lo + "-" + e.hi
	case e.hasMask:
		return e.lo + "/" + e.mask
	}
	return e.lo
}

// knownKeys are the keys relation translates.
var knownKeys = map[string]bool{}

func init() {
	for _, k := range strings.Split("meta nfproto,nfproto,meta protocol,ip saddr,ip daddr,ip6 saddr,ip6 daddr,"+
		"ip protocol,meta l4proto,l4proto,tcp sport,tcp dport,udp sport,udp dport,sctp sport,sctp dport,th sport,th dport,"+
		"tcp flags,icmp type,icmp code,icmpv6 type,icmpv6 code,ct state,ct status,meta iifname,iifname,meta oifname,"+
		"oifname,meta iif,iif,meta oif,oif,meta mark,mark,meta pkttype,pkttype,ip ttl,ip6 hoplimit,"+
		"ip length,ip6 length,meta length,length,ether saddr,ip dscp,ip6 dscp,meta skuid,skuid,meta skgid,skgid", ",") {
		knownKeys[k] = true
	}
}

// relation translates one comparison.
func (b *ruleBuilder) relation(pos rules.Pos, key, op string, mask *rhs, val rhs) {
	if raw, ok := strings.CutPrefix(key, "raw payload "); ok {
		b.rawPayload(pos, key, raw, op, mask, val)
		return
	}
	addrKey := key == "ip saddr" || key == "ip daddr" || key == "ip6 saddr" || key == "ip6 daddr"
	if mask != nil && key != "tcp flags" && key != "meta mark" && key != "mark" && key != "ip frag-off" && key != "ct status" && !addrKey {
		b.unsupported(pos, key+" &")
		return
	}
	if op == "!" && key != "tcp flags" && key != "ct status" {
		// nft's "!" tests that none of a bitmask's flags is set.
		b.unsupported(pos, key+" !")
		return
	}
	switch key {
	case "meta nfproto", "nfproto", "meta protocol":
		b.nfproto(pos, key, op, val)
	case "ip saddr", "ip daddr", "ip6 saddr", "ip6 daddr":
		fam := rules.IPv4
		if strings.HasPrefix(key, "ip6 ") {
			fam = rules.IPv6
		}
		switch {
		case !b.needFamily(fam):
		case mask != nil:
			b.addrMaskMatch(pos, key, op, *mask, val)
		default:
			b.addrMatch(pos, key, op, val)
		}
	case "ip protocol", "meta l4proto", "l4proto":
		if key == "ip protocol" && !b.needFamily(rules.IPv4) {
			return
		}
		b.protoMatch(pos, op, val)
	case "tcp sport", "tcp dport", "udp sport", "udp dport", "sctp sport", "sctp dport", "th sport", "th dport":
		b.portMatch(pos, key, op, val)
	case "tcp flags":
		b.tcpFlags(pos, op, mask, val)
	case "icmp type", "icmp code":
		if b.needFamily(rules.IPv4) {
			b.icmpMatch(pos, false, key, op, val)
		}
	case "icmpv6 type", "icmpv6 code":
		if b.needFamily(rules.IPv6) {
			b.icmpMatch(pos, true, key, op, val)
		}
	case "ct state":
		b.ctState(pos, op, val)
	case "ct status":
		b.ctStatus(pos, op, mask, val)
	case "meta iifname", "iifname", "meta oifname", "oifname", "meta iif", "iif", "meta oif", "oif":
		b.ifname(pos, key, op, val)
	case "meta mark", "mark":
		b.mark(pos, op, mask, val)
	case "meta skuid", "skuid", "meta skgid", "skgid":
		b.skOwner(pos, key, op, val)
	case "meta pkttype", "pkttype":
		b.pktType(pos, op, val)
	case "ip ttl":
		if b.needFamily(rules.IPv4) {
			b.ttl(pos, op, val)
		}
	case "ip6 hoplimit":
		if b.needFamily(rules.IPv6) {
			b.ttl(pos, op, val)
		}
	case "ip dscp":
		if b.needFamily(rules.IPv4) {
			b.dscp(pos, key, op, val)
		}
	case "ip6 dscp":
		if b.needFamily(rules.IPv6) {
			b.dscp(pos, key, op, val)
		}
	case "ip length":
		if b.needFamily(rules.IPv4) {
			b.length(pos, op, val, 0)
		}
	case "ip frag-off":
		if b.needFamily(rules.IPv4) {
			b.fragOff(pos, op, mask, val)
		}
	case "meta length", "length":
		// skb->len: at the IP hooks the packet from its network header,
		// trimmed to the header's length, so what -m length tests (and
		// iptables-translate writes for it). At netdev ingress it counts
		// Ethernet padding too.
		if b.tbl.family == "netdev" {
			b.unsupported(pos, "meta length in a netdev table")
			return
		}
		b.length(pos, op, val, 0)
	case "ip6 length":
		// The payload length; the model's length adds the header.
		if b.needFamily(rules.IPv6) {
			b.length(pos, op, val, 40)
		}
	case "ether saddr":
		b.etherSaddr(pos, op, val)
	case "ip6 nexthdr":
		// The IPv6 header's own field, which differs from the transport
		// protocol behind extension headers; the compiled program does
		// not read it.
		b.unsupported(pos, "ip6 nexthdr (the IPv6 header's next header field, not the transport protocol: meta l4proto is supported)")
	default:
		b.unsupported(pos, key)
	}
}

// needFamily narrows an inet rule to family f: in the other family's
// model the rule never matches.
func (b *ruleBuilder) needFamily(f rules.Family) bool {
	if b.fam != f {
		b.add(choice{})
		return false
	}
	return true
}

// fragOff translates "ip frag-off & 0x1fff != 0", the non-first
// fragments, as iptables-translate writes -f (and "== 0" for ! -f):
// xt's -f tests the same offset bits.
func (b *ruleBuilder) fragOff(pos rules.Pos, op string, mask *rhs, val rhs) {
	one := func(v *rhs) (uint64, bool) {
		if v == nil || len(v.elems) != 1 || v.set {
			return 0, false
		}
		e := v.elems[0]
		n, err := parseNum(e.lo, 16)
		return n, err == nil && !e.hasRange && !e.hasMask && e.ref == ""
	}
	m, ok1 := one(mask)
	v, ok2 := one(&val)
	if !ok1 || !ok2 || m != 0x1fff || v != 0 || (op != "!=" && op != "==" && op != "") {
		b.unsupported(pos, "ip frag-off other than & 0x1fff != 0 (-f) or == 0")
		return
	}
	neg := op != "!=" // == 0: ! -f
	b.add(always1(func(r *rules.Rule) bool {
		if r.Fragment && r.FragmentNeg != neg {
			return false // -f and ! -f: never
		}
		r.Fragment, r.FragmentNeg = true, neg
		return true
	}))
}

func (b *ruleBuilder) nfproto(pos rules.Pos, key, op string, val rhs) {
	if op != "" && op != "==" && op != "!=" {
		b.unsupported(pos, key+" "+op)
		return
	}
	in := false
	for _, el := range val.elems {
		var f rules.Family
		switch el.lo {
		case "ipv4", "ip", "0x0800", "2":
			f = rules.IPv4
		case "ipv6", "ip6", "0x86dd", "10":
			f = rules.IPv6
		default:
			continue
		}
		if f == b.fam {
			in = true
		}
	}
	if in == (op == "!=") {
		b.add(choice{})
	}
}

func (b *ruleBuilder) addrMatch(pos rules.Pos, key, op string, val rhs) {
	if op != "" && op != "==" && op != "!=" {
		b.unsupported(pos, key+" "+op)
		return
	}
	neg := op == "!="
	dst := strings.HasSuffix(key, "daddr")
	// One address, prefix or range becomes -s/-d or -m iprange; a set,
	// named or anonymous, a hash:net ipset of its prefixes.
	if len(val.elems) == 1 && !val.set && val.elems[0].ref == "" {
		el := val.elems[0]
		if el.hasRange {
			from, err1 := netip.ParseAddr(el.lo)
			to, err2 := netip.ParseAddr(el.hi)
			if err1 != nil || err2 != nil || from.BitLen() != b.fam.Bits() || to.BitLen() != b.fam.Bits() {
				b.errorf(el.pos, "bad %s address range %s-%s", b.fam, el.lo, el.hi)
				return
			}
			b.add(always1(addrRangeCond(pos, dst, from, to, neg)))
			return
		}
		p, err := prefixOf(el, b.fam)
		if err != nil {
			b.errorf(el.pos, "%v", err)
			return
		}
		b.add(always1(func(r *rules.Rule) bool {
			if !setAddr(r, dst, rules.NetFromPrefix(p), neg) {
				from, to := prefixRange(p)
				return addrRangeCond(pos, dst, from, to, neg)(r)
			}
			return true
		}))
		return
	}
	prefixes, name, ok := b.addrSetPrefixes(pos, val)
	if !ok {
		return
	}
	set := &rules.IPSet{Name: name, Pos: pos, Type: "hash:net", Family: b.fam}
	for _, p := range prefixes {
		set.Entries = append(set.Entries, rules.IPSetEntry{Pos: pos, Addr: p})
	}
	b.sets[name] = set
	dir := rules.SetSrc
	if dst {
		dir = rules.SetDst
	}
	b.add(always1(func(r *rules.Rule) bool {
		r.Matches = append(r.Matches, &rules.Set{Located: rules.Located{Pos: pos}, SetName: name, Dirs: []rules.SetDir{dir}, Neg: neg})
		return true
	}))
}

// addrMaskMatch translates "ip saddr & MASK == VALUE", which
// iptables-translate writes for -s ADDR/MASK with a mask that is no
// prefix: -s/-d with that mask. A value with bits outside the mask is
// never equal.
func (b *ruleBuilder) addrMaskMatch(pos rules.Pos, key, op string, mask, val rhs) {
	one := func(v rhs) (netip.Addr, bool) {
		if len(v.elems) != 1 || v.set {
			return netip.Addr{}, false
		}
		e := v.elems[0]
		a, err := netip.ParseAddr(e.lo)
		return a, err == nil && !e.hasRange && !e.hasMask && e.ref == "" && a.BitLen() == b.fam.Bits()
	}
	m, ok1 := one(mask)
	v, ok2 := one(val)
	if !ok1 || !ok2 || (op != "" && op != "==" && op != "!=") {
		b.unsupported(pos, key+" & with a set, range or comparison")
		return
	}
	neg := op == "!="
	mb, vb := m.AsSlice(), v.AsSlice()
	for i := range vb {
		if vb[i]&^mb[i] != 0 {
			if !neg {
				b.add(choice{}) // never equal
			}
			return
		}
	}
	dst := strings.HasSuffix(key, "daddr")
	n := rules.Net{Addr: v, Mask: m}
	b.add(always1(func(r *rules.Rule) bool {
		if setAddr(r, dst, n, neg) {
			return true
		}
		// The rule's own test is taken: a prefix is a range, as a second
		// "ip saddr 10.0.0.0/8" is; any other mask a match of its own.
		if bits := n.Bits(); bits >= 0 {
			from, to := prefixRange(netip.PrefixFrom(v, bits))
			return addrRangeCond(pos, dst, from, to, neg)(r)
		}
		r.Matches = append(r.Matches, &rules.MaskedAddr{Located: rules.Located{Pos: pos}, Dst: dst, Net: n, Neg: neg})
		return true
	}))
}

// setAddr makes n the rule's -s (-d when dst), and says whether it could:
// not when the rule has one already.
func setAddr(r *rules.Rule, dst bool, n rules.Net, neg bool) bool {
	switch {
	case !dst && r.Src.IsAny() && !r.SrcNeg:
		r.Src, r.SrcNeg = n, neg
	case dst && r.Dst.IsAny() && !r.DstNeg:
		r.Dst, r.DstNeg = n, neg
	default:
		return false
	}
	return true
}

func addrRangeCond(pos rules.Pos, dst bool, from, to netip.Addr, neg bool) cond {
	return func(r *rules.Rule) bool {
		ar := &rules.AddrRange{From: from, To: to}
		m := &rules.IPRange{Located: rules.Located{Pos: pos}}
		if dst {
			m.Dst, m.DstNeg = ar, neg
		} else {
			m.Src, m.SrcNeg = ar, neg
		}
		r.Matches = append(r.Matches, m)
		return true
	}
}

// prefixRange returns the first and last address of p.
func prefixRange(p netip.Prefix) (netip.Addr, netip.Addr) {
	from := p.Masked().Addr()
	b := from.AsSlice()
	for i := p.Bits(); i < len(b)*8; i++ {
		b[i/8] |= 0x80 >> (i % 8)
	}
	to, _ := netip.AddrFromSlice(b)
	return from, to
}

// addrSetPrefixes returns the prefixes of an address set and the name of
// the ipset the model gives it.
func (b *ruleBuilder) addrSetPrefixes(pos rules.Pos, val rhs) ([]netip.Prefix, string, bool) {
	var elems []elem
	name := fmt.Sprintf("nft:%s:%d:%d", pos.File, pos.Line, pos.Col)
	if len(val.elems) == 1 && val.elems[0].ref != "" {
		ref := val.elems[0].ref
		s := b.tbl.sets[ref]
		if s == nil {
			b.errorf(pos, "set @%s does not exist in table %s %s", ref, b.tbl.family, b.tbl.name)
			return nil, "", false
		}
		// A map is a set of its keys to a lookup (nft_lookup without a
		// destination register).
		for _, f := range s.flags {
			if f == "timeout" || f == "dynamic" {
				b.unsupported(pos, "set with flag "+f)
				return nil, "", false
			}
		}
		for i, el := range s.elems {
			if el.CatchAll {
				b.unsupported(pos, "set "+s.name+" with a catch-all element *")
				return nil, "", false
			}
			r, ok := b.rv.value(el.Key, s.elemEnvs[i], 0)
			if !ok {
				return nil, "", false
			}
			if timed(el) {
				b.unsupported(toPos(el.Pos), "set element timeout")
				return nil, "", false
			}
			elems = append(elems, r.elems...)
		}
		name = fmt.Sprintf("nft:%s:%s", b.tbl.name, ref)
	} else {
		elems = val.elems
	}
	var out []netip.Prefix
	for _, el := range elems {
		if el.ref != "" {
			b.errorf(el.pos, "set reference inside a set")
			return nil, "", false
		}
		if el.hasRange {
			from, err1 := netip.ParseAddr(el.lo)
			to, err2 := netip.ParseAddr(el.hi)
			if err1 != nil || err2 != nil || from.BitLen() != b.fam.Bits() || to.BitLen() != b.fam.Bits() || from.Compare(to) > 0 {
				b.errorf(el.pos, "bad %s address range %s-%s", b.fam, el.lo, el.hi)
				return nil, "", false
			}
			out = append(out, RangePrefixes(from, to)...)
			continue
		}
		p, err := prefixOf(el, b.fam)
		if err != nil {
			b.errorf(el.pos, "%v", err)
			return nil, "", false
		}
		out = append(out, p)
	}
	return out, name, true
}

// RangePrefixes splits from..to into the prefixes that cover it exactly.
func RangePrefixes(from, to netip.Addr) []netip.Prefix {
	var out []netip.Prefix
	for {
		bits := from.BitLen()
		// Grow the prefix while it starts at from and ends within to.
		for bits > 0 {
			p := netip.PrefixFrom(from, bits-1)
			if p.Masked().Addr() != from {
				break
			}
			if _, last := prefixRange(p); last.Compare(to) > 0 {
				break
			}
			bits--
		}
		p := netip.PrefixFrom(from, bits)
		out = append(out, p)
		_, last := prefixRange(p)
		if last.Compare(to) >= 0 {
			return out
		}
		from = last.Next()
	}
}

func (b *ruleBuilder) protoMatch(pos rules.Pos, op string, val rhs) {
	if op != "" && op != "==" && op != "!=" {
		b.unsupported(pos, "l4proto "+op)
		return
	}
	var protos []uint8
	for _, el := range val.elems {
		if el.hasRange || el.hasMask || el.ref != "" {
			b.unsupported(el.pos, "protocol range or set reference")
			return
		}
		p, err := parseProto(el.lo)
		if err != nil {
			b.errorf(el.pos, "%v", err)
			return
		}
		protos = append(protos, p)
	}
	if op == "!=" && (len(protos) > 1 || b.negProto != nil && *b.negProto != protos[0]) {
		// More protocols than the rule's "! -p" holds: the rest as a
		// match of their own.
		protos = dedup(protos)
		loc := rules.Located{Pos: pos}
		b.add(always1(func(r *rules.Rule) bool {
			if r.Proto != 0 && !r.ProtoNeg {
				return !slices.Contains(protos, r.Proto)
			}
			rest := protos
			if r.ProtoNeg {
				rest = slices.DeleteFunc(slices.Clone(protos), func(p uint8) bool { return p == r.Proto })
			}
			if len(rest) > 0 {
				r.Matches = append(r.Matches, &rules.ProtocolsNot{Located: loc, Protos: rest})
			}
			return true
		}))
		return
	}
	if op == "!=" {
		p := protos[0]
		b.negProto = &p
		b.add(always1(func(r *rules.Rule) bool {
			switch {
			case r.Proto == 0 && !r.ProtoNeg:
				r.Proto, r.ProtoNeg, r.ProtoGiven = p, true, true
				return true
			case !r.ProtoNeg:
				return r.Proto != p
			}
			return r.Proto == p // two negations need two matches
		}))
		return
	}
	var c choice
	for _, p := range dedup(protos) {
		c = append(c, alt{needProto(p)})
	}
	b.add(c)
}

func dedup[T comparable](xs []T) []T {
	var out []T
	for _, x := range xs {
		if !slices.Contains(out, x) {
			out = append(out, x)
		}
	}
	return out
}

// portMatch: the TCP or UDP match of the model for the first condition on
// a port, multiport for the others and for sets, SCTP and th.
func (b *ruleBuilder) portMatch(pos rules.Pos, key, op string, val rhs) {
	proto, field, _ := strings.Cut(key, " ")
	var ranges []rules.PortRange
	neg := op == "!="
	switch op {
	case "", "==", "!=":
		for _, el := range b.expandRef(pos, val) {
			r, ok := b.portRange(el)
			if !ok {
				return
			}
			ranges = append(ranges, r)
		}
		if len(val.elems) == 0 {
			return
		}
	case "<", ">", "<=", ">=":
		if len(val.elems) != 1 {
			b.errorf(pos, "%s needs one port", op)
			return
		}
		v, err := parsePort(val.elems[0].lo)
		if err != nil {
			b.errorf(pos, "%v", err)
			return
		}
		r, ok := cmpRange(op, uint64(v), 0xffff)
		if !ok {
			b.add(choice{})
			return
		}
		ranges = []rules.PortRange{{Lo: uint16(r[0]), Hi: uint16(r[1])}}
	default:
		b.unsupported(pos, key+" "+op)
		return
	}
	if len(ranges) == 0 {
		if !neg {
			b.add(choice{})
			return
		}
		// Not in an empty set: every packet nft can load the port of,
		// which the whole range of ports says.
		ranges, neg = []rules.PortRange{rules.AnyPort}, false
	}
	loc := rules.Located{Pos: pos}
	dir := rules.MultiportDst
	if field == "sport" {
		dir = rules.MultiportSrc
	}
	need := b.portProto(pos, key, proto)
	b.add(always1(func(r *rules.Rule) bool {
		if !need(r) {
			return false
		}
		if !slices.Contains(portProtos, r.Proto) || r.ProtoNeg {
			return true // refused by portProto
		}
		p := r.Proto
		// A tcp or udp match with every port would test none: the
		// whole range stays a multiport match, which loads the port.
		if len(ranges) == 1 && (p == 6 || p == 17) && (ranges[0] != rules.AnyPort || neg) {
			if b.singlePort(r, p, field, ranges[0], neg, loc) {
				return true
			}
		}
		r.Matches = append(r.Matches, &rules.Multiport{Located: loc, Dir: dir, Ports: ranges, Neg: neg})
		return true
	}))
}

// portProtos are the protocols whose transport header begins with the
// source and destination ports, which multiport reads (and netfilter's
// xt_multiport accepts).
var portProtos = []uint8{6, 17, 33, 132, 136}

// portProto is the protocol condition of a port key. "tcp dport" and the
// like depend on their protocol. nft's "th dport" has no dependency: it
// loads the two bytes at offset 2 of any transport header (an ICMP
// checksum, an ESP SPI). Where an earlier term of the rule has made the
// protocol one of portProtos, those bytes are its port and the key is
// that protocol's; elsewhere bpfwall, which reads no transport header
// it does not know, refuses it.
func (b *ruleBuilder) portProto(pos rules.Pos, key, proto string) cond {
	if proto != "th" {
		p, _ := parseProto(proto)
		return b.dep(p)
	}
	return func(r *rules.Rule) bool {
		if !slices.Contains(portProtos, r.Proto) || r.ProtoNeg {
			r.Matches = append(r.Matches, &rules.Generic{Located: rules.Located{Pos: pos},
				Ext: key + " (bpfwall reads it after a protocol match of tcp, udp, udplite, sctp or dccp)"})
		}
		return true
	}
}

// fillFreePort sets the field's ("sport" or "dport") range of a tcp or udp
// match if it does not test that port yet.
func fillFreePort(field string, src *rules.PortRange, srcNeg *bool, dst *rules.PortRange, dstNeg *bool, pr rules.PortRange, neg bool) bool {
	ports, portsNeg := src, srcNeg
	if field == "dport" {
		ports, portsNeg = dst, dstNeg
	} else if field != "sport" {
		return false
	}
	if *ports != rules.AnyPort || *portsNeg {
		return false
	}
	*ports, *portsNeg = pr, neg
	return true
}

// singlePort sets the port of the rule's tcp or udp match when it has none
// yet in that direction.
func (b *ruleBuilder) singlePort(r *rules.Rule, p uint8, field string, pr rules.PortRange, neg bool, loc rules.Located) bool {
	for _, m := range r.Matches {
		switch m := m.(type) {
		case *rules.TCP:
			if p != 6 {
				continue
			}
			return fillFreePort(field, &m.SrcPorts, &m.SrcNeg, &m.DstPorts, &m.DstNeg, pr, neg)
		case *rules.UDP:
			if p != 17 {
				continue
			}
			return fillFreePort(field, &m.SrcPorts, &m.SrcNeg, &m.DstPorts, &m.DstNeg, pr, neg)
		}
	}
	src, dst := rules.AnyPort, rules.AnyPort
	sneg, dneg := false, false
	if field == "sport" {
		src, sneg = pr, neg
	} else {
		dst, dneg = pr, neg
	}
	if p == 6 {
		r.Matches = append(r.Matches, &rules.TCP{Located: loc, SrcPorts: src, DstPorts: dst, SrcNeg: sneg, DstNeg: dneg})
	} else {
		r.Matches = append(r.Matches, &rules.UDP{Located: loc, SrcPorts: src, DstPorts: dst, SrcNeg: sneg, DstNeg: dneg})
	}
	return true
}

// expandRef replaces a reference to a named set by its elements, which
// must be single values: the key is one.
func (b *ruleBuilder) expandRef(pos rules.Pos, val rhs) []elem {
	out := b.setElems(pos, val)
	if slices.ContainsFunc(out, func(e elem) bool { return e.parts != nil }) {
		b.errorf(pos, "one key, a set of concatenations")
		return nil
	}
	return out
}

// setElems replaces a reference to a named set by its elements.
func (b *ruleBuilder) setElems(pos rules.Pos, val rhs) []elem {
	if len(val.elems) != 1 || val.elems[0].ref == "" {
		return val.elems
	}
	ref := val.elems[0].ref
	s := b.tbl.sets[ref]
	if s == nil { // a map is looked up by its keys
		b.errorf(pos, "set @%s does not exist in table %s %s", ref, b.tbl.family, b.tbl.name)
		return nil
	}
	for _, f := range s.flags {
		if f == "timeout" || f == "dynamic" {
			b.unsupported(pos, "set with flag "+f)
			return nil
		}
	}
	var out []elem
	for i, el := range s.elems {
		if timed(el) {
			b.unsupported(toPos(el.Pos), "set element timeout")
			return nil
		}
		if el.CatchAll {
			b.unsupported(pos, "set "+s.name+" with a catch-all element *")
			return nil
		}
		r, ok := b.rv.value(el.Key, s.elemEnvs[i], 0)
		if !ok {
			return nil
		}
		out = append(out, r.elems...)
	}
	return out
}

func (b *ruleBuilder) portRange(el elem) (rules.PortRange, bool) {
	if el.hasMask || el.ref != "" {
		b.errorf(el.pos, "bad port %s", el.lo)
		return rules.PortRange{}, false
	}
	lo, err := parsePort(el.lo)
	if err != nil {
		b.errorf(el.pos, "%v", err)
		return rules.PortRange{}, false
	}
	hi := lo
	if el.hasRange {
		if hi, err = parsePort(el.hi); err != nil || hi < lo {
			b.errorf(el.pos, "bad port range %s-%s", el.lo, el.hi)
			return rules.PortRange{}, false
		}
	}
	return rules.PortRange{Lo: lo, Hi: hi}, true
}

// cmpRange returns the values of 0..maxV that satisfy "x op v", or false
// when there are none.
func cmpRange(op string, v, maxV uint64) ([2]uint64, bool) {
	switch op {
	case "<":
		if v == 0 {
			return [2]uint64{}, false
		}
		return [2]uint64{0, v - 1}, true
	case "<=":
		return [2]uint64{0, min(v, maxV)}, true
	case ">":
		if v >= maxV {
			return [2]uint64{}, false
		}
		return [2]uint64{v + 1, maxV}, true
	case ">=":
		if v > maxV {
			return [2]uint64{}, false
		}
		return [2]uint64{v, maxV}, true
	}
	return [2]uint64{v, v}, true
}

func tcpFlagBits(names ...string) (uint8, error) {
	var v uint8
	for _, n := range names {
		f, ok := tcpFlagNames[n]
		if !ok {
			x, err := parseNum(n, 8)
			if err != nil {
				return 0, fmt.Errorf("unknown tcp flag %q", n)
			}
			f = uint8(x)
		}
		v |= f
	}
	return v, nil
}

func flagValue(el elem) (uint8, error) {
	if el.or != nil {
		return tcpFlagBits(el.or...)
	}
	return tcpFlagBits(el.lo)
}

// tcpFlags: "tcp flags syn" and "tcp flags syn,ack" (any of the flags is
// set), "== syn" and sets (exactly these flags), "syn / syn,ack" and
// "& (syn|ack) == syn" (these flags under a mask).
func (b *ruleBuilder) tcpFlags(pos rules.Pos, op string, mask *rhs, val rhs) {
	loc := rules.Located{Pos: pos}
	need := b.dep(6)
	flags := func(m, c uint8, neg bool) cond {
		return func(r *rules.Rule) bool {
			if !need(r) {
				return false
			}
			r.Matches = append(r.Matches, &rules.TCP{Located: loc, SrcPorts: rules.AnyPort, DstPorts: rules.AnyPort, FlagMask: m, FlagComp: c, FlagsNeg: neg})
			return true
		}
	}
	// "a,b / c,d": the mask is the part after "/" and the rest of the list.
	if i := slices.IndexFunc(val.elems, func(e elem) bool { return e.hasMask }); i >= 0 && mask == nil && !val.set {
		var comp []string
		for _, e := range val.elems[:i] {
			comp = append(comp, e.lo)
		}
		comp = append(comp, val.elems[i].lo)
		maskNames := []string{val.elems[i].mask}
		for _, e := range val.elems[i+1:] {
			maskNames = append(maskNames, e.lo)
		}
		c, err1 := tcpFlagBits(comp...)
		m, err2 := tcpFlagBits(maskNames...)
		if err1 != nil || err2 != nil || (op != "" && op != "==" && op != "!=") {
			b.errorf(pos, "bad tcp flags")
			return
		}
		// nft compares (flags & mask) with the value as written
		// (nft_bitwise, then nft_cmp): a value bit outside the mask makes
		// the test fail for every packet, so the value is not masked here.
		b.add(always1(flags(m, c, op == "!=")))
		return
	}
	if mask != nil {
		if len(mask.elems) != 1 {
			b.errorf(pos, "bad tcp flags mask")
			return
		}
		m, err := flagValue(mask.elems[0])
		if err != nil {
			b.errorf(pos, "%v", err)
			return
		}
		if op == "" && !val.set {
			op = "=="
		}
		b.flagValues(pos, op, m, val, flags)
		return
	}
	if (op == "" || op == "!") && !val.set {
		// Implicit: (flags & value) != 0, any of the flags; "!" none of
		// them, (flags & value) == 0, as nft lists --tcp-flags X NONE.
		var all uint8
		for _, e := range val.elems {
			v, err := flagValue(e)
			if err != nil {
				b.errorf(e.pos, "%v", err)
				return
			}
			all |= v
		}
		if op == "!" {
			b.add(always1(flags(all, 0, false)))
			return
		}
		var c choice
		var seen uint8
		for bit := uint8(1); bit != 0; bit <<= 1 {
			if all&bit == 0 {
				continue
			}
			// The lowest set flag is this one: disjoint alternatives.
			c = append(c, alt{flags(seen|bit, bit, false)})
			seen |= bit
		}
		b.add(c)
		return
	}
	b.flagValues(pos, op, 0xff, val, flags)
}

func (b *ruleBuilder) flagValues(pos rules.Pos, op string, m uint8, val rhs, flags func(m, c uint8, neg bool) cond) {
	var vals []uint8
	for _, e := range val.elems {
		v, err := flagValue(e)
		if err != nil || e.hasRange || e.hasMask {
			b.errorf(e.pos, "bad tcp flags value")
			return
		}
		vals = append(vals, v)
	}
	switch op {
	case "", "==":
		var c choice
		for _, v := range dedup(vals) {
			if v&^m != 0 {
				continue // never equal under the mask
			}
			c = append(c, alt{flags(m, v, false)})
		}
		b.add(c)
	case "!=":
		// A value with bits outside the mask is never equal: its "!="
		// holds for every TCP packet whose flags nft can load, and the
		// rule still needs those (found by internal/difftest, nft seed 67).
		var a alt
		for _, v := range dedup(vals) {
			a = append(a, flags(m, v, true))
		}
		b.add(choice{a})
	default:
		b.unsupported(pos, "tcp flags "+op)
	}
}

func (b *ruleBuilder) icmpMatch(pos rules.Pos, v6 bool, key, op string, val rhs) {
	if b.icmp == nil {
		b.icmp = &icmpTerm{v6: v6, pos: pos}
	}
	it := b.icmp
	types, codes := icmpTypes, icmpCodes
	if v6 {
		types, codes = icmpv6Types, icmpv6Codes
	}
	isType := strings.HasSuffix(key, "type")
	if op != "" && op != "==" && op != "!=" {
		b.unsupported(pos, key+" "+op)
		return
	}
	names := codes
	if isType {
		names = types
	}
	var rs []codeRange
	for _, e := range b.expandRef(pos, val) {
		if e.hasMask || e.hasRange && isType {
			b.unsupported(e.pos, key+" range")
			return
		}
		lo, err := lookupByte(names, e.lo)
		hi := lo
		if err == nil && e.hasRange {
			hi, err = lookupByte(names, e.hi)
		}
		if err != nil {
			b.errorf(e.pos, "%s: %v", key, err)
			return
		}
		if lo > hi {
			b.errorf(e.pos, "%s: range %d-%d is empty", key, lo, hi)
			return
		}
		rs = append(rs, codeRange{lo, hi})
	}
	switch {
	case isType && it.typ == nil && it.typeNames == nil && op == "!=" && len(rs) == 1:
		it.typ, it.typeNeg = &rs[0].lo, true
	case isType && it.typ == nil && it.typeNames == nil && op != "!=":
		var vs []uint8
		for _, r := range rs {
			vs = append(vs, r.lo)
		}
		if len(vs) == 1 {
			it.typ = &vs[0]
		} else {
			it.typeNames = dedup(vs)
		}
	case !isType && it.codes == nil:
		it.codes = mergeCodes(rs, op == "!=")
	default:
		b.unsupported(pos, key+" combination")
	}
}

// mergeCodes orders and joins code ranges, which nft's sets may list
// overlapping, into disjoint ones; with neg their complement.
func mergeCodes(rs []codeRange, neg bool) []codeRange {
	slices.SortFunc(rs, func(x, y codeRange) int { return int(x.lo) - int(y.lo) })
	var out []codeRange
	for _, r := range rs {
		if n := len(out); n > 0 && int(r.lo) <= int(out[n-1].hi)+1 {
			out[n-1].hi = max(out[n-1].hi, r.hi)
			continue
		}
		out = append(out, r)
	}
	if !neg {
		return out
	}
	comp := []codeRange{}
	next := 0 // the first code not yet covered
	for _, r := range out {
		if int(r.lo) > next {
			comp = append(comp, codeRange{uint8(next), r.lo - 1})
		}
		next = int(r.hi) + 1
	}
	if next <= 0xff {
		comp = append(comp, codeRange{uint8(next), 0xff})
	}
	return comp
}

// flushICMP adds the rule's icmp type and code terms as one condition:
// an alternative for each type and code range, the model's ICMP match,
// or its ICMPCode where the rule names no type.
func (b *ruleBuilder) flushICMP() {
	it := b.icmp
	if it == nil {
		return
	}
	b.icmp = nil
	proto := uint8(1)
	if it.v6 {
		proto = 58
	}
	loc := rules.Located{Pos: it.pos}
	need := b.dep(proto)
	codes := it.codes
	if codes == nil {
		codes = []codeRange{{0, 0xff}}
	}
	if len(codes) == 0 {
		// "icmp code != { 0-255 }"; the protocol is still that of icmp.
		b.add(choice{})
		return
	}
	// Each model rule gets a match of its own.
	mk := func(m func() rules.Match) alt {
		return alt{func(r *rules.Rule) bool {
			if !need(r) {
				return false
			}
			r.Matches = append(r.Matches, m())
			return true
		}}
	}
	var types []uint8
	switch {
	case it.typ != nil:
		if it.typeNeg && it.codes != nil {
			b.unsupported(it.pos, "negated icmp type with a code")
			return
		}
		types = []uint8{*it.typ}
	case it.typeNames != nil:
		types = it.typeNames
	default:
		var c choice
		for _, cr := range codes {
			c = append(c, mk(func() rules.Match {
				return &rules.ICMPCode{Located: loc, V6: it.v6, CodeMin: cr.lo, CodeMax: cr.hi}
			}))
		}
		b.add(c)
		return
	}
	var c choice
	for _, t := range types {
		if !it.v6 && t == 0xff {
			b.unsupported(it.pos, "icmp type 255")
			return
		}
		for _, cr := range codes {
			c = append(c, mk(func() rules.Match {
				return &rules.ICMP{Located: loc, V6: it.v6, Type: t, CodeMin: cr.lo, CodeMax: cr.hi, Neg: it.typeNeg}
			}))
		}
	}
	b.add(c)
}

// CTStateBits are the kernel's conntrack state bits (NF_CT_STATE_BIT) and
// their nft names.
var CTStateBits = []struct {
	Bit  uint32
	Name string
}{
	{expr.CtStateBitINVALID, "invalid"}, {expr.CtStateBitESTABLISHED, "established"},
	{expr.CtStateBitRELATED, "related"}, {expr.CtStateBitNEW, "new"}, {expr.CtStateBitUNTRACKED, "untracked"},
}

// ctStateNumber reads a ct state given as a number of the kernel's bits
// (NF_CT_STATE_BIT, CTStateBits), as nft takes it too: "ct state 8" is
// new. Any of them with the implicit operator; with == and != (a packet
// has one state) exactly one.
func ctStateNumber(s, op string) (uint16, bool) {
	v, err := parseNum(s, 32)
	if err != nil || v == 0 {
		return 0, false
	}
	var st uint16
	n := 0
	for _, b := range CTStateBits {
		if v&uint64(b.Bit) != 0 {
			st |= ctStateNames[b.Name]
			v &^= uint64(b.Bit)
			n++
		}
	}
	return st, v == 0 && (op == "" || n == 1)
}

func (b *ruleBuilder) ctState(pos rules.Pos, op string, val rhs) {
	if op != "" && op != "==" && op != "!=" {
		b.unsupported(pos, "ct state "+op)
		return
	}
	if len(val.elems) == 1 && !val.set && (op == "==" || op == "!=") {
		// "== 6": no packet has two states at once.
		if st, ok := ctStateNumber(val.elems[0].lo, ""); ok && bits.OnesCount16(st) > 1 {
			if op == "==" {
				b.add(choice{})
				return
			}
			// Every state, still tested: conntrack stays on.
			all := &rules.Conntrack{Located: rules.Located{Pos: pos}, State: rules.CTInvalid | rules.CTEstablished | rules.CTRelated | rules.CTNew | rules.CTUntracked}
			b.add(always1(func(r *rules.Rule) bool { r.Matches = append(r.Matches, all); return true }))
			return
		}
	}
	var st uint16
	for _, e := range b.expandRef(pos, val) {
		names := e.or
		if names == nil {
			names = []string{e.lo}
		}
		for _, n := range names {
			s, ok := ctStateNames[n]
			if !ok {
				s, ok = ctStateNumber(n, op)
			}
			if !ok || e.hasRange || e.hasMask {
				b.errorf(e.pos, "unknown ct state %q", n)
				return
			}
			st |= s
		}
	}
	// A packet has exactly one state, so "any of" (implicit), set
	// membership and equality agree; "!=" of one state is its negation.
	if op == "!=" && len(val.elems) > 1 && !val.set {
		b.unsupported(pos, "ct state != list")
		return
	}
	m := &rules.Conntrack{Located: rules.Located{Pos: pos}, State: st, StateNeg: op == "!="}
	b.add(always1(func(r *rules.Rule) bool { r.Matches = append(r.Matches, m); return true }))
}

// tcpOptKinds are the TCP option kinds nft names.
var tcpOptKinds = map[string]uint8{
	"eol": 0, "nop": 1, "maxseg": 2, "window": 3, "sack-perm": 4, "sack": 5, "sack0": 5, "sack1": 5, "sack2": 5, "sack3": 5,
	"timestamp": 8, "md5sig": 19, "mptcp": 30, "fastopen": 34,
}

// tcpOptTest refuses "tcp option KIND exists" and "missing" by name: nft's
// walk of the options (nft_exthdr_tcp_eval) is not the one --tcp-option
// makes, which is the one the model has. It stops a byte before the
// header's end, finds an option only where the option fits, and "missing"
// matches every packet that is not TCP.
func (b *ruleBuilder) tcpOptTest(pos rules.Pos, o *TCPOpt) {
	if _, ok := tcpOptKinds[o.Kind]; !ok {
		n, err := parseNum(o.Kind, 64)
		switch {
		case err != nil:
			b.errorf(pos, "unknown tcp option %q", o.Kind)
			return
		case n > 255:
			b.errorf(pos, "tcp option %s exceeds valid range 0-255", o.Kind)
			return
		}
	}
	b.unsupported(pos, "tcp option "+o.Kind+" "+o.Test+" (nft's walk of the options is not --tcp-option's)")
}

// ctStatusWords are the flags of the conntrack entry's status that nft
// names. The model has two: the conntrack states SNAT and DNAT, which
// conntrack_mt reads from IPS_SRC_NAT and IPS_DST_NAT.
var ctStatusWords = map[string]uint32{
	"expected": 1, "seen-reply": 2, "assured": 4, "confirmed": 8, "snat": ipsSrcNAT, "dnat": ipsDstNAT, "dying": 0x200,
}

// IPS_SRC_NAT and IPS_DST_NAT.
const (
	ipsSrcNAT = 0x10
	ipsDstNAT = 0x20
)

// ctWithEntry are the conntrack states of a packet that has an entry.
const ctWithEntry = rules.CTNew | rules.CTEstablished | rules.CTRelated

// needsEntry reports whether one of ms is a state test that only a packet
// with a conntrack entry passes.
func needsEntry(ms []rules.Match) bool {
	return slices.ContainsFunc(ms, func(x rules.Match) bool {
		c, ok := x.(*rules.Conntrack)
		return ok && !c.StateNeg && c.State != 0 && c.State&^ctWithEntry == 0
	})
}

// ctStatus translates the tests of the entry's status that are the states
// SNAT and DNAT: "ct status dnat", any of the flags set (what
// iptables-translate writes for --ctstate DNAT), "ct status ! dnat", none
// of them, and their spellings "& flags != 0" and "& flags == 0". Without
// an entry nft's ct expression ends the rule, negated or not, so "none"
// needs one too: the packet's state is NEW, ESTABLISHED or RELATED. The
// other flags (expected, seen-reply, assured, confirmed, dying) are not in
// the model; "==", "!=" and sets compare the whole status word, which
// holds them.
func (b *ruleBuilder) ctStatus(pos rules.Pos, op string, mask *rhs, val rhs) {
	// The flags a value names, as model bits and as the status word.
	flagsOf := func(v rhs) (uint16, uint32, bool) {
		var word uint32
		for _, e := range b.expandRef(pos, v) {
			if e.hasRange || e.hasMask || e.ref != "" {
				b.unsupported(pos, "ct status of a range, prefix or set")
				return 0, 0, false
			}
			names := e.or
			if names == nil {
				names = []string{e.lo}
			}
			for _, n := range names {
				w, ok := ctStatusWords[n]
				if num, err := parseNum(n, 32); err == nil {
					w, ok = uint32(num), true
				}
				if !ok {
					b.errorf(e.pos, "unknown ct status %q", n)
					return 0, 0, false
				}
				word |= w
			}
		}
		if other := word &^ (ipsSrcNAT | ipsDstNAT); other != 0 {
			low := other & -other
			what := fmt.Sprintf("%#x", low)
			for n, w := range ctStatusWords {
				if w == low {
					what = n
				}
			}
			b.unsupported(pos, "ct status "+what+" (of its flags only snat and dnat, the conntrack states SNAT and DNAT)")
			return 0, 0, false
		}
		var st uint16
		if word&ipsSrcNAT != 0 {
			st |= rules.CTSnat
		}
		if word&ipsDstNAT != 0 {
			st |= rules.CTDnat
		}
		return st, word, true
	}
	anyOf := func(st uint16) {
		m := &rules.Conntrack{Located: rules.Located{Pos: pos}, State: st}
		b.add(always1(func(r *rules.Rule) bool { r.Matches = append(r.Matches, m); return true }))
	}
	noneOf := func(st uint16) {
		entry := &rules.Conntrack{Located: rules.Located{Pos: pos}, State: ctWithEntry}
		m := &rules.Conntrack{Located: rules.Located{Pos: pos}, State: st, StateNeg: true}
		b.add(always1(func(r *rules.Rule) bool {
			// Unless an earlier state test of the rule needs one already
			// (as fmt --nft prints the negation).
			if !needsEntry(r.Matches) {
				r.Matches = append(r.Matches, entry)
			}
			r.Matches = append(r.Matches, m)
			return true
		}))
	}
	if val.set {
		b.unsupported(pos, "ct status in a set (it compares the whole status word)")
		return
	}
	if mask == nil {
		st, _, ok := flagsOf(val)
		switch {
		case !ok:
		case st == 0:
			b.unsupported(pos, "ct status 0")
		case op == "":
			anyOf(st)
		case op == "!":
			noneOf(st)
		default:
			b.unsupported(pos, "ct status "+op+" (it compares the whole status word)")
		}
		return
	}
	m, mword, ok := flagsOf(*mask)
	if !ok {
		return
	}
	_, vword, ok := flagsOf(val)
	if !ok {
		return
	}
	if op == "" {
		op = "=="
	}
	one := bits.OnesCount16(m) == 1
	switch {
	case m == 0 || (op != "==" && op != "!="):
		b.unsupported(pos, "ct status & "+op)
	case vword == 0 && op == "!=", one && vword == mword && op == "==":
		anyOf(m)
	case vword == 0 && op == "==", one && vword == mword && op == "!=":
		noneOf(m)
	default:
		b.unsupported(pos, "ct status & flags compared with other than 0 or the one flag")
	}
}

// ifname: nft compares the name with a NUL-padded IFNAMSIZ buffer; "eth*"
// compares the prefix. "iif" and "oif" compare the index nft found for
// the name when it loaded the rule, which the model's name match is once
// bpfwall attaches (see rules.Rule.InByIndex).
func (b *ruleBuilder) ifname(pos rules.Pos, key, op string, val rhs) {
	if op != "" && op != "==" && op != "!=" {
		b.unsupported(pos, key+" "+op)
		return
	}
	out := strings.HasSuffix(key, "oifname") || strings.HasSuffix(key, "oif")
	byIndex := !strings.HasSuffix(key, "name")
	var names []string
	for _, e := range b.expandRef(pos, val) {
		if e.hasRange || e.hasMask {
			b.errorf(e.pos, "bad interface name")
			return
		}
		n := e.lo
		if n == "" {
			b.errorf(e.pos, "%s \"\": an empty interface name is not allowed", key)
			return
		}
		if byIndex {
			if _, err := strconv.ParseUint(n, 0, 32); err == nil && !e.quoted {
				b.unsupported(e.pos, key+" by number (bpfwall matches the interface by the name it has when loaded)")
				return
			}
			if n == "" || strings.ContainsAny(n, "*+") || len(n) >= 16 {
				b.errorf(e.pos, "%s %q: not an interface name", key, e.lo)
				return
			}
		}
		if strings.HasSuffix(n, "*") && !strings.HasSuffix(n, `\*`) {
			n = strings.TrimSuffix(n, "*") + "+"
		} else if strings.ContainsAny(n, "+") || len(n) >= 16 {
			b.unsupported(e.pos, "interface name "+strconv.Quote(e.lo))
			return
		}
		names = append(names, n)
	}
	set := func(n string, neg bool) cond {
		return func(r *rules.Rule) bool {
			p, pneg, pidx := &r.InIface, &r.InNeg, &r.InByIndex
			if out {
				p, pneg, pidx = &r.OutIface, &r.OutNeg, &r.OutByIndex
			}
			if *p != "" {
				if *p == n && *pneg == neg && *pidx == byIndex {
					return true
				}
				// The rule's own test is taken: a match of its own.
				r.Matches = append(r.Matches, &rules.Ifaces{Located: rules.Located{Pos: pos}, Out: out, ByIndex: byIndex, Names: []string{n}, Neg: neg})
				return true
			}
			*p, *pneg, *pidx = n, neg, byIndex
			return true
		}
	}
	if op == "!=" {
		if len(names) == 1 {
			b.add(always1(set(names[0], true)))
			return
		}
		// None of the names.
		m := &rules.Ifaces{Located: rules.Located{Pos: pos}, Out: out, ByIndex: byIndex, Names: dedup(names), Neg: true}
		b.add(always1(func(r *rules.Rule) bool { r.Matches = append(r.Matches, m); return true }))
		return
	}
	if !disjointNames(names) {
		b.unsupported(pos, key+" set with overlapping wildcards")
		return
	}
	var c choice
	for _, n := range dedup(names) {
		c = append(c, alt{set(n, false)})
	}
	b.add(c)
}

// disjointNames reports whether no interface name matches two patterns.
func disjointNames(names []string) bool {
	for i, a := range names {
		for _, c := range names[i+1:] {
			if a == c {
				continue
			}
			pa, pc := strings.TrimSuffix(a, "+"), strings.TrimSuffix(c, "+")
			wa, wc := pa != a, pc != c
			if (wa && strings.HasPrefix(pc, pa)) || (wc && strings.HasPrefix(pa, pc)) {
				return false
			}
		}
	}
	return true
}

func (b *ruleBuilder) mark(pos rules.Pos, op string, mask *rhs, val rhs) {
	m := uint32(0xffffffff)
	if mask != nil {
		if len(mask.elems) != 1 || mask.elems[0].hasRange || mask.elems[0].hasMask {
			b.errorf(pos, "bad mark mask")
			return
		}
		v, err := parseNum(mask.elems[0].lo, 32)
		if err != nil {
			b.errorf(pos, "bad mark mask %q", mask.elems[0].lo)
			return
		}
		m = uint32(v)
	}
	if op != "" && op != "==" && op != "!=" {
		b.unsupported(pos, "mark "+op)
		return
	}
	var vals []uint32
	for _, e := range b.expandRef(pos, val) {
		if e.hasRange || e.hasMask {
			b.unsupported(e.pos, "mark range")
			return
		}
		v, err := parseNum(e.lo, 32)
		if err != nil {
			b.errorf(e.pos, "bad mark %q", e.lo)
			return
		}
		vals = append(vals, uint32(v))
	}
	mk := func(v uint32, neg bool) cond {
		return func(r *rules.Rule) bool {
			r.Matches = append(r.Matches, &rules.Mark{Located: rules.Located{Pos: pos}, Value: v, Mask: m, Neg: neg})
			return true
		}
	}
	if op == "!=" {
		var a alt
		for _, v := range dedup(vals) {
			a = append(a, mk(v, true))
		}
		b.add(choice{a})
		return
	}
	var c choice
	for _, v := range dedup(vals) {
		if v&^m != 0 {
			continue
		}
		c = append(c, alt{mk(v, false)})
	}
	b.add(c)
}

func (b *ruleBuilder) pktType(pos rules.Pos, op string, val rhs) {
	if op != "" && op != "==" && op != "!=" {
		b.unsupported(pos, "pkttype "+op)
		return
	}
	var ts []uint8
	for _, e := range b.expandRef(pos, val) {
		lo, ok := pktTypeValue(e.lo)
		hi := lo
		if ok && e.hasRange {
			hi, ok = pktTypeValue(e.hi)
		}
		if !ok || e.hasMask || hi < lo {
			b.errorf(e.pos, "unknown packet type %q", e.lo)
			return
		}
		if hi > rules.PacketOtherHost {
			// nft takes the kernel's other types (outgoing, loopback):
			// the model has host, broadcast, multicast and otherhost.
			b.unsupported(e.pos, fmt.Sprintf("packet type %d", hi))
			return
		}
		for t := int(lo); t <= int(hi); t++ {
			ts = append(ts, uint8(t))
		}
	}
	mk := func(t uint8, neg bool) cond {
		return func(r *rules.Rule) bool {
			r.Matches = append(r.Matches, &rules.PktType{Located: rules.Located{Pos: pos}, Type: t, Neg: neg})
			return true
		}
	}
	if op == "!=" {
		var a alt
		for _, t := range dedup(ts) {
			a = append(a, mk(t, true))
		}
		b.add(choice{a})
		return
	}
	var c choice
	for _, t := range dedup(ts) {
		c = append(c, alt{mk(t, false)})
	}
	b.add(c)
}

// pktTypeValue reads a packet type: a name or a number.
func pktTypeValue(s string) (uint8, bool) {
	if t, ok := pktTypeNames[s]; ok {
		return t, true
	}
	n, err := parseNum(s, 8)
	return uint8(n), err == nil
}

// ttl compares the IPv4 TTL or the IPv6 hop limit.
func (b *ruleBuilder) ttl(pos rules.Pos, op string, val rhs) {
	loc := rules.Located{Pos: pos}
	mk := func(cop rules.CompareOp, v uint8) cond {
		return func(r *rules.Rule) bool {
			if b.fam == rules.IPv6 {
				r.Matches = append(r.Matches, &rules.HL{Located: loc, Op: cop, Value: v})
			} else {
				r.Matches = append(r.Matches, &rules.TTL{Located: loc, Op: cop, Value: v})
			}
			return true
		}
	}
	rangeAlt := func(lo, hi uint64) alt {
		var a alt
		if lo > 0 {
			a = append(a, mk(rules.OpGt, uint8(lo-1)))
		}
		if hi < 255 {
			a = append(a, mk(rules.OpLt, uint8(hi+1)))
		}
		return a
	}
	elems := b.expandRef(pos, val)
	var c choice
	for _, e := range elems {
		lo, err := parseNum(e.lo, 8)
		hi := lo
		if err == nil && e.hasRange {
			hi, err = parseNum(e.hi, 8)
		}
		if err != nil || e.hasMask || hi < lo {
			b.errorf(e.pos, "bad ttl %q", e.lo)
			return
		}
		switch {
		case op == "!=" && !e.hasRange && len(elems) == 1:
			c = append(c, alt{mk(rules.OpNe, uint8(lo))})
		case op == "!=":
			b.unsupported(pos, "negated ttl range or set")
			return
		case op == "" || op == "==":
			if e.hasRange {
				c = append(c, rangeAlt(lo, hi))
			} else {
				c = append(c, alt{mk(rules.OpEq, uint8(lo))})
			}
		default:
			if len(elems) != 1 || e.hasRange {
				b.errorf(pos, "%s needs one value", op)
				return
			}
			r, ok := cmpRange(op, lo, 255)
			if !ok {
				b.add(choice{})
				return
			}
			c = append(c, rangeAlt(r[0], r[1]))
		}
	}
	if !disjointRanges(elems) {
		b.unsupported(pos, "overlapping ttl set")
		return
	}
	b.add(c)
}

// disjointRanges reports whether no value is in two elements.
func disjointRanges(elems []elem) bool {
	type rg struct{ lo, hi uint64 }
	var rs []rg
	for _, e := range elems {
		lo, err := parseNum(e.lo, 64)
		if err != nil {
			return false
		}
		hi := lo
		if e.hasRange {
			if hi, err = parseNum(e.hi, 64); err != nil {
				return false
			}
		}
		for _, x := range rs {
			if lo <= x.hi && x.lo <= hi {
				return false
			}
		}
		rs = append(rs, rg{lo, hi})
	}
	return true
}

// length compares the IP length; add is what the model's length adds to
// the field (the IPv6 header).
func (b *ruleBuilder) length(pos rules.Pos, op string, val rhs, add uint64) {
	elems := b.expandRef(pos, val)
	mk := func(lo, hi uint64, neg bool) cond {
		return func(r *rules.Rule) bool {
			r.Matches = append(r.Matches, &rules.Length{Located: rules.Located{Pos: pos}, Min: uint16(lo), Max: uint16(hi), Neg: neg})
			return true
		}
	}
	if add != 0 {
		// 65535 + 40 does not fit the model's 16 bits.
		b.unsupported(pos, "ip6 length")
		return
	}
	var c choice
	for _, e := range elems {
		lo, err := parseNum(e.lo, 16)
		hi := lo
		if err == nil && e.hasRange {
			hi, err = parseNum(e.hi, 16)
		}
		if err != nil || e.hasMask || hi < lo {
			b.errorf(e.pos, "bad length %q", e.lo)
			return
		}
		switch op {
		case "", "==":
			c = append(c, alt{mk(lo, hi, false)})
		case "!=":
			if len(elems) != 1 {
				b.unsupported(pos, "negated length set")
				return
			}
			c = append(c, alt{mk(lo, hi, true)})
		default:
			if len(elems) != 1 || e.hasRange {
				b.errorf(pos, "%s needs one value", op)
				return
			}
			r, ok := cmpRange(op, lo, 0xffff)
			if !ok {
				b.add(choice{})
				return
			}
			c = append(c, alt{mk(r[0], r[1], false)})
		}
	}
	if !disjointRanges(elems) {
		b.unsupported(pos, "overlapping length set")
		return
	}
	b.add(c)
}

// parseMAC reads an Ethernet address as nft does: six octets of one or
// two hex digits, separated by colons.
func parseMAC(s string) (net.HardwareAddr, error) {
	parts := strings.Split(s, ":")
	if len(parts) != 6 {
		return nil, fmt.Errorf("bad mac address %q", s)
	}
	hw := make(net.HardwareAddr, 6)
	for i, p := range parts {
		v, err := strconv.ParseUint(p, 16, 8)
		if err != nil || len(p) == 0 || len(p) > 2 {
			return nil, fmt.Errorf("bad mac address %q", s)
		}
		hw[i] = byte(v)
	}
	return hw, nil
}

func (b *ruleBuilder) etherSaddr(pos rules.Pos, op string, val rhs) {
	if (op != "" && op != "==" && op != "!=") || len(val.elems) != 1 || val.set {
		b.unsupported(pos, "ether saddr set or comparison")
		return
	}
	hw, err := parseMAC(val.elems[0].lo)
	if err != nil {
		b.errorf(pos, "bad mac address %q", val.elems[0].lo)
		return
	}
	m := &rules.MAC{Located: rules.Located{Pos: pos}, Addr: hw, Neg: op == "!="}
	b.add(always1(func(r *rules.Rule) bool { r.Matches = append(r.Matches, m); return true }))
}

// rawPayload checks "@base,offset,length VALUE" as nft does, and keeps it
// as a construct bpfwall does not compile.
func (b *ruleBuilder) rawPayload(pos rules.Pos, key, raw, op string, mask *rhs, val rhs) {
	f := strings.Split(raw, ",")
	n, err := strconv.ParseUint(f[len(f)-1], 0, 32)
	if err != nil || n == 0 {
		b.errorf(pos, "%s: a raw payload of %s bits", key, f[len(f)-1])
		return
	}
	numbers := true
	for _, el := range val.elems {
		for _, v := range []string{el.lo, el.hi} {
			x, err := strconv.ParseUint(v, 0, 64)
			if err == nil && n < 64 && x>>n != 0 {
				b.errorf(el.pos, "value %s exceeds the %d bits of %s", v, n, key)
				return
			}
			numbers = numbers && (err == nil || v == "" && !el.hasRange)
		}
		numbers = numbers && el.ref == "" && !el.hasMask && el.parts == nil && el.or == nil
	}
	// The ports' words of the transport header, which nft itself lists
	// as th sport and th dport.
	if th := map[string]string{"@th,0,16": "th sport", "@th,16,16": "th dport"}[raw]; th != "" && mask == nil && numbers {
		b.portMatch(pos, th, op, val)
		return
	}
	b.unsupported(pos, key)
}
