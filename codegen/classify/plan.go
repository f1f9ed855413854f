// Package classify plans the classifier (-O1). It answers, for a run of
// terminal rules, "which is the earliest rule that decides this packet?"
// with a few map lookups instead of a test per rule; see
// docs/ARCHITECTURE.md and codegen's package doc. Each rule is normalized
// into tuples (ir.Program.Form); tuples of one shape go into one table, a
// hash keyed by the packet's fields cut to the shape (for keys of up to
// 32 bytes, a bucket array that the program hashes into: buckets.go), or
// an LPM trie when shapes differ in one field's prefix length only. A table's value is the
// earliest rule with that key and what it does; the tables are looked up
// in the order of their earliest rule, and the lookups stop as soon as no
// later table can hold an earlier rule.
//
// A rule's matches that no tuple expresses (negations, interface
// prefixes, TCP flags, ICMP types, lengths, marks, ...) are its
// residual: they are tested once per table, before its lookup, as part
// of the table's guard, so that a table holds only rules with the same
// residual. (A numbered -i or -o pattern is a field of the tuple: see
// ir.Program.IfacePatterns.) A packet the
// residual fails for skips the table: every rule in it fails too, and no
// candidate is lost. Only matches without effects take part (Pure):
// a rule with a stateful or hotdropping match beyond its tuples stays
// plain code. REJECT is a terminal verdict like DROP: main sends the
// reply of the rule the classifier found. So is a jump to a chain that
// never returns (KindJump, with Planner.Jumps).
//
// A rule can also drop a packet whose headers it finds cut short
// (hotdrop) when only its matches before that point hold. Those matches
// are tuples too, in tables of their own that apply only to such packets:
// for every packet, exactly one of a rule's tables applies, and the
// earliest rule it finds decides as ipt_do_table would.
//
// A Planner turns the runs of a chain's terminal rules into Segments of
// Tables and gives each looked-up table its map (MapSpec) and key
// (Layout); codegen emits the lookups. Planning depends on the hook, which
// decides which matches may be tested as a residual (Planner.Pure) and
// what a REJECT is, so it is not an ir pass: the ir passes hold for every
// hook.
package classify

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"fmt"
	"hash/maphash"
	"reflect"
	"runtime/debug"
	"slices"

	"github.com/cilium/ebpf"

	"bpfwall/codegen/uapi"
	"bpfwall/internal/flatidx"
	"bpfwall/internal/mapkv"
	"bpfwall/ir"
	"bpfwall/rules"
)

// Kinds of a table value: what the rule does. The first three are the
// chain function's codes (codegen checks that they are).
const (
	KindAccept  = 1
	KindDrop    = 2
	KindHotdrop = 3
	KindReturn  = 4
	// KindReject is a REJECT in the netfilter stage, which drops the
	// packet and counts abi.StageRejectDropped; elsewhere a REJECT is
	// KindDrop and main sends its reply.
	KindReject = 5
	// KindJump is a jump or goto to a chain that never returns
	// (ir.Program.Terminating): the chain it calls decides, so the rule
	// is as terminal as an ACCEPT. Codegen calls the chain of the rule
	// found.
	KindJump = 6
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
	costIndexed   = 12 // two array lookups and a scan of the runs
	costBuckets   = 12 // a hash in code, two array lookups, a few compares
	costInline    = 2
	// maxInlineTuples is how many tuples a table may have to be tested in
	// code rather than looked up.
	maxInlineTuples = 4
)

// MaxLookupTables bounds the classifier's maps: a program may use 64
// maps, and the fixed ones and the address sets need some.
const MaxLookupTables = 48

// MaxSegmentTables bounds a segment's tables; a run that needs more is
// planned in halves. The verifier follows a state for every rule an
// inline table may have found by each later table, whose first test
// compares it: 10k rules on 30 VLAN prefixes made 1,774 tables, and a
// program it gave up on.
const MaxSegmentTables = 128

// Planner plans the classified segments of one program.
type Planner struct {
	// Program is the optimized program whose chains are planned: its
	// rules' forms (ir.Program.Form) are the tuples.
	Program *ir.Program
	// Stage is set for the netfilter stage, where a REJECT drops
	// (KindReject) and the tables have names of their own.
	Stage bool
	// ForceLookups looks every table up, however few its tuples and
	// whatever the cost estimate says (codegen.Options.ForceLookups).
	ForceLookups bool
	// Pure reports whether a match may be tested before a table, as part
	// of its guard: it has no effects and cannot drop the packet.
	Pure func(ir.Match) bool
	// NoOutIface: the program cannot key a table on the output device
	// (an accelerator finds it by a route lookup, after the tables), and
	// rules that test its name stay plain.
	NoOutIface bool
	// Jumps classifies the jumps and gotos to chains that never return
	// (KindJump), which otherwise end a run of rules: most real chains
	// jump between their verdicts.
	Jumps bool
	// Forget lets each rule's form go once plan has taken its tuples
	// (ir.Program.ForgetForms), for a caller that does not plan the
	// rules again: at 100k rules the forms are a quarter of the live
	// heap when planning starts.
	Forget bool

	tables     int // the tables named so far
	maps       int // and their maps
	classified int
	// residuals are the matches tested before a table's lookup, by the
	// key in its Guard.
	residuals map[string][]ir.Match
	// oneResidual is the key of each lone residual match seen.
	oneResidual map[ir.Match]string
	// terminating says which chains never return, computed once.
	terminating []bool
	// pools are the maps the bucket tables share, by slot size.
	pools map[int]*bucketPool
	// flats are the arrays the contents of each map view (Flats).
	flats map[string][]mapkv.Flat
	// forgotten counts the forms let go (Forget) since the heap was last
	// collected (collectForms).
	forgotten int
}

// viewed returns the contents of map name, views of f's arrays, and
// notes them for Flats.
func (c *Planner) viewed(name string, f mapkv.Flat) []ebpf.MapKV {
	c.noteFlat(name, f)
	return f.KVs()
}

// noteFlat notes that the next contents of map name view f.
func (c *Planner) noteFlat(name string, f mapkv.Flat) {
	if c.flats == nil {
		c.flats = make(map[string][]mapkv.Flat)
	}
	c.flats[name] = append(c.flats[name], f)
}

// Flats returns, by map name, the arrays that the contents of the
// classifier's maps view, in order: a loader may write their entries
// straight from them (a bucket pool's are one for each of its tables).
func (c *Planner) Flats() map[string][]mapkv.Flat { return c.flats }

// collectAfter is how many forms a plan lets go before it has the heap
// collected, at least; and at least half the program's rules' worth.
const collectAfter = 1 << 16

