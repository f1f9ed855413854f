package nft

import (
	"bytes"
	"errors"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/alecthomas/participle/v2"
	"github.com/alecthomas/participle/v2/lexer"

	"bpfwall/rules"
)

// ruleset is the nftables state a script builds: what "nft list ruleset"
// would print after "nft -f". Rules stay unread ASTs until a family's
// model is built from them.
type ruleset struct {
	tables []*table
}

type table struct {
	family string // ip, ip6, inet, netdev, arp, bridge
	name   string
	pos    rules.Pos
	chains []*chain
	sets   map[string]*set
	// objects are the named stateful objects declared in the table, as
	// "counter NAME", "quota NAME", "ct helper NAME": a rule may only
	// name one that exists.
	objects map[string]bool
	// What only a listing prints: the table's flags and comment, its
	// stateful objects and flowtables as declared, and its sets in the
	// order they were added.
	flags    []string
	comment  *string
	objDecls []objDecl
	setOrder []string
}

// objDecl is a stateful object or flowtable as declared: its words
// ("counter", "c1") and its block, if it has one.
type objDecl struct {
	words []string
	body  *Block
	env   *env // the variables where it was declared
}

type chain struct {
	name  string
	pos   rules.Pos
	table *table
	hook  *baseHook // nil for regular chains
	rules []*srcRule
	// comment and flags are the chain's, for a listing.
	comment *string
	flags   []string
}

// baseHook is what makes a chain a base chain.
type baseHook struct {
	pos      rules.Pos
	typ      string // filter, nat, route
	hook     string // input, forward, output, prerouting, postrouting, ingress, egress
	prio     int
	policy   rules.Policy
	devices  []string
	priority bool // a priority was given
}

type srcRule struct {
	pos rules.Pos
	ast *Rule
	// unread is the text of a rule the grammar could not read, and
	// partial the terms it read before what it could not.
	unread  string
	partial []*Term
	// raw is an unread rule's text as written, for a listing.
	raw  string
	env  *env // the variables defined where the rule was read
	file string
}

type set struct {
	name     string
	pos      rules.Pos
	isMap    bool
	keyType  []string // "type" words, or for typeof the expression's text
	valType  string
	flags    []string
	counter  bool // the declaration has a counter statement
	merge    bool // auto-merge: overlapping intervals are merged
	elems    []*Elem
	elemEnvs []*env
	file     string
	// items are the declaration's lines, and lines the text of those
	// but the elements, for a listing.
	items []*SetItem
	lines []string
}

func (s *set) kind() string {
	if s.isMap {
		return "map"
	}
	return "set"
}

// elemCounter returns the position of an element's counter, if it has one.
func elemCounter(el *Elem) (rules.Pos, bool) {
	for _, o := range el.Options {
		if o.Key == "counter" {
			return toPos(el.Pos), true
		}
	}
	return rules.Pos{}, false
}

// env is a scope of "define"d variables; scopes are never modified once a
// rule refers to them (a define makes a new one).
type env struct {
	vars map[string]*Value
	envs map[string]*env // the scope each value was defined in
}

func (e *env) with(name string, v *Value, defEnv *env) *env {
	n := &env{vars: make(map[string]*Value, len(e.vars)+1), envs: make(map[string]*env, len(e.vars)+1)}
	for k, x := range e.vars {
		n.vars[k] = x
		n.envs[k] = e.envs[k]
	}
	if v == nil {
		delete(n.vars, name)
		delete(n.envs, name)
	} else {
		n.vars[name] = v
		n.envs[name] = defEnv
	}
	return n
}

// reader reads a script and the files it includes into a ruleset.
type reader struct {
	rs       *ruleset
	srcs     map[string][]byte // each file read, for the text of unread rules
	readFile func(string) ([]byte, error)
	depth    int
	errs     rules.ErrorList
}

func (rd *reader) errorf(pos rules.Pos, format string, args ...any) {
	rd.errs = append(rd.errs, rules.Errorf(pos, format, args...))
}

func toPos(p lexer.Position) rules.Pos {
	return rules.Pos{File: p.Filename, Line: p.Line, Col: p.Column}
}

// unquote strips the quotes of a string token; other tokens are returned
// as they are.
func unquote(s string) string {
	if len(s) >= 2 && s[0] == '"' && s[len(s)-1] == '"' {
		if u, err := strconv.Unquote(s); err == nil {
			return u
		}
		return s[1 : len(s)-1]
	}
	return s
}

