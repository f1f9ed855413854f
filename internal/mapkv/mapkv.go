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
