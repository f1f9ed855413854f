package loader

import (
	"fmt"
	"sync"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"golang.org/x/sys/unix"
)

// kernelHZ is the kernel's tick rate, measured once (measureHZ).
var kernelHZ = sync.OnceValues(measureHZ)

// measureHZ measures the kernel's tick rate: the jiffies a tiny
// program reads across a known pause. The tick rates Linux offers (100,
// 250, 300, 1000) are far enough apart that a pause of 100 ms tells them
// apart: each read is timed between two clock reads that are at most
// hzReadSlack apart, so that a goroutine preempted while it reads (a
// compile runs beside it, see StartHZ) cannot skew the rate.
func measureHZ() (int, error) {
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Name:    "bpfwall_jiffies",
		Type:    ebpf.XDP,
		License: "GPL",
		Instructions: asm.Instructions{
			asm.FnJiffies64.Call(),
			asm.Return(),
		},
	})
	if err != nil {
		return 0, fmt.Errorf("measure the kernel's HZ: %w", err)
	}
	defer prog.Close()
	frame := make([]byte, 64)
	read := func() (uint32, time.Time, error) {
		for range 100 {
			before := time.Now()
			j, err := prog.Run(&ebpf.RunOptions{Data: frame})
			if err != nil {
				return 0, time.Time{}, fmt.Errorf("measure the kernel's HZ: %w", err)
			}
			if after := time.Now(); after.Sub(before) <= hzReadSlack {
				return j, before.Add(after.Sub(before) / 2), nil
			}
		}
		return 0, time.Time{}, fmt.Errorf("measure the kernel's HZ: no read of jiffies took less than %v", hzReadSlack)
	}
	j0, t0, err := read()
	if err != nil {
		return 0, err
	}
	time.Sleep(100 * time.Millisecond)
	j1, t1, err := read()
	if err != nil {
		return 0, err
	}
	rate := float64(j1-j0) / t1.Sub(t0).Seconds()
	best := 0
	for _, hz := range []int{100, 250, 300, 1000} {
		if best == 0 || abs(rate-float64(hz)) < abs(rate-float64(best)) {
			best = hz
		}
	}
	return best, nil
}

// hzReadSlack bounds the time one read of jiffies may take.
const hzReadSlack = time.Millisecond

// StartHZ starts measuring the kernel's tick rate in the background, for
// a load whose program counts jiffies (limit, hashlimit, recent): the
// load then waits for what is left of the measurement's 100 ms pause,
// not for all of it. A restore calls it as it reads its input, and
// parses and compiles meanwhile. A measurement that fails fails the
// load that needs it, and no other.
func StartHZ() { go kernelHZ() }

func abs(x float64) float64 {
	if x < 0 {
		return -x
	}
	return x
}

// largeMemory reports whether the kernel's hashlimit tables default to
// 8192 buckets: htable_create's test, totalram_pages() > 1 GiB / PAGE_SIZE.
func largeMemory() (bool, error) {
	var si unix.Sysinfo_t
	if err := unix.Sysinfo(&si); err != nil {
		return false, fmt.Errorf("sysinfo: %w", err)
	}
	return uint64(si.Totalram)*uint64(si.Unit) > 1<<30+uint64(unix.Getpagesize())-1, nil
}