// parseFile parses src, turning participle's errors into *rules.Error.
func parseFile(name string, src []byte) (*File, error) {
	f, err := fileParser.ParseBytes(name, src)
	if err != nil {
		var perr participle.Error
		if errors.As(err, &perr) {
			return nil, rules.ErrorList{rules.Errorf(toPos(perr.Position()), "%s", perr.Message())}
		}
		return nil, err
	}
	return f, nil
}

// readScript reads one file's items in order. cur is the table whose
// block the items are in, nil at top level.
func (rd *reader) readScript(name string, src []byte, e *env) *env {
	if rd.srcs == nil {
		rd.srcs = map[string][]byte{}
	}
	rd.srcs[name] = src
	f, err := parseFile(name, src)
	if err != nil {
		var l rules.ErrorList
		if errors.As(err, &l) {
			rd.errs = append(rd.errs, l...)
		} else {
			rd.errorf(rules.Pos{File: name, Line: 1}, "%v", err)
		}
		return e
	}
	for _, it := range f.Items {
		e = rd.topItem(it, e)
	}
	return e
}

func (rd *reader) topItem(it *TopItem, e *env) *env {
	pos := toPos(it.Pos)
	switch {
	case it.Include != nil:
		return rd.include(pos, unquote(*it.Include), e)
	case it.Define != nil:
		return rd.define(it.Define, e)
	case it.Table != nil:
		t := rd.addTable(it.Table.Spec, pos)
		if it.Table.Body != nil {
			e = rd.tableBody(t, it.Table.Body, e)
		}
	case it.Command != nil:
		rd.command(it.Command, e)
	}
	return e
}

func (rd *reader) define(d *Define, e *env) *env {
	if d.Verb == "undefine" {
		return e.with(d.Name, nil, nil)
	}
	if d.Value == nil {
		rd.errorf(toPos(d.Pos), "%s %s needs a value", d.Verb, d.Name)
		return e
	}
	return e.with(d.Name, d.Value, e)
}

// include reads an included file. A relative name is relative to the
// including file; a pattern with no matching file includes nothing, as in
// nft.
func (rd *reader) include(pos rules.Pos, name string, e *env) *env {
	if rd.depth >= 16 {
		rd.errorf(pos, "include %q: includes nested too deeply", name)
		return e
	}
	if !filepath.IsAbs(name) && pos.File != "" && pos.File != "<stdin>" {
		name = filepath.Join(filepath.Dir(pos.File), name)
	}
	files := []string{name}
	if strings.ContainsAny(name, "*?[") {
		var err error
		if files, err = filepath.Glob(name); err != nil {
			rd.errorf(pos, "include %q: %v", name, err)
			return e
		}
		slices.Sort(files)
	}
	for _, f := range files {
		src, err := rd.readFile(f)
		if err != nil {
			rd.errorf(pos, "include: %v", err)
			continue
		}
		if hasStatement(src) && !Detect(src) {
			// Do not echo what a file that is no rule set holds: as root,
			// bpfwall can read any file.
			rd.errorf(pos, "include %q: not an nft rule set: its first statement is no nft command", f)
			continue
		}
		rd.depth++
		e = rd.readScript(f, src, e)
		rd.depth--
	}
	return e
}

func (rd *reader) lookupTable(spec TableSpec) *table {
	fam := familyOf(spec)
	name := unquote(spec.Name)
	for _, t := range rd.rs.tables {
		if t.family == fam && t.name == name {
			return t
		}
	}
	return nil
}

func familyOf(spec TableSpec) string {
	if spec.Family == "" {
		return "ip" // nft's default family
	}
	return spec.Family
}

func (rd *reader) addTable(spec TableSpec, pos rules.Pos) *table {
	if t := rd.lookupTable(spec); t != nil {
		return t
	}
	t := &table{family: familyOf(spec), name: unquote(spec.Name), pos: pos, sets: make(map[string]*set)}
	rd.rs.tables = append(rd.rs.tables, t)
	return t
}

func (t *table) chain(name string) *chain {
	for _, c := range t.chains {
		if c.name == name {
			return c
		}
	}
	return nil
}

