package codegen

import (
	"cmp"
	"encoding/binary"
	"fmt"
	"hash/maphash"
	"slices"

	"github.com/cilium/ebpf"

	"bpfwall/ir"
	"bpfwall/rules"
)

// The classifier (-O1) answers, for a run of terminal rules, "which is the
// earliest rule that decides this packet?" with a few map lookups instead
// of a test per rule; see CLASSIFIER.md. Each rule is normalized into
// tuples (ir.Program.Form); tuples of one shape go into one table, a hash
// keyed by the packet's fields cut to the shape, or an LPM trie when
// shapes differ in one field's prefix length only. A table's value is the
// earliest rule with that key and what it does; the tables are looked up
// in the order of their earliest rule, and the lookups stop as soon as no
// later table can hold an earlier rule.
//
// A rule's matches that no tuple expresses (negations, interfaces, TCP
// flags, ICMP types, lengths, marks, ...) are its residual: they are
// tested once per table, before its lookup, as part of the table's guard,
// so that a table holds only rules with the same residual. A packet the
// residual fails for skips the table: every rule in it fails too, and no
// candidate is lost. Only matches without effects take part (pureMatch):
// a rule with a stateful or hotdropping match beyond its tuples stays
// plain code. REJECT is a terminal verdict like DROP: main sends the
// reply of the rule the classifier found.
//
// A rule can also drop a packet whose headers it finds cut short
// (hotdrop) when only its matches before that point hold. Those matches
// are tuples too, in tables of their own that apply only to such packets:
// for every packet, exactly one of a rule's tables applies, and the
// earliest rule it finds decides as ipt_do_table would.

// Kinds of a table value: what the rule does. The first three are the
// chain function's codes.
const (
	kindAccept  = codeAccept
	kindDrop    = codeDrop
	kindHotdrop = codeHotdrop
	kindReturn  = 4
	// kindReject is a REJECT in the netfilter stage, which drops the
	// packet and counts abi.StageRejectDropped; elsewhere a REJECT is
	// kindDrop and main sends its reply.
	kindReject = 5
)

// The cost estimate, in about nanoseconds.
var (
	// costPlainRule is what testing one plain rule costs, costHash and
	// costLPM what a lookup costs, costInline one inlined tuple.
	costPlainRule = 2
	costHash      = 20
	costLPM       = 40
	costArray     = 8
	costRanges    = 30 // a hash lookup and a scan of the runs
	costInline    = 2
	// maxInlineTuples is how many tuples a table may have to be tested in
	// code rather than looked up.
	maxInlineTuples = 4
)

// maxLookupTables bounds the classifier's maps: a program may use 64
// maps, and the fixed ones and the address sets need some.
const maxLookupTables = 48

// mode says which of a rule's tuples a table holds.
type mode uint8

const (
	modeFull     mode = iota // all matches: the rule matches
	modePreL4                // matches before the L4Header: it drops a short packet
	modePreProto             // matches before Proto: it drops an IPv6 packet whose extension headers cannot be walked
)

// guard is the condition under which a table applies to a packet.
type guard struct {
	mode mode
	// v6proto: the rules test the protocol in IPv6, where a failed walk
	// of the extension headers drops the packet.
	v6proto bool
	// l4Len and tiny are the rules' L4Header (0 without one).
	l4Len int
	tiny  bool
	// residual names the rules' residual matches that apply to the
	// mode, in compiler.residuals; "" for none.
	residual string
}

// entry is one tuple of a rule in a table.
type entry struct {
	t    ir.Tuple
	id   uint32
	kind uint32
	// need is, in a table of candidates, the residual bits the rule's
	// residual sets (0 for none): see mergeResiduals.
	need uint16
}

// table is one lookup of a segment.
type table struct {
	name  string // the map's, when looked up
	guard guard
	lens  [ir.NumFields]uint8 // the shape; for an LPM trie or a port array, lens[lpm] is the field's width
	lpm   int                 // the field of varying length, or -1 for a hash
	// array: an array indexed by the port field, whose entries all test
	// the same protocol or none.
	array bool
	// ranges, for a hash keyed by the fields other than the port field
	// lpm: the runs of ports of each key.
	ranges *portRanges
	// entries are sorted by rule, one per tuple.
	entries []entry
	first   uint32 // the earliest rule
	inline  bool
	// residuals, for a table of candidates, are the residual keys of the
	// tables merged into it: bit i of an entry's need is residuals[i];
	// keys and lists are its map's keys and the candidates of each.
	residuals []string
	keys      [][]byte
	lists     [][]entry
}

// shapeKey is the guard and shape that tuples share in a table.
type shapeKey struct {
	g    guard
	lens [ir.NumFields]uint8
}

// segmentPlan is a run of terminal rules classified by tables.
type segmentPlan struct {
	rules  []*ir.Rule
	tables []*table
}

