// Package testenv gates tests that need root, the kernel or system tools:
// outside CI they skip with a reason; under CI=true they must run.
package testenv

import (
	"bpfwall/internal/topology"
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"testing"

	"golang.org/x/sys/unix"
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

// Unavailable skips the test, or fails it under CI, saying what it
// lacks.
func Unavailable(t testing.TB, format string, args ...any) {
	t.Helper()
	skip(t, format, args...)
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
// when it is absent: outside CI the material is optional, and CI, which
// always has shared/ beside the clone, fails instead.
func Corpus(t testing.TB, rel string) string {
	t.Helper()
	for _, dir := range []string{"../../../shared/corpora/", "../../shared/corpora/", "../shared/corpora/"} {
		if _, err := os.Stat(dir + rel); err == nil {
			return dir + rel
		}
	}
	skip(t, "corpus folder shared/corpora/%s is absent (shared/ belongs beside the clone)", rel)
	return ""
}

// A RealDump is a rule set of the real-world corpus (shared/corpora/real).
type RealDump struct {
	Name string // its file's name
	Path string
	// Src is its text, with the TUM dumps' anonymized MAC addresses
	// (XX:XX:XX:XX:XX:XX, which iptables refuses) replaced by a valid one.
	Src []byte
}

// RealDumps returns the rule sets of the real-world corpus, skipping the
// test when it is absent (see Corpus).
func RealDumps(t testing.TB) []RealDump {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(Corpus(t, "real"), "*"))
	if err != nil {
		t.Fatal(err)
	}
	var out []RealDump
	for _, f := range files {
		name := filepath.Base(f)
		if name == "README.md" || name == "raw-anomalies" {
			continue
		}
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		src = bytes.ReplaceAll(src, []byte("XX:XX:XX:XX:XX:XX"), []byte("02:00:00:00:00:01"))
		out = append(out, RealDump{Name: name, Path: f, Src: src})
	}
	return out
}

// CorpusFiles returns the files of corpus folder shared/corpora/rel
// whose names match pattern, for tests that add them to what they check
// (fuzz seeds): none when the folder is absent, but under CI it must be
// there.
func CorpusFiles(t testing.TB, rel, pattern string) []string {
	t.Helper()
	for _, dir := range []string{"../../../shared/corpora/", "../../shared/corpora/", "../shared/corpora/"} {
		if _, err := os.Stat(dir + rel); err == nil {
			files, err := filepath.Glob(filepath.Join(dir+rel, pattern))
			if err != nil {
				t.Fatal(err)
			}
			return files
		}
	}
	if InCI() {
		t.Fatalf("CI=true but corpus folder shared/corpora/%s is absent", rel)
	}
	return nil
}

// BPFFS mounts a bpffs instance of the test's own and returns a pin root
// below it (for loader.Place.Root, or BPFWALL_ROOT): the test's pins are
// its alone, never under /sys/fs/bpf where a production bpfwall pins, and
// the instance goes when the test ends, detaching what is still pinned.
func BPFFS(t testing.TB) string {
	t.Helper()
	RequireRoot(t)
	dir := t.TempDir()
	if err := unix.Mount("bpf", dir, "bpf", 0, "mode=0700"); err != nil {
		t.Fatalf("mount a bpffs of the test's own: %v", err)
	}
	t.Cleanup(func() { unix.Unmount(dir, unix.MNT_DETACH) })
	return filepath.Join(dir, "bpfwall")
}

// Isolate points the bpfwall commands the test runs at a bpffs and a
// lock file of the test's own (BPFWALL_ROOT, BPFWALL_LOCKFILE), and
// returns the pin root: the test neither waits for nor disturbs a
// bpfwall that runs on the same host. The test must not be parallel.
func Isolate(t *testing.T) string {
	t.Helper()
	root := BPFFS(t)
	t.Setenv("BPFWALL_ROOT", root)
	t.Setenv("BPFWALL_LOCKFILE", filepath.Join(t.TempDir(), "bpfwall.lock"))
	return root
}

// NewNetns creates a network namespace for the test, released when it
// ends. Its Do and Run run code on threads inside it.
func NewNetns(t testing.TB) *topology.Netns {
	t.Helper()
	RequireRoot(t)
	ns, err := topology.NewNetns()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ns.Close)
	return ns
}

// EnterFreshNetns moves the calling goroutine, locked to its thread, into
// a new network namespace, and back when the test ends; it returns the
// namespace, for the goroutines the test starts, which stay outside. If
// it cannot go back, the thread stays locked and dies with the goroutine.
func EnterFreshNetns(t testing.TB) *topology.Netns {
	t.Helper()
	ns := NewNetns(t)
	runtime.LockOSThread()
	orig, err := topology.CurrentNetns()
	if err != nil {
		runtime.UnlockOSThread()
		t.Fatal(err)
	}
	if err := ns.Enter(); err != nil {
		orig.Close()
		runtime.UnlockOSThread()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := orig.Enter(); err != nil {
			t.Errorf("return to the original netns: %v", err)
			return
		}
		orig.Close()
		runtime.UnlockOSThread()
	})
	return ns
}

// InFreshNetns runs f on a thread in a new network namespace, which
// ends with the test.
func InFreshNetns(t *testing.T, f func()) {
	t.Helper()
	NewNetns(t).Run(f)
}

// NftList loads script with nft -f in a network namespace of its own,
// after the shell commands setup (interfaces rules name, say), and
// returns what the command list ("nft list ruleset", "nft -s list
// ruleset") prints; ok is false when nft refuses the script, and the
// text is then nft's error. An element's remaining timeout, which runs
// down between two listings, is left out.
func NftList(t testing.TB, script []byte, list, setup string) (string, bool) {
	t.Helper()
	f := filepath.Join(t.TempDir(), "rules.nft")
	if err := os.WriteFile(f, script, 0o600); err != nil {
		t.Fatal(err)
	}
	if setup != "" {
		setup += " && "
	}
	out, err := exec.Command("unshare", "-n", "sh", "-c", setup+"nft -f "+f+" && "+list).CombinedOutput()
	return expiresRE.ReplaceAllString(string(out), ""), err == nil
}

var expiresRE = regexp.MustCompile(` expires [0-9dhms]+`)
