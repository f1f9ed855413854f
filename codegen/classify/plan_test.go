package classify

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"reflect"
	"slices"
	"strings"
	"testing"

	"bpfwall/internal/mapkv"
	"bpfwall/ir"
	"bpfwall/parser/iptables"
	"bpfwall/rules"
)

// TestRunsOf checks the runs of random spans against the earliest span
// that holds each value, and that more runs than a value holds are
// refused.
func TestRunsOf(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for trial := range 500 {
		spans := make([]span, 1+rng.IntN(24))
		for i := range spans {
			// Prefixes, mostly long, as tuples make.
			bits := 16 - rng.IntN(9)
			if rng.IntN(10) == 0 {
				bits = rng.IntN(17)
			}
			lo := rng.IntN(1<<16) &^ (1<<(16-bits) - 1)
			spans[i] = span{lo: lo, hi: lo | (1<<(16-bits) - 1), id: uint32(i), kind: uint32(1 + rng.IntN(4))}
		}
		var want []PortRun
		for v := range 1 << 16 {
			r := PortRun{Hi: uint16(v)}
			if i := slices.IndexFunc(spans, func(s span) bool { return s.lo <= v && v <= s.hi }); i >= 0 {
				r.ID, r.Kind = spans[i].id, uint16(spans[i].kind)
			}
			if n := len(want); n > 0 && want[n-1].ID == r.ID && want[n-1].Kind == r.Kind {
				want[n-1].Hi = r.Hi
				continue
			}
			want = append(want, r)
		}
		got, ok := runsOf(spans)
		if ok != (len(want) <= MaxRuns) {
			t.Fatalf("trial %d: %d runs, ok = %v", trial, len(want), ok)
		}
		if ok && !slices.Equal(got, want) {
			t.Fatalf("trial %d: got runs %v, want %v", trial, got, want)
		}
	}
}

// TestSetLow checks that setLow numbers the keys an entry spans.
func TestSetLow(t *testing.T) {
	b := []byte{0xab, 0xcd, 0xef, 0x12}
	setLow(b, 16, 12, 0x5)
	if want := []byte{0xab, 0xc5, 0xef, 0x12}; !slices.Equal(b, want) {
		t.Errorf("got % x, want % x", b, want)
	}
	setLow(b, 9, 6, 0x6)
	if want := []byte{0xab, 0x45, 0xef, 0x12}; !slices.Equal(b, want) {
		t.Errorf("got % x, want % x", b, want)
	}
}

// TestEarliestCovering checks the stack sweep against its definition:
// for each entry, the earliest of it and the entries whose prefix holds
// it, on random nested and disjoint prefixes of addresses and ports.
func TestEarliestCovering(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for trial := range 400 {
		f, width := ir.FieldSrc, 32
		switch trial % 3 {
		case 1:
			width = 128
		case 2:
			f, width = ir.FieldDport, 16
		}
		seen := make(map[ir.Tuple]bool)
		var es []Entry
		id := uint32(0)
		for range 1 + rng.IntN(80) {
			var tp ir.Tuple
			tp.Len[ir.FieldProto] = 8
			tp.Field(ir.FieldProto)[0] = 6
			v := tp.Field(f)[:width/8]
			// Few distinct addresses, so that prefixes nest.
			v[0] = byte(rng.IntN(4))
			v[len(v)-1] = byte(rng.IntN(4))
			bits := rng.IntN(width + 1)
			for i := range v {
				switch {
				case bits >= 8*(i+1):
				case bits <= 8*i:
					v[i] = 0
				default:
					v[i] &= 0xff << (8 - (bits - 8*i))
				}
			}
			tp.Len[f] = uint8(bits)
			if seen[tp] {
				continue
			}
			seen[tp] = true
			if rng.IntN(3) > 0 {
				id++ // some rules have several tuples
			}
			es = append(es, Entry{T: tp, ID: id, Kind: 1 + id%3})
		}
		got := earliestCovering(es, f)
		for i, e := range es {
			want := e
			for _, o := range es {
				if o.ID < want.ID && o.T.Len[f] < e.T.Len[f] && o.T.Covers(e.T) {
					want = o
				}
			}
			if got[i].ID != want.ID || got[i].Kind != want.Kind {
				t.Fatalf("trial %d, entry %d (%s, rule %d): got rule %d, want %d", trial, i, ir.TupleString(rules.IPv6, e.T), e.ID, got[i].ID, want.ID)
			}
		}
	}
}