// eligible reports whether r can be classified: its normal form, which
// the program keeps for plan, is in terms the classifier tests.
func (c *compiler) eligible(r *ir.Rule) bool {
	switch r.Action.(type) {
	case ir.Accept, ir.Drop, ir.Return:
	case ir.TProxy:
		// An ACCEPT to the classifier: main tells them apart.
	case ir.Reject:
		// A DROP to the classifier, whose reply main sends (see kindOf).
	case ir.Jump, ir.Goto, ir.Log, ir.None:
		return false
	}
	if c.p.Family == rules.IPv6 {
		// ip6tables' "-p all" only walks the extension headers.
		for _, m := range r.Matches {
			if m, ok := m.(ir.Proto); ok && m.Proto == 0 {
				return false
			}
		}
	}
	f, ok := c.p.Form(r)
	if !ok {
		return false
	}
	for _, m := range f.Residual {
		if !c.pureMatch(m) {
			return false
		}
	}
	return true
}

// residualKey names the residual matches ms in c.residuals.
func (c *compiler) residualKey(ms []ir.Match) string {
	if len(ms) == 0 {
		return ""
	}
	k := fmt.Sprintf("%#v", ms)
	if c.residuals == nil {
		c.residuals = make(map[string][]ir.Match)
	}
	c.residuals[k] = ms
	return k
}

func (c *compiler) kindOf(a ir.Action) uint32 {
	switch a.(type) {
	case ir.Accept, ir.TProxy:
		return kindAccept
	case ir.Drop:
		return kindDrop
	case ir.Reject:
		if c.hook == HookStage {
			return kindReject
		}
		return kindDrop
	case ir.Return:
	case ir.Jump, ir.Goto, ir.Log, ir.None:
		panic(fmt.Sprintf("codegen: %T classified", a)) // not eligible
	}
	return kindReturn
}

// units splits a chain into plain rules and classified segments.
func (c *compiler) units(rs []*ir.Rule) []unit {
	if c.level == O0 {
		out := make([]unit, len(rs))
		for i, r := range rs {
			out[i] = unit{rule: r}
		}
		return out
	}
	var out []unit
	// One allocation for every run: a run is the next part of it. The
	// plans read the rules' forms from the program's cache, and copy the
	// tuples they keep, so the forms are let go once the chain is planned
	// (at 100k rules they are a quarter of the compile's memory), unless
	// the netfilter stage, compiled next, plans the chain again.
	run := make([]*ir.Rule, 0, len(rs))
	flush := func() {
		out = append(out, c.classifyRun(run)...)
		run = run[len(run):]
	}
	for _, r := range rs {
		if !c.eligible(r) {
			flush()
			out = append(out, unit{rule: r})
			continue
		}
		run = append(run, r)
	}
	flush()
	if !c.defers() {
		c.p.ForgetForms(rs)
	}
	return out
}

// classifyRun classifies a run of eligible rules: one segment, or, when its
// tables would be more than the program may have, its halves in turn,
// so that a run of many kinds of rules does not fall back to plain code
// whole; rules that no segment takes stay plain.
func (c *compiler) classifyRun(run []*ir.Rule) []unit {
	plan, tooMany := c.plan(run)
	switch {
	case plan != nil:
		c.classifiedRules += len(run)
		return []unit{{seg: plan}}
	case tooMany && len(run) > 1:
		h := len(run) / 2
		return append(c.classifyRun(run[:h]), c.classifyRun(run[h:])...)
	}
	out := make([]unit, len(run))
	for i, r := range run {
		out[i] = unit{rule: r}
	}
	return out
}

// unit is a plain rule or a classified segment.
type unit struct {
	rule *ir.Rule
	seg  *segmentPlan
}

