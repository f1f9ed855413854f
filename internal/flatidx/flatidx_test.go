package flatidx

import (
	"math/rand/v2"
	"testing"
)

// TestIndex checks Insert and Get against a Go map of the keys (a hash's
// high 32 bits), for indexes made for fewer keys than they get, so that
// they grow; with hashes that differ only in their low bits (one key),
// keys that start at the same slot, and key 0, which is key 1.
func TestIndex(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, made := range []int{0, 10, 1000, 5000} {
		x := New(made)
		want := make(map[uint32]int32)
		for i := range 5000 {
			var h uint64
			switch i % 4 {
			case 0:
				h = rng.Uint64()
			case 1:
				h = rng.Uint64N(64)<<32 | rng.Uint64N(1<<32) // few keys
			case 2:
				h = rng.Uint64N(2) << 32 // keys 0 and 1
			default:
				h = rng.Uint64()
				for reduce(key(h)*0x85ebca6b, len(x.keys)) != 0 {
					h = rng.Uint64()
				}
			}
			v := int32(i)
			got, had := x.Insert(h, v)
			w, ok := want[key(h)]
			if !ok {
				want[key(h)], w = v, v
			}
			if had != ok || got != w {
				t.Fatalf("made for %d: Insert(%#x, %d) = %d, %v; want %d, %v", made, h, v, got, had, w, ok)
			}
		}
		for k, w := range want {
			if got, ok := x.Get(uint64(k)<<32 | rng.Uint64N(1<<32)); !ok || got != w {
				t.Fatalf("made for %d: Get of key %#x = %d, %v; want %d", made, k, got, ok, w)
			}
		}
		for range 1000 {
			h := rng.Uint64()
			if _, ok := want[key(h)]; ok {
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

// TestNumbers checks Numbers against a Go map, with maphash and with a
// hash under which pairs of keys share the 32 bits the index keeps, so
// that the exact map for those is used. (By chance, maphash's hashes of
// 250k keys shared them in 96% of runs: a test that relied on it failed
// in the others.)
func TestNumbers(t *testing.T) {
	for _, tc := range []struct {
		name    string
		hash    func(uint64) uint64
		collide bool
	}{
		{"maphash", nil, false},
		{"pairs", func(k uint64) uint64 { return k/2<<32 | k&1 }, true},
	} {
		rng := rand.New(rand.NewPCG(7, 8))
		const n = 400_000
		x := NewNumbers[uint64](n / 4)
		x.hash = tc.hash
		want := make(map[uint64]int32)
		for range n {
			k := rng.Uint64N(n) // repeats
			got, isNew := x.Number(k)
			w, ok := want[k]
			if !ok {
				w = int32(len(want))
				want[k] = w
			}
			if got != w || isNew == ok {
				t.Fatalf("%s: Number(%d) = %d, %v; want %d, %v", tc.name, k, got, isNew, w, !ok)
			}
		}
		for k, w := range want {
			if x.Keys[w] != k {
				t.Fatalf("%s: Keys[%d] = %d, want %d", tc.name, w, x.Keys[w], k)
			}
		}
		if tc.collide && len(x.collided) < len(want)/4 {
			t.Fatalf("%s: %d of %d keys shared their hash's 32 bits with another: the exact map went untested", tc.name, len(x.collided), len(want))
		}
	}
}
