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

// TestNumbers checks Numbers against a Go map, with keys many enough that
// some share the 32 bits of their hashes that the index keeps (about
// n²/2³³ of them), so that the exact map for those is used too.
func TestNumbers(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	const n = 400_000
	x := NewNumbers[uint64](n / 4)
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
			t.Fatalf("Number(%d) = %d, %v; want %d, %v", k, got, isNew, w, !ok)
		}
	}
	for k, w := range want {
		if x.Keys[w] != k {
			t.Fatalf("Keys[%d] = %d, want %d", w, x.Keys[w], k)
		}
	}
	if len(x.collided) == 0 {
		t.Fatalf("no key of %d shared its hash's 32 bits: the exact map went untested", len(want))
	}
}
