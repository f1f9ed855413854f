package loader

import (
	"encoding/binary"
	"testing"

	"github.com/cilium/ebpf"

	"bpfwall/internal/mapkv"
	"bpfwall/internal/testenv"
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

// TestFillContents writes a hash and an array in several batches at once,
// and reads every entry back; contents for a map the collection lacks
// are an error.
func TestFillContents(t *testing.T) {
	testenv.RequireRoot(t)
	n := 3*counterBatch + 17
	kvs := func(hash bool) []ebpf.MapKV {
		out := make([]ebpf.MapKV, n)
		for i := range out {
			k := i
			if hash {
				k = 7*i + 1
			}
			key := binary.NativeEndian.AppendUint32(nil, uint32(k))
			out[i] = ebpf.MapKV{Key: key, Value: binary.NativeEndian.AppendUint64(nil, uint64(i)*3)}
		}
		return out
	}
	spec := &ebpf.CollectionSpec{Maps: map[string]*ebpf.MapSpec{
		"hash":  {Type: ebpf.Hash, KeySize: 4, ValueSize: 8, MaxEntries: uint32(n)},
		"array": {Type: ebpf.Array, KeySize: 4, ValueSize: 8, MaxEntries: uint32(n)},
	}}
	coll, err := ebpf.NewCollection(spec)
	if err != nil {
		t.Fatal(err)
	}
	defer coll.Close()
	contents := map[string][]ebpf.MapKV{"hash": kvs(true), "array": kvs(false)}
	if err := fillContents(coll, contents); err != nil {
		t.Fatal(err)
	}
	for name, want := range contents {
		for _, kv := range want {
			var got uint64
			if err := coll.Maps[name].Lookup(kv.Key, &got); err != nil {
				t.Fatalf("%s %x: %v", name, kv.Key, err)
			}
			if got != binary.NativeEndian.Uint64(mapkv.MustOf(kv.Value)) {
				t.Fatalf("%s %x: %d, want %x", name, kv.Key, got, kv.Value)
			}
		}
	}
	contents["missing"] = kvs(false)
	if err := fillContents(coll, contents); err == nil {
		t.Error("contents of a map not in the collection written")
	}
}
