package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"bpfwall/internal/testenv"
)

const fromKernelRuleset = `table inet filter {
	chain input {
		type filter hook input priority 0; policy drop;
		iifname "lo" accept
		ip saddr 10.0.0.0/8 tcp dport 22 accept
		udp dport { 53, 123 } jump dns
	}
	chain dns {
		ip daddr 192.0.2.1 drop
	}
}
`

// TestFromKernel loads a rule set with nft -f in a fresh network
// namespace and reads it back with --from-kernel.
func TestFromKernel(t *testing.T) {
	testenv.RequireRoot(t)
	testenv.RequireTool(t, "nft", "unshare")
	bin := buildBpfwall(t)
	file := filepath.Join(t.TempDir(), "r.nft")
	if err := os.WriteFile(file, []byte(fromKernelRuleset), 0o644); err != nil {
		t.Fatal(err)
	}
	// check prints for the kernel's rule set what it prints for its text.
	checkText := func(args ...string) string {
		var stdout, stderr bytes.Buffer
		if err := run(append(args, file), &stdout, &stderr); err != nil {
			t.Fatalf("check %s: %v\n%s", file, err, stderr.String())
		}
		if !strings.Contains(stdout.String(), " 1 tables, 4 chains, ") {
			t.Fatalf("check %s printed %q", file, stdout.String())
		}
		return strings.ReplaceAll(stdout.String(), file+":", "kernel:")
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"check", "--from-kernel"}, checkText("check")},
		{[]string{"check", "-6", "--from-kernel"}, checkText("check", "-6")},
		{[]string{"compile", "--dump", "--from-kernel"}, "kernel:4"},
	} {
		var stdout, stderr bytes.Buffer
		cmd := exec.Command("unshare", "-n", "sh", "-c", `nft -f "$0" && exec "$@"`, file, bin)
		cmd.Args = append(cmd.Args, tc.args...)
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Run(); err != nil {
			t.Errorf("%s: %v\n%s%s", strings.Join(tc.args, " "), err, stdout.String(), stderr.String())
			continue
		}
		if !strings.Contains(stdout.String(), tc.want) {
			t.Errorf("%s printed\n%s\nwant it to contain %q", strings.Join(tc.args, " "), stdout.String(), tc.want)
		}
	}
}

func TestFromKernelExcludesFile(t *testing.T) {
	var stdout, stderr bytes.Buffer
	code := exitCode(run([]string{"check", "--from-kernel", "r.nft"}, &stdout, &stderr), &stderr)
	if code != 2 || !strings.Contains(stderr.String(), "--from-kernel reads no FILE") {
		t.Errorf("check --from-kernel FILE: exit %d, stderr %q; want a usage error", code, stderr.String())
	}
}
