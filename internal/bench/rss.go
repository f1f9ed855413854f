package bench

import (
	"os"
	"runtime/debug"

	"golang.org/x/sys/unix"
)

// resetPeakRSS returns the memory the Go heap no longer uses to the
// system and resets the process's peak resident set size to the current
// one (clear_refs 5), so that peakRSS measures what comes next. It
// reports whether the kernel reset it.
func resetPeakRSS() bool {
	debug.FreeOSMemory()
	return os.WriteFile("/proc/self/clear_refs", []byte("5"), 0) == nil
}

// peakRSS is the process's peak resident set size in bytes (getrusage).
func peakRSS() int64 {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return ru.Maxrss * 1024
}