func (rd *reader) tableBody(t *table, body *TableBody, e *env) *env {
	for _, it := range body.Items {
		pos := toPos(it.Pos)
		switch {
		case it.Include != nil:
			// Included files inside a block hold top-level syntax in
			// bpfwall's reading; fw4 uses them for whole tables.
			e = rd.include(pos, unquote(*it.Include), e)
		case it.Chain != nil:
			c := rd.addChain(t, unquote(it.Chain.Name), pos)
			rd.chainBody(c, it.Chain.Body, e)
		case it.Set != nil:
			rd.addSet(t, it.Set.Kind == "map", unquote(it.Set.Name), pos, it.Set.Items, e)
		case it.Define != nil:
			e = rd.define(it.Define, e)
		case it.Object != nil:
			t.addObject(it.Object.Words)
			t.objDecls = append(t.objDecls, objDecl{words: it.Object.Words, body: it.Object.Body, env: e})
		case it.Flags != nil:
			t.flags = append(t.flags, it.Flags...)
		case it.Comment != nil:
			t.comment = it.Comment
		}
		// Flags, comments and objects (counters, quotas, helpers,
		// flowtables) change no verdict unless a rule refers to them,
		// and a rule that does is rejected where it does.
	}
	return e
}

func (rd *reader) addChain(t *table, name string, pos rules.Pos) *chain {
	if c := t.chain(name); c != nil {
		return c
	}
	c := &chain{name: name, pos: pos, table: t}
	t.chains = append(t.chains, c)
	return c
}

func (rd *reader) chainBody(c *chain, body *ChainBody, e *env) {
	for _, it := range body.Items {
		pos := toPos(it.Pos)
		switch {
		case it.Hook != nil:
			rd.setHook(c, it.Hook, e)
		case it.Policy != nil:
			if c.hook == nil {
				rd.errorf(pos, "chain %s: a policy needs a base chain", c.name)
				continue
			}
			switch *it.Policy {
			case "accept":
				c.hook.policy = rules.PolicyAccept
			case "drop":
				c.hook.policy = rules.PolicyDrop
			default:
				rd.errorf(pos, "chain %s: unknown policy %q", c.name, *it.Policy)
			}
		case it.Devices != nil:
			if c.hook != nil {
				c.hook.devices = append(c.hook.devices, rd.words(it.Devices, e)...)
			}
		case it.Comment != nil:
			c.comment = it.Comment
		case it.Flags != nil:
			c.flags = append(c.flags, it.Flags...)
		case it.Rule != nil && len(it.Rule.Rest) > 0:
			c.rules = append(c.rules, &srcRule{pos: pos, ast: &Rule{Pos: it.Rule.Pos}, unread: "… " + restText(it.Rule.Rest), partial: it.Rule.Terms, raw: rd.rawRule(it.Rule.Pos), env: e, file: pos.File})
		case it.Rule != nil:
			c.rules = append(c.rules, &srcRule{pos: pos, ast: it.Rule, env: e, file: pos.File})
		case it.Unread != nil:
			c.rules = append(c.rules, &srcRule{pos: pos, ast: &Rule{Pos: it.Pos}, unread: it.Unread.text(), raw: rd.rawRule(it.Pos), env: e, file: pos.File})
		}
	}
}

// words flattens a value of names ("eth0", { "eth0", "eth1" }, $var).
func (rd *reader) words(v *Value, e *env) []string {
	var out []string
	var walk func(p *Prim, e *env)
	walk = func(p *Prim, e *env) {
		switch {
		case p.Atom != nil:
			out = append(out, unquote(*p.Atom))
		case p.Var != nil:
			name := (*p.Var)[1:]
			if d, ok := e.vars[name]; ok {
				for _, u := range d.Parts {
					walk(u.Lo, e.envs[name])
				}
			}
		case p.Set != nil:
			for _, el := range p.Set.Elems {
				if el.Key == nil {
					continue
				}
				for _, u := range el.Key.Parts {
					walk(u.Lo, e)
				}
			}
		}
	}
	for _, u := range v.Parts {
		walk(u.Lo, e)
	}
	return out
}

// standardPriorities are nft's named priorities of the ip, ip6 and inet
// families (and netdev's "filter").
var standardPriorities = map[string]int{
	"raw": -300, "mangle": -150, "dstnat": -100, "filter": 0, "security": 50, "srcnat": 100,
}

// bridgePriorities are those of the bridge family, whose tables bpfwall
// reads to refuse them by name.
var bridgePriorities = map[string]int{"dstnat": -300, "filter": -200, "out": 100, "srcnat": 300}

