package classify

import (
	"bpfwall/ir"
	"bpfwall/rules"
	"math/rand/v2"
	"slices"
	"testing"
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
