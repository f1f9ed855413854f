package loader

import (
	"testing"

	"github.com/cilium/ebpf"

	"bpfwall/codegen/abi"
	"bpfwall/internal/testenv"
)

// TestReadCounters reads per-CPU counters maps of both layouts: blocks
// of abi.CountersPerBlock counters, and a counter an entry, as a filter
// that an earlier version of bpfwall loaded has pinned. Each counter
// sums its CPUs' values.
func TestReadCounters(t *testing.T) {
	testenv.RequireRoot(t)
	cpus, err := ebpf.PossibleCPU()
	if err != nil {
		t.Fatal(err)
	}
	const n = 2*abi.CountersPerBlock + 7
	// Counter i on CPU c: i+1 packets and c+1 bytes.
	want := make([]abi.Counter, n)
	for i := range want {
		want[i] = abi.Counter{Packets: uint64(i+1) * uint64(cpus), Bytes: uint64(cpus * (cpus + 1) / 2)}
	}
	t.Run("blocks", func(t *testing.T) {
		mp, err := ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.PerCPUArray, KeySize: 4, ValueSize: abi.CounterBlockSize, MaxEntries: uint32(abi.CounterBlocks(n))})
		if err != nil {
			t.Fatal(err)
		}
		defer mp.Close()
		for k := range abi.CounterBlocks(n) {
			vals := make([]abi.CounterBlock, cpus)
			for c := range vals {
				for j := range vals[c] {
					if id := k*abi.CountersPerBlock + j; id < n {
						vals[c][j] = abi.Counter{Packets: uint64(id + 1), Bytes: uint64(c + 1)}
					}
				}
			}
			if err := mp.Put(uint32(k), vals); err != nil {
				t.Fatal(err)
			}
		}
		checkCounters(t, mp, want)
	})
	t.Run("one a rule", func(t *testing.T) {
		mp, err := ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.PerCPUArray, KeySize: 4, ValueSize: 16, MaxEntries: n})
		if err != nil {
			t.Fatal(err)
		}
		defer mp.Close()
		for id := range n {
			vals := make([]abi.Counter, cpus)
			for c := range vals {
				vals[c] = abi.Counter{Packets: uint64(id + 1), Bytes: uint64(c + 1)}
			}
			if err := mp.Put(uint32(id), vals); err != nil {
				t.Fatal(err)
			}
		}
		checkCounters(t, mp, want)
	})
}

func checkCounters(t *testing.T, mp *ebpf.Map, want []abi.Counter) {
	t.Helper()
	got, err := readCounters(mp, len(want))
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(want) {
		t.Fatalf("%d counters, want %d", len(got), len(want))
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("counter %d: %+v, want %+v", i, got[i], want[i])
		}
	}
	if _, err := readCounters(mp, len(want)+abi.CountersPerBlock); err == nil {
		t.Errorf("read as %d counters: no error", len(want)+abi.CountersPerBlock)
	}
}