func (rd *reader) setHook(c *chain, h *HookSpec, e *env) {
	pos := toPos(h.Pos)
	if c.hook == nil {
		c.hook = &baseHook{policy: rules.PolicyAccept}
	}
	c.hook.pos, c.hook.typ, c.hook.hook = pos, h.Type, h.Hook
	if h.Device != nil {
		c.hook.devices = append(c.hook.devices, rd.words(h.Device, e)...)
	}
	if h.Priority == nil {
		return
	}
	c.hook.priority = true
	p := h.Priority
	var n int
	switch {
	case p.Num != nil:
		v, err := strconv.ParseInt(*p.Num, 0, 32)
		if err != nil {
			rd.errorf(toPos(p.Pos), "bad priority %q", *p.Num)
			return
		}
		n = int(v)
	case p.Name != nil:
		prios := standardPriorities
		if c.table != nil && c.table.family == "bridge" {
			prios = bridgePriorities
		}
		v, ok := prios[*p.Name]
		if !ok {
			rd.errorf(toPos(p.Pos), "unknown priority %q", *p.Name)
			return
		}
		n = v
	case p.Var != nil:
		rd.errorf(toPos(p.Pos), "priority from a variable is not supported")
		return
	}
	if p.Neg {
		n = -n
	}
	if p.Offset != nil {
		off, err := strconv.ParseInt(*p.Offset, 0, 32)
		if err != nil {
			rd.errorf(toPos(p.Pos), "bad priority offset %q", *p.Offset)
			return
		}
		if p.Sign == "-" {
			off = -off
		}
		n += int(off)
	}
	c.hook.prio = n
}

func (rd *reader) addSet(t *table, isMap bool, name string, pos rules.Pos, items []*SetItem, e *env) *set {
	s := t.sets[name]
	if s == nil {
		s = &set{name: name, pos: pos, isMap: isMap, file: pos.File}
		t.sets[name] = s
		t.setOrder = append(t.setOrder, name)
	}
	s.items = append(s.items, items...)
	end := -1
	for i, it := range items {
		if it.Elements == nil && it.Pos.Offset > end {
			// An item the grammar read in part ends where its line does:
			// the rest of the line is no item of its own. An item ends
			// where elements the grammar read begin.
			limit := -1
			if i+1 < len(items) && items[i+1].Elements != nil && items[i+1].Pos.Filename == it.Pos.Filename {
				limit = items[i+1].Pos.Offset
			}
			line, stop := rd.rawSpan(it.Pos, limit)
			end = stop
			line = substVars(line, e)
			if !slices.Contains(s.lines, line) {
				s.lines = append(s.lines, line)
			}
		}
	}
	for _, it := range items {
		switch {
		case it.Type != nil:
			s.keyType = it.Type.Key
			s.valType = strings.Join(it.Type.Value, ".")
		case it.Typeof != nil:
			key, val, _ := strings.Cut(strings.Join(it.Typeof.Tokens, " "), " : ")
			s.keyType, s.valType = []string{key}, val
		case it.Flags != nil:
			s.flags = append(s.flags, it.Flags...)
		case it.Other != nil && it.Other.Keyword == "counter":
			s.counter = true
		case it.Other != nil && it.Other.Keyword == "auto-merge":
			s.merge = true
		}
	}
	// nft reads the whole declaration before its elements.
	for _, it := range items {
		if it.Elements != nil {
			rd.addElements(s, it.Elements, e)
		}
	}
	return s
}

func (rd *reader) addElements(s *set, l *SetLit, e *env) {
	for _, el := range l.Elems {
		if pos, ok := elemCounter(el); ok && !s.counter {
			rd.errorf(pos, "missing statement in %s declaration: element counters need a counter statement in the %s", s.kind(), s.kind())
			continue
		}
		if what, pos := intervalElem(el); what != "" && !slices.Contains(s.flags, "interval") {
			rd.errorf(pos, "You must add 'flags interval' to your %s declaration if you want to add %s elements", s.kind(), what)
			continue
		}
		s.elems = append(s.elems, el)
		s.elemEnvs = append(s.elemEnvs, e)
	}
}

// intervalElem names what makes el an interval, which only a set with
// flags interval holds: a range or a prefix, of the key or of a part.
func intervalElem(el *Elem) (string, rules.Pos) {
	if el.Key == nil {
		return "", rules.Pos{}
	}
	for _, u := range el.Key.Parts {
		switch {
		case u.Hi != nil:
			return "range", toPos(u.Pos)
		case u.Mask != nil:
			return "prefix", toPos(u.Pos)
		}
	}
	return "", rules.Pos{}
}

