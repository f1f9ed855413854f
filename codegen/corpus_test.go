package codegen_test

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/cilium/ebpf"

	"bpfwall/codegen"
	"bpfwall/codegen/abi"
	"bpfwall/internal/testenv"
	"bpfwall/ir"
	"bpfwall/parser/iptables"
	"bpfwall/rules"
)

// TestRealDumpsLoad compiles the real-world dumps of the shared corpus for
// every hook, loads each program that compiles, and reports the program
// sizes, the verifier's work, and what stops the others.
func TestRealDumpsLoad(t *testing.T) {
	testenv.RequireRoot(t)
	dir := testenv.Corpus(t, "real")
	files, err := filepath.Glob(filepath.Join(dir, "*"))
	if err != nil {
		t.Fatal(err)
	}
	hooks := []struct {
		hook  codegen.Hook
		chain string
	}{
		{codegen.HookXDP, "INPUT"},
		{codegen.HookTCIngress, "INPUT"},
		{codegen.HookTCEgress, "OUTPUT"},
	}
	blockers := make(map[string]map[string]bool) // feature -> dumps
	loaded := 0
	for _, f := range files {
		base := filepath.Base(f)
		if base == "README.md" || base == "raw-anomalies" {
			continue
		}
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		// The TUM dumps were anonymized with MACs iptables rejects.
		src = bytes.ReplaceAll(src, []byte("XX:XX:XX:XX:XX:XX"), []byte("02:00:00:00:00:01"))
		opts := iptables.Options{}
		if strings.HasSuffix(f, ".rules") {
			opts.Noflush, opts.Fragment = true, true
		}
		rs, err := iptables.Parse(base, src, opts)
		if err != nil {
			note(blockers, base, err)
			continue
		}
		for _, h := range hooks {
			p, err := ir.Lower(rs, ir.LowerOptions{Chain: h.chain})
			if err == nil {
				var prog *codegen.Program
				if prog, err = codegen.Compile(p, codegen.Options{Trace: true, Hook: h.hook}); err == nil {
					insns, verified := loadProgram(t, prog)
					t.Logf("%-52s %-10s %4d rules: %6d instructions, %6d verified", base, h.hook, len(p.Rules), insns, verified)
					loaded++
					continue
				}
			}
			note(blockers, base+" "+h.hook.String(), err)
		}
	}
	features := make([]string, 0, len(blockers))
	for f := range blockers {
		features = append(features, f)
	}
	sort.Strings(features)
	for _, f := range features {
		t.Logf("%3d dump/hook pairs stopped by: %s", len(blockers[f]), f)
	}
	t.Logf("%d programs compiled and loaded", loaded)
	if loaded == 0 {
		t.Error("no real dump compiled")
	}
}

// note records the features an error names, with positions left out.
func note(blockers map[string]map[string]bool, what string, err error) {
	var list rules.ErrorList
	var e *rules.Error
	switch {
	case errors.As(err, &list):
	case errors.As(err, &e):
		list = rules.ErrorList{e}
	default:
		list = rules.ErrorList{{Msg: err.Error()}}
	}
	for _, e := range list {
		if blockers[e.Msg] == nil {
			blockers[e.Msg] = make(map[string]bool)
		}
		blockers[e.Msg][what] = true
	}
}

// loadProgram loads a program and returns its size and the number of
// instructions the verifier processed.
func loadProgram(t *testing.T, p *codegen.Program) (insns, verified int) {
	t.Helper()
	for _, ins := range p.Spec.Programs[abi.ProgramName].Instructions {
		insns += int(ins.Size() / 8)
	}
	spec, err := p.KernelSpec(kernelBTF(t))
	if err != nil {
		t.Fatal(err)
	}
	coll, err := ebpf.NewCollection(spec)
	if err != nil {
		t.Fatalf("load: %v", err)
	}
	defer coll.Close()
	info, err := coll.Programs[abi.ProgramName].Info()
	if err != nil {
		t.Fatal(err)
	}
	n, _ := info.VerifiedInstructions()
	return insns, int(n)
}