// plan builds the tables of a run of eligible rules, or returns nil when
// plain code is expected to be cheaper, or when the tables would be more
// than the program has left (tooMany).
func (c *compiler) plan(run []*ir.Rule) (plan *segmentPlan, tooMany bool) {
	if len(run) == 0 {
		return nil, false
	}
	v6 := c.p.Family == rules.IPv6
	// The entries of each shape, in rule order. The tuples are first
	// given their shapes, so that each shape's entries and set are made
	// at their size (growing them was a third of a 1M-rule plan). A tuple
	// is kept once per shape: seen[i] holds, by hash, the entry of the
	// first tuple of that hash in shape i; another tuple of the same hash
	// is told apart in collided.
	type pending struct {
		shape    int32
		t        *ir.Tuple
		id, kind uint32
	}
	total := 0
	for _, r := range run {
		f, _ := c.p.Form(r) // computed by eligible
		total += len(f.Tuples) + len(f.PreL4) + len(f.PreProto)
	}
	todo := make([]pending, 0, total)
	index := make(map[shapeKey]int)
	var order []shapeKey
	var count []int
	var last shapeKey
	lastIndex := -1
	add := func(g guard, ts []ir.Tuple, id, kind uint32) {
		for j := range ts {
			k := shapeKey{g, ts[j].Len}
			i := lastIndex
			if i < 0 || k != last {
				var ok bool
				if i, ok = index[k]; !ok {
					i = len(order)
					index[k] = i
					order = append(order, k)
					count = append(count, 0)
				}
				last, lastIndex = k, i
			}
			count[i]++
			todo = append(todo, pending{int32(i), &ts[j], id, kind})
		}
	}
	for _, r := range run {
		f, _ := c.p.Form(r)
		id := uint32(r.ID)
		v6proto := v6 && f.Proto
		add(guard{mode: modeFull, v6proto: v6proto, l4Len: f.L4Len, tiny: f.Tiny, residual: c.residualKey(f.Residual)}, f.Tuples, id, c.kindOf(r.Action))
		if f.L4Len > 0 {
			add(guard{mode: modePreL4, v6proto: v6proto, l4Len: f.L4Len, tiny: f.Tiny, residual: c.residualKey(f.Residual[:f.ResidualPreL4])}, f.PreL4, id, kindHotdrop)
		}
		if v6proto {
			add(guard{mode: modePreProto, v6proto: true, residual: c.residualKey(f.Residual[:f.ResidualPreProto])}, f.PreProto, id, kindHotdrop)
		}
	}
	type shapeTuple struct {
		shape int32
		t     ir.Tuple
	}
	seed := maphash.MakeSeed()
	lists := make([][]entry, len(order))
	seen := make([]map[uint64]int32, len(order))
	for i, n := range count {
		lists[i], seen[i] = make([]entry, 0, n), make(map[uint64]int32, n)
	}
	var collided map[shapeTuple]struct{}
	for _, pe := range todo {
		// The earliest rule with a tuple wins; rules come in order.
		i, t := pe.shape, *pe.t
		h := maphash.Comparable(seed, t)
		if j, ok := seen[i][h]; !ok {
			seen[i][h] = int32(len(lists[i]))
		} else if lists[i][j].t == t {
			continue
		} else {
			st := shapeTuple{i, t}
			if _, ok := collided[st]; ok {
				continue
			}
			if collided == nil {
				collided = make(map[shapeTuple]struct{})
			}
			collided[st] = struct{}{}
		}
		lists[i] = append(lists[i], entry{t: t, id: pe.id, kind: pe.kind})
	}
	todo, seen, collided, index = nil, nil, nil, nil
	shapes := make(map[shapeKey][]entry, len(order))
	for i, k := range order {
		shapes[k] = lists[i]
	}
	taken := make(map[shapeKey]bool)
	tables := portTables(shapes, order, taken)
	tables = append(tables, c.mergeTries(shapes, order, taken)...)
	for _, k := range order {
		if taken[k] {
			continue
		}
		// The shape's entries are this table's alone: no copy.
		tables = append(tables, &table{guard: k.g, lens: k.lens, lpm: -1, entries: shapes[k]})
	}
	for _, t := range tables {
		sortByRule(t.entries)
	}
	tables = c.splitRanges(tables)
	tables = c.mergeResiduals(tables)
	for _, t := range tables {
		t.first = t.entries[0].id
		t.inline = !c.forceLookups && len(t.entries) <= maxInlineTuples || emptyShape(t)
	}
	slices.SortStableFunc(tables, func(a, b *table) int { return cmp.Compare(a.first, b.first) })

	if !c.forceLookups && !c.lookupsPay(run, tables) {
		return nil, false
	}
	lookups := 0
	for _, t := range tables {
		if !t.inline {
			lookups++
		}
	}
	if c.ntables+lookups > maxLookupTables {
		return nil, true
	}
	for _, t := range tables {
		if !t.inline {
			t.name = fmt.Sprintf("%s%d", c.tablePrefix(), c.ntables)
			c.ntables++
		}
	}
	return &segmentPlan{rules: run, tables: tables}, false
}

// mergeTries merges the shapes not taken yet that differ in one field's
// length into LPM tries, one field after the other, where a trie saves
// lookups, and marks them taken.
func (c *compiler) mergeTries(shapes map[shapeKey][]entry, order []shapeKey, taken map[shapeKey]bool) []*table {
	var tables []*table
	for _, f := range []ir.Field{ir.FieldSrc, ir.FieldDst, ir.FieldDport, ir.FieldSport} {
		groups := make(map[shapeKey][]shapeKey)
		var gorder []shapeKey
		for _, k := range order {
			if taken[k] {
				continue
			}
			g := k
			g.lens[f] = 0
			if groups[g] == nil {
				gorder = append(gorder, g)
			}
			groups[g] = append(groups[g], k)
		}
		for _, g := range gorder {
			ks := groups[g]
			if len(ks) < 2 {
				continue
			}
			// A trie is slower than a hash: merge when it saves lookups.
			apart := 0
			for _, k := range ks {
				apart += lookupCost(len(shapes[k]), costHash)
			}
			if !c.forceLookups && apart <= costLPM {
				continue
			}
			t := &table{guard: g.g, lens: g.lens, lpm: int(f)}
			t.lens[f] = uint8(8 * f.Width(c.p.Family))
			n := 0
			for _, k := range ks {
				n += len(shapes[k])
			}
			t.entries = make([]entry, 0, n)
			for _, k := range ks {
				taken[k] = true
				t.entries = append(t.entries, shapes[k]...)
			}
			tables = append(tables, t)
		}
	}
	return tables
}

// lookupsPay reports whether the tables cost less than testing the run's
// rules one by one.
func (c *compiler) lookupsPay(run []*ir.Rule, tables []*table) bool {
	// Packets take one table per guard class; count them all, as the
	// worst case.
	cost, plain := 0, costPlainRule*len(run)
	for _, t := range tables {
		if t.guard.mode != modeFull {
			continue
		}
		cost += t.cost() + costPlainRule*len(c.residuals[t.guard.residual])
		for _, k := range t.residuals {
			cost += costPlainRule * len(c.residuals[k])
		}
	}
	return cost < plain
}