func (a *SelAtom) text() string {
	if a.Bare != "" {
		return a.Bare
	}
	if a.Raw != nil {
		return "raw payload " + strings.Join(a.Raw, ",")
	}
	return strings.Join(slices.DeleteFunc([]string{a.Proto, a.Dir, a.Fam, a.Field}, func(s string) bool { return s == "" }), " ")
}

func (rd *reader) command(c *Command, e *env) {
	pos := toPos(c.Pos)
	switch {
	case c.Ruleset != nil:
		switch c.Verb {
		case "flush":
			if c.Ruleset.Family == "" {
				rd.rs.tables = nil
			} else {
				rd.rs.tables = slices.DeleteFunc(rd.rs.tables, func(t *table) bool { return t.family == c.Ruleset.Family })
			}
		case "list", "reset":
		default:
			rd.errorf(pos, "%s ruleset is not supported", c.Verb)
		}
	case c.Table != nil:
		switch c.Verb {
		case "add", "create":
			if c.Verb == "create" && rd.lookupTable(c.Table.Spec) != nil {
				rd.errorf(pos, "table %s already exists", unquote(c.Table.Spec.Name))
				return
			}
			t := rd.addTable(c.Table.Spec, pos)
			if c.Table.Body != nil {
				rd.tableBody(t, c.Table.Body, e)
			}
		case "delete", "destroy":
			t := rd.lookupTable(c.Table.Spec)
			if t == nil {
				if c.Verb == "delete" {
					rd.errorf(pos, "table %s does not exist", unquote(c.Table.Spec.Name))
				}
				return
			}
			rd.rs.tables = slices.DeleteFunc(rd.rs.tables, func(x *table) bool { return x == t })
		case "flush":
			if t := rd.needTable(c.Table.Spec, pos); t != nil {
				for _, ch := range t.chains {
					ch.rules = nil
				}
			}
		case "list", "reset":
		default:
			rd.errorf(pos, "%s table is not supported", c.Verb)
		}
	case c.Chain != nil:
		t := rd.needTable(c.Chain.Table, pos)
		if t == nil {
			return
		}
		name := unquote(c.Chain.Name)
		switch c.Verb {
		case "add", "create":
			if c.Verb == "create" && t.chain(name) != nil {
				rd.errorf(pos, "chain %s already exists", name)
				return
			}
			ch := rd.addChain(t, name, pos)
			if c.Chain.Body != nil {
				rd.chainBody(ch, c.Chain.Body, e)
			}
		case "flush":
			if ch := rd.needChain(t, name, pos); ch != nil {
				ch.rules = nil
			}
		case "delete", "destroy":
			if ch := t.chain(name); ch != nil {
				t.chains = slices.DeleteFunc(t.chains, func(x *chain) bool { return x == ch })
			} else if c.Verb == "delete" {
				rd.errorf(pos, "chain %s does not exist", name)
			}
		case "list", "reset":
		default:
			rd.errorf(pos, "%s chain is not supported", c.Verb)
		}
	case c.Rule != nil:
		rd.ruleCommand(c, pos, e)
	case c.Set != nil:
		t := rd.needTable(c.Set.Table, pos)
		if t == nil {
			return
		}
		switch c.Verb {
		case "add", "create":
			rd.addSet(t, c.Set.Kind == "map", unquote(c.Set.Name), pos, c.Set.Items, e)
		case "flush":
			if s := t.sets[unquote(c.Set.Name)]; s != nil {
				s.elems, s.elemEnvs = nil, nil
			}
		case "delete", "destroy":
			delete(t.sets, unquote(c.Set.Name))
			t.setOrder = slices.DeleteFunc(t.setOrder, func(n string) bool { return n == unquote(c.Set.Name) })
		case "list", "reset":
		default:
			rd.errorf(pos, "%s %s is not supported", c.Verb, c.Set.Kind)
		}
	case c.Element != nil:
		t := rd.needTable(c.Element.Table, pos)
		if t == nil {
			return
		}
		s := t.sets[unquote(c.Element.Set)]
		if s == nil {
			rd.errorf(pos, "set %s does not exist", c.Element.Set)
			return
		}
		switch c.Verb {
		case "add", "create":
			rd.addElements(s, c.Element.Elems, e)
		default:
			rd.errorf(pos, "%s element is not supported", c.Verb)
		}
	case c.Other != nil:
		switch c.Verb {
		case "list", "reset":
			return
		}
		// Stateful objects and flowtables: no verdict depends on them
		// unless a rule names them, and such a rule is an error there.
		switch c.Other.Keyword {
		case "counter", "quota", "limit", "ct", "flowtable", "secmark", "synproxy":
			if c.Verb == "add" || c.Verb == "create" {
				rd.addObjectCmd(c.Other, e)
			}
			return
		}
		rd.errorf(pos, "%s %s is not supported", c.Verb, c.Other.Keyword)
	}
}

