package loader

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"bpfwall/codegen"
	"bpfwall/internal/testenv"
	"bpfwall/ir"
	"bpfwall/parser/iptables"
	"bpfwall/rules"
)

// inFreshNetns moves the test's goroutine, locked to its thread, into a
// new network namespace holding a veth pair veth0 <-> veth1, both up, and
// back when the test ends. Goroutines the test starts stay outside.
func inFreshNetns(t *testing.T) uint64 {
	t.Helper()
	testenv.EnterFreshNetns(t)
	ip(t, "link", "set", "lo", "up")
	ip(t, "link", "add", "veth0", "type", "veth", "peer", "name", "veth1")
	ip(t, "link", "set", "veth0", "up")
	ip(t, "link", "set", "veth1", "up")
	ns, err := NetNS()
	if err != nil {
		t.Fatal(err)
	}
	return ns
}

// ip runs ip(8) in the calling thread's network namespace.
func ip(t *testing.T, args ...string) {
	t.Helper()
	if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
		t.Fatalf("ip %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// testRoots are the tests' pin roots.
var testRoots sync.Map // *testing.T -> string

// testRoot returns the test's pin root, on a bpffs of its own
// (testenv.BPFFS), never the production one.
func testRoot(t *testing.T) string {
	if r, ok := testRoots.Load(t); ok {
		return r.(string)
	}
	r := testenv.BPFFS(t)
	testRoots.Store(t, r)
	t.Cleanup(func() { testRoots.Delete(t) })
	return r
}

// testPlace returns the place of hook in the test's namespace, under the
// test's pin root, removing its pins when the test ends.
func testPlace(t *testing.T, ns uint64, hook codegen.Hook) Place {
	p := Place{Root: testRoot(t), NetNS: ns, Hook: hook}
	t.Cleanup(func() {
		os.RemoveAll(p.Dir())
		removeIfOnlyMarked(filepath.Dir(p.Dir()))
	})
	return p
}

// ruleset is a filter table whose entry chain (INPUT, or OUTPUT for
// tc-egress) holds the rules given.
func ruleset(hook codegen.Hook, lines ...string) string {
	chain := entryChain(hook)
	var b strings.Builder
	b.WriteString("*filter\n:INPUT ACCEPT [0:0]\n:FORWARD ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n")
	for _, l := range lines {
		b.WriteString("-A " + chain + " " + l + "\n")
	}
	b.WriteString("COMMIT\n")
	return b.String()
}

func entryChain(hook codegen.Hook) string {
	if hook == codegen.HookTCEgress {
		return "OUTPUT"
	}
	return "INPUT"
}

// compileText parses and compiles a rule set for hook.
func compileText(t testing.TB, hook codegen.Hook, text string) (*rules.Ruleset, *codegen.Program) {
	t.Helper()
	rs, prog, err := compileRules(hook, text)
	if err != nil {
		t.Fatal(err)
	}
	return rs, prog
}

func compileRules(hook codegen.Hook, text string) (*rules.Ruleset, *codegen.Program, error) {
	rs, err := iptables.Parse("test.rules", []byte(text), iptables.Options{Counters: true})
	if err != nil {
		return nil, nil, fmt.Errorf("parse: %w", err)
	}
	p, err := ir.Lower(rs, ir.LowerOptions{Chain: entryChain(hook)})
	if err != nil {
		return nil, nil, fmt.Errorf("lower: %w", err)
	}
	prog, err := codegen.Compile(p, codegen.Options{Trace: true, Hook: hook})
	if err != nil {
		return nil, nil, fmt.Errorf("compile: %w", err)
	}
	return rs, prog, nil
}

// newSwap returns a swap of text into place, attaching to ifaces.
func newSwap(t testing.TB, place Place, text string, ifaces ...string) *Swap {
	t.Helper()
	rs, prog := compileText(t, place.Hook, text)
	meta, counters, err := NewMeta(rs, prog, "test.rules")
	if err != nil {
		t.Fatal(err)
	}
	return &Swap{Place: place, Program: prog, Meta: meta, Counters: counters, Ifaces: ifaces, XDPMode: XDPGeneric}
}

func mustSwap(t testing.TB, s *Swap) *Result {
	t.Helper()
	res, err := s.Run()
	if err != nil {
		t.Fatalf("swap: %v", err)
	}
	return res
}