// maxCandidates bounds the rules one key of a table of candidates lists:
// every value has this many, so that the code does not depend on the
// rules. candidateSize is one's size: u32 rule, u16 kind, u16 need.
const (
	maxCandidates = 4
	candidateSize = 8
	// maxResidualBits is how many residuals one table of candidates
	// tells apart: the bits of a u16.
	maxResidualBits = 16
)

// mergeResiduals merges the hashes that share a shape and a guard but for
// their residuals into one table of candidates: each key lists, earliest
// first, the rules with that key up to the first without a residual, and
// each with the residual bit it needs. Before the lookup the table's
// residuals are tested once, each setting its bit; after it, the first
// candidate whose bit is set is the earliest rule of those tables that
// matches. A packet takes one lookup where it took one per residual
// (realistic rule sets mix plain service ACCEPTs with ones under "! -i",
// TCP flags or ICMP types), and no candidate is lost: a rule not listed
// comes after one that matches whenever it does. A group whose keys would
// list more than maxCandidates rules stays apart.
func (c *compiler) mergeResiduals(tables []*table) []*table {
	type groupKey struct {
		g    guard
		lens [ir.NumFields]uint8
	}
	groups := make(map[groupKey][]*table)
	var order []groupKey
	for _, t := range tables {
		if t.lpm >= 0 || t.array || t.ranges != nil || emptyShape(t) || !c.forceLookups && len(t.entries) <= maxInlineTuples {
			continue
		}
		k := groupKey{t.guard, t.lens}
		k.g.residual = ""
		if groups[k] == nil {
			order = append(order, k)
		}
		groups[k] = append(groups[k], t)
	}
	into := make(map[*table]*table)
	for _, k := range order {
		ts := groups[k]
		withResidual := 0
		for _, t := range ts {
			if t.guard.residual != "" {
				withResidual++
			}
		}
		if len(ts) < 2 || withResidual > maxResidualBits {
			continue
		}
		m := &table{guard: k.g, lens: k.lens, lpm: -1}
		n := 0
		for _, t := range ts {
			n += len(t.entries)
		}
		m.entries = make([]entry, 0, n)
		for _, t := range ts {
			var need uint16
			if t.guard.residual != "" {
				need = 1 << len(m.residuals)
				m.residuals = append(m.residuals, t.guard.residual)
			}
			for _, e := range t.entries {
				e.need = need
				m.entries = append(m.entries, e)
			}
		}
		sortByRule(m.entries)
		var ok bool
		if m.keys, m.lists, ok = c.candidates(m); !ok {
			continue
		}
		for _, t := range ts {
			into[t] = m
		}
	}
	if len(into) == 0 {
		return tables
	}
	out := make([]*table, 0, len(tables))
	placed := make(map[*table]bool)
	for _, t := range tables {
		m, ok := into[t]
		switch {
		case !ok:
			out = append(out, t)
		case !placed[m]:
			placed[m] = true
			out = append(out, m)
		}
	}
	return out
}

// candidates returns the keys of a table of candidates, in order, and the
// candidates of each: earliest first, up to the first that needs no
// residual, without a later rule that needs the same bit as an earlier
// one (it can only match where that one does). False when a key would
// have more than maxCandidates.
func (c *compiler) candidates(t *table) ([][]byte, [][]entry, bool) {
	l := c.layout(t)
	keys := make([][]byte, 0, len(t.entries))
	lists := make([][]entry, 0, len(t.entries))
	at := make(map[string]int, len(t.entries))
	closed := make(map[string]bool, len(t.entries))
	for _, e := range t.entries { // the earliest rule first
		k := l.key(e.t)
		if closed[string(k)] {
			continue
		}
		i, ok := at[string(k)]
		if !ok {
			i = len(keys)
			at[string(k)] = i
			keys = append(keys, k)
			lists = append(lists, nil)
		}
		if slices.ContainsFunc(lists[i], func(o entry) bool { return o.need == e.need }) {
			continue
		}
		if len(lists[i]) == maxCandidates {
			return nil, nil, false
		}
		lists[i] = append(lists[i], e)
		if e.need == 0 {
			closed[string(k)] = true
		}
	}
	return keys, lists, true
}

// candidatesSpec returns a table of candidates' hash: the key, and
// maxCandidates candidates; a key with fewer repeats its last.
func (c *compiler) candidatesSpec(t *table) *ebpf.MapSpec {
	kvs := make([]ebpf.MapKV, len(t.keys))
	for i, k := range t.keys {
		v := make([]byte, candidateSize*maxCandidates)
		list := t.lists[i]
		for j := range maxCandidates {
			e := list[min(j, len(list)-1)]
			binary.NativeEndian.PutUint32(v[candidateSize*j:], e.id)
			binary.NativeEndian.PutUint16(v[candidateSize*j+4:], uint16(e.kind))
			binary.NativeEndian.PutUint16(v[candidateSize*j+6:], e.need)
		}
		kvs[i] = ebpf.MapKV{Key: k, Value: v}
	}
	return &ebpf.MapSpec{
		Name:       t.name,
		Type:       ebpf.Hash,
		KeySize:    uint32(c.layout(t).size),
		ValueSize:  candidateSize * maxCandidates,
		MaxEntries: uint32(len(kvs)),
		Contents:   kvs,
	}
}

