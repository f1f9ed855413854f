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
// and reads every entry back: from the MapKVs, and from the flat arrays
// they view when the arrays are given (in two parts), but not from arrays
// they do not view. Contents for a map the collection lacks are an error.
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
	parts := []mapkv.Flat{mapkv.NewFlat(4, 8, counterBatch+5), mapkv.NewFlat(4, 8, n-counterBatch-5)}
	var viewed []ebpf.MapKV
	for p, f := range parts {
		for i := range f.Len() {
			binary.NativeEndian.PutUint32(f.Key(i), uint32(11*i+p))
			binary.NativeEndian.PutUint64(f.Value(i), uint64(5*i+p))
		}
		viewed = append(viewed, f.KVs()...)
	}
	// Arrays of other entries than the contents': not written.
	other := mapkv.NewFlat(4, 8, n)
	for i := range other.Len() {
		binary.NativeEndian.PutUint32(other.Key(i), uint32(i))
		binary.NativeEndian.PutUint64(other.Value(i), 99)
	}
	flats := map[string][]mapkv.Flat{"flat": parts, "array": {other}}
	spec := &ebpf.CollectionSpec{Maps: map[string]*ebpf.MapSpec{
		"hash":  {Type: ebpf.Hash, KeySize: 4, ValueSize: 8, MaxEntries: uint32(n)},
		"array": {Type: ebpf.Array, KeySize: 4, ValueSize: 8, MaxEntries: uint32(n)},
		"flat":  {Type: ebpf.Hash, KeySize: 4, ValueSize: 8, MaxEntries: uint32(n)},
	}}
	coll, err := ebpf.NewCollection(spec)
	if err != nil {
		t.Fatal(err)
	}
	defer coll.Close()
	contents := map[string][]ebpf.MapKV{"hash": kvs(true), "array": kvs(false), "flat": viewed}
	flat := func(name string) []mapkv.Flat { return flats[name] }
	if err := fillContents(coll, contents, flat); err != nil {
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
	if err := fillContents(coll, contents, flat); err == nil {
		t.Error("contents of a map not in the collection written")
	}
}

// TestFlatViews: arrays are taken for the contents only when those view
// them, first entry to last, in order.
func TestFlatViews(t *testing.T) {
	a, b := mapkv.NewFlat(4, 8, 3), mapkv.NewFlat(4, 8, 2)
	kvs := append(a.KVs(), b.KVs()...)
	if !viewsOf([]mapkv.Flat{a, b}, kvs, 4, 8) {
		t.Error("two arrays and their views: not taken")
	}
	for name, c := range map[string]struct {
		flats  []mapkv.Flat
		kvs    []ebpf.MapKV
		ks, vs int
	}{
		"none":          {nil, kvs, 4, 8},
		"out of order":  {[]mapkv.Flat{b, a}, kvs, 4, 8},
		"one missing":   {[]mapkv.Flat{a}, kvs, 4, 8},
		"one too many":  {[]mapkv.Flat{a, b, b}, kvs, 4, 8},
		"other sizes":   {[]mapkv.Flat{a, b}, kvs, 4, 4},
		"copies":        {[]mapkv.Flat{a, b}, append(mapkv.NewFlat(4, 8, 3).KVs(), b.KVs()...), 4, 8},
		"last replaced": {[]mapkv.Flat{a, b}, append(kvs[:4:4], mapkv.KV(make([]byte, 4), make([]byte, 8))), 4, 8},
	} {
		if viewsOf(c.flats, c.kvs, c.ks, c.vs) {
			t.Errorf("%s: taken", name)
		}
	}
}
