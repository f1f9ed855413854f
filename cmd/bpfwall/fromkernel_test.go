package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
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
		counter packets 5 bytes 300
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
		// fmt --nft lists the live rule set as nft does.
		{[]string{"fmt", "--nft", "--from-kernel"}, "\t\tip saddr 10.0.0.0/8 tcp dport 22 accept\n\t\tudp dport { 53, 123 } jump dns\n"},
		{[]string{"fmt", "--nft", "--from-kernel"}, "\t\ttype filter hook input priority filter; policy drop;\n"},
		// With -c, the kernel's counts.
		{[]string{"fmt", "--nft", "-c", "--from-kernel"}, "\t\tcounter packets 5 bytes 300\n"},
		{[]string{"fmt", "--nft", "--from-kernel"}, "\t\tcounter\n"},
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

// fromKernelIptables is loaded with iptables-nft-restore: its conntrack,
// multiport, comment, recent and set matches and its REJECT and LOG are
// xtables extensions in nf_tables.
const fromKernelIptables = `*filter
:INPUT DROP [0:0]
:FORWARD DROP [0:0]
:OUTPUT ACCEPT [0:0]
-A INPUT -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT
-A INPUT -m set --match-set blocked src -j DROP
-A INPUT -p tcp -m multiport --dports 80,443 -m comment --comment web -j ACCEPT
-A INPUT -p tcp -m tcp --dport 22 -m recent --update --seconds 60 --hitcount 4 --name SSH --mask 255.255.255.255 --rsource -j DROP
-A INPUT -p tcp -m tcp --dport 22 -m recent --set --name SSH --mask 255.255.255.255 --rsource -j ACCEPT
-A INPUT -j LOG --log-prefix "drop: "
-A INPUT -p tcp -j REJECT --reject-with tcp-reset
COMMIT
`

// TestFromKernelIptablesNFT: what iptables-nft (the iptables of current
// distributions) loaded, with an ipset, reads back through the binary as
// the file does: fmt prints the same iptables-save text, and compile
// --from-kernel builds a program of the same rules and maps.
func TestFromKernelIptablesNFT(t *testing.T) {
	testenv.RequireRoot(t)
	testenv.RequireTool(t, "iptables-nft-restore", "ipset", "unshare")
	bin := buildBpfwall(t)
	dir := t.TempDir()
	file := filepath.Join(dir, "rules.v4")
	sets := filepath.Join(dir, "sets")
	if err := os.WriteFile(file, []byte(fromKernelIptables), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(sets, []byte("create blocked hash:net family inet hashsize 1024 maxelem 65536\nadd blocked 198.51.100.0/24\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	runIn := func(args ...string) string {
		var stdout, stderr bytes.Buffer
		cmd := exec.Command("unshare", "-n", "sh", "-c", `ipset restore < "$0" && iptables-nft-restore < "$1" && shift && exec "$@"`, sets, file, bin)
		cmd.Args = append(cmd.Args, args...)
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Run(); err != nil {
			t.Fatalf("%s: %v\n%s%s", strings.Join(args, " "), err, stdout.String(), stderr.String())
		}
		return stdout.String()
	}
	fileOut := func(args ...string) string {
		var stdout, stderr bytes.Buffer
		if err := run(append(args, "--ipset", sets, file), &stdout, &stderr); err != nil {
			t.Fatalf("%s %s: %v\n%s", strings.Join(args, " "), file, err, stderr.String())
		}
		return stdout.String()
	}
	if got, want := runIn("fmt", "--from-kernel"), fileOut("fmt"); got != want {
		t.Errorf("fmt --from-kernel printed\n%s\nfmt FILE\n%s", got, want)
	}
	// The programs differ: iptables-nft's native -p tcp and --dport do
	// not drop a truncated header as -m tcp does, and bpfwall follows the
	// kernel (TestRandomIptablesNFT). They have the same rules and maps.
	head := regexp.MustCompile(`(?m)^; (bpfwall .* program: .*|maps:|  +\S+ +\S+ +key .*)$`)
	got := head.FindAllString(runIn("compile", "--dump", "--from-kernel"), -1)
	want := head.FindAllString(fileOut("compile", "--dump"), -1)
	if len(got) < 3 || strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("compile --dump --from-kernel:\n%s\nfrom the file:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
