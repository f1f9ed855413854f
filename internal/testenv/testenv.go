// Package testenv gates tests that need root, the kernel or system tools:
// outside CI they skip with a reason; under CI=true they must run.
package testenv

import (
	"os"
	"os/exec"
	"runtime"
	"testing"
)

// InCI reports whether the tests run in CI, where nothing may be skipped.
func InCI() bool { return os.Getenv("CI") == "true" }

// skip skips the test, or fails it under CI.
func skip(t testing.TB, format string, args ...any) {
	t.Helper()
	if InCI() {
		t.Fatalf("CI=true but the test cannot run: "+format, args...)
	}
	t.Skipf(format, args...)
}

// RequireRoot skips the test (fails it under CI) unless it runs as root.
func RequireRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		skip(t, "needs root")
	}
}

// RequireCPUs skips the test (fails it under CI) unless it may run on at
// least n CPUs at once.
func RequireCPUs(t testing.TB, n int) {
	t.Helper()
	if have := runtime.NumCPU(); have < n {
		skip(t, "needs %d CPUs, has %d", n, have)
	}
}

// RequireTool skips the test (fails it under CI) unless every named program
// is on the PATH.
func RequireTool(t testing.TB, names ...string) {
	t.Helper()
	for _, n := range names {
		if _, err := exec.LookPath(n); err != nil {
			skip(t, "needs %s on the PATH (see .ci/run)", n)
		}
	}
}

// Corpus returns the path of a folder of ../shared/corpora relative to a
// package directory two levels below the module root, skipping the test
// (in CI too: the material is optional) when it is absent.
func Corpus(t testing.TB, rel string) string {
	t.Helper()
	for _, dir := range []string{"../../../shared/corpora/", "../../shared/corpora/", "../shared/corpora/"} {
		if _, err := os.Stat(dir + rel); err == nil {
			return dir + rel
		}
	}
	t.Skipf("corpus folder shared/corpora/%s is absent", rel)
	return ""
}
