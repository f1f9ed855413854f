package main

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"bpfwall/internal/bench"
	"bpfwall/internal/testenv"
)

func TestBenchUsage(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
	}{
		{"bad size", []string{"bench", "--sizes", "1,x"}},
		{"negative level", []string{"bench", "--levels", "-1"}},
		{"unknown family", []string{"bench", "--families", "nope"}},
		{"no runs", []string{"bench", "--runs", "0"}},
		{"positional argument", []string{"bench", "rules.v4"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			err := run(tc.args, &stdout, &stderr)
			if !errors.Is(err, errUsage) || exitCode(err, &stderr) != 2 {
				t.Errorf("err = %v, want a usage error (exit 2)", err)
			}
		})
	}
}

func TestBenchJSON(t *testing.T) {
	testenv.RequireRoot(t)
	var stdout, stderr bytes.Buffer
	err := run([]string{"bench", "-q", "--json", "--families", "blocklist", "--sizes", "1", "--levels", "0", "--repeat", "2000", "--runs", "1"}, &stdout, &stderr)
	if err != nil {
		t.Fatalf("%v: %s", err, stderr.String())
	}
	r, err := bench.ReadJSON(&stdout)
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Micro) != 1 || r.Micro[0].Skipped != "" || r.Micro[0].NoMatchNs <= 0 {
		t.Errorf("want one measured row, got %+v", r.Micro)
	}
}

// TestTUMPathFromAnyDirectory: the TUM dump is found in a shared/corpora
// above the working directory, however deep.
func TestTUMPathFromAnyDirectory(t *testing.T) {
	top := t.TempDir()
	want := filepath.Join(top, "shared/corpora/real", bench.TUMDump)
	deep := filepath.Join(top, "work/main/codegen/testdata")
	for _, d := range []string{filepath.Dir(want), deep} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(want, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Chdir(deep)
	if got := (&benchFlags{}).tumPath(); got != want {
		t.Errorf("tumPath from %s = %s, want %s", deep, got, want)
	}
}