// TestIndexedRanges splits tries of IPv4 sources into ranges tables and
// reads every probe's rule back through the index and the blocks, as
// the program does: the earliest entry that holds the address, or none.
// A table whose tuples test different protocols keeps its hash.
func TestIndexedRanges(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	c := &Planner{Program: &ir.Program{Family: rules.IPv4}}
	for trial := range 60 {
		protos := []byte{0}
		switch trial % 3 {
		case 1:
			protos = []byte{6}
		case 2:
			protos = []byte{6, 17}
		}
		tb := &Table{LPM: int(ir.FieldSrc)}
		seen := make(map[ir.Tuple]bool)
		for id := range uint32(1 + rng.IntN(200)) {
			var tp ir.Tuple
			if p := protos[rng.IntN(len(protos))]; p != 0 {
				tp.Len[ir.FieldProto] = 8
				tp.Field(ir.FieldProto)[0] = p
			}
			bits := 16 + rng.IntN(17)
			addr := uint32(rng.IntN(8))<<16 | uint32(rng.IntN(1<<16))
			addr &^= 1<<(32-bits) - 1
			binary.BigEndian.PutUint32(tp.Field(ir.FieldSrc), addr)
			tp.Len[ir.FieldSrc] = uint8(bits)
			if !seen[tp] {
				seen[tp] = true
				tb.Entries = append(tb.Entries, Entry{T: tp, ID: id, Kind: 1 + id%3})
			}
		}
		tb.Lens = tb.Entries[0].T.Len
		tb.Lens[ir.FieldSrc] = 32
		out, ok := c.ranges(tb, 32-RunBits)
		if !ok || out[0].Ranges == nil {
			t.Fatalf("trial %d: no ranges table", trial)
		}
		rt := out[0]
		// The keys with too many runs go to a trie, with all their
		// entries.
		inTrie := make(map[ir.Tuple]bool)
		if len(out) > 1 {
			for _, e := range out[1].Entries {
				inTrie[e.T] = true
			}
		}
		if _, want := rt.Proto(); rt.Ranges.Indexed != (want || protos[0] == 0) {
			t.Fatalf("trial %d, protocols %v: indexed %v", trial, protos, rt.Ranges.Indexed)
		}
		if !rt.Ranges.Indexed {
			continue
		}
		rt.Name = "cls"
		index := make(map[uint32]uint32)
		for _, kv := range c.IndexSpec(rt).Contents {
			index[binary.NativeEndian.Uint32(mapkv.MustOf(kv.Key))] = binary.NativeEndian.Uint32(mapkv.MustOf(kv.Value))
		}
		spec := c.rangesSpec(rt)
		blocks := make(map[uint32][]byte)
		for _, kv := range spec.Contents {
			k := binary.NativeEndian.Uint32(mapkv.MustOf(kv.Key))
			if k == 0 || k >= spec.MaxEntries {
				t.Fatalf("trial %d: block %d of %d", trial, k, spec.MaxEntries)
			}
			blocks[k] = mapkv.MustOf(kv.Value)
		}
		for range 2000 {
			addr := uint32(rng.IntN(9))<<16 | uint32(rng.IntN(1<<16))
			var want Entry
			for _, e := range rt.Entries {
				bits := e.T.Len[ir.FieldSrc]
				if !inTrie[e.T] && binary.BigEndian.Uint32(e.T.Field(ir.FieldSrc))^addr < 1<<(32-bits) {
					want = e
					break
				}
			}
			var got PortRun
			if blk := index[addr>>16]; blk != 0 {
				v := blocks[blk]
				for j := 0; j < len(v); j += RunSize {
					if uint32(binary.NativeEndian.Uint16(v[j:])) >= addr&0xffff {
						got = PortRun{Kind: binary.NativeEndian.Uint16(v[j+2:]), ID: binary.NativeEndian.Uint32(v[j+4:])}
						break
					}
				}
			}
			if uint32(got.Kind) != want.Kind || got.Kind != 0 && got.ID != want.ID {
				t.Fatalf("trial %d, %#x: got rule %d kind %d, want %d kind %d", trial, addr, got.ID, got.Kind, want.ID, want.Kind)
			}
		}
	}
}

