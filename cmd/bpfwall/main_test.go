package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gopacket/gopacket/layers"

	"bpfwall/internal/packets"
	"bpfwall/internal/testenv"
)

// runCmd runs the command line and returns its output and exit code.
func runCmd(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	var out, errOut bytes.Buffer
	err := run(args, &out, &errOut)
	code = exitCode(err, &errOut)
	return out.String(), errOut.String(), code
}

func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

const example = "../../testdata/examples/web-server.rules.v4"

func TestCheck(t *testing.T) {
	out, errOut, code := runCmd(t, "check", "-q", example)
	if code != 0 || errOut != "" {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
	// Checked for restore without -i, every chain at its netfilter hook,
	// the example has nothing to warn about; for xdp, the conntrack
	// rule's one warning.
	if _, errOut, _ := runCmd(t, "check", example); errOut != "" {
		t.Errorf("check: stderr %q", errOut)
	}
	if _, errOut, _ := runCmd(t, "check", "--hook", "xdp", example); strings.Count(errOut, "\n") != 1 || !strings.Contains(errOut, ":10:2: warning: conntrack state on xdp") {
		t.Errorf("check --hook xdp: stderr %q", errOut)
	}
	if want := example + ": ipv4, 1 tables, 4 chains, 9 rules\n"; out != want {
		t.Errorf("stdout %q, want %q", out, want)
	}
}

func TestCheckReportsPositions(t *testing.T) {
	bad := writeFile(t, "bad.rules", "*filter\n-A INPUT -j ACCEPT\n-A INPUT -p tcp --dport 70000 -j DROP\nCOMMIT\n")
	_, errOut, code := runCmd(t, "check", bad)
	if code != 1 {
		t.Fatalf("exit %d, want 1", code)
	}
	for _, want := range []string{bad + ":3:", "70000", bad + ": line 3 failed"} {
		if !strings.Contains(errOut, want) {
			t.Errorf("stderr %q does not contain %q", errOut, want)
		}
	}
}

func TestFmtIsStable(t *testing.T) {
	once, errOut, code := runCmd(t, "fmt", example)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	if !strings.Contains(once, "-A INPUT -s 192.0.2.0/24 -p tcp -m tcp --dport 22 -j ssh-allow\n") {
		t.Errorf("fmt output lacks the canonical ssh rule:\n%s", once)
	}
	twice, _, code := runCmd(t, "fmt", writeFile(t, "once.rules", once))
	if code != 0 || twice != once {
		t.Errorf("fmt of fmt differs (exit %d):\n%s", code, twice)
	}
}

// TestFmtNFT: fmt --nft prints an nft rule set as nft lists it, text
// that reads back to the same text, and refuses an iptables one.
func TestFmtNFT(t *testing.T) {
	src := writeFile(t, "f.nft", "table inet f {\n chain in {\n  type filter hook input priority 0; policy drop;\n"+
		"  ip saddr . tcp dport { 10.0.0.1 . 22, 10.0.0.2 . 80 } accept\n  ct state established accept\n }\n}\n")
	once, errOut, code := runCmd(t, "fmt", "--nft", src)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for _, line := range []string{
		"\t\ttype filter hook input priority filter; policy drop;\n",
		"\t\tip saddr . tcp dport { 10.0.0.1 . 22, 10.0.0.2 . 80 } accept\n",
	} {
		if !strings.Contains(once, line) {
			t.Errorf("fmt --nft output lacks %q:\n%s", line, once)
		}
	}
	twice, _, code := runCmd(t, "fmt", "--nft", writeFile(t, "once.nft", once))
	if code != 0 || twice != once {
		t.Errorf("fmt --nft of fmt --nft differs (exit %d):\n%s", code, twice)
	}
	if _, errOut, code := runCmd(t, "fmt", "--nft", example); code != 1 || !strings.Contains(errOut, "is iptables text") {
		t.Errorf("fmt --nft of iptables text: exit %d, %s", code, errOut)
	}
}

func TestUsageErrors(t *testing.T) {
	tests := [][]string{
		{},
		{"nosuchcommand"},
		{"check"},
		{"fmt", "a", "b"},
		{"check", "--nosuchflag", example},
	}
	for _, args := range tests {
		if _, _, code := runCmd(t, args...); code != 2 {
			t.Errorf("bpfwall %s: exit %d, want 2", strings.Join(args, " "), code)
		}
	}
}

func TestFlagsAfterFile(t *testing.T) {
	v6 := writeFile(t, "v6.rules", "*filter\n-A INPUT -s 2001:db8::1 -j DROP\nCOMMIT\n")
	out, errOut, code := runCmd(t, "check", v6, "-6")
	if code != 0 || !strings.Contains(out, "ipv6") {
		t.Errorf("exit %d, stdout %q, stderr %q", code, out, errOut)
	}
}

func TestCheckWithIPSets(t *testing.T) {
	rulesFile := writeFile(t, "sets.rules", "*filter\n-A INPUT -m set --match-set allow src -j ACCEPT\nCOMMIT\n")
	if _, errOut, code := runCmd(t, "check", rulesFile); code != 1 || !strings.Contains(errOut, `set "allow" does not exist`) {
		t.Errorf("without --ipset: exit %d, stderr %q", code, errOut)
	}
	sets := writeFile(t, "sets.ipset", "create allow hash:net family inet hashsize 1024 maxelem 65536\nadd allow 10.0.0.0/8\nadd allow 192.0.2.1-192.0.2.6\n")
	if out, errOut, code := runCmd(t, "check", "--ipset", sets, rulesFile); code != 0 {
		t.Errorf("with --ipset: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
}

func TestCheckShadowed(t *testing.T) {
	f := writeFile(t, "rules.v4", "*filter\n:INPUT DROP [0:0]\n:FORWARD ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n"+
		"-A INPUT -s 10.0.0.0/8 -j DROP\n-A INPUT -s 10.1.0.0/16 -p tcp -m tcp --dport 22 -j ACCEPT\nCOMMIT\n")
	out, errOut, code := runCmd(t, "check", f)
	if want := f + ":6: never matches: covered by " + f + ":5\n"; code != 0 || !strings.HasSuffix(out, want) {
		t.Errorf("exit %d, stdout %q, stderr %q; want the warning %q", code, out, errOut, want)
	}
}

func TestCompileDump(t *testing.T) {
	out, errOut, code := runCmd(t, "compile", "--dump", example)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	if !strings.HasPrefix(out, "; bpfwall -O1 xdp program") {
		t.Errorf("dump does not start with its header (-O1 is the default):\n%.200s", out)
	}
	if o0, _, _ := runCmd(t, "compile", "-O0", "--dump", example); !strings.HasPrefix(o0, "; bpfwall -O0 xdp program") {
		t.Errorf("-O0 dump does not start with its header:\n%.200s", o0)
	}
	// Every rule's instructions are introduced by its position and text.
	for _, want := range []string{
		"web-server.rules.v4:9 -A INPUT -i lo -j ACCEPT",
		"web-server.rules.v4:17 -A ssh-allow -j RETURN",
		"counters",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("dump lacks %q", want)
		}
	}
	again, _, _ := runCmd(t, "compile", "--dump", example)
	if again != out {
		t.Error("two dumps of the same input differ")
	}
	if _, _, code := runCmd(t, "compile", "--dump", "--hook", "nosuch", example); code != 2 {
		t.Errorf("unknown hook: exit %d, want 2", code)
	}
}

func TestCompileRejectsUnsupported(t *testing.T) {
	f := writeFile(t, "ct.rules", "*filter\n-A INPUT -m recent --rcheck --hitcount 5000 -j ACCEPT\n-A INPUT -m hashlimit --hashlimit-upto 1/s --hashlimit-rate-match --hashlimit-name x -j ACCEPT\nCOMMIT\n")
	_, errOut, code := runCmd(t, "compile", "--dump", f)
	if code != 1 || !strings.Contains(errOut, f+":2:11: recent") || !strings.Contains(errOut, f+":3:11: hashlimit") {
		t.Errorf("exit %d, stderr %q; want both rules named at their match", code, errOut)
	}
}

// TestTrace runs the example packets through the kernel and compares the
// verdicts and deciding rules with the golden output.
func TestTrace(t *testing.T) {
	testenv.RequireRoot(t)
	out, errOut, code := runCmd(t, "trace", "--packets", "../../testdata/examples/web-server.packets.jsonl", example)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	want, err := os.ReadFile("../../testdata/examples/web-server.trace.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	if out != string(want) {
		t.Errorf("trace:\n%s\nwant:\n%s", out, want)
	}
}

// TestBoundedInput: endless input is refused after rules.MaxSource bytes,
// not read until memory runs out.
func TestBoundedInput(t *testing.T) {
	if testing.Short() {
		t.Skip("reads 256 MiB")
	}
	_, errOut, code := runCmd(t, "check", "/dev/zero")
	if code != 1 || !strings.Contains(errOut, "input too large: more than 256 MiB") {
		t.Errorf("check /dev/zero: exit %d, %q", code, errOut)
	}
	nft := writeFile(t, "r.nft", "include \"/dev/zero\"\n")
	_, errOut, code = runCmd(t, "check", nft)
	if code != 1 || !strings.Contains(errOut, "/dev/zero: not a regular file") {
		t.Errorf("include /dev/zero: exit %d, %q", code, errOut)
	}
}

// TestNFTFamilyFromContent: an ip6-only nft rule set read without -6 is
// compiled for IPv6 packets, not to an empty IPv4 program that passes
// them all.
func TestNFTFamilyFromContent(t *testing.T) {
	file := writeFile(t, "v6.nft", "table ip6 t {\n chain c {\n  type filter hook input priority 0;\n  tcp dport 22 drop\n }\n}\n")
	out, errOut, code := runCmd(t, "check", file)
	if code != 0 || !strings.Contains(out, "ipv6, 1 tables, 3 chains, 1 rules") {
		t.Errorf("check: exit %d, %q %q", code, out, errOut)
	}
}

// TestVersion: bpfwall --version, -V and version print the build's
// version on stdout, as iptables -V does.
func TestVersion(t *testing.T) {
	for _, arg := range []string{"--version", "-V", "version"} {
		out, errOut, code := runCmd(t, arg)
		if code != 0 || errOut != "" || !strings.HasPrefix(out, "bpfwall ") || !strings.Contains(out, ", go1.") {
			t.Errorf("%s: exit %d, %q %q", arg, code, out, errOut)
		}
	}
}

// TestCheckRefusesWhatRestoreRefuses: check answers whether restore would
// take the input: a match the code generator refuses makes restore leave
// its chain to the kernel, and check says so; with --no-delegate, or for
// an interface hook, it fails check at its position; --hook checks the
// chain of that hook.
func TestCheckRefusesWhatRestoreRefuses(t *testing.T) {
	f := writeFile(t, "string.rules", "*filter\n-A INPUT -p tcp --dport 22 -j ACCEPT\n-A INPUT -m string --string foo --algo bm -j DROP\nCOMMIT\n")
	_, errOut, code := runCmd(t, "check", f)
	if code != 0 || !strings.Contains(errOut, "filter INPUT runs in the kernel's netfilter") || !strings.Contains(errOut, f+":3:11: string match is not supported") {
		t.Errorf("check of -m string: exit %d, stderr %q", code, errOut)
	}
	for _, args := range [][]string{{"--no-delegate"}, {"--hook", "xdp"}} {
		_, errOut, code := runCmd(t, append(append([]string{"check"}, args...), f)...)
		if code != 1 || !strings.Contains(errOut, f+":3:") || !strings.Contains(errOut, "string match is not supported") {
			t.Errorf("check %v of -m string: exit %d, stderr %q", args, code, errOut)
		}
	}
	// The rule is in INPUT: tc-egress runs OUTPUT, which compiles.
	if out, errOut, code := runCmd(t, "check", "--hook", "tc-egress", f); code != 0 {
		t.Errorf("check --hook tc-egress: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	if _, errOut, code := runCmd(t, "check", "--hook", "nosuch", f); code != 2 {
		t.Errorf("check --hook nosuch: exit %d, stderr %q", code, errOut)
	}
}

// TestFmtFragment: fmt -n prints a fragment for iptables-restore -n as
// one: it may jump to chains defined elsewhere, and it declares only the
// policies the input set, since with -n every policy line sets one.
func TestFmtFragment(t *testing.T) {
	f := writeFile(t, "frag.rules", "*filter\n:INPUT DROP [0:0]\n:mine - [0:0]\n-A mine -p tcp -j DROP\n-A FORWARD -j elsewhere\nCOMMIT\n")
	want := "*filter\n:INPUT DROP [0:0]\n:mine - [0:0]\n-A FORWARD -j elsewhere\n-A mine -p tcp -j DROP\nCOMMIT\n"
	out, errOut, code := runCmd(t, "fmt", "-nq", f)
	if code != 0 || out != want || errOut != "" {
		t.Fatalf("fmt -n: exit %d, stderr %q, stdout\n%s\nwant\n%s", code, errOut, out, want)
	}
	again, _, code := runCmd(t, "fmt", "-nq", writeFile(t, "again.rules", out))
	if code != 0 || again != out {
		t.Errorf("fmt -n is not stable:\n%s\nthen\n%s", out, again)
	}
	if _, _, code := runCmd(t, "fmt", f); code != 1 {
		t.Errorf("fmt without -n of a fragment: exit %d, want 1", code)
	}
}

// TestTraceCookedPcap: trace reads tcpdump -i any captures (Linux cooked,
// SLL and SLL2), which hold both directions: an ingress hook traces the
// packets that arrived and says it never sees those that left, tc-egress
// the other way round; each line names its packet.
func TestTraceCookedPcap(t *testing.T) {
	testenv.RequireRoot(t)
	in, err := packets.Desc{DPort: 22}.Frame()
	if err != nil {
		t.Fatal(err)
	}
	out, err := packets.Desc{Proto: "udp", DPort: 53}.Frame()
	if err != nil {
		t.Fatal(err)
	}
	rules := writeFile(t, "r.rules", "*filter\n:INPUT ACCEPT [0:0]\n:FORWARD ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n"+
		"-A INPUT -p tcp -m tcp --dport 22 -j DROP\n-A OUTPUT -p udp -m udp --dport 53 -j DROP\nCOMMIT\n")
	for _, lt := range []layers.LinkType{layers.LinkTypeLinuxSLL, layers.LinkTypeLinuxSLL2} {
		var buf bytes.Buffer
		if err := packets.WriteCooked(&buf, lt, []packets.Captured{{Frame: in}, {Frame: out, Outgoing: true}}); err != nil {
			t.Fatal(err)
		}
		pcap := writeFile(t, "any.pcap", buf.String())
		for _, tc := range []struct {
			hook string
			want []string
		}{
			{"xdp", []string{
				`{"packet":1,"summary":"IP 10.0.0.1.1234 > 10.0.0.2.22: Flags [S], length 24","verdict":"DROP","rule":"` + rules + `:5","chain":"INPUT"}`,
				`{"packet":2,"summary":"IP 10.0.0.1.1234 > 10.0.0.2.53: UDP, length 36","skipped":"captured leaving the host: the xdp hook sees arriving packets"}`,
			}},
			{"tc-egress", []string{
				`{"packet":1,"summary":"IP 10.0.0.1.1234 > 10.0.0.2.22: Flags [S], length 24","skipped":"captured arriving: the tc-egress hook sees leaving packets"}`,
				`{"packet":2,"summary":"IP 10.0.0.1.1234 > 10.0.0.2.53: UDP, length 36","verdict":"DROP","rule":"` + rules + `:6","chain":"OUTPUT"}`,
			}},
		} {
			got, errOut, code := runCmd(t, "trace", "--hook", tc.hook, "--pcap", pcap, rules)
			if want := strings.Join(tc.want, "\n") + "\n"; code != 0 || got != want {
				t.Errorf("%s capture at %s: exit %d, stderr %q\n%s\nwant\n%s", lt, tc.hook, code, errOut, got, want)
			}
		}
	}
}

// TestCheckNFTNotDelegated: restore takes iptables input only, so check
// of an nft rule set says what bpfwall cannot compile without claiming
// that iptables-restore would take it to the kernel; the rule set is
// still valid nft, and check takes it.
func TestCheckNFTNotDelegated(t *testing.T) {
	file := filepath.Join(t.TempDir(), "r.nft")
	src := "table inet t {\n\tchain c {\n\t\ttype filter hook input priority 0;\n\t\tct zone 3 drop\n\t}\n}\n"
	if err := os.WriteFile(file, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	_, errOut, code := runCmd(t, "check", file)
	if code != 0 || !strings.Contains(errOut, "cannot compile filter INPUT, which nft runs as it is:\n  "+file+":4:3: ct zone match is not supported") || strings.Contains(errOut, "restore") {
		t.Errorf("check: exit %d, stderr %q", code, errOut)
	}
}
