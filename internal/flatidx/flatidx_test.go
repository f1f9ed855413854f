package flatidx

import (
	"math/rand/v2"
	"testing"
)

// TestIndex checks Insert, Get and Set against a Go map, for an index made
// for fewer keys than it gets (so that it grows), with hashes that collide
// in their low bits and the two hashes that are the same key.
func TestIndex(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, made := range []int{0, 10, 1000, 5000} {
		x := New(made)
		want := make(map[uint64]int32)
		key := func(h uint64) uint64 { return max(h, 1) }
		for i := range 5000 {
			var h uint64
			switch i % 4 {
			case 0:
				h = rng.Uint64()
			case 1:
				h = rng.Uint64N(64) << 40 // equal low bits: probes run on
			case 2:
				h = rng.Uint64N(2) // 0 and 1
			default:
				h = rng.Uint64N(200)
			}
			v := int32(i)
			if i%7 == 0 {
				x.Set(h, v)
				want[key(h)] = v
				continue
			}
			got, had := x.Insert(h, v)
			w, ok := want[key(h)]
			if !ok {
				want[key(h)], w = v, v
			}
			if had != ok || got != w {
				t.Fatalf("made for %d: Insert(%#x, %d) = %d, %v; want %d, %v", made, h, v, got, had, w, ok)
			}
		}
		for h, w := range want {
			if got, ok := x.Get(h); !ok || got != w {
				t.Fatalf("made for %d: Get(%#x) = %d, %v; want %d", made, h, got, ok, w)
			}
		}
		for range 1000 {
			h := rng.Uint64() | 1<<63
			if _, ok := want[h]; ok {
				continue
			}
			if got, ok := x.Get(h); ok {
				t.Fatalf("made for %d: Get(%#x) = %d for a key never inserted", made, h, got)
			}
		}
		if x.n != len(want) || 2*x.n > len(x.keys) {
			t.Fatalf("made for %d: %d keys in %d slots; want %d keys, at most half full", made, x.n, len(x.keys), len(want))
		}
	}
}
