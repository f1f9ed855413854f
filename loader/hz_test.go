package loader

import (
	"compress/gzip"
	"io"
	"os"
	"strconv"
	"strings"
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
