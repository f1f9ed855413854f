package loader

import (
	"compress/gzip"
	"io"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"

	"golang.org/x/sys/unix"

	"bpfwall/internal/testenv"
)

// TestKernelHZ checks the measured tick rate against the kernel's own
// configuration, where the machine has it.
func TestKernelHZ(t *testing.T) {
	testenv.RequireRoot(t)
	hz, err := kernelHZ()
	if err != nil {
		t.Fatal(err)
	}
	want, ok := configHZ()
	if !ok {
		// Nothing to compare with; the measurement itself must work.
		t.Logf("no kernel config; measured HZ %d", hz)
		return
	}
	if hz != want {
		t.Errorf("measured HZ %d, the kernel config says %d", hz, want)
	}
}

// TestKernelHZUnderLoad measures the tick rate while every CPU is busy,
// as a restore's compile keeps them while StartHZ measures: preempted
// reads must not skew the rate into another HZ.
func TestKernelHZUnderLoad(t *testing.T) {
	testenv.RequireRoot(t)
	want, ok := configHZ()
	if !ok {
		var err error
		if want, err = kernelHZ(); err != nil {
			t.Fatal(err)
		}
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 4 * runtime.GOMAXPROCS(0) {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				for range 1000 {
					_ = make([]byte, 64) // and the collector's work
				}
			}
		})
	}
	defer func() { close(stop); wg.Wait() }()
	for i := range 3 {
		hz, err := measureHZ()
		if err != nil {
			t.Fatal(err)
		}
		if hz != want {
			t.Errorf("measurement %d under load: HZ %d, want %d", i, hz, want)
		}
	}
}

// configHZ reads CONFIG_HZ from /proc/config.gz, or from
// /boot/config-$(uname -r).
func configHZ() (int, bool) {
	var text []byte
	if f, err := os.Open("/proc/config.gz"); err == nil {
		defer f.Close()
		if z, err := gzip.NewReader(f); err == nil {
			text, _ = io.ReadAll(z)
		}
	}
	if text == nil {
		var u unix.Utsname
		if unix.Uname(&u) != nil {
			return 0, false
		}
		text, _ = os.ReadFile("/boot/config-" + unix.ByteSliceToString(u.Release[:]))
	}
	for _, line := range strings.Split(string(text), "\n") {
		if v, ok := strings.CutPrefix(line, "CONFIG_HZ="); ok {
			hz, err := strconv.Atoi(v)
			return hz, err == nil
		}
	}
	return 0, false
}
