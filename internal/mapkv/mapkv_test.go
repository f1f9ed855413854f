package mapkv

import (
	"testing"

	"github.com/cilium/ebpf"
)

// TestBytes: a key held as Bytes shares the slice's memory, reads back as
// the same bytes, and costs no allocation.
func TestBytes(t *testing.T) {
	b := []byte{1, 2, 3, 4, 5, 6}
	kv := KV(b[:4], b[4:])
	k, ok1 := Of(kv.Key)
	v, ok2 := Of(kv.Value)
	if !ok1 || !ok2 || string(k) != string(b[:4]) || string(v) != string(b[4:]) {
		t.Fatalf("Of: %v %v %v %v", k, ok1, v, ok2)
	}
	b[0] = 9
	if k[0] != 9 {
		t.Error("the key does not share the slice's memory")
	}
	if _, ok := Of(uint32(1)); ok {
		t.Error("Of takes a uint32 for bytes")
	}
	var sink ebpf.MapKV
	if n := testing.AllocsPerRun(100, func() { sink = KV(b[:4], b[4:]) }); n != 0 {
		t.Errorf("KV allocates %v times", n)
	}
	_ = sink
}