// collectForms collects the heap once the forms let go are a large part
// of it: a form and the entries made of its tuples are otherwise both
// live at the next collection, which then paces the heap from their sum.
// Half of a large program's forms gone is a sixth of the compile's live
// heap, and collecting at most twice a compile costs little: a
// mixed-rule restore's peak RSS is 7% lower at 100k rules (152 -> 142
// MB, median of five) and 10% at 1M (1.30 -> 1.17 GB, three), in the
// same time. The free pages go back to the kernel too
// (debug.FreeOSMemory), as after restore lowers its chains: with both, a
// realistic 1M restore peaks at 1.03 GiB instead of 1.13.
func (c *Planner) collectForms(n int) {
	c.forgotten += n
	if c.forgotten >= max(collectAfter, len(c.Program.Rules)/2) {
		c.forgotten = 0
		debug.FreeOSMemory()
	}
}

// slab hands out the byte slices of one map's keys and values from
// blocks, each twice the last up to 64 KiB: an allocation per block
// instead of two per entry (the contents of a 100k-rule program were a
// million objects). The blocks live as long as the contents do, so a
// slab is never shared between maps.
type slab struct {
	free []byte
	next int // the next block's size
}

func (s *slab) take(n int) []byte {
	if len(s.free) < n {
		s.next = min(max(2*s.next, 512), 64<<10)
		s.free = make([]byte, max(n, s.next))
	}
	b := s.free[:n:n]
	s.free = s.free[n:]
	return b
}

// Classified is how many rules the segments planned so far hold.
func (c *Planner) Classified() int { return c.classified }

// Residual returns the residual matches that key names in a Guard.
func (c *Planner) Residual(key string) []ir.Match { return c.residuals[key] }

// Mode says which of a rule's tuples a table holds.
type Mode uint8

const (
	ModeFull     Mode = iota // all matches: the rule matches
	ModePreL4                // matches before the L4Header: it drops a short packet
	ModePreProto             // matches before Proto: it drops an IPv6 packet whose extension headers cannot be walked
)

// Guard is the condition under which a table applies to a packet.
type Guard struct {
	Mode Mode
	// V6Proto: the rules test the protocol in IPv6, where a failed walk
	// of the extension headers drops the packet.
	V6Proto bool
	// L4Len and Tiny are the rules' L4Header (0 without one).
	L4Len int
	Tiny  bool
	// Residual names the rules' residual matches that apply to the
	// mode (Planner.Residual); "" for none.
	Residual string
}

// Entry is one tuple of a rule in a table.
type Entry struct {
	T ir.Tuple
	// Need is, in a table of candidates, the residual bits the rule's
	// residual sets (0 for none): see mergeResiduals. (It fills the
	// tuple's last word: an Entry is 56 bytes.)
	Need uint16
	ID   uint32
	Kind uint32
}

// Table is one lookup of a segment.
type Table struct {
	Name  string // the map's, when looked up
	Guard Guard
	Lens  [ir.NumFields]uint8 // the shape; for an LPM trie or a port array, lens[lpm] is the field's width
	LPM   int                 // the field of varying length, or -1 for a hash
	// Array: an array indexed by the port field, whose entries all test
	// the same protocol or none.
	Array bool
	// Buckets, for a table with exact keys looked up (a hash, of
	// candidates, or of ranges not indexed), is its bucket array
	// (BucketsOf): set, but not built, by plan.
	Buckets *Buckets
	// Ranges, for a hash keyed by the fields other than the port field
	// LPM: the runs of ports of each key.
	Ranges *PortRanges
	// Entries are sorted by rule, one per tuple.
	Entries []Entry
	First   uint32 // the earliest rule
	Inline  bool
	// Residuals, for a table of candidates, are the residual keys of the
	// tables merged into it: bit i of an entry's Need is Residuals[i];
	// cands are its map's keys and the candidates of each.
	Residuals []string
	cands     mapkv.Flat
}

// Release lets go of what only planning and building t's map read: its
// entries, keys and lists of candidates. Codegen releases each table
// once its lookup is emitted and its map built, so that a segment's
// tables do not all hold their tuples until the last is built (most of
// a large rule set is one segment).
func (t *Table) Release() { t.Entries, t.cands = nil, mapkv.Flat{} }

// shapeKey is the guard and shape that tuples share in a table.
type shapeKey struct {
	g    Guard
	lens [ir.NumFields]uint8
}

// Segment is a run of terminal rules classified by tables.
type Segment struct {
	Rules  []*ir.Rule
	Tables []*Table
}

// Eligible reports whether r can be classified: its normal form, which
// the program keeps for plan, is in terms the classifier tests.
func (c *Planner) Eligible(r *ir.Rule) bool {
	switch r.Action.(type) {
	case ir.Accept, ir.Drop, ir.Return:
	case ir.TProxy:
		// An ACCEPT to the classifier: main tells them apart.
	case ir.Reject:
		// A DROP to the classifier, whose reply main sends (see kindOf).
	case ir.Jump, ir.Goto:
		if to, _ := ir.JumpTarget(r.Action); !c.Jumps || !c.terminates(to) {
			return false
		}
	case ir.Log, ir.None:
		return false
	}
	if c.Program.Family == rules.IPv6 {
		// ip6tables' "-p all" only walks the extension headers.
		for _, m := range r.Matches {
			if m, ok := m.(ir.Proto); ok && m.Proto == 0 {
				return false
			}
		}
	}
	f, ok := c.Program.Form(r)
	if !ok {
		return false
	}
	for _, m := range f.Residual {
		if !c.Pure(m) {
			return false
		}
	}
	if c.NoOutIface {
		for _, ts := range [][]ir.Tuple{f.Tuples, f.PreL4, f.PreProto} {
			for _, t := range ts {
				if t.Len[ir.FieldOut] > 0 {
					return false
				}
			}
		}
	}
	return true
}

// residualKey names the residual matches ms in c.residuals.
func (c *Planner) residualKey(ms []ir.Match) string {
	if len(ms) == 0 {
		return ""
	}
	// A lone match of a kind whose values compare, the common case, is
	// looked up by its value first: formatting every rule's residual
	// was a tenth of a 1M-rule plan. Equal values format alike.
	one := len(ms) == 1 && hashable(reflect.TypeOf(ms[0]))
	if one {
		if k, ok := c.oneResidual[ms[0]]; ok {
			return k
		}
	}
	k := fmt.Sprintf("%#v", ms)
	if c.residuals == nil {
		c.residuals = make(map[string][]ir.Match)
		c.oneResidual = make(map[ir.Match]string)
	}
	c.residuals[k] = ms
	if one {
		c.oneResidual[ms[0]] = k
	}
	return k
}

// hashable reports whether values of type t can key a map without
// panicking: comparable, and without interfaces, whose dynamic values
// may not be.
func hashable(t reflect.Type) bool {
	switch t.Kind() {
	case reflect.Interface:
		return false
	case reflect.Array:
		return hashable(t.Elem())
	case reflect.Struct:
		for i := range t.NumField() {
			if !hashable(t.Field(i).Type) {
				return false
			}
		}
		return true
	}
	return t.Comparable()
}

