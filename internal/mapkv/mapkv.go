// Package mapkv holds a BPF map's key or value bytes in an
// ebpf.MapKV without an allocation. A []byte in an interface is a slice
// header on the heap: the classifier's contents, hundreds of thousands of
// entries, were two such headers each. Bytes gives a pointer to the bytes
// as an array instead, which an interface holds as it is, and which
// cilium/ebpf writes as those bytes (a pointer to a value of fixed size).
package mapkv

import (
	"reflect"
	"sync"
	"unsafe"

	"github.com/cilium/ebpf"
)

// arrays caches the [n]byte types by n.
var arrays sync.Map // int -> reflect.Type

func arrayOf(n int) reflect.Type {
	if t, ok := arrays.Load(n); ok {
		return t.(reflect.Type)
	}
	t, _ := arrays.LoadOrStore(n, reflect.PointerTo(reflect.ArrayOf(n, reflect.TypeFor[byte]())))
	return t.(reflect.Type)
}

// Bytes returns b as a pointer to a [len(b)]byte sharing b's memory, in
// an interface; an empty b as itself.
func Bytes(b []byte) any {
	if len(b) == 0 {
		return b
	}
	return reflect.NewAt(arrayOf(len(b)).Elem(), unsafe.Pointer(unsafe.SliceData(b))).Interface()
}

// KV is the entry of key and value, each as Bytes.
func KV(key, value []byte) ebpf.MapKV { return ebpf.MapKV{Key: Bytes(key), Value: Bytes(value)} }

// Of returns the bytes of a key or value that Bytes made, or of a []byte,
// and false for anything else.
func Of(x any) ([]byte, bool) {
	switch x := x.(type) {
	case []byte:
		return x, true
	case nil:
		return nil, false
	}
	v := reflect.ValueOf(x)
	if v.Kind() != reflect.Pointer || v.IsNil() {
		return nil, false
	}
	if a := v.Type().Elem(); a.Kind() == reflect.Array && a.Elem().Kind() == reflect.Uint8 {
		return unsafe.Slice((*byte)(v.UnsafePointer()), a.Len()), true
	}
	return nil, false
}

// MustOf is Of for contents that are bytes.
func MustOf(x any) []byte {
	b, ok := Of(x)
	if !ok {
		panic("mapkv: not bytes")
	}
	return b
}

// Flat is a map's entries in two arrays, without a header per entry:
// entry i's key is Keys[i*KeySize:][:KeySize], its value
// Values[i*ValueSize:][:ValueSize]. A MapSpec's contents may be KVs views
// of it, and a loader may then write entries straight from the arrays.
type Flat struct {
	KeySize, ValueSize int
	Keys, Values       []byte
}

// NewFlat returns n zeroed entries.
func NewFlat(keySize, valueSize, n int) Flat {
	return Flat{KeySize: keySize, ValueSize: valueSize, Keys: make([]byte, n*keySize), Values: make([]byte, n*valueSize)}
}

// Len is the number of entries.
func (f Flat) Len() int { return len(f.Keys) / f.KeySize }

// Key is entry i's key.
func (f Flat) Key(i int) []byte { return f.Keys[i*f.KeySize : (i+1)*f.KeySize : (i+1)*f.KeySize] }

// Value is entry i's value.
func (f Flat) Value(i int) []byte {
	return f.Values[i*f.ValueSize : (i+1)*f.ValueSize : (i+1)*f.ValueSize]
}

// KVs returns the entries as a MapSpec's contents, views of the arrays.
func (f Flat) KVs() []ebpf.MapKV {
	out := make([]ebpf.MapKV, f.Len())
	for i := range out {
		out[i] = KV(f.Key(i), f.Value(i))
	}
	return out
}

// Views reports whether kvs are f's entries as KVs made them: the same
// number, the first and the last viewing f's bytes.
func (f Flat) Views(kvs []ebpf.MapKV) bool {
	n := f.Len()
	if len(kvs) != n || n == 0 {
		return len(kvs) == n
	}
	same := func(x any, b []byte) bool {
		v, ok := Of(x)
		return ok && len(v) == len(b) && unsafe.SliceData(v) == unsafe.SliceData(b)
	}
	return same(kvs[0].Key, f.Key(0)) && same(kvs[0].Value, f.Value(0)) &&
		same(kvs[n-1].Key, f.Key(n-1)) && same(kvs[n-1].Value, f.Value(n-1))
}