// TestBuckets builds bucket arrays of random keys and looks every key,
// and keys not stored, up as the program does: hash, then the slots of
// the two buckets, from the table's base in its pool. Each stored key
// finds its own rule, in one slot only; no other key finds one. The
// tables of one slot size share a pool, each in buckets of its own.
func TestBuckets(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	v4 := &Planner{Program: &ir.Program{Family: rules.IPv4}}
	v6 := &Planner{Program: &ir.Program{Family: rules.IPv6}}
	for trial := range 60 {
		c := v4
		tb := &Table{Name: "cls", LPM: -1}
		tb.Lens[ir.FieldSrc] = 32
		switch trial % 3 {
		case 1:
			tb.Lens[ir.FieldProto], tb.Lens[ir.FieldDport] = 8, 16 // a 7-byte key, padded
		case 2:
			c = v6 // a 32-byte key
			tb.Lens[ir.FieldSrc], tb.Lens[ir.FieldDst] = 128, 128
		}
		n := 1 + rng.IntN(3000)
		if trial < 3 {
			n = trial + 1
		}
		stored := make(map[[MaxBucketKey]byte]uint32)
		random := func() ir.Tuple {
			var tp ir.Tuple
			tp.Len = tb.Lens
			// Few distinct values, so that keys share words.
			binary.BigEndian.PutUint32(tp.Field(ir.FieldSrc), uint32(rng.IntN(4*n)))
			if tb.Lens[ir.FieldDst] > 0 {
				tp.Field(ir.FieldDst)[15] = byte(rng.IntN(2))
			}
			if tb.Lens[ir.FieldProto] > 0 {
				tp.Field(ir.FieldProto)[0] = byte(6 + 11*rng.IntN(2))
				binary.BigEndian.PutUint16(tp.Field(ir.FieldDport), uint16(rng.IntN(4)))
			}
			return tp
		}
		keyOf := func(tp ir.Tuple) [MaxBucketKey]byte {
			var k [MaxBucketKey]byte
			copy(k[:], c.Layout(tb).Key(tp))
			return k
		}
		for id := range uint32(n) {
			// Each tuple once, for its earliest rule, as plan keeps it.
			tp := random()
			if _, ok := stored[keyOf(tp)]; !ok {
				stored[keyOf(tp)] = id
				tb.Entries = append(tb.Entries, Entry{T: tp, ID: id, Kind: 1 + id%3})
			}
		}
		tb.Buckets = &Buckets{}
		var before uint32 // the pool's buckets before this table's
		if p := c.pools[c.bucketSlot(tb)]; p != nil {
			before = p.spec.MaxEntries
		}
		bk := c.BucketsOf(tb)
		spec := c.MapSpec(tb)
		if bk.Base != before || spec.Name != bk.Map || spec.MaxEntries != before+1<<bk.Bits || int(spec.ValueSize) != BucketSlots*bk.SlotSize() {
			t.Fatalf("trial %d: map %s of %d × %d bytes for %d buckets of %d from %d in %s", trial, spec.Name, spec.MaxEntries, spec.ValueSize, 1<<bk.Bits, bk.SlotSize(), bk.Base, bk.Map)
		}
		buckets := make(map[uint32][]byte)
		for _, kv := range spec.Contents {
			buckets[binary.NativeEndian.Uint32(mapkv.MustOf(kv.Key))] = mapkv.MustOf(kv.Value)
		}
		lookup := func(k [MaxBucketKey]byte) (ids []uint32) {
			words := make([]uint32, bk.Words)
			for j := range words {
				words[j] = binary.NativeEndian.Uint32(k[4*j:])
			}
			b1, b2 := BucketIndexes(BucketHash(bk.Seed, words), bk.Bits)
			for _, b := range []uint32{b1, b2} {
				v := buckets[bk.Base+b]
				for s := 0; v != nil && s < BucketSlots; s++ {
					slot := v[s*bk.SlotSize():]
					same := true
					for j, w := range words {
						same = same && binary.NativeEndian.Uint32(slot[4*j:]) == w
					}
					if same && binary.NativeEndian.Uint32(slot[4*bk.Words+4:]) != 0 {
						ids = append(ids, binary.NativeEndian.Uint32(slot[4*bk.Words:]))
					}
				}
				if b2 == b1 {
					break
				}
			}
			return ids
		}
		for k, id := range stored {
			if got := lookup(k); len(got) != 1 || got[0] != id {
				t.Fatalf("trial %d: key % x finds rules %v, want [%d]", trial, k, got, id)
			}
		}
		for range 1000 {
			k := keyOf(random())
			if _, ok := stored[k]; !ok {
				if got := lookup(k); len(got) != 0 {
					t.Fatalf("trial %d: key % x, not stored, finds rules %v", trial, k, got)
				}
			}
		}
	}
}