func (c *Planner) kindOf(a ir.Action) uint32 {
	switch a.(type) {
	case ir.Accept, ir.TProxy:
		return KindAccept
	case ir.Drop:
		return KindDrop
	case ir.Reject:
		if c.Stage {
			return KindReject
		}
		return KindDrop
	case ir.Return:
	case ir.Jump, ir.Goto:
		return KindJump
	case ir.Log, ir.None:
		panic(fmt.Sprintf("codegen: %T classified", a)) // not eligible
	}
	return KindReturn
}

// terminates reports whether chain ci never returns.
func (c *Planner) terminates(ci int) bool {
	if c.terminating == nil {
		c.terminating = c.Program.Terminating()
	}
	return c.terminating[ci]
}

// Run classifies a run of eligible rules: one segment, or, when its
// tables would be more than the program may have, its halves in turn,
// so that a run of many kinds of rules does not fall back to plain code
// whole; rules that no segment takes stay plain.
func (c *Planner) Run(run []*ir.Rule) []Unit {
	plan, tooMany := c.plan(run)
	switch {
	case plan != nil:
		c.classified += len(run)
		return []Unit{{Seg: plan}}
	case tooMany && len(run) > 1:
		h := len(run) / 2
		return append(c.Run(run[:h]), c.Run(run[h:])...)
	}
	out := make([]Unit, len(run))
	for i, r := range run {
		out[i] = Unit{Rule: r}
	}
	return out
}

// Unit is a plain rule or a classified segment.
type Unit struct {
	Rule *ir.Rule
	Seg  *Segment
}

// plan builds the tables of a run of eligible rules, or returns nil when
// plain code is expected to be cheaper, or when the tables would be more
// than the program has left (tooMany).
func (c *Planner) plan(run []*ir.Rule) (plan *Segment, tooMany bool) {
	if len(run) == 0 {
		return nil, false
	}
	v6 := c.Program.Family == rules.IPv6
	// The entries of each shape, in rule order. The tuples are first
	// given their shapes, so that each shape's entries and set are made
	// at their size (growing them was a third of a 1M-rule plan); then
	// the forms are read again, in the same order, into the entries. (A
	// copy of every tuple between the two cost more than the second
	// read.) A tuple is kept once per shape: seen holds, by the hash of
	// shape and tuple, the entry of the first tuple of that hash in its
	// shape's list; another tuple of the same hash is told apart in
	// collided.
	total := 0
	for _, r := range run {
		f, _ := c.Program.Form(r) // computed by eligible
		total += len(f.Tuples) + len(f.PreL4) + len(f.PreProto)
	}
	shapeOf := make([]int32, 0, total)
	index := make(map[shapeKey]int32)
	var order []shapeKey
	var count []int
	var last shapeKey
	lastIndex := int32(-1)
	shape := func(k shapeKey) int32 {
		if lastIndex >= 0 && k == last {
			return lastIndex
		}
		i, ok := index[k]
		if !ok {
			i = int32(len(order))
			index[k] = i
			order = append(order, k)
			count = append(count, 0)
		}
		last, lastIndex = k, i
		return i
	}
	add := func(g Guard, ts []ir.Tuple) {
		for j := range ts {
			i := shape(shapeKey{g, ts[j].Len})
			count[i]++
			shapeOf = append(shapeOf, i)
		}
	}
	for _, r := range run {
		f, _ := c.Program.Form(r)
		v6proto := v6 && f.Proto
		add(Guard{Mode: ModeFull, V6Proto: v6proto, L4Len: f.L4Len, Tiny: f.Tiny, Residual: c.residualKey(f.Residual)}, f.Tuples)
		if f.L4Len > 0 {
			add(Guard{Mode: ModePreL4, V6Proto: v6proto, L4Len: f.L4Len, Tiny: f.Tiny, Residual: c.residualKey(f.Residual[:f.ResidualPreL4])}, f.PreL4)
		}
		if v6proto {
			add(Guard{Mode: ModePreProto, V6Proto: true, Residual: c.residualKey(f.Residual[:f.ResidualPreProto])}, f.PreProto)
		}
	}
	type shapeTuple struct {
		shape int32
		t     ir.Tuple
	}
	seed := maphash.MakeSeed()
	lists := make([][]Entry, len(order))
	for i, n := range count {
		lists[i] = make([]Entry, 0, n)
	}
	// (flatidx: Go maps per shape spent most of their time in probes.)
	seen := flatidx.New(total)
	var collided map[shapeTuple]struct{}
	next := 0
	keep := func(ts []ir.Tuple, id, kind uint32) {
		for _, t := range ts {
			i := shapeOf[next]
			next++
			// The earliest rule with a tuple wins; rules come in order.
			st := shapeTuple{i, t}
			if j, had := seen.Insert(maphash.Comparable(seed, st), int32(len(lists[i]))); had {
				// j indexes another shape's list when the two
				// shapes' tuples only share a hash.
				if int(j) < len(lists[i]) && lists[i][j].T == t {
					continue
				}
				if _, ok := collided[st]; ok {
					continue
				}
				if collided == nil {
					collided = make(map[shapeTuple]struct{})
				}
				collided[st] = struct{}{}
			}
			lists[i] = append(lists[i], Entry{T: t, ID: id, Kind: kind})
		}
	}
	for n, r := range run {
		f, _ := c.Program.Form(r)
		id := uint32(r.ID)
		keep(f.Tuples, id, c.kindOf(r.Action))
		if f.L4Len > 0 {
			keep(f.PreL4, id, KindHotdrop)
		}
		if v6 && f.Proto {
			keep(f.PreProto, id, KindHotdrop)
		}
		if c.Forget {
			// The entries hold copies of its tuples; a half planned
			// again (Run) computes its forms again.
			c.Program.ForgetForms(run[n : n+1])
		}
	}
	shapeOf, seen, collided, index = nil, nil, nil, nil
	if c.Forget {
		c.collectForms(len(run))
	}
	shapes := make(map[shapeKey][]Entry, len(order))
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
		tables = append(tables, &Table{Guard: k.g, Lens: k.lens, LPM: -1, Entries: shapes[k]})
	}
	for _, t := range tables {
		sortByRule(t.Entries)
	}
	tables = c.splitRanges(tables)
	tables = c.mergeResiduals(tables)
	for _, t := range tables {
		t.First = t.Entries[0].ID
		t.Inline = !c.ForceLookups && len(t.Entries) <= maxInlineTuples || emptyShape(t)
	}
	slices.SortStableFunc(tables, func(a, b *Table) int { return cmp.Compare(a.First, b.First) })

	if len(tables) > MaxSegmentTables {
		return nil, true
	}
	if !c.ForceLookups && !c.lookupsPay(run, tables) {
		return nil, false
	}
	// A bucket table adds a map only when it is the first of its slot
	// size: the others share that pool.
	maps := 0
	slot := make([]int, len(tables))
	var pooled []int
	for i, t := range tables {
		switch {
		case t.Inline:
		case c.bucketable(t):
			slot[i] = c.bucketSlot(t)
			if c.pools[slot[i]] == nil && !slices.Contains(pooled, slot[i]) {
				pooled = append(pooled, slot[i])
				maps++
			}
		default:
			maps += t.maps()
		}
	}
	if c.maps+maps > MaxLookupTables {
		return nil, true
	}
	c.maps += maps
	for i, t := range tables {
		if !t.Inline {
			t.Name = fmt.Sprintf("%s%d", c.tablePrefix(), c.tables)
			c.tables++
			if slot[i] != 0 {
				t.Buckets = &Buckets{slot: slot[i]}
				c.pool(slot[i])
			}
		}
	}
	return &Segment{Rules: run, Tables: tables}, false
}