// tablePrefix names the classifier's tables: the netfilter stage's are
// its own, since the loader gives the stage the ingress program's maps of
// the same name, and the stage's tables differ (kindReject).
func (c *compiler) tablePrefix() string {
	if c.hook == HookStage {
		return "ncls"
	}
	return "cls"
}

// lookupCost estimates what a table of n tuples costs a packet, when a
// lookup in it costs lookup.
func lookupCost(n, lookup int) int {
	if n <= maxInlineTuples {
		return costInline * n
	}
	return lookup
}

// cost estimates what the table costs a packet.
func (t *table) cost() int {
	switch {
	case t.inline:
		return costInline * len(t.entries)
	case t.array:
		return costArray
	case t.ranges != nil:
		return costRanges
	case t.lpm >= 0:
		return costLPM
	}
	return costHash
}

// maxPortProtos bounds the port arrays of one guard and port field: one
// per protocol. Shapes with more protocols stay in hashes and tries.
const maxPortProtos = 4

// portArraySize is a port array's: a slot per port.
const portArraySize = 1 << 16

// portField returns the port field of a shape that constrains it, and
// else at most the protocol, exactly.
func portField(lens [ir.NumFields]uint8) (ir.Field, bool) {
	if lens[ir.FieldSrc] != 0 || lens[ir.FieldDst] != 0 || (lens[ir.FieldProto] != 0 && lens[ir.FieldProto] != 8) {
		return 0, false
	}
	switch {
	case lens[ir.FieldDport] > 0 && lens[ir.FieldSport] == 0:
		return ir.FieldDport, true
	case lens[ir.FieldSport] > 0 && lens[ir.FieldDport] == 0:
		return ir.FieldSport, true
	}
	return 0, false
}

// portTables takes the shapes that constrain one port, and the protocol
// exactly or not at all, into tables indexed by the port: one per guard,
// port field and protocol. An array lookup costs the same for any number
// of rules and any mix of prefix lengths, where an LPM trie's cost grows
// with its depth (a port allowlist of 100,000 rules made one 3× slower
// than a single rule).
func portTables(shapes map[shapeKey][]entry, order []shapeKey, taken map[shapeKey]bool) []*table {
	type class struct {
		g        guard
		field    ir.Field
		anyProto bool
	}
	members := make(map[class][]shapeKey)
	var classes []class
	for _, k := range order {
		f, ok := portField(k.lens)
		if !ok {
			continue
		}
		cl := class{k.g, f, k.lens[ir.FieldProto] == 0}
		if members[cl] == nil {
			classes = append(classes, cl)
		}
		members[cl] = append(members[cl], k)
	}
	var out []*table
	for _, cl := range classes {
		byProto := make(map[uint8]*table)
		var protos []uint8
		for _, k := range members[cl] {
			for _, e := range shapes[k] {
				p := e.t.Value[ir.FieldProto][0]
				t := byProto[p]
				if t == nil {
					t = &table{guard: cl.g, lpm: int(cl.field), array: true}
					t.lens[cl.field] = 16
					if !cl.anyProto {
						t.lens[ir.FieldProto] = 8
					}
					byProto[p] = t
					protos = append(protos, p)
				}
				t.entries = append(t.entries, e)
			}
		}
		if len(protos) > maxPortProtos {
			continue
		}
		for _, k := range members[cl] {
			taken[k] = true
		}
		slices.Sort(protos)
		for _, p := range protos {
			out = append(out, byProto[p])
		}
	}
	return out
}

// sortByRule puts entries in rule order, the earliest first; the entries
// of one rule keep their order. A table of one shape is in that order
// already: its entries were added rule by rule.
func sortByRule(es []entry) {
	byID := func(a, b entry) int { return cmp.Compare(a.id, b.id) }
	if !slices.IsSortedFunc(es, byID) {
		slices.SortStableFunc(es, byID)
	}
}

func emptyShape(t *table) bool {
	return t.lens == [ir.NumFields]uint8{}
}

// slot is where a field goes in a lookup key.
type slot struct {
	field ir.Field
	off   int // from the start of the key
	size  int
}

// keyLayout is a table's key: for an LPM trie a u32 prefix length, then
// the fields at their natural alignment, the varying one last; gaps are
// zero.
type keyLayout struct {
	slots []slot
	size  int
	// fixedBits is the prefix length of everything before the varying
	// field of an LPM trie.
	fixedBits int
}

// key is the tuple's fields at their slots; an LPM trie's prefix length
// is left for the caller.
func (l keyLayout) key(tp ir.Tuple) []byte {
	k := make([]byte, l.size)
	for _, s := range l.slots {
		copy(k[s.off:s.off+s.size], tp.Value[s.field][:s.size])
	}
	return k
}

