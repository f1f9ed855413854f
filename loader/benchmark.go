package loader

import (
	"fmt"
	"time"

	"github.com/cilium/ebpf"
)

// Benchmark runs frame through the program repeat times in the kernel with
// BPF_PROG_TEST_RUN and returns the kernel's mean time per run and the
// program's return code. The program's maps are updated as by real
// packets (counters count every repetition).
func (l *Loaded) Benchmark(frame []byte, repeat int) (time.Duration, uint32, error) {
	ret, d, err := l.prog.Benchmark(frame, repeat, nil)
	if err != nil {
		return 0, 0, fmt.Errorf("benchmark %s program: %w", l.Program.Hook, err)
	}
	return d, ret, nil
}

// Footprint is what a loaded program holds in the kernel.
type Footprint struct {
	// JITedBytes is the size of the program's machine code.
	JITedBytes int
	// MapBytes is the memory the kernel charges to the program's maps
	// (memlock, as in /proc/PID/fdinfo), and ProgBytes to the program.
	MapBytes, ProgBytes uint64
}

// Footprint asks the kernel what the program and its maps take.
func (l *Loaded) Footprint() (Footprint, error) {
	var fp Footprint
	info, err := l.prog.Info()
	if err != nil {
		return fp, fmt.Errorf("program info: %w", err)
	}
	if n, err := info.JitedSize(); err == nil {
		fp.JITedBytes = int(n)
	}
	fp.ProgBytes, _ = info.Memlock()
	for name, m := range l.coll.Maps {
		mi, err := m.Info()
		if err != nil {
			return fp, fmt.Errorf("map %s info: %w", name, err)
		}
		if n, ok := mi.Memlock(); ok {
			fp.MapBytes += n
		} else {
			fp.MapBytes += specBytes(m)
		}
	}
	return fp, nil
}

// specBytes estimates a map's memory from its sizes when the kernel does
// not say: keys and values times entries, values once per CPU for per-CPU
// maps.
func specBytes(m *ebpf.Map) uint64 {
	value := uint64(m.ValueSize())
	switch m.Type() {
	case ebpf.PerCPUArray, ebpf.PerCPUHash, ebpf.LRUCPUHash:
		if n, err := ebpf.PossibleCPU(); err == nil {
			value *= uint64(n)
		}
	}
	return (uint64(m.KeySize()) + value) * uint64(m.MaxEntries())
}
