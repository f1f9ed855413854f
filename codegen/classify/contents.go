package classify

import (
	"github.com/cilium/ebpf"

	"bpfwall/internal/mapkv"
)

// contents is a table's entries as a map holds them, in two arrays and
// without a header per entry: entry i's key is keys[i*ks:][:ks], its
// value vals[i*vs:][:vs]. A table's contents were an ebpf.MapKV per
// entry, 32 bytes before its key and value, and a table of candidates
// kept a slice of keys and a slice of entries per key besides: at 1M
// rules those were a sixth of the compile's live heap. A bucket array
// is built from contents as they are; only a map that cilium/ebpf
// writes whole gets its MapKVs (kvs), views of the arrays.
type contents struct {
	ks, vs     int
	keys, vals []byte
}

// newContents returns the contents of n entries, zeroed.
func newContents(ks, vs, n int) *contents {
	return &contents{ks: ks, vs: vs, keys: make([]byte, n*ks), vals: make([]byte, n*vs)}
}

func (c *contents) len() int { return len(c.keys) / c.ks }

func (c *contents) key(i int) []byte { return c.keys[i*c.ks : (i+1)*c.ks : (i+1)*c.ks] }

func (c *contents) value(i int) []byte { return c.vals[i*c.vs : (i+1)*c.vs : (i+1)*c.vs] }

// kvs returns the entries as a MapSpec's contents, sharing the arrays.
func (c *contents) kvs() []ebpf.MapKV {
	out := make([]ebpf.MapKV, c.len())
	for i := range out {
		out[i] = mapkv.KV(c.key(i), c.value(i))
	}
	return out
}