func (c *compiler) layout(t *table) keyLayout {
	var l keyLayout
	off := 0
	if t.lpm >= 0 {
		off = 4
	}
	place := func(f ir.Field) {
		w := f.Width(c.p.Family)
		align := min(w, 4)
		off = (off + align - 1) / align * align
		l.slots = append(l.slots, slot{field: f, off: off, size: w})
		off += w
	}
	for _, f := range []ir.Field{ir.FieldSrc, ir.FieldDst, ir.FieldSport, ir.FieldDport, ir.FieldProto} {
		if int(f) != t.lpm && t.lens[f] > 0 {
			place(f)
		}
	}
	if t.lpm >= 0 {
		w := ir.Field(t.lpm).Width(c.p.Family)
		align := min(w, 4)
		off = (off + align - 1) / align * align
		l.fixedBits = 8 * (off - 4)
		place(ir.Field(t.lpm))
	}
	l.size = off
	return l
}

// mapSpec returns the table's map and its contents. The contents of every
// classifier table come in the order of its entries (the earliest rule
// first), which is the same for the same rule set; sorting them by key,
// which the kernel does not need, took 2 s of a 1M-rule compile.
func (c *compiler) mapSpec(t *table) *ebpf.MapSpec {
	switch {
	case t.array:
		return portArray(t)
	case t.ranges != nil:
		return c.rangesSpec(t)
	case t.residuals != nil:
		return c.candidatesSpec(t)
	}
	l := c.layout(t)
	key := func(tp ir.Tuple, plen int) []byte {
		k := l.key(tp)
		if t.lpm >= 0 {
			binary.NativeEndian.PutUint32(k, uint32(plen))
		}
		return k
	}
	value := func(e entry) []byte {
		v := make([]byte, 8)
		binary.NativeEndian.PutUint32(v, e.id)
		binary.NativeEndian.PutUint32(v[4:], e.kind)
		return v
	}
	var kvs []ebpf.MapKV
	if t.lpm < 0 {
		kvs = make([]ebpf.MapKV, 0, len(t.entries))
		seen := make(map[string]bool, len(t.entries))
		for _, e := range t.entries { // the earliest rule first
			k := key(e.t, 0)
			if !seen[string(k)] {
				seen[string(k)] = true
				kvs = append(kvs, ebpf.MapKV{Key: k, Value: value(e)})
			}
		}
	} else {
		kvs = c.lpmContents(t, l, key, value)
	}
	spec := &ebpf.MapSpec{
		Name:       t.name,
		Type:       ebpf.Hash,
		KeySize:    uint32(l.size),
		ValueSize:  8,
		MaxEntries: uint32(len(kvs)),
		Contents:   kvs,
	}
	if t.lpm >= 0 {
		spec.Type, spec.Flags = ebpf.LPMTrie, bpfFNoPrealloc
	}
	return spec
}

// bpfFNoPrealloc is BPF_F_NO_PREALLOC, which LPM tries require.
const bpfFNoPrealloc = 1

// lpmContents stores at every prefix the earliest rule among the entries
// whose prefix covers it, with the same other fields: the trie returns
// the longest stored prefix that contains the packet's field, and every
// entry the packet matches covers that one.
func (c *compiler) lpmContents(t *table, l keyLayout, key func(ir.Tuple, int) []byte, value func(entry) []byte) []ebpf.MapKV {
	f := ir.Field(t.lpm)
	// The earliest rule per tuple, grouped by the fields other than f.
	type fieldPrefix struct {
		value [16]byte
		bits  uint8
	}
	groups := make(map[string][]entry)
	var order []string
	seen := make(map[ir.Tuple]bool, len(t.entries))
	for _, e := range t.entries { // the earliest rule first
		if seen[e.t] {
			continue
		}
		seen[e.t] = true
		k := string(key(e.t, 0)[4 : 4+l.fixedBits/8])
		if groups[k] == nil {
			order = append(order, k)
		}
		groups[k] = append(groups[k], e)
	}
	var kvs []ebpf.MapKV
	for _, k := range order {
		es := groups[k]
		var byPrefix map[fieldPrefix]entry
		var lens []uint8
		if len(es) > 32 {
			byPrefix = make(map[fieldPrefix]entry, len(es))
			for _, e := range es {
				fp := fieldPrefix{e.t.Value[f], e.t.Len[f]}
				if _, ok := byPrefix[fp]; !ok {
					byPrefix[fp] = e
					lens = append(lens, e.t.Len[f])
				}
			}
			slices.Sort(lens)
			lens = slices.Compact(lens)
		}
		for _, e := range es {
			best := e
			if byPrefix == nil {
				for _, o := range es {
					if o.id < best.id && o.t.Len[f] < e.t.Len[f] && o.t.Covers(e.t) {
						best = o
					}
				}
			} else {
				for _, n := range lens {
					if n >= e.t.Len[f] {
						break
					}
					cut := e.t.Len
					cut[f] = n
					if o, ok := byPrefix[fieldPrefix{e.t.Cut(cut).Value[f], n}]; ok && o.id < best.id {
						best = o
					}
				}
			}
			kvs = append(kvs, ebpf.MapKV{Key: key(e.t, l.fixedBits+int(e.t.Len[f])), Value: value(best)})
		}
	}
	return kvs
}

