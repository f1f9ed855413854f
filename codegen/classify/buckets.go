package classify

import (
	"encoding/binary"
	"fmt"
	"math/bits"
	"math/rand/v2"
	"slices"

	"github.com/cilium/ebpf"

	"bpfwall/internal/mapkv"
)

// A bucket table is a hash table of the classifier's own, for the exact
// keys, up to MaxBucketKey bytes, of a plain hash, a table of candidates
// or a ranges table that is not indexed: an array of buckets of
// BucketSlots entries, where a key is in one of two buckets (cuckoo
// hashing). The program hashes the key
// (BucketHash) and looks both buckets up in the array, lookups the
// verifier inlines, where a hash map's lookup calls into the kernel,
// which hashes the key with jhash: that call was a third of the cost of
// a packet that one table decides. A miss costs two array lookups and at
// most 2*BucketSlots key compares, whatever the table's size.
const (
	BucketSlots  = 2
	MaxBucketKey = 32 // an IPv6 address pair, or one with ports and protocol
)

// Buckets is how a table's bucket array is laid out and hashed.
type Buckets struct {
	// Bits is log2 of the number of buckets, Seed the hash's start.
	Bits int
	Seed uint64
	// Words is the key's size in u32 words: a slot is the key, then
	// the value a hash would have (a rule and its kind, a table's
	// candidates, or a ranges table's runs), of Value bytes.
	Words, Value int
	// Mark is where in a value a u32 (a u16 with MarkHalf) is not 0 but
	// in an empty slot: a kind, or a first candidate's, or the end of
	// the last run (65535).
	Mark     int
	MarkHalf bool
	// Map is the array the buckets are in, from bucket Base on: the
	// bucket arrays of one slot size share one map (a pool), since a
	// program may have 64 maps and a rule set of many chains has more
	// tables than that.
	Map  string
	Base uint32
	// slot is the slot size plan counted the table's pool for; built is
	// set once the buckets are in their pool.
	slot  int
	built bool
}

// bucketPool is the array the bucket tables of one slot size share.
type bucketPool struct {
	spec *ebpf.MapSpec
}

// pool returns the pool of the bucket tables of slot size slot, made
// the first time.
func (c *Planner) pool(slot int) *bucketPool {
	if p := c.pools[slot]; p != nil {
		return p
	}
	if c.pools == nil {
		c.pools = make(map[int]*bucketPool)
	}
	p := &bucketPool{spec: &ebpf.MapSpec{
		Name:      fmt.Sprintf("%sb%d", c.tablePrefix(), len(c.pools)),
		Type:      ebpf.Array,
		KeySize:   4,
		ValueSize: uint32(BucketSlots * slot),
	}}
	c.pools[slot] = p
	return p
}

// bucketSlot is the slot size of table t's buckets: its key's words and
// the value a hash would have.
func (c *Planner) bucketSlot(t *Table) int {
	words := (c.Layout(KeyTable(t)).Size + 3) / 4
	value := 8 // ruleValue
	switch {
	case t.Ranges != nil:
		value = RunSize * t.Ranges.Width()
	case t.Residuals != nil:
		value = CandidateSize * MaxCandidates
	}
	return 4*words + value
}

// SlotSize is the size of one slot.
func (b *Buckets) SlotSize() int { return 4*b.Words + b.Value }

// The multipliers of BucketHash: odd, with bits spread (from the
// golden ratio and from splitmix64).
const (
	BucketMul  = 0x9e3779b97f4a7c15
	BucketMul2 = 0xbf58476d1ce4e5b9
)

// BucketHash hashes a key's words, native-endian u32s of its bytes, as
// the program does: multiplications carry every bit of h upward, so the
// top bits depend on all the key.
func BucketHash(seed uint64, words []uint32) uint64 {
	h := seed
	for _, w := range words {
		h = (h ^ uint64(w)) * BucketMul
	}
	return h
}

// BucketIndexes are the two buckets a key of hash h may be in.
func BucketIndexes(h uint64, bits int) (uint32, uint32) {
	return uint32(h >> (64 - bits)), uint32((h * BucketMul2) >> (64 - bits))
}

// bucketable reports whether a table's lookup can be a bucket array: a
// hash's, a table of candidates', or a ranges table's that is not
// indexed.
func (c *Planner) bucketable(t *Table) bool {
	switch {
	case t.Array:
		return false
	case t.Ranges != nil:
		if t.Ranges.Indexed {
			return false
		}
	case t.LPM >= 0:
		return false
	}
	return c.Layout(KeyTable(t)).Size <= MaxBucketKey
}

// KeyTable is the table whose layout is t's key: a ranges table's
// RangesKey, or t.
func KeyTable(t *Table) *Table {
	if t.Ranges != nil {
		return t.RangesKey()
	}
	return t
}

