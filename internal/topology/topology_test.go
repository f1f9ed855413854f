package topology

import (
	"fmt"
	"os"
	"strings"
	"testing"
)

// TestReapStale: the namespaces a dead process left are deleted, those
// of a live one stay.
func TestReapStale(t *testing.T) {
	// testenv, which imports this package, would say the same.
	if os.Geteuid() != 0 {
		if os.Getenv("CI") != "" {
			t.Fatal("needs root, and CI runs every kernel test")
		}
		t.Skip("needs root")
	}
	prefix := fmt.Sprintf("bwreap%d", os.Getpid())
	dead := prefix + "-999999999-1-fw" // above pid_max: never a live process
	live := fmt.Sprintf("%s-%d-1-fw", prefix, os.Getpid())
	for _, ns := range []string{dead, live} {
		if err := Run("ip", "netns", "add", ns); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { Run("ip", "netns", "del", ns) })
	}
	reapStale(prefix)
	out, err := os.ReadDir("/run/netns")
	if err != nil {
		t.Fatal(err)
	}
	left := map[string]bool{}
	for _, e := range out {
		if strings.HasPrefix(e.Name(), prefix) {
			left[e.Name()] = true
		}
	}
	if left[dead] || !left[live] {
		t.Errorf("namespaces left: %v, want %s alone", left, live)
	}
}