// mergeTries merges the shapes not taken yet that differ in one field's
// length into LPM tries, one field after the other, where a trie saves
// lookups, and marks them taken.
func (c *Planner) mergeTries(shapes map[shapeKey][]Entry, order []shapeKey, taken map[shapeKey]bool) []*Table {
	var tables []*Table
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
			if !c.ForceLookups && apart <= costLPM {
				continue
			}
			t := &Table{Guard: g.g, Lens: g.lens, LPM: int(f)}
			t.Lens[f] = uint8(8 * f.Width(c.Program.Family))
			n := 0
			for _, k := range ks {
				n += len(shapes[k])
			}
			t.Entries = make([]Entry, 0, n)
			for _, k := range ks {
				taken[k] = true
				t.Entries = append(t.Entries, shapes[k]...)
			}
			tables = append(tables, t)
		}
	}
	return tables
}

// lookupsPay reports whether the tables cost less than testing the run's
// rules one by one.
func (c *Planner) lookupsPay(run []*ir.Rule, tables []*Table) bool {
	// Packets take one table per guard class; count them all, as the
	// worst case.
	cost, plain := 0, costPlainRule*len(run)
	for _, t := range tables {
		if t.Guard.Mode != ModeFull {
			continue
		}
		cost += c.cost(t) + costPlainRule*len(c.residuals[t.Guard.Residual])
		for _, k := range t.Residuals {
			cost += costPlainRule * len(c.residuals[k])
		}
	}
	return cost < plain
}