// BucketsOf returns the bucket array of a table that has one, building
// it the first time: its layout for the code, and its map.
func (c *Planner) BucketsOf(t *Table) *Buckets {
	if t.Buckets.built {
		return t.Buckets
	}
	var kvs mapkv.Flat
	mark, half := 4, false
	switch {
	case t.Ranges != nil:
		kvs = c.rangesContents(t)
		mark, half = RunSize*(t.Ranges.Width()-1), true
	case t.Residuals != nil:
		kvs = t.cands
	default:
		kvs = c.hashContents(t)
	}
	n := kvs.Len()
	// The keys as the program hashes them: u32 words, padded.
	words := (kvs.KeySize + 3) / 4
	keys := make([]uint32, n*words)
	for i := range n {
		var padded [MaxBucketKey]byte
		copy(padded[:], kvs.Key(i))
		for j := range words {
			keys[i*words+j] = binary.NativeEndian.Uint32(padded[4*j:])
		}
	}
	// Half full at most: two choices of buckets of two slots place such
	// a load at once, almost always.
	nbits := max(1, bits.Len(uint(n-1)))
	rng := rand.New(rand.NewPCG(uint64(n), 1))
	for {
		for try := range 8 {
			seed := uint64(try+1) * BucketMul2
			if slots, ok := cuckoo(keys, words, seed, nbits, rng); ok {
				bk := &Buckets{Bits: nbits, Seed: seed, Words: words, Value: kvs.ValueSize, Mark: mark, MarkHalf: half, built: true}
				if want := t.Buckets.slot; want != 0 && want != bk.SlotSize() {
					panic(fmt.Sprintf("classify: table %s has slots of %d bytes, planned for %d", t.Name, bk.SlotSize(), want))
				}
				pool := c.pool(bk.SlotSize()).spec
				c.noteFlat(pool.Name, bk.addTo(pool, kvs, keys, slots))
				t.Buckets = bk
				return bk
			}
		}
		nbits++
	}
}

// cuckoo places every key, words u32s each in keys, in a slot of one of
// its two buckets, moving keys from full buckets to their other one; it
// returns each slot's key (index+1, 0 for empty), or false when a key
// found no place.
func cuckoo(keys []uint32, words int, seed uint64, nbits int, rng *rand.Rand) ([]int32, bool) {
	key := func(k int32) []uint32 { return keys[int(k)*words : int(k+1)*words] }
	slots := make([]int32, BucketSlots<<nbits)
	place := func(b uint32, k int32) bool {
		for s := range BucketSlots {
			if i := int(b)*BucketSlots + s; slots[i] == 0 {
				slots[i] = k + 1
				return true
			}
		}
		return false
	}
	for i := range len(keys) / words {
		k := int32(i)
		b1, b2 := BucketIndexes(BucketHash(seed, key(k)), nbits)
		if place(b1, k) || place(b2, k) {
			continue
		}
		b := b1
		placed := false
		for range 500 {
			// Evict a random key of b for k, and move it to its
			// other bucket.
			j := int(b)*BucketSlots + rng.IntN(BucketSlots)
			k, slots[j] = slots[j]-1, k+1
			o1, o2 := BucketIndexes(BucketHash(seed, key(k)), nbits)
			if b = o1; b == uint32(j/BucketSlots) {
				b = o2
			}
			if place(b, k) {
				placed = true
				break
			}
		}
		if !placed {
			return nil, false
		}
	}
	return slots, true
}

// addTo adds the bucket array to its pool's map, at the pool's end (Base):
// a value per bucket, the buckets without a key left out (an array starts
// zeroed). It returns the arrays its contents view. The buckets are packed in order; the keys are written in their
// own order, which reads kvs straight through (reading it in the
// buckets' order missed the cache on every key).
func (b *Buckets) addTo(pool *ebpf.MapSpec, kvs mapkv.Flat, keys []uint32, slots []int32) mapkv.Flat {
	vsize := BucketSlots * b.SlotSize()
	nb := 1 << b.Bits
	b.Map, b.Base = pool.Name, pool.MaxEntries
	// packed[bk] is bucket bk's place among the used ones, from 1.
	packed := make([]int32, nb)
	n := int32(0)
	for bk := range nb {
		for s := range BucketSlots {
			if slots[bk*BucketSlots+s] != 0 {
				n++
				packed[bk] = n
				break
			}
		}
	}
	values := make([]byte, int(n)*vsize)
	index := make([]byte, 4*n)
	// The entries go straight into the pool's contents, grown once per
	// table: a slice of them appended after was a third copy.
	pool.Contents = slices.Grow(pool.Contents, int(n))
	for bk, p := range packed {
		if p == 0 {
			continue
		}
		key := index[4*(p-1) : 4*p]
		binary.NativeEndian.PutUint32(key, b.Base+uint32(bk))
		pool.Contents = append(pool.Contents, mapkv.KV(key, values[int(p-1)*vsize:int(p)*vsize]))
	}
	at := make([]int32, kvs.Len()) // each key's slot
	for i, k := range slots {
		if k != 0 {
			at[k-1] = int32(i)
		}
	}
	for k, i := range at {
		bk, s := int(i)/BucketSlots, int(i)%BucketSlots
		slot := values[int(packed[bk]-1)*vsize+s*b.SlotSize():]
		for j, w := range keys[k*b.Words : (k+1)*b.Words] {
			binary.NativeEndian.PutUint32(slot[4*j:], w)
		}
		copy(slot[4*b.Words:b.SlotSize()], kvs.Value(k)) // rule, kind
	}
	pool.MaxEntries += uint32(nb)
	return mapkv.Flat{KeySize: 4, ValueSize: vsize, Keys: index, Values: values}
}