// TestResidualKey: a lone residual match is keyed by its value when its
// kind can key a map, and by its text otherwise; equal matches get one
// key, different ones different keys, and every key names its matches.
func TestResidualKey(t *testing.T) {
	type withIface struct{ M ir.Match }
	for _, tc := range []struct {
		t    reflect.Type
		want bool
	}{
		{reflect.TypeOf(ir.TCPFlags{}), true},
		{reflect.TypeOf(ir.AddrSet{}), false},
		{reflect.TypeOf(withIface{}), false},
		{reflect.TypeOf([2]withIface{}), false},
		{reflect.TypeOf([2]ir.TCPFlags{}), true},
	} {
		if got := hashable(tc.t); got != tc.want {
			t.Errorf("hashable(%v) = %v, want %v", tc.t, got, tc.want)
		}
	}
	var c Planner
	syn := []ir.Match{ir.TCPFlags{Mask: 0x17, Comp: 0x02}}
	set := []ir.Match{ir.AddrSet{Set: "a", Entries: []ir.SetEntry{{}}}}
	keys := map[string]bool{}
	for _, ms := range [][]ir.Match{
		syn, {ir.TCPFlags{Mask: 0x17, Comp: 0x02}}, {ir.TCPFlags{Mask: 0x17, Comp: 0x02, Neg: true}},
		set, {ir.AddrSet{Set: "b", Entries: []ir.SetEntry{{}}}}, append(syn, set...),
	} {
		k := c.residualKey(ms)
		keys[k] = true
		if got := c.Residual(k); !reflect.DeepEqual(got, ms) {
			t.Errorf("Residual(residualKey(%v)) = %v", ms, got)
		}
	}
	if len(keys) != 5 {
		t.Errorf("%d keys for 5 different residuals (two alike): %v", len(keys), keys)
	}
}

// TestSortByRule checks sortByRule against a stable sort, on entries made
// of runs in rule order as planning merges them, and on random ones.
func TestSortByRule(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	byID := func(a, b Entry) int { return int(a.ID) - int(b.ID) }
	for n := range 400 {
		var es []Entry
		runs := 1 + rng.IntN(9)
		if n%4 == 0 {
			runs = rng.IntN(60) // many short runs, and none
		}
		for r := range runs {
			id := uint32(rng.IntN(20))
			for range rng.IntN(30) {
				id += uint32(rng.IntN(3)) // repeated rules
				es = append(es, Entry{ID: id, Kind: uint32(r), Need: uint16(len(es))})
			}
		}
		want := slices.Clone(es)
		slices.SortStableFunc(want, byID)
		sortByRule(es)
		if !slices.Equal(es, want) {
			t.Fatalf("case %d: got\n%v\nwant\n%v", n, es, want)
		}
	}
}

