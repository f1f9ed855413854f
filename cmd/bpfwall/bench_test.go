package main

import (
	"bytes"
	"errors"
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