// MaxCandidates bounds the rules one key of a table of candidates lists:
// every value has this many, so that the code does not depend on the
// rules. CandidateSize is one's size: u32 rule, u16 kind, u16 need.
const (
	MaxCandidates = 4
	CandidateSize = 8
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
// list more than MaxCandidates rules stays apart.
func (c *Planner) mergeResiduals(tables []*Table) []*Table {
	type groupKey struct {
		g    Guard
		lens [ir.NumFields]uint8
	}
	groups := make(map[groupKey][]*Table)
	var order []groupKey
	for _, t := range tables {
		if t.LPM >= 0 || t.Array || t.Ranges != nil || emptyShape(t) || !c.ForceLookups && len(t.Entries) <= maxInlineTuples {
			continue
		}
		k := groupKey{t.Guard, t.Lens}
		k.g.Residual = ""
		if groups[k] == nil {
			order = append(order, k)
		}
		groups[k] = append(groups[k], t)
	}
	into := make(map[*Table]*Table)
	for _, k := range order {
		ts := groups[k]
		withResidual := 0
		for _, t := range ts {
			if t.Guard.Residual != "" {
				withResidual++
			}
		}
		if len(ts) < 2 || withResidual > maxResidualBits {
			continue
		}
		m := &Table{Guard: k.g, Lens: k.lens, LPM: -1}
		n := 0
		for _, t := range ts {
			n += len(t.Entries)
		}
		m.Entries = make([]Entry, 0, n)
		for _, t := range ts {
			var need uint16
			if t.Guard.Residual != "" {
				need = 1 << len(m.Residuals)
				m.Residuals = append(m.Residuals, t.Guard.Residual)
			}
			for _, e := range t.Entries {
				e.Need = need
				m.Entries = append(m.Entries, e)
			}
		}
		sortByRule(m.Entries)
		var ok bool
		if m.cands, ok = c.candidates(m); !ok {
			continue
		}
		for _, t := range ts {
			into[t] = m
		}
	}
	if len(into) == 0 {
		return tables
	}
	out := make([]*Table, 0, len(tables))
	placed := make(map[*Table]bool)
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

// candidates returns the contents of a table of candidates: its keys,
// in order, and the candidates of each, earliest first, up to the first
// that needs no residual, without a later rule that needs the same bit as
// an earlier one (it can only match where that one does). A key with
// fewer than MaxCandidates repeats its last. False when a key would have
// more.
func (c *Planner) candidates(t *Table) (mapkv.Flat, bool) {
	const vs = CandidateSize * MaxCandidates
	// closed marks a key's count once it has a candidate that needs no
	// residual.
	const closed = 0x80
	l := c.Layout(t)
	// The keys are numbered by their bytes (flatidx: Go maps of the keys
	// as strings were most of a 1M-rule table's candidates).
	byKey := flatidx.NewNumbers[[maxKeySize]byte](len(t.Entries))
	// Each entry's key is numbered first, so that the values are made
	// once, of their size: grown as keys came, they were allocated five
	// times over.
	keyOf := make([]int32, len(t.Entries))
	for j, e := range t.Entries {
		var kb [maxKeySize]byte
		l.put(kb[:l.Size], e.T)
		keyOf[j], _ = byKey.Number(kb)
	}
	out := mapkv.NewFlat(l.Size, vs, len(byKey.Keys))
	count := make([]uint8, len(byKey.Keys))
	for j, e := range t.Entries { // the earliest rule first
		i := keyOf[j]
		n := int(count[i])
		if n&closed != 0 {
			continue
		}
		v := out.Value(int(i))
		if candidateNeeds(v, n, e.Need) {
			continue
		}
		if n == MaxCandidates {
			return mapkv.Flat{}, false
		}
		binary.NativeEndian.PutUint32(v[CandidateSize*n:], e.ID)
		binary.NativeEndian.PutUint16(v[CandidateSize*n+4:], uint16(e.Kind))
		binary.NativeEndian.PutUint16(v[CandidateSize*n+6:], e.Need)
		count[i]++
		if e.Need == 0 {
			count[i] |= closed
		}
	}
	for i, k := range byKey.Keys {
		copy(out.Key(i), k[:l.Size])
	}
	for i, n := range count {
		v := out.Value(i)
		n &^= closed
		for j := int(n); j < MaxCandidates; j++ {
			copy(v[CandidateSize*j:][:CandidateSize], v[CandidateSize*(int(n)-1):])
		}
	}
	return out, true
}

// candidateNeeds says whether one of the first n candidates of value v
// needs the residual bits need.
func candidateNeeds(v []byte, n int, need uint16) bool {
	for j := range n {
		if binary.NativeEndian.Uint16(v[CandidateSize*j+6:]) == need {
			return true
		}
	}
	return false
}

// candidatesSpec returns a table of candidates' hash.
func (c *Planner) candidatesSpec(t *Table) *ebpf.MapSpec {
	kvs := c.viewed(t.Name, t.cands)
	return &ebpf.MapSpec{
		Name:       t.Name,
		Type:       ebpf.Hash,
		KeySize:    uint32(c.Layout(t).Size),
		ValueSize:  CandidateSize * MaxCandidates,
		MaxEntries: uint32(len(kvs)),
		Contents:   kvs,
	}
}

// tablePrefix names the classifier's tables: the netfilter stage's are
// its own, since the loader gives the stage the ingress program's maps of
// the same name, and the stage's tables differ (KindReject).
func (c *Planner) tablePrefix() string {
	if c.Stage {
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

// maxPortProtos bounds the port arrays of one guard and port field: one
// per protocol. Shapes with more protocols stay in hashes and tries.
const maxPortProtos = 4

// portArraySize is a port array's: a slot per port.
const portArraySize = 1 << 16

// portField returns the port field of a shape that constrains it, and
// else at most the protocol, exactly.
func portField(lens [ir.NumFields]uint8) (ir.Field, bool) {
	if lens[ir.FieldSrc] != 0 || lens[ir.FieldDst] != 0 || (lens[ir.FieldProto] != 0 && lens[ir.FieldProto] != 8) ||
		lens[ir.FieldIn] != 0 || lens[ir.FieldOut] != 0 {
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
func portTables(shapes map[shapeKey][]Entry, order []shapeKey, taken map[shapeKey]bool) []*Table {
	type class struct {
		g        Guard
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
	var out []*Table
	for _, cl := range classes {
		byProto := make(map[uint8]*Table)
		var protos []uint8
		for _, k := range members[cl] {
			for _, e := range shapes[k] {
				p := e.T.Field(ir.FieldProto)[0]
				t := byProto[p]
				if t == nil {
					t = &Table{Guard: cl.g, LPM: int(cl.field), Array: true}
					t.Lens[cl.field] = 16
					if !cl.anyProto {
						t.Lens[ir.FieldProto] = 8
					}
					byProto[p] = t
					protos = append(protos, p)
				}
				t.Entries = append(t.Entries, e)
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
//
// A table's entries come as runs already in order, one per shape merged
// into it; the runs are merged pairwise, the earlier run first among
// equal rules: linear in the entries per round, with rounds for the runs'
// logarithm. (A stable sort was a tenth of a 1M-rule plan.)
func sortByRule(es []Entry) {
	bounds := []int{0}
	for i := 1; i < len(es); i++ {
		if es[i].ID < es[i-1].ID {
			bounds = append(bounds, i)
		}
	}
	if len(bounds) == 1 {
		return
	}
	bounds = append(bounds, len(es))
	src, dst := es, make([]Entry, len(es))
	for len(bounds) > 2 {
		next := []int{0}
		for i := 0; i+1 < len(bounds); i += 2 {
			lo, mid := bounds[i], bounds[i+1]
			if i+2 == len(bounds) { // an odd run out
				copy(dst[lo:mid], src[lo:mid])
				next = append(next, mid)
				break
			}
			hi := bounds[i+2]
			mergeByRule(dst[lo:hi], src[lo:mid], src[mid:hi])
			next = append(next, hi)
		}
		bounds, src, dst = next, dst, src
	}
	if &src[0] != &es[0] {
		copy(es, src)
	}
}

// mergeByRule merges a and b, each in rule order, into out, a's entries
// first among equal rules.
func mergeByRule(out, a, b []Entry) {
	i, j := 0, 0
	for k := range out {
		if j == len(b) || i < len(a) && a[i].ID <= b[j].ID {
			out[k] = a[i]
			i++
		} else {
			out[k] = b[j]
			j++
		}
	}
}

func emptyShape(t *Table) bool {
	return t.Lens == [ir.NumFields]uint8{}
}

// Slot is where a field goes in a lookup key.
type Slot struct {
	Field ir.Field
	Off   int // from the start of the key
	Size  int
}

// KeyLayout is a table's key: for an LPM trie a u32 prefix length, then
// the fields at their natural alignment, the varying one last; gaps are
// zero.
type KeyLayout struct {
	Slots []Slot
	Size  int
	// FixedBits is the prefix length of everything before the varying
	// field of an LPM trie.
	FixedBits int
}

// Key is the tuple's fields at their slots; an LPM trie's prefix length
// is left for the caller.
func (l KeyLayout) Key(tp ir.Tuple) []byte { return l.put(make([]byte, l.Size), tp) }

// put writes the tuple's fields at their slots of k, l.Size bytes whose
// gaps are zero, and returns k.
func (l KeyLayout) put(k []byte, tp ir.Tuple) []byte {
	for _, s := range l.Slots {
		copy(k[s.Off:s.Off+s.Size], tp.Field(s.Field)[:s.Size])
	}
	return k
}

// maxKeySize bounds a key's bytes: an LPM trie's prefix length, then
// every field of IPv6 (16+16+2+2+1), aligned.
const maxKeySize = 4 + 16 + 16 + 2 + 2 + 1

func (c *Planner) Layout(t *Table) KeyLayout {
	var l KeyLayout
	off := 0
	if t.LPM >= 0 {
		off = 4
	}
	place := func(f ir.Field) {
		w := f.Width(c.Program.Family)
		align := min(w, 4)
		off = (off + align - 1) / align * align
		l.Slots = append(l.Slots, Slot{Field: f, Off: off, Size: w})
		off += w
	}
	for _, f := range []ir.Field{ir.FieldSrc, ir.FieldDst, ir.FieldSport, ir.FieldDport, ir.FieldProto, ir.FieldIn, ir.FieldOut} {
		if int(f) != t.LPM && t.Lens[f] > 0 {
			place(f)
		}
	}
	if t.LPM >= 0 {
		w := ir.Field(t.LPM).Width(c.Program.Family)
		align := min(w, 4)
		off = (off + align - 1) / align * align
		l.FixedBits = 8 * (off - 4)
		place(ir.Field(t.LPM))
	}
	l.Size = off
	return l
}

// MapSpec returns the table's map and its contents. The contents of every
// classifier table come in the order of its entries (the earliest rule
// first), which is the same for the same rule set; sorting them by key,
// which the kernel does not need, took 2 s of a 1M-rule compile.
func (c *Planner) MapSpec(t *Table) *ebpf.MapSpec {
	switch {
	case t.Array:
		return portArray(t)
	case t.Buckets != nil:
		// The pool's map, which grows with each table until the program
		// is built.
		return c.pool(c.BucketsOf(t).SlotSize()).spec
	case t.Ranges != nil:
		return c.rangesSpec(t)
	case t.Residuals != nil:
		return c.candidatesSpec(t)
	}
	if t.LPM < 0 {
		kvs := c.viewed(t.Name, c.hashContents(t))
		return &ebpf.MapSpec{
			Name:       t.Name,
			Type:       ebpf.Hash,
			KeySize:    uint32(c.Layout(t).Size),
			ValueSize:  8,
			MaxEntries: uint32(len(kvs)),
			Contents:   kvs,
		}
	}
	l := c.Layout(t)
	mem := new(slab)
	key := func(tp ir.Tuple, plen int) []byte {
		k := l.put(mem.take(l.Size), tp)
		binary.NativeEndian.PutUint32(k, uint32(plen))
		return k
	}
	kvs := c.lpmContents(t, l, key, func(e Entry) []byte { return ruleValue(mem, e) })
	return &ebpf.MapSpec{
		Name:       t.Name,
		Type:       ebpf.LPMTrie,
		Flags:      uapi.MapNoPrealloc,
		KeySize:    uint32(l.Size),
		ValueSize:  8,
		MaxEntries: uint32(len(kvs)),
		Contents:   kvs,
	}
}

// hashContents is a plain hash table's contents: each entry's key, with
// its rule (u32) and what it does (u32). A plain hash is the entries of
// one shape and guard, of which plan keeps each tuple once, for its
// earliest rule: the keys, the tuples' fields, are distinct already.
func (c *Planner) hashContents(t *Table) mapkv.Flat {
	l := c.Layout(t)
	out := mapkv.NewFlat(l.Size, 8, len(t.Entries))
	for i, e := range t.Entries {
		l.put(out.Key(i), e.T)
		putRule(out.Value(i), e)
	}
	return out
}

// ruleValue is a hash or trie value: the entry's rule (u32) and what it
// does (u32).
func ruleValue(mem *slab, e Entry) []byte {
	v := mem.take(8)
	putRule(v, e)
	return v
}

// putRule writes a ruleValue into v.
func putRule(v []byte, e Entry) {
	binary.NativeEndian.PutUint32(v, e.ID)
	binary.NativeEndian.PutUint32(v[4:], e.Kind)
}

// lpmContents stores at every prefix the earliest rule among the entries
// whose prefix covers it, with the same other fields: the trie returns
// the longest stored prefix that contains the packet's field, and every
// entry the packet matches covers that one.
func (c *Planner) lpmContents(t *Table, l KeyLayout, key func(ir.Tuple, int) []byte, value func(Entry) []byte) []ebpf.MapKV {
	f := ir.Field(t.LPM)
	// The earliest rule per tuple, grouped by the fields other than f
	// (whose lengths are the same in every tuple of a trie): numbered,
	// and then laid out group by group. (Go maps of tuples and of the
	// groups' slices were half of a 1M-rule trie's contents.)
	seen := flatidx.NewNumbers[ir.Tuple](len(t.Entries))
	groups := flatidx.NewNumbers[ir.Tuple](0)
	firsts := make([]Entry, 0, len(t.Entries))
	groupOf := make([]int32, 0, len(t.Entries))
	for _, e := range t.Entries { // the earliest rule first
		if _, isNew := seen.Number(e.T); !isNew {
			continue
		}
		lens := e.T.Len
		lens[f] = 0
		n, _ := groups.Number(e.T.Cut(lens))
		firsts, groupOf = append(firsts, e), append(groupOf, n)
	}
	at := make([]int32, len(groups.Keys)+1)
	for _, n := range groupOf {
		at[n+1]++
	}
	for g := range groups.Keys {
		at[g+1] += at[g]
	}
	es := make([]Entry, len(firsts))
	fill := slices.Clone(at[:len(groups.Keys)])
	for i, n := range groupOf {
		es[fill[n]] = firsts[i]
		fill[n]++
	}
	kvs := make([]ebpf.MapKV, 0, len(es))
	for g := range groups.Keys {
		group := es[at[g]:at[g+1]]
		best := earliestCovering(group, f)
		for i, e := range group {
			kvs = append(kvs, mapkv.KV(key(e.T, l.FixedBits+int(e.T.Len[f])), value(best[i])))
		}
	}
	return kvs
}

// earliestCovering returns, for each of es, distinct tuples that differ
// only in field f, the earliest entry among it and those whose prefix of
// f holds its own. Sorted by address, the shorter prefix first, the
// prefixes that hold an entry are a stack of nested ones before it, each
// with the earliest of it and those that hold it. (Looking each shorter
// prefix up in a map took most of a 1M-rule compile's trie contents.)
func earliestCovering(es []Entry, f ir.Field) []Entry {
	type placed struct {
		value [16]byte // f, masked to its prefix
		bits  uint8
		i     int32
	}
	sorted := make([]placed, len(es))
	for i, e := range es {
		sorted[i] = placed{fieldValue(e.T.Cut(e.T.Len), f), e.T.Len[f], int32(i)}
	}
	slices.SortFunc(sorted, func(a, b placed) int {
		if c := bytes.Compare(a.value[:], b.value[:]); c != 0 {
			return c
		}
		return cmp.Compare(a.bits, b.bits)
	})
	best := make([]Entry, len(es))
	var stack []int32 // indices into es of nested prefixes
	for _, p := range sorted {
		e := es[p.i]
		for len(stack) > 0 && !es[stack[len(stack)-1]].T.Covers(e.T) {
			stack = stack[:len(stack)-1]
		}
		b := e
		if n := len(stack); n > 0 && best[stack[n-1]].ID < b.ID {
			b = best[stack[n-1]]
		}
		best[p.i] = b
		stack = append(stack, p.i)
	}
	return best
}

// fieldValue is field f of t as an array, to key a map by.
func fieldValue(t ir.Tuple, f ir.Field) [16]byte {
	var v [16]byte
	copy(v[:], t.Field(f))
	return v
}

// portArray returns the map of a port array: at every port, the earliest
// rule with a tuple that holds it and what it does; zero (kind 0) where
// none does.
func portArray(t *Table) *ebpf.MapSpec {
	var mem slab
	f := ir.Field(t.LPM)
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
	for _, e := range t.Entries { // the earliest rule first
		lo := int32(binary.BigEndian.Uint16(e.T.Field(f)))
		hi := lo | (1<<(16-e.T.Len[f]) - 1)
		for p := find(lo); p <= hi; p = find(p + 1) {
			k := mem.take(4)
			binary.NativeEndian.PutUint32(k, uint32(p))
			kvs = append(kvs, mapkv.KV(k, ruleValue(&mem, e)))
			next[p] = p + 1
		}
	}
	return &ebpf.MapSpec{
		Name:       t.Name,
		Type:       ebpf.Array,
		KeySize:    4,
		ValueSize:  8,
		MaxEntries: portArraySize,
		Contents:   kvs,
	}
}

// MaxRuns bounds the runs a key of a ranges table may have, and so its
// values' width (PortRanges.Width): the code, and the verifier's work,
// depend on the rules only as far as that.
const MaxRuns = 32

// RunSize is a run's size in a ranges table's value: u16 hi, u16 kind,
// u32 rule.
const RunSize = 8

// RunBits is how many low bits of its field a ranges table's runs cover;
// the key holds the others.
const RunBits = 16

// maxBucketsPerEntry bounds how many keys one entry may span, a prefix
// shorter than the key's part of its field.
const maxBucketsPerEntry = 256

// PortRun is a run of values of the low RunBits of a field, up to Hi,
// that rule id of kind decides, or none (kind 0).
type PortRun struct {
	Hi   uint16
	Kind uint16
	ID   uint32
}

// span is the part of a tuple of rule id in one key: the values lo..hi of
// the low RunBits.
type span struct {
	lo, hi   int
	id, kind uint32
}

// PortRanges is what a ranges table holds.
type PortRanges struct {
	// KeyBits is how many high bits of the field LPM the key holds.
	KeyBits int
	Keys    []ir.Tuple // the tuples cut to the other fields and keyBits
	Runs    [][]PortRun
	// Indexed: the key is the high RunBits of an IPv4 address and
	// nothing else (but a protocol every tuple tests, which the table's
	// guard tests): it is looked up in an array of 2^RunBits block
	// numbers (IndexSpec), then the block of runs in an array of blocks,
	// both inlined by the verifier, where a hash lookup calls a helper
	// and hashes the key: a quarter of a realistic rule set's cost per
	// packet went to three such lookups. The index costs 256 KiB.
	Indexed bool
}

// Width is how many runs every value of the table holds: the most a key
// has, rounded up to a power of two, and at least MinRunsWidth (at most
// MaxRuns). Values sized for MaxRuns were mostly padding (a key has one
// to three runs, most often), in the program's memory and the kernel's.
// The floor keeps the search, and so the program, the same from a few
// rules to many: the most runs a key has grows with the rules, slowly.
func (rs *PortRanges) Width() int {
	most := 1
	for _, runs := range rs.Runs {
		most = max(most, len(runs))
	}
	n := MinRunsWidth
	for n < most {
		n *= 2
	}
	return n
}

// MinRunsWidth is the fewest runs a ranges table's values hold.
const MinRunsWidth = 16

// splitRanges turns every LPM trie on a port, or an IPv4 address, into a
// hash keyed by the other fields and the field's high bits, whose value
// lists the runs of the low 16 bits and the earliest rule of each, for
// the keys with at most MaxRuns runs; the tuples that reach the other
// keys stay in a trie. A hash lookup and a few compares cost the same for
// any number of rules, where a trie grows deeper with its entries: a
// 100,000-rule blocklist or allowlist of port ranges per server made a
// matching packet 3× slower than one rule. A packet's key is in the hash
// with every tuple that reaches it, or every such tuple is in the trie,
// and both return only rules the packet matches: the earliest wins.
func (c *Planner) splitRanges(tables []*Table) []*Table {
	var out []*Table
	for _, t := range tables {
		keyBits := -1
		switch {
		case t.Array || t.LPM < 0:
		case t.LPM == int(ir.FieldDport) || t.LPM == int(ir.FieldSport):
			keyBits = 0
		case c.Program.Family == rules.IPv4:
			keyBits = 32 - RunBits
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
func (c *Planner) ranges(t *Table, keyBits int) ([]*Table, bool) {
	f := ir.Field(t.LPM)
	cut := t.Lens
	cut[f] = uint8(keyBits)
	if cut == [ir.NumFields]uint8{} {
		return nil, false
	}
	width := 8 * f.Width(c.Program.Family)
	// The entries that reach each key, earliest first: the keys are
	// numbered, and at[at[k]:at[k+1]] are key k's entries in reach.
	// (Most entries have a key of their own: the sizes are the
	// entries'. A Go map of the keys' slices was a tenth of a 1M-rule
	// plan.)
	byKey := flatidx.NewNumbers[ir.Tuple](len(t.Entries))
	var keyOf, entryOf []int32 // each entry's keys, in order
	buckets := 0
	for i, e := range t.Entries {
		k := e.T.Cut(cut)
		n := 1
		if int(e.T.Len[f]) < keyBits {
			n = 1 << (keyBits - int(e.T.Len[f]))
		}
		if buckets += n; n > maxBucketsPerEntry || buckets > 4*len(t.Entries)+maxBucketsPerEntry {
			return nil, false
		}
		for j := range n {
			kj := k
			if n > 1 {
				setLow(kj.Field(f)[:width/8], keyBits, int(e.T.Len[f]), j)
				kj.Len[f] = uint8(keyBits)
			}
			n, _ := byKey.Number(kj)
			keyOf, entryOf = append(keyOf, n), append(entryOf, int32(i))
		}
	}
	keys := byKey.Keys
	at := make([]int32, len(keys)+1)
	for _, n := range keyOf {
		at[n+1]++
	}
	for k := range keys {
		at[k+1] += at[k]
	}
	reach := make([]int32, len(keyOf))
	fill := slices.Clone(at[:len(keys)])
	for i, n := range keyOf {
		reach[fill[n]] = entryOf[i]
		fill[n]++
	}
	rs := &PortRanges{KeyBits: keyBits, Keys: make([]ir.Tuple, 0, len(keys)), Runs: make([][]PortRun, 0, len(keys))}
	ranges := &Table{Guard: t.Guard, Lens: t.Lens, LPM: t.LPM, Ranges: rs}
	trie := &Table{Guard: t.Guard, Lens: t.Lens, LPM: t.LPM}
	inTrie := make([]bool, len(t.Entries))
	for ki, k := range keys {
		is := reach[at[ki]:at[ki+1]]
		spans := make([]span, len(is))
		for j, i := range is {
			e := t.Entries[i]
			lo, hi := lowSpan(e.T, f, width)
			if int(e.T.Len[f]) <= keyBits {
				lo, hi = 0, 1<<RunBits-1
			}
			spans[j] = span{lo: lo, hi: hi, id: e.ID, kind: e.Kind}
		}
		runs, ok := runsOf(spans)
		if !ok {
			for _, i := range is {
				inTrie[i] = true
			}
			continue
		}
		rs.Keys = append(rs.Keys, k)
		rs.Runs = append(rs.Runs, runs)
	}
	for i, e := range t.Entries {
		if inTrie[i] {
			trie.Entries = append(trie.Entries, e)
		}
	}
	if len(rs.Keys) > 0 {
		ranges.Entries = t.Entries
		rs.Indexed = keyBits == 32-RunBits && indexable(ranges.RangesKey())
	}
	var out []*Table
	for _, u := range []*Table{ranges, trie} {
		if len(u.Entries) > 0 {
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

// lowSpan is the range of the low RunBits of field f, of width bits, that
// t holds, when its prefix is at least width-RunBits long.
func lowSpan(t ir.Tuple, f ir.Field, width int) (lo, hi int) {
	b := t.Field(f)[width/8-2 : width/8]
	lo = int(b[0])<<8 | int(b[1])
	free := width - int(t.Len[f])
	return lo, lo | (1<<free - 1)
}

// runsOf returns the runs of values that the earliest of spans, which
// come earliest rule first, decide; false when there are more than
// MaxRuns.
func runsOf(spans []span) ([]PortRun, bool) {
	// The spans' ends cut the values into pieces the same spans hold.
	starts := []int{0}
	for _, s := range spans {
		starts = append(starts, s.lo)
		if s.hi < 1<<RunBits-1 {
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
	var runs []PortRun
	for i, o := range owner {
		r := PortRun{Hi: 1<<RunBits - 1}
		if i+1 < len(starts) {
			r.Hi = uint16(starts[i+1] - 1)
		}
		if o >= 0 {
			r.ID, r.Kind = spans[o].id, uint16(spans[o].kind)
		}
		if n := len(runs); n > 0 && runs[n-1].ID == r.ID && runs[n-1].Kind == r.Kind {
			runs[n-1].Hi = r.Hi
			continue
		}
		if len(runs) == MaxRuns {
			return nil, false
		}
		runs = append(runs, r)
	}
	return runs, true
}

// indexable reports whether k, a ranges table's key table, keys by one
// field's high RunBits alone, but for a protocol its entries share.
func indexable(k *Table) bool {
	fields := 0
	for f, n := range k.Lens {
		switch {
		case n == 0:
		case ir.Field(f) == ir.FieldProto:
			if _, ok := k.Proto(); !ok {
				return false
			}
		case n != RunBits:
			return false
		default:
			fields++
		}
	}
	return fields == 1
}

// IndexName is the name of an indexed ranges table's index map.
func (t *Table) IndexName() string { return t.Name + "_idx" }

// IndexSpec returns an indexed ranges table's index: at each value of
// the high RunBits of its field, the number of the key's block of runs
// in the table's map, from 1; 0 where no key is.
func (c *Planner) IndexSpec(t *Table) *ebpf.MapSpec {
	f := ir.Field(t.LPM)
	kvs := make([]ebpf.MapKV, len(t.Ranges.Keys))
	var mem slab
	for i, k := range t.Ranges.Keys {
		kv := mem.take(8)
		binary.NativeEndian.PutUint32(kv, uint32(binary.BigEndian.Uint16(k.Field(f))))
		binary.NativeEndian.PutUint32(kv[4:], uint32(i+1))
		kvs[i] = mapkv.KV(kv[:4:4], kv[4:])
	}
	return &ebpf.MapSpec{
		Name:       t.IndexName(),
		Type:       ebpf.Array,
		KeySize:    4,
		ValueSize:  4,
		MaxEntries: 1 << RunBits,
		Contents:   kvs,
	}
}

// rangesSpec returns a ranges table's map, a hash from its key, or for
// an indexed one an array from the block number, to Width runs; a key
// with fewer repeats its last run, which ends at the last value.
func (c *Planner) rangesSpec(t *Table) *ebpf.MapSpec {
	kvs := c.viewed(t.Name, c.rangesContents(t))
	width := t.Ranges.Width()
	if t.Ranges.Indexed {
		// Block 0, which no key has, stays empty.
		return &ebpf.MapSpec{
			Name:       t.Name,
			Type:       ebpf.Array,
			KeySize:    4,
			ValueSize:  uint32(RunSize * width),
			MaxEntries: uint32(len(kvs) + 1),
			Contents:   kvs,
		}
	}
	return &ebpf.MapSpec{
		Name:       t.Name,
		Type:       ebpf.Hash,
		KeySize:    uint32(c.Layout(t.RangesKey()).Size),
		ValueSize:  uint32(RunSize * width),
		MaxEntries: uint32(len(kvs)),
		Contents:   kvs,
	}
}

// rangesContents is a ranges table's keys, or for an indexed one its
// block numbers, each with Width runs.
func (c *Planner) rangesContents(t *Table) mapkv.Flat {
	width := t.Ranges.Width()
	ks := 4
	if !t.Ranges.Indexed {
		ks = c.Layout(t.RangesKey()).Size
	}
	l := c.Layout(t.RangesKey())
	out := mapkv.NewFlat(ks, RunSize*width, len(t.Ranges.Keys))
	for i, k := range t.Ranges.Keys {
		if t.Ranges.Indexed {
			binary.NativeEndian.PutUint32(out.Key(i), uint32(i+1))
		} else {
			l.put(out.Key(i), k)
		}
		v := out.Value(i)
		runs := t.Ranges.Runs[i]
		for j := range width {
			r := runs[min(j, len(runs)-1)]
			binary.NativeEndian.PutUint16(v[RunSize*j:], r.Hi)
			binary.NativeEndian.PutUint16(v[RunSize*j+2:], r.Kind)
			binary.NativeEndian.PutUint32(v[RunSize*j+4:], r.ID)
		}
	}
	return out
}

// maps is how many maps the table's lookup uses.
func (t *Table) maps() int {
	if t.Ranges != nil && t.Ranges.Indexed {
		return 2
	}
	return 1
}

// cost estimates what the table costs a packet.
func (c *Planner) cost(t *Table) int {
	switch {
	case t.Inline:
		return costInline * len(t.Entries)
	case t.Array:
		return costArray
	case t.Ranges != nil && t.Ranges.Indexed:
		return costIndexed
	case t.Ranges != nil:
		return costRanges
	case t.LPM >= 0:
		return costLPM
	case c.bucketable(t):
		return costBuckets
	}
	return costHash
}

// rangesKey is the table whose key is a ranges table's: its other fields
// and the high bits of its field.
func (t *Table) RangesKey() *Table {
	u := *t
	u.Lens[t.LPM], u.LPM, u.Ranges = uint8(t.Ranges.KeyBits), -1, nil
	return &u
}

// varies reports whether the table's tuples differ in the length of the
// field lpm.
func (t *Table) Varies() bool {
	return slices.ContainsFunc(t.Entries, func(e Entry) bool { return e.T.Len[t.LPM] != t.Entries[0].T.Len[t.LPM] })
}

// proto returns the protocol all of the table's tuples test, if they do.
func (t *Table) Proto() (uint8, bool) {
	if t.Lens[ir.FieldProto] == 0 {
		return 0, false
	}
	p := t.Entries[0].T.Field(ir.FieldProto)[0]
	for _, e := range t.Entries {
		if e.T.Field(ir.FieldProto)[0] != p {
			return 0, false
		}
	}
	return p, true
}
