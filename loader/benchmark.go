package loader

import (
	"fmt"
	"time"
	"unsafe"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"

	"bpfwall/codegen"
	"bpfwall/rules"
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

// BenchmarkNetfilter is Benchmark for a chain's netfilter program: the
// kernel's bpf_prog_test_run_nf runs it at hook (see
// BenchmarkNetfilterProgram).
func (l *Loaded) BenchmarkNetfilter(frame []byte, hook link.NetfilterInetHook, repeat int) (time.Duration, uint32, error) {
	if l.Program.Hook != codegen.HookNetfilter {
		return 0, 0, fmt.Errorf("benchmark a %s program at a netfilter hook", l.Program.Hook)
	}
	return BenchmarkNetfilterProgram(l.prog, l.Program.IR.Family, frame, hook, repeat)
}

// BenchmarkNetfilterProgram runs frame through netfilter program prog of
// family repeat times at hook with BPF_PROG_TEST_RUN, and returns the
// kernel's mean time per run and the program's return code. The kernel
// (bpf_prog_test_run_nf) pulls the frame's Ethernet header and gives the
// hook state the loopback device. cilium/ebpf's Run takes the context
// this needs but returns no time, so the command is issued here.
func BenchmarkNetfilterProgram(prog *ebpf.Program, family rules.Family, frame []byte, hook link.NetfilterInetHook, repeat int) (time.Duration, uint32, error) {
	pf := uint8(unix.NFPROTO_IPV4)
	if family == rules.IPv6 {
		pf = unix.NFPROTO_IPV6
	}
	// struct nf_hook_state's first fields; the kernel requires the rest
	// zero.
	ctx := []byte{byte(hook), pf}
	attr := progRunAttr{
		progFD:     uint32(prog.FD()),
		dataSizeIn: uint32(len(frame)),
		dataIn:     unsafe.Pointer(unsafe.SliceData(frame)),
		repeat:     uint32(repeat),
		ctxSizeIn:  uint32(len(ctx)),
		ctxIn:      unsafe.Pointer(unsafe.SliceData(ctx)),
	}
	for {
		_, _, errno := unix.Syscall(unix.SYS_BPF, unix.BPF_PROG_TEST_RUN, uintptr(unsafe.Pointer(&attr)), unsafe.Sizeof(attr))
		if errno == unix.EINTR {
			continue // a signal: the run starts over
		}
		if errno != 0 {
			return 0, 0, fmt.Errorf("benchmark netfilter program: %w", errno)
		}
		return time.Duration(attr.duration), attr.retval, nil
	}
}

// progRunAttr is union bpf_attr's test member for BPF_PROG_TEST_RUN, on
// a 64-bit machine. The buffers are pointers, which the garbage
// collector sees (and moves with a stack), as cilium/ebpf's sys.Pointer.
type progRunAttr struct {
	progFD, retval           uint32
	dataSizeIn, dataSizeOut  uint32
	dataIn, dataOut          unsafe.Pointer
	repeat, duration         uint32
	ctxSizeIn, ctxSizeOut    uint32
	ctxIn, ctxOut            unsafe.Pointer
	flags, cpu, batchSize, _ uint32
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
