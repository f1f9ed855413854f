// Package flatidx is a hash index for the compiler's large one-shot
// lookups: an open-addressed table from 64-bit hashes to int32 values, in
// two flat arrays of 4-byte keys and values. A lookup that misses, as most
// do, reads one cache line of keys; a Go map reads a control word and a
// slot. And a bitmap of a few bits per key, small enough to stay in cache,
// turns most lookups of absent keys away before they read the keys at
// all: the shadow pass's tuple space search misses in most of the shapes
// it probes. Callers hash their keys themselves, and tell keys that only
// share a hash apart by what the values point to.
package flatidx

import "hash/maphash"

// Index maps hashes to values. Its key is a hash's high 32 bits: hashes
// that agree in them are the same key, and a caller checks what a value
// points to.
type Index struct {
	n    int      // keys held
	keys []uint32 // 0: empty
	vals []int32
	// seen has a bit set for every key held.
	seen []uint64
}

// New returns an index for n keys, half full with them; it grows if
// given more.
func New(n int) *Index {
	size := max(16, 2*n)
	return &Index{keys: make([]uint32, size), vals: make([]int32, size), seen: make([]uint64, (4*size+63)/64)}
}

// reduce maps x to 0..n-1 (Lemire's multiply-shift): a table of any
// size, where a power of two would double the largest ones.
func reduce(x uint32, n int) int { return int(uint64(x) * uint64(n) >> 32) }

// key returns the key stored for hash h.
func key(h uint64) uint32 { return max(uint32(h>>32), 1) }

// filterBit returns the word and bit of key k in seen: 4 bits per slot,
// 8 or more per key. (The slot and the bit come from the key by two
// multiplies, so that keys near in one are not near in the other.)
func (x *Index) filterBit(k uint32) (int, uint64) {
	b := reduce(k*0x9e3779b9, 64*len(x.seen))
	return b >> 6, 1 << (b & 63)
}

// slot returns where hash h's key is, or the empty slot where it would go.
func (x *Index) slot(h uint64) int {
	k := key(h)
	i := reduce(k*0x85ebca6b, len(x.keys))
	for x.keys[i] != 0 && x.keys[i] != k {
		if i++; i == len(x.keys) {
			i = 0
		}
	}
	return i
}

// Get returns the value of hash h's key.
func (x *Index) Get(h uint64) (int32, bool) {
	if w, b := x.filterBit(key(h)); x.seen[w]&b == 0 {
		return 0, false
	}
	i := x.slot(h)
	return x.vals[i], x.keys[i] != 0
}

// Insert gives hash h's key the value v when it has none, and returns the
// value the key has and whether it had one already.
func (x *Index) Insert(h uint64, v int32) (int32, bool) {
	i := x.slot(h)
	if x.keys[i] != 0 {
		return x.vals[i], true
	}
	if 2*(x.n+1) > len(x.keys) {
		x.grow()
		i = x.slot(h)
	}
	k := key(h)
	x.keys[i], x.vals[i] = k, v
	w, b := x.filterBit(k)
	x.seen[w] |= b
	x.n++
	return v, false
}

// grow doubles the table.
func (x *Index) grow() {
	old := *x
	*x = *New(2 * old.n)
	for i, k := range old.keys {
		if k != 0 {
			x.Insert(uint64(k)<<32, old.vals[i])
		}
	}
}

// Numbers gives distinct keys the numbers 0, 1, ... in the order they are
// first seen, Keys holding them by number: a map from key to number
// without an entry on the heap per key, for sets of a million tuples.
// Keys are found by their hash in an Index; a key that only shares its
// hash's 32 bits with an earlier one goes to an exact map.
type Numbers[K comparable] struct {
	Keys     []K
	seed     maphash.Seed
	index    *Index
	collided map[K]int32
	// hash, when not nil, hashes the keys instead of maphash: a test's,
	// which makes keys share their hash's 32 bits.
	hash func(K) uint64
}

// NewNumbers returns Numbers made for n keys.
func NewNumbers[K comparable](n int) *Numbers[K] {
	return &Numbers[K]{Keys: make([]K, 0, n), seed: maphash.MakeSeed(), index: New(n)}
}

// Number returns k's number, and whether k is new.
func (x *Numbers[K]) Number(k K) (int32, bool) {
	var h uint64
	if x.hash != nil {
		h = x.hash(k)
	} else {
		h = maphash.Comparable(x.seed, k)
	}
	i, had := x.index.Insert(h, int32(len(x.Keys)))
	switch {
	case !had:
		x.Keys = append(x.Keys, k)
		return i, true
	case x.Keys[i] == k:
		return i, false
	}
	if j, ok := x.collided[k]; ok {
		return j, false
	}
	if x.collided == nil {
		x.collided = make(map[K]int32)
	}
	j := int32(len(x.Keys))
	x.collided[k] = j
	x.Keys = append(x.Keys, k)
	return j, true
}