// portArray returns the map of a port array: at every port, the earliest
// rule with a tuple that holds it and what it does; zero (kind 0) where
// none does.
func portArray(t *table) *ebpf.MapSpec {
	f := ir.Field(t.lpm)
	// next[p] leads to the first port from p on that no earlier rule
	// holds (a union-find), so that every port is set once.
	next := make([]int32, portArraySize+1)
	for i := range next {
		next[i] = int32(i)
	}
	find := func(p int32) int32 {
		for next[p] != p {
			next[p] = next[next[p]]
			p = next[p]
		}
		return p
	}
	var kvs []ebpf.MapKV
	for _, e := range t.entries { // the earliest rule first
		lo := int32(binary.BigEndian.Uint16(e.t.Value[f][:2]))
		hi := lo | (1<<(16-e.t.Len[f]) - 1)
		for p := find(lo); p <= hi; p = find(p + 1) {
			k := make([]byte, 4)
			binary.NativeEndian.PutUint32(k, uint32(p))
			v := make([]byte, 8)
			binary.NativeEndian.PutUint32(v, e.id)
			binary.NativeEndian.PutUint32(v[4:], e.kind)
			kvs = append(kvs, ebpf.MapKV{Key: k, Value: v})
			next[p] = p + 1
		}
	}
	return &ebpf.MapSpec{
		Name:       t.name,
		Type:       ebpf.Array,
		KeySize:    4,
		ValueSize:  8,
		MaxEntries: portArraySize,
		Contents:   kvs,
	}
}

// maxRuns bounds the runs a key of a ranges table may have; every value
// has this many, so that the code, and the verifier's work, do not
// depend on the rules.
const maxRuns = 32

// runSize is a run's size in a ranges table's value: u16 hi, u16 kind,
// u32 rule.
const runSize = 8

// runBits is how many low bits of its field a ranges table's runs cover;
// the key holds the others.
const runBits = 16

// maxBucketsPerEntry bounds how many keys one entry may span, a prefix
// shorter than the key's part of its field.
const maxBucketsPerEntry = 256

// portRun is a run of values of the low runBits of a field, up to hi,
// that rule id of kind decides, or none (kind 0).
type portRun struct {
	hi   uint16
	kind uint16
	id   uint32
}

// span is the part of a tuple of rule id in one key: the values lo..hi of
// the low runBits.
type span struct {
	lo, hi   int
	id, kind uint32
}

// portRanges is what a ranges table holds.
type portRanges struct {
	// keyBits is how many high bits of the field lpm the key holds.
	keyBits int
	keys    []ir.Tuple // the tuples cut to the other fields and keyBits
	runs    [][]portRun
}

// rangesKey is the table whose key is a ranges table's: its other fields
// and the high bits of its field.
func (t *table) rangesKey() *table {
	u := *t
	u.lens[t.lpm], u.lpm, u.ranges = uint8(t.ranges.keyBits), -1, nil
	return &u
}

// splitRanges turns every LPM trie on a port, or an IPv4 address, into a
// hash keyed by the other fields and the field's high bits, whose value
// lists the runs of the low 16 bits and the earliest rule of each, for
// the keys with at most maxRuns runs; the tuples that reach the other
// keys stay in a trie. A hash lookup and a few compares cost the same for
// any number of rules, where a trie grows deeper with its entries: a
// 100,000-rule blocklist or allowlist of port ranges per server made a
// matching packet 3× slower than one rule. A packet's key is in the hash
// with every tuple that reaches it, or every such tuple is in the trie,
// and both return only rules the packet matches: the earliest wins.
func (c *compiler) splitRanges(tables []*table) []*table {
	var out []*table
	for _, t := range tables {
		keyBits := -1
		switch {
		case t.array || t.lpm < 0:
		case t.lpm == int(ir.FieldDport) || t.lpm == int(ir.FieldSport):
			keyBits = 0
		case c.p.Family == rules.IPv4:
			keyBits = 32 - runBits
		}
		if keyBits >= 0 {
			if u, ok := c.ranges(t, keyBits); ok {
				out = append(out, u...)
				continue
			}
		}
		out = append(out, t)
	}
	return out
}