// TestLPMContents looks packets up in a trie's contents as the kernel
// does (the longest stored prefix of the key) and checks the rule found
// against the earliest entry that holds the packet: entries of nested
// prefixes of the varying field, in groups of other fields, repeated
// tuples among them.
func TestLPMContents(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	c := &Planner{Program: &ir.Program{Family: rules.IPv4}}
	for trial := range 100 {
		tb := &Table{LPM: int(ir.FieldSrc)}
		tb.Lens[ir.FieldSrc], tb.Lens[ir.FieldProto], tb.Lens[ir.FieldDport] = 32, 8, 16
		random := func(bits int) ir.Tuple {
			var tp ir.Tuple
			tp.Len = tb.Lens
			tp.Len[ir.FieldSrc] = uint8(bits)
			addr := uint32(rng.IntN(4))<<30 | uint32(rng.IntN(4))
			if bits < 32 {
				addr &^= 1<<(32-bits) - 1
			}
			binary.BigEndian.PutUint32(tp.Field(ir.FieldSrc), addr)
			tp.Field(ir.FieldProto)[0] = byte(6 + 11*rng.IntN(2))
			binary.BigEndian.PutUint16(tp.Field(ir.FieldDport), uint16(1+rng.IntN(2)))
			return tp
		}
		id := uint32(0)
		for range 1 + rng.IntN(60) {
			if rng.IntN(3) > 0 {
				id++
			}
			tb.Entries = append(tb.Entries, Entry{T: random(rng.IntN(33)), ID: id, Kind: 1 + id%3})
		}
		l := c.Layout(tb)
		key := func(tp ir.Tuple, plen int) []byte {
			k := l.Key(tp)
			binary.NativeEndian.PutUint32(k, uint32(plen))
			return k
		}
		kvs := c.lpmContents(tb, l, key, func(e Entry) []byte { return ruleValue(new(slab), e) })
		fixed := 4 + l.FixedBits/8
		for range 200 {
			pkt := random(32)
			pk := l.Key(pkt)
			best, found := -1, uint32(0)
			for _, kv := range kvs {
				k := mapkv.MustOf(kv.Key)
				plen := int(binary.NativeEndian.Uint32(k)) - l.FixedBits
				if !bytes.Equal(k[4:fixed], pk[4:fixed]) || plen <= best {
					continue
				}
				a, b := binary.BigEndian.Uint32(k[fixed:]), binary.BigEndian.Uint32(pk[fixed:])
				if plen == 0 || a>>(32-plen) == b>>(32-plen) {
					best, found = plen, binary.NativeEndian.Uint32(mapkv.MustOf(kv.Value))
				}
			}
			want := -1
			for _, e := range tb.Entries {
				if e.T.Covers(pkt) {
					want = int(e.ID)
					break
				}
			}
			if (best < 0) != (want < 0) || best >= 0 && int(found) != want {
				t.Fatalf("trial %d: packet %v finds rule %d (prefix %d), want %d\nentries %v", trial, pkt, found, best, want, tb.Entries)
			}
		}
	}
}

