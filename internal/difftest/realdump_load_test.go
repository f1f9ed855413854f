package difftest

import (
	"maps"
	"slices"
	"strings"
	"testing"

	"bpfwall/codegen"
	"bpfwall/internal/testenv"
	"bpfwall/ir"
	"bpfwall/loader"
	"bpfwall/parser/iptables"
	"bpfwall/rules"
)

// TestRealDumpsLoad compiles the real-world dumps of the shared corpus for
// every interface hook, has the kernel load each program that compiles
// (loader.Load, as load and restore do), and reports the program sizes,
// the verifier's work, and what stops the others.
func TestRealDumpsLoad(t *testing.T) {
	testenv.RequireRoot(t)
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
	for _, d := range testenv.RealDumps(t) {
		opts := iptables.Options{}
		if strings.HasSuffix(d.Name, ".rules") {
			opts.Noflush, opts.Fragment = true, true
		}
		rs, err := iptables.Parse(d.Name, d.Src, opts)
		if err != nil {
			noteBlockers(blockers, d.Name, err)
			continue
		}
		for _, h := range hooks {
			p, err := ir.Lower(rs, ir.LowerOptions{Chain: h.chain})
			if err == nil {
				var prog *codegen.Program
				if prog, err = codegen.Compile(p, codegen.Options{Hook: h.hook}); err == nil {
					l, err := loader.Load(prog, loader.Options{})
					if err != nil {
						t.Fatalf("%s at %s: %v", d.Name, h.hook, err)
					}
					t.Logf("%-52s %-10s %4d rules: %6d instructions, %6d verified", d.Name, h.hook, len(p.Rules), prog.Size(), l.VerifiedInsns)
					l.Close()
					loaded++
					continue
				}
			}
			noteBlockers(blockers, d.Name+" "+h.hook.String(), err)
		}
	}
	for _, f := range slices.Sorted(maps.Keys(blockers)) {
		t.Logf("%3d dump/hook pairs stopped by: %s", len(blockers[f]), f)
	}
	t.Logf("%d programs compiled and loaded", loaded)
	if loaded == 0 {
		t.Error("no real dump compiled")
	}
}

// noteBlockers records the features an error names, with positions left
// out.
func noteBlockers(blockers map[string]map[string]bool, what string, err error) {
	list, ok := rules.AsErrorList(err)
	if !ok {
		list = rules.ErrorList{{Msg: err.Error()}}
	}
	for _, e := range list {
		if blockers[e.Msg] == nil {
			blockers[e.Msg] = make(map[string]bool)
		}
		blockers[e.Msg][what] = true
	}
}
