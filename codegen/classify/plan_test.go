package classify

import (
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