func (rd *reader) needTable(spec TableSpec, pos rules.Pos) *table {
	t := rd.lookupTable(spec)
	if t == nil {
		rd.errorf(pos, "table %s %s does not exist", familyOf(spec), unquote(spec.Name))
	}
	return t
}

func (rd *reader) needChain(t *table, name string, pos rules.Pos) *chain {
	c := t.chain(name)
	if c == nil {
		rd.errorf(pos, "chain %s does not exist in table %s %s", name, t.family, t.name)
	}
	return c
}

func (rd *reader) ruleCommand(c *Command, pos rules.Pos, e *env) {
	rc := c.Rule
	t := rd.needTable(rc.Table, pos)
	if t == nil {
		return
	}
	ch := rd.needChain(t, unquote(rc.Chain), pos)
	if ch == nil {
		return
	}
	if rc.Where != "" {
		// Handles are the kernel's numbering, unknown to a script reader.
		rd.errorf(pos, "%s rule with %s %s is not supported", c.Verb, rc.Where, rc.WhereAt)
		return
	}
	switch c.Verb {
	case "add", "create", "insert":
		if rc.Rule == nil {
			rd.errorf(pos, "%s rule needs a rule", c.Verb)
			return
		}
		r := &srcRule{pos: toPos(rc.Rule.Pos), ast: rc.Rule, env: e, file: pos.File}
		if len(rc.Rule.Rest) > 0 {
			r.ast, r.unread, r.partial = &Rule{Pos: rc.Rule.Pos}, "… "+restText(rc.Rule.Rest), rc.Rule.Terms
			r.raw = rd.rawRule(rc.Rule.Pos)
		}
		if c.Verb == "insert" {
			ch.rules = slices.Insert(ch.rules, 0, r)
		} else {
			ch.rules = append(ch.rules, r)
		}
	default:
		rd.errorf(pos, "%s rule is not supported", c.Verb)
	}
}

// rawRule is the text of the rule that starts at p, as written: up to
// the end of its line or a ";" outside strings and braces, runs of space
// outside strings made one.
func (rd *reader) rawRule(p lexer.Position) string {
	s, _ := rd.rawSpan(p, -1)
	return s
}

// rawSpan is rawRule with the offset where the text ends, at limit at the
// latest (-1: none).
func (rd *reader) rawSpan(p lexer.Position, limit int) (string, int) {
	src := rd.srcs[p.Filename]
	if p.Offset < 0 || p.Offset >= len(src) {
		return "", p.Offset
	}
	var b []byte
	space := func() {
		if len(b) > 0 && b[len(b)-1] != ' ' {
			b = append(b, ' ')
		}
	}
	depth, quoted := 0, false
	i := p.Offset
loop:
	for ; i < len(src) && i != limit; i++ {
		c := src[i]
		switch {
		case quoted:
			if c == '\\' && i+1 < len(src) {
				b = append(b, c)
				i++
				c = src[i]
			} else if c == '"' {
				quoted = false
			}
		case c == '"':
			quoted = true
		case c == '\\' && i+1 < len(src) && (src[i+1] == '\n' || src[i+1] == '\r'):
			for i+1 < len(src) && (src[i+1] == '\n' || src[i+1] == '\r') {
				i++
			}
			space()
			continue
		case c == '#':
			// A comment runs to the end of its line, inside braces too.
			for i+1 < len(src) && src[i+1] != '\n' {
				i++
			}
			continue
		case (c == '\n' || c == ';' || c == '}') && depth == 0:
			break loop
		case c == '{':
			depth++
		case c == '}':
			depth--
		}
		if !quoted && (c == ' ' || c == '\t' || c == '\r' || c == '\n') {
			space()
			continue
		}
		b = append(b, c)
	}
	return strings.TrimSpace(string(b)), i
}