// ranges splits an LPM table into a ranges table and a trie of the rest,
// or reports false when its keys would be empty or too many.
func (c *compiler) ranges(t *table, keyBits int) ([]*table, bool) {
	f := ir.Field(t.lpm)
	cut := t.lens
	cut[f] = uint8(keyBits)
	if cut == [ir.NumFields]uint8{} {
		return nil, false
	}
	width := 8 * f.Width(c.p.Family)
	// The entries that reach each key, earliest first. (Most entries
	// have a key of their own: the sizes are the entries'.)
	byKey := make(map[ir.Tuple][]int, len(t.entries))
	keys := make([]ir.Tuple, 0, len(t.entries))
	buckets := 0
	for i, e := range t.entries {
		k := e.t.Cut(cut)
		n := 1
		if int(e.t.Len[f]) < keyBits {
			n = 1 << (keyBits - int(e.t.Len[f]))
		}
		if buckets += n; n > maxBucketsPerEntry || buckets > 4*len(t.entries)+maxBucketsPerEntry {
			return nil, false
		}
		for j := range n {
			kj := k
			if n > 1 {
				setLow(kj.Value[f][:width/8], keyBits, int(e.t.Len[f]), j)
				kj.Len[f] = uint8(keyBits)
			}
			if byKey[kj] == nil {
				keys = append(keys, kj)
			}
			byKey[kj] = append(byKey[kj], i)
		}
	}
	rs := &portRanges{keyBits: keyBits, keys: make([]ir.Tuple, 0, len(keys)), runs: make([][]portRun, 0, len(keys))}
	ranges := &table{guard: t.guard, lens: t.lens, lpm: t.lpm, ranges: rs}
	trie := &table{guard: t.guard, lens: t.lens, lpm: t.lpm}
	inTrie := make([]bool, len(t.entries))
	for _, k := range keys {
		is := byKey[k]
		spans := make([]span, len(is))
		for j, i := range is {
			e := t.entries[i]
			lo, hi := lowSpan(e.t, f, width)
			if int(e.t.Len[f]) <= keyBits {
				lo, hi = 0, 1<<runBits-1
			}
			spans[j] = span{lo: lo, hi: hi, id: e.id, kind: e.kind}
		}
		runs, ok := runsOf(spans)
		if !ok {
			for _, i := range is {
				inTrie[i] = true
			}
			continue
		}
		rs.keys = append(rs.keys, k)
		rs.runs = append(rs.runs, runs)
	}
	for i, e := range t.entries {
		if inTrie[i] {
			trie.entries = append(trie.entries, e)
		}
	}
	if len(rs.keys) > 0 {
		ranges.entries = t.entries
	}
	var out []*table
	for _, u := range []*table{ranges, trie} {
		if len(u.entries) > 0 {
			out = append(out, u)
		}
	}
	return out, true
}

// setLow sets bits from..to-1 of the big-endian field b to the number j.
func setLow(b []byte, to, from, j int) {
	for bit := to - 1; bit >= from; bit, j = bit-1, j>>1 {
		mask := byte(0x80) >> (bit % 8)
		if j&1 != 0 {
			b[bit/8] |= mask
		} else {
			b[bit/8] &^= mask
		}
	}
}

// lowSpan is the range of the low runBits of field f, of width bits, that
// t holds, when its prefix is at least width-runBits long.
func lowSpan(t ir.Tuple, f ir.Field, width int) (lo, hi int) {
	b := t.Value[f][width/8-2 : width/8]
	lo = int(b[0])<<8 | int(b[1])
	free := width - int(t.Len[f])
	return lo, lo | (1<<free - 1)
}

// runsOf returns the runs of values that the earliest of spans, which
// come earliest rule first, decide; false when there are more than
// maxRuns.
func runsOf(spans []span) ([]portRun, bool) {
	// The spans' ends cut the values into pieces the same spans hold.
	starts := []int{0}
	for _, s := range spans {
		starts = append(starts, s.lo)
		if s.hi < 1<<runBits-1 {
			starts = append(starts, s.hi+1)
		}
	}
	slices.Sort(starts)
	starts = slices.Compact(starts)
	// The earliest span that holds each piece; next leads to the first
	// piece from there on that none holds yet (a union-find).
	owner := make([]int, len(starts))
	next := make([]int, len(starts)+1)
	for i := range starts {
		owner[i] = -1
		next[i] = i
	}
	next[len(starts)] = len(starts)
	find := func(i int) int {
		for next[i] != i {
			next[i] = next[next[i]]
			i = next[i]
		}
		return i
	}
	for i, s := range spans {
		j, _ := slices.BinarySearch(starts, s.lo)
		for j = find(j); j < len(starts) && starts[j] <= s.hi; j = find(j + 1) {
			owner[j] = i
			next[j] = j + 1
		}
	}
	var runs []portRun
	for i, o := range owner {
		r := portRun{hi: 1<<runBits - 1}
		if i+1 < len(starts) {
			r.hi = uint16(starts[i+1] - 1)
		}
		if o >= 0 {
			r.id, r.kind = spans[o].id, uint16(spans[o].kind)
		}
		if n := len(runs); n > 0 && runs[n-1].id == r.id && runs[n-1].kind == r.kind {
			runs[n-1].hi = r.hi
			continue
		}
		if len(runs) == maxRuns {
			return nil, false
		}
		runs = append(runs, r)
	}
	return runs, true
}

// rangesSpec returns a ranges table's hash: the key, and maxRuns runs; a
// key with fewer repeats its last run, which ends at the last value.
func (c *compiler) rangesSpec(t *table) *ebpf.MapSpec {
	l := c.layout(t.rangesKey())
	var kvs []ebpf.MapKV
	for i, k := range t.ranges.keys {
		key := l.key(k)
		v := make([]byte, runSize*maxRuns)
		runs := t.ranges.runs[i]
		for j := range maxRuns {
			r := runs[min(j, len(runs)-1)]
			binary.NativeEndian.PutUint16(v[runSize*j:], r.hi)
			binary.NativeEndian.PutUint16(v[runSize*j+2:], r.kind)
			binary.NativeEndian.PutUint32(v[runSize*j+4:], r.id)
		}
		kvs = append(kvs, ebpf.MapKV{Key: key, Value: v})
	}
	return &ebpf.MapSpec{
		Name:       t.name,
		Type:       ebpf.Hash,
		KeySize:    uint32(l.size),
		ValueSize:  runSize * maxRuns,
		MaxEntries: uint32(len(kvs)),
		Contents:   kvs,
	}
}