// TestCandidates checks a table's candidates against their definition:
// per key, in rule order, the entries up to the first that needs no
// residual, without one whose need an earlier candidate has; too many
// candidates for a key make the table fail.
func TestCandidates(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	c := &Planner{Program: &ir.Program{Family: rules.IPv6}}
	outcomes := map[bool]int{}
	for trial := range 200 {
		tb := &Table{LPM: -1}
		tb.Lens[ir.FieldSrc], tb.Lens[ir.FieldDport] = 128, 16
		for id := range uint32(1 + rng.IntN(300)) {
			var tp ir.Tuple
			tp.Len = tb.Lens
			tp.Field(ir.FieldSrc)[15] = byte(rng.IntN(6))
			tp.Field(ir.FieldSrc)[0] = byte(rng.IntN(2))
			binary.BigEndian.PutUint16(tp.Field(ir.FieldDport), uint16(rng.IntN(3)))
			// Six needs: some keys have more than MaxCandidates.
			tb.Entries = append(tb.Entries, Entry{T: tp, ID: id, Kind: 1, Need: uint16(rng.IntN(6))})
		}
		// The definition, key by key.
		l := c.Layout(tb)
		var order []string
		want := map[string][]Entry{}
		tooMany := false
		for _, e := range tb.Entries {
			k := string(l.Key(e.T))
			list, seen := want[k]
			if !seen {
				order = append(order, k)
			}
			if slices.ContainsFunc(list, func(o Entry) bool { return o.Need == 0 || o.Need == e.Need }) {
				continue
			}
			if len(list) == MaxCandidates {
				tooMany = true
				break
			}
			want[k] = append(list, e)
		}
		got, ok := c.candidates(tb)
		outcomes[ok]++
		if ok == tooMany {
			t.Fatalf("trial %d: candidates ok = %v, want %v", trial, ok, !tooMany)
		}
		if !ok {
			continue
		}
		if got.Len() != len(order) {
			t.Fatalf("trial %d: %d keys, want %d", trial, got.Len(), len(order))
		}
		for i, k := range order {
			// The map's value: each candidate's rule (u32), kind and
			// need (u16s); a shorter list repeats its last.
			var v []byte
			list := want[k]
			for j := range MaxCandidates {
				e := list[min(j, len(list)-1)]
				v = binary.NativeEndian.AppendUint32(v, e.ID)
				v = binary.NativeEndian.AppendUint16(v, uint16(e.Kind))
				v = binary.NativeEndian.AppendUint16(v, e.Need)
			}
			if string(got.Key(i)) != k || !bytes.Equal(got.Value(i), v) {
				t.Fatalf("trial %d: key %d is %x with %x, want %x with %x", trial, i, got.Key(i), got.Value(i), k, v)
			}
		}
	}
	if outcomes[true] < 20 || outcomes[false] < 20 {
		t.Errorf("tables with and without too many candidates: %v", outcomes)
	}
}

// TestSegmentTables: a run whose rules differ in many residuals (pairs
// of interface prefixes, in and out) is planned in parts of at most
// MaxSegmentTables tables each; planned whole it needs over a thousand.
func TestSegmentTables(t *testing.T) {
	var b strings.Builder
	b.WriteString("*filter\n:INPUT ACCEPT [0:0]\n:FORWARD ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n")
	rng := rand.New(rand.NewPCG(1, 2))
	pairs := make(map[[2]int]bool)
	for i := range 4000 {
		in, out := rng.IntN(30), rng.IntN(30)
		pairs[[2]int{in, out}] = true
		a := netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)})
		if i%2 == 0 {
			fmt.Fprintf(&b, "-A FORWARD -i vl%dx+ -s %s -j DROP\n", in, a)
			continue
		}
		fmt.Fprintf(&b, "-A FORWARD -i vl%dx+ -o vl%dx+ -d %s -p tcp -m tcp --dport %d -j ACCEPT\n", in, out, a, 1+rng.IntN(65534))
	}
	b.WriteString("COMMIT\n")
	if len(pairs) <= MaxSegmentTables {
		t.Fatalf("%d pairs of interfaces: the run fits one segment", len(pairs))
	}
	rs, err := iptables.Parse("ifaces", []byte(b.String()), iptables.Options{})
	if err != nil {
		t.Fatal(err)
	}
	p, err := ir.Lower(rs, ir.LowerOptions{Table: "filter", Chain: "FORWARD"})
	if err != nil {
		t.Fatal(err)
	}
	c := &Planner{Program: p, Pure: func(ir.Match) bool { return true }}
	for _, r := range p.Chains[0].Rules {
		if !c.Eligible(r) {
			t.Fatalf("rule %d is not eligible", r.ID)
		}
	}
	segs := 0
	for _, u := range c.Run(p.Chains[0].Rules) {
		if u.Seg == nil {
			continue
		}
		segs++
		if n := len(u.Seg.Tables); n > MaxSegmentTables {
			t.Errorf("a segment of %d rules has %d tables", len(u.Seg.Rules), n)
		}
	}
	t.Logf("%d segments", segs)
}