// readRuleset reads a script into the nftables state it describes.
func readRuleset(name string, src []byte, readFile func(string) ([]byte, error)) (*ruleset, error) {
	if readFile == nil {
		readFile = rules.ReadRegular
	}
	rd := &reader{rs: &ruleset{}, readFile: readFile}
	rd.readScript(name, src, &env{vars: map[string]*Value{}, envs: map[string]*env{}})
	for _, t := range rd.rs.tables {
		for _, n := range slices.Sorted(maps.Keys(t.sets)) {
			rd.overlaps(t.sets[n])
		}
	}
	if err := rd.errs.Err(); err != nil {
		return rd.rs, err
	}
	return rd.rs, nil
}

var _ = fmt.Sprint

// setKeys are the set types whose intervals overlaps checks, with a
// selector of their values.
var setKeys = map[string]string{"ipv4_addr": "ip saddr", "ipv6_addr": "ip6 saddr", "inet_service": "tcp dport"}

// overlaps refuses, as nft does, an interval set or map without
// auto-merge two of whose elements overlap.
func (rd *reader) overlaps(s *set) {
	key := ""
	if len(s.keyType) == 1 {
		key = setKeys[s.keyType[0]]
	}
	if key == "" || s.merge || !slices.Contains(s.flags, "interval") {
		return
	}
	type span struct {
		lo, hi []byte
		pos    rules.Pos
	}
	var spans []span
	rv := resolver{errs: &rules.ErrorList{}}
	for i, el := range s.elems {
		if el.Key == nil {
			continue
		}
		r, ok := rv.value(el.Key, s.elemEnvs[i], 0)
		if !ok {
			return // the rules that use the set say why
		}
		for _, e := range r.elems {
			if lo, hi, ok := partRange(key, e); ok {
				spans = append(spans, span{lo, hi, e.pos})
			}
		}
	}
	slices.SortStableFunc(spans, func(a, b span) int { return bytes.Compare(a.lo, b.lo) })
	for i := 1; i < len(spans); i++ {
		if bytes.Compare(spans[i].lo, spans[i-1].hi) <= 0 {
			later := spans[i]
			if comparePos(spans[i-1].pos, later.pos) > 0 {
				later = spans[i-1]
			}
			rd.errorf(later.pos, "conflicting intervals specified")
			return
		}
	}
}

// comparePos orders positions in a file.
func comparePos(a, b rules.Pos) int {
	if a.Line != b.Line {
		return a.Line - b.Line
	}
	return a.Col - b.Col
}

// addObject records a declared object, from its words: "counter NAME",
// "ct helper NAME".
func (t *table) addObject(words []string) {
	if len(words) < 2 {
		return
	}
	kind, name := words[0], words[1]
	if kind == "ct" && len(words) >= 3 {
		kind, name = "ct "+words[1], words[2]
	}
	if t.objects == nil {
		t.objects = map[string]bool{}
	}
	t.objects[kind+" "+unquote(name)] = true
}

// addObjectCmd records the object of "add counter [FAMILY] TABLE NAME":
// its keyword and the words after it.
func (rd *reader) addObjectCmd(g *Generic, e *env) {
	words := []string{g.Keyword}
	for _, r := range g.Rest {
		if r.Nested != nil {
			break
		}
		words = append(words, r.Token)
	}
	if g.Keyword == "ct" && len(words) > 1 {
		words = append([]string{"ct " + words[1]}, words[2:]...)
	}
	// KIND [FAMILY] TABLE NAME
	rest := words[1:]
	spec := TableSpec{}
	switch {
	case len(rest) >= 3 && slices.Contains([]string{"ip", "ip6", "inet", "netdev", "arp", "bridge"}, rest[0]):
		spec.Family, spec.Name, rest = rest[0], rest[1], rest[2:]
	case len(rest) >= 2:
		spec.Name, rest = rest[0], rest[1:]
	default:
		return
	}
	if t := rd.lookupTable(spec); t != nil {
		kind := strings.Fields(words[0])
		t.addObject(append(kind, rest[0]))
		var body *Block
		if n := len(g.Rest); n > 0 && g.Rest[n-1].Nested != nil {
			body = g.Rest[n-1].Nested
		}
		t.objDecls = append(t.objDecls, objDecl{words: append(kind, rest[0]), body: body, env: e})
	}
}
