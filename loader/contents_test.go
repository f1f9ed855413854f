package loader

import (
	"testing"

	"github.com/cilium/ebpf"
)

// TestDeferContents: only large maps of byte keys and values, not carried
// over, are written in batches after the collection is made; the spec
// the caller gave is left as it was.
func TestDeferContents(t *testing.T) {
	bytesKV := func(n int) []ebpf.MapKV {
		out := make([]ebpf.MapKV, n)
		for i := range out {
			out[i] = ebpf.MapKV{Key: []byte{byte(i), byte(i >> 8), 0, 0}, Value: []byte{1, 0, 0, 0, 0, 0, 0, 0}}
		}
		return out
	}
	typed := make([]ebpf.MapKV, batchContents)
	for i := range typed {
		typed[i] = ebpf.MapKV{Key: uint32(i), Value: uint64(i)}
	}
	spec := &ebpf.CollectionSpec{Maps: map[string]*ebpf.MapSpec{
		"large":    {Type: ebpf.Hash, KeySize: 4, ValueSize: 8, MaxEntries: 1024, Contents: bytesKV(batchContents)},
		"small":    {Type: ebpf.Hash, KeySize: 4, ValueSize: 8, MaxEntries: 1024, Contents: bytesKV(batchContents - 1)},
		"typed":    {Type: ebpf.Array, KeySize: 4, ValueSize: 8, MaxEntries: 1024, Contents: typed},
		"carried":  {Type: ebpf.Hash, KeySize: 4, ValueSize: 8, MaxEntries: 1024, Contents: bytesKV(batchContents)},
		"readonly": {Type: ebpf.Array, KeySize: 4, ValueSize: 8, MaxEntries: 1024, Flags: 1 << 7, Contents: bytesKV(batchContents)},
	}}
	out, deferred := deferContents(spec, map[string]*ebpf.Map{"carried": new(ebpf.Map)})
	if len(deferred) != 1 || len(deferred["large"]) != batchContents {
		t.Fatalf("deferred %d maps: %v", len(deferred), keys(deferred))
	}
	if out.Maps["large"].Contents != nil || spec.Maps["large"].Contents == nil {
		t.Error("the deferred map's contents stay in the spec returned, or left the caller's")
	}
	for _, name := range []string{"small", "typed", "carried", "readonly"} {
		if len(out.Maps[name].Contents) == 0 {
			t.Errorf("%s: contents taken out", name)
		}
	}
}

func keys[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}
