// Package flatidx is a hash index for the compiler's large one-shot
// lookups: a fixed-size, open-addressed table from 64-bit hashes to int32
// values, in two flat arrays. A lookup that misses, as most do, reads one
// cache line of keys; a Go map reads a control word and a slot. And a
// bitmap of a few bits per key, small enough to stay in cache, turns most
// lookups of absent keys away before they read the keys at all: the
// shadow pass's tuple space search misses in most of the shapes it
// probes. Callers hash their keys themselves (hash/maphash) and
// tell keys that only share a hash apart by what the values point to.
package flatidx

// Index maps hashes to values. Hashes 0 and 1 are the same key.
type Index struct {
	n    int // keys held
	mask uint64
	keys []uint64 // 0: empty
	vals []int32
	// seen has a bit set for every key held, at its hash's high bits.
	seen []uint64
}

// New returns an index for n keys, at most half full with them; it grows
// if given more.
func New(n int) *Index {
	size := 16
	for size < 2*n {
		size *= 2
	}
	return &Index{mask: uint64(size - 1), keys: make([]uint64, size), vals: make([]int32, size), seen: make([]uint64, size/16)}
}

// filterBit returns the word and bit of key h in seen: 4 bits per slot,
// 8 or more per key.
func (x *Index) filterBit(h uint64) (int, uint64) {
	b := (h >> 32) & (x.mask<<2 | 3)
	return int(b >> 6), 1 << (b & 63)
}

// slot returns where key h is, or the empty slot where it would go.
func (x *Index) slot(h uint64) uint64 {
	h = max(h, 1)
	i := h & x.mask
	for x.keys[i] != 0 && x.keys[i] != h {
		i = (i + 1) & x.mask
	}
	return i
}

// Get returns the value of key h.
func (x *Index) Get(h uint64) (int32, bool) {
	if w, b := x.filterBit(max(h, 1)); x.seen[w]&b == 0 {
		return 0, false
	}
	i := x.slot(h)
	return x.vals[i], x.keys[i] != 0
}

// Insert gives key h the value v when h has none, and returns the value
// h has and whether it had one already.
func (x *Index) Insert(h uint64, v int32) (int32, bool) {
	i := x.slot(h)
	if x.keys[i] != 0 {
		return x.vals[i], true
	}
	if 2*(x.n+1) > len(x.keys) {
		x.grow()
		i = x.slot(h)
	}
	x.keys[i], x.vals[i] = max(h, 1), v
	w, b := x.filterBit(x.keys[i])
	x.seen[w] |= b
	x.n++
	return v, false
}

// Set gives key h the value v.
func (x *Index) Set(h uint64, v int32) {
	if _, had := x.Insert(h, v); had {
		x.vals[x.slot(h)] = v
	}
}

func (x *Index) grow() {
	old := *x
	*x = *New(2 * old.n)
	for i, h := range old.keys {
		if h != 0 {
			x.Insert(h, old.vals[i])
		}
	}
}
