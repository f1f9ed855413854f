package iptables

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"bpfwall/internal/testenv"
	"bpfwall/rules"
)

// oracleResult is what the real iptables-legacy-restore did with an input.
type oracleResult struct {
	ok       bool
	failLine int               // the line it reported, 0 if none
	tables   map[string]string // iptables-save text per table, normalized
	stderr   string
}

var (
	oracleLineRe   = regexp.MustCompile(`(?:line:? |line )(\d+)`)
	chainCounterRe = regexp.MustCompile(`(?m)^(:\S+ \S+) \[\d+:\d+\]$`)
)

// runOracle restores src with iptables-legacy-restore (ip6tables- for IPv6)
// in a new network namespace and returns what iptables-legacy-save prints.
func runOracle(t *testing.T, src []byte, fam rules.Family, setup string) oracleResult {
	t.Helper()
	prog := "iptables"
	if fam == rules.IPv6 {
		prog = "ip6tables"
	}
	f := filepath.Join(t.TempDir(), "input")
	if err := os.WriteFile(f, src, 0o600); err != nil {
		t.Fatal(err)
	}
	script := fmt.Sprintf("%s-legacy-restore < %s && %s-legacy-save", prog, f, prog)
	if setup != "" {
		script = setup + " && " + script
	}
	cmd := exec.Command("unshare", "--net", "sh", "-c", script)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	res := oracleResult{ok: err == nil, stderr: stderr.String(), tables: map[string]string{}}
	if !res.ok {
		if m := oracleLineRe.FindStringSubmatch(res.stderr); m != nil {
			res.failLine, _ = strconv.Atoi(m[1])
		}
		return res
	}
	res.tables = splitSave(stdout.String())
	return res
}

// splitSave splits iptables-save text into tables, dropping comments and
// chain counters (a fresh restore without -c has none).
func splitSave(s string) map[string]string {
	tables := map[string]string{}
	var name string
	var cur strings.Builder
	for line := range strings.Lines(s) {
		switch {
		case strings.HasPrefix(line, "#"):
		case strings.HasPrefix(line, "*"):
			name = strings.TrimSpace(line[1:])
			cur.Reset()
			cur.WriteString(line)
		case strings.TrimSpace(line) == "COMMIT":
			cur.WriteString(line)
			tables[name] = chainCounterRe.ReplaceAllString(cur.String(), "$1 [0:0]")
		default:
			cur.WriteString(line)
		}
	}
	return tables
}

// compareWithOracle parses src and checks that bpfwall and the kernel agree:
// both fail at the same line, or both succeed with the same iptables-save
// text for every table.
func compareWithOracle(t *testing.T, name string, src []byte) {
	t.Helper()
	fam := DetectFamily(src, rules.IPv4)
	env := oracleEnv[name]
	want := runOracle(t, src, fam, env.setup)
	rs, err := Parse(name, src, Options{Family: fam, ForceFamily: true, Sets: env.sets})
	switch {
	case !want.ok && err == nil && (strings.Contains(want.stderr, "Couldn't load") || strings.Contains(want.stderr, "No such file or directory")):
		// An extension bpfwall keeps generically, which this machine's
		// iptables or kernel lacks.
		t.Skipf("this kernel or iptables lacks an extension the input uses: %s", strings.TrimSpace(want.stderr))
	case !want.ok && err == nil:
		t.Fatalf("iptables-restore failed (%s) but bpfwall accepted the input", strings.TrimSpace(want.stderr))
	case want.ok && err != nil:
		t.Fatalf("iptables-restore accepted the input but bpfwall failed: %v", err)
	case !want.ok:
		got := FailedLine(err)
		lines := strings.Split(string(src), "\n")
		atCommit := want.failLine > 0 && want.failLine <= len(lines) && strings.TrimSpace(lines[want.failLine-1]) == "COMMIT"
		// The kernel finds loops only when the table is committed; bpfwall
		// names the jump instead. bpfwall keeps extensions it does not
		// interpret without validating their arguments, so iptables may
		// reject such a line earlier.
		generic := want.failLine > 0 && want.failLine <= len(lines) && usesGenericExtension(lines[want.failLine-1])
		if got != want.failLine && !atCommit && !generic {
			t.Fatalf("iptables-restore failed at line %d (%s), bpfwall at line %d: %v", want.failLine, strings.TrimSpace(want.stderr), got, err)
		}
		return
	}
	got := splitSave(string(rs.Save(rules.SaveOptions{})))
	for table, text := range got {
		// Extensions bpfwall keeps uninterpreted print as written, not in
		// iptables' canonical form; compare the other rules exactly.
		w, wGeneric := dropGenericRules(want.tables[table])
		g, gGeneric := dropGenericRules(text)
		if w != g || wGeneric != gGeneric {
			t.Errorf("table %s differs from iptables-legacy-save (%d and %d rules with uninterpreted extensions):\n%s", table, wGeneric, gGeneric, lineDiff(w, g))
		}
	}
}

// dropGenericRules removes the rules that use uninterpreted extensions from
// save text and counts them.
func dropGenericRules(text string) (string, int) {
	var b strings.Builder
	n := 0
	for line := range strings.Lines(text) {
		if strings.HasPrefix(line, "-A ") && usesGenericExtension(line) {
			n++
			continue
		}
		b.WriteString(line)
	}
	return b.String(), n
}

// usesGenericExtension reports whether a rule line loads a match or target
// that bpfwall keeps without interpreting.
func usesGenericExtension(line string) bool {
	toks := tokenize(nil, line, 1)
	for i := 0; i+1 < len(toks); i++ {
		switch toks[i].text {
		case "-m", "--match":
			if _, ok := matchExts[toks[i+1].text]; !ok {
				return true
			}
		case "-j", "--jump":
			if knownTargets[toks[i+1].text] {
				return true
			}
		}
	}
	return false
}

// lineDiff lists the lines only one side has.
func lineDiff(want, got string) string {
	wl, gl := strings.Split(want, "\n"), strings.Split(got, "\n")
	var b strings.Builder
	for _, l := range wl {
		if !slices.Contains(gl, l) {
			fmt.Fprintf(&b, "-iptables %s\n", l)
		}
	}
	for _, l := range gl {
		if !slices.Contains(wl, l) {
			fmt.Fprintf(&b, "+bpfwall  %s\n", l)
		}
	}
	return b.String()
}

func requireOracle(t *testing.T) {
	t.Helper()
	testenv.RequireRoot(t)
	testenv.RequireTool(t, "unshare", "iptables-legacy-restore", "ip6tables-legacy-restore", "ipset", "nfacct")
}

// oracleEnv is what a real dump expects to exist on its host besides the
// rules: ipsets and nfacct objects.
var oracleEnv = map[string]struct {
	setup string
	sets  map[string]*rules.IPSet
}{
	"serverfault-759927-ipset.iptables-save": {
		setup: "ipset create whitelist hash:ip",
		sets:  realDumpSets["serverfault-759927-ipset.iptables-save"],
	},
	"k8s-kube-proxy-TestOverallIPTablesRules.restore": {setup: "nfacct add ct_state_invalid_dropped_pkts && nfacct add localhost_nps_accepted_pkts"},
}

// TestOracleRealDumps restores every real-world dump with the kernel and
// with bpfwall and compares the outcome.
func TestOracleRealDumps(t *testing.T) {
	requireOracle(t)
	dir := testenv.Corpus(t, "real")
	files, _ := filepath.Glob(filepath.Join(dir, "*"))
	for _, f := range files {
		base := filepath.Base(f)
		if base == "README.md" || base == "raw-anomalies" || strings.HasPrefix(base, "ufw-0.37-") && strings.HasSuffix(base, ".rules") {
			continue // ufw's .rules are fragments for restore -n; see TestCheckRealDumps
		}
		t.Run(base, func(t *testing.T) {
			src, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			compareWithOracle(t, base, src)
		})
	}
}

func TestOracleRawAnomalies(t *testing.T) {
	requireOracle(t)
	dir := testenv.Corpus(t, "real/raw-anomalies")
	files, _ := filepath.Glob(filepath.Join(dir, "*"))
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			src, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			compareWithOracle(t, filepath.Base(f), src)
		})
	}
}

// TestOracleRestoreCommands runs restore command sequences through the
// kernel and through bpfwall.
func TestOracleRestoreCommands(t *testing.T) {
	requireOracle(t)
	for _, tc := range restoreCases {
		t.Run(tc.name, func(t *testing.T) {
			compareWithOracle(t, tc.name, []byte(tc.input))
		})
	}
}

// restoreCases exercise restore commands and line handling. They are run
// against the kernel by TestOracleRestoreCommands and against fixed
// expectations by TestRestoreCommands.
var restoreCases = []struct {
	name  string
	input string
	// want is the expected iptables-save text of the filter table, or
	// "error N" for a failure at line N.
	want string
}{
	{"append and insert", `*filter
-A INPUT -s 10.0.0.1 -j ACCEPT
-A INPUT -s 10.0.0.2 -j ACCEPT
-I INPUT -s 10.0.0.3 -j DROP
-I INPUT 2 -s 10.0.0.4 -j DROP
-I INPUT 5 -s 10.0.0.5 -j DROP
COMMIT
`, `*filter
:INPUT ACCEPT [0:0]
:FORWARD ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
-A INPUT -s 10.0.0.3/32 -j DROP
-A INPUT -s 10.0.0.4/32 -j DROP
-A INPUT -s 10.0.0.1/32 -j ACCEPT
-A INPUT -s 10.0.0.2/32 -j ACCEPT
-A INPUT -s 10.0.0.5/32 -j DROP
COMMIT
`},
	{"sctp ports and chunk types", `*filter
-A INPUT -p sctp --dport 50000 -j ACCEPT
-A INPUT -p sctp -m sctp ! --sport :1024 --dport 7: -j DROP
-A INPUT -p sctp -m sctp --sport 0:65535 -j DROP
-A INPUT -p sctp -m sctp ! --chunk-types any data:Ie,Init,ABORT:T -j DROP
COMMIT
`, `*filter
:INPUT ACCEPT [0:0]
:FORWARD ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
-A INPUT -p sctp -m sctp --dport 50000 -j ACCEPT
-A INPUT -p sctp -m sctp ! --sport 0:1024 --dport 7:65535 -j DROP
-A INPUT -p sctp -m sctp --sport 0:65535 -j DROP
-A INPUT -p sctp -m sctp ! --chunk-types any DATA:Ie,INIT,ABORT:T -j DROP
COMMIT
`},
	{"sctp needs its protocol", `*filter
-A INPUT -p sctp -m sctp --dport 1 -j ACCEPT
-A INPUT -p udp -m sctp --dport 1 -j ACCEPT
COMMIT
`, "error 3"},
	{"sctp chunk types are checked", `*filter
-A INPUT -p sctp -m sctp --chunk-types all DATA -j ACCEPT
-A INPUT -p sctp -m sctp --chunk-types all FOO -j ACCEPT
COMMIT
`, "error 3"},
	{"insert past the end", `*filter
-A INPUT -j ACCEPT
-I INPUT 3 -j DROP
COMMIT
`, "error 3"},
	{"address lists expand; insert reverses them", `*filter
-A INPUT -s 10.0.0.1,10.0.0.2 -d 10.1.0.0/16,10.2.0.0/16 -j ACCEPT
-I INPUT -s 192.0.2.1,192.0.2.2 -j DROP
COMMIT
`, `*filter
:INPUT ACCEPT [0:0]
:FORWARD ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
-A INPUT -s 192.0.2.2/32 -j DROP
-A INPUT -s 192.0.2.1/32 -j DROP
-A INPUT -s 10.0.0.1/32 -d 10.1.0.0/16 -j ACCEPT
-A INPUT -s 10.0.0.1/32 -d 10.2.0.0/16 -j ACCEPT
-A INPUT -s 10.0.0.2/32 -d 10.1.0.0/16 -j ACCEPT
-A INPUT -s 10.0.0.2/32 -d 10.2.0.0/16 -j ACCEPT
COMMIT
`},
	{"delete by number and by rule", `*filter
-A INPUT -s 10.0.0.1 -j ACCEPT
-A INPUT -s 10.0.0.2 -j ACCEPT
-A INPUT -s 10.0.0.3 -j ACCEPT
-A INPUT -s 10.0.0.2 -j ACCEPT
-D INPUT 1
-D INPUT -s 10.0.0.2/32 -j ACCEPT
COMMIT
`, `*filter
:INPUT ACCEPT [0:0]
:FORWARD ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
-A INPUT -s 10.0.0.3/32 -j ACCEPT
-A INPUT -s 10.0.0.2/32 -j ACCEPT
COMMIT
`},
	{"delete a rule that does not exist", `*filter
-A INPUT -s 10.0.0.1 -j ACCEPT
-D INPUT -s 10.0.0.1 -j DROP
COMMIT
`, "error 3"},
	{"delete past the end", `*filter
-D INPUT 1
COMMIT
`, "error 2"},
	{"replace", `*filter
-A INPUT -s 10.0.0.1 -j ACCEPT
-A INPUT -s 10.0.0.2 -j ACCEPT
-R INPUT 2 -s 10.0.0.9 -j DROP
COMMIT
`, `*filter
:INPUT ACCEPT [0:0]
:FORWARD ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
-A INPUT -s 10.0.0.1/32 -j ACCEPT
-A INPUT -s 10.0.0.9/32 -j DROP
COMMIT
`},
	{"replace needs one address", `*filter
-A INPUT -j ACCEPT
-R INPUT 1 -s 10.0.0.1,10.0.0.2 -j DROP
COMMIT
`, "error 3"},
	{"new chain, rename keeps references", `*filter
-N web
-A web -p tcp -j ACCEPT
-A INPUT -j web
-E web www
-A INPUT -g www
COMMIT
`, `*filter
:INPUT ACCEPT [0:0]
:FORWARD ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
:www - [0:0]
-A INPUT -j www
-A INPUT -g www
-A www -p tcp -j ACCEPT
COMMIT
`},
	{"user chains print sorted", `*filter
:zeta - [0:0]
:alpha - [0:0]
:INPUT DROP [5:10]
-A zeta -j RETURN
-A alpha -j RETURN
COMMIT
`, `*filter
:INPUT DROP [0:0]
:FORWARD ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
:alpha - [0:0]
:zeta - [0:0]
-A alpha -j RETURN
-A zeta -j RETURN
COMMIT
`},
	{"flush, zero, delete chains", `*filter
:a - [0:0]
:b - [0:0]
-A a -j ACCEPT
-A INPUT -j a
-A INPUT -j DROP
-Z
-F INPUT
-X b
-F a
-X a
-P FORWARD DROP
COMMIT
`, `*filter
:INPUT ACCEPT [0:0]
:FORWARD DROP [0:0]
:OUTPUT ACCEPT [0:0]
COMMIT
`},
	{"delete a chain in use", `*filter
:a - [0:0]
-A INPUT -j a
-X a
COMMIT
`, "error 4"},
	{"delete a chain that is not empty", `*filter
:a - [0:0]
-A a -j ACCEPT
-X a
COMMIT
`, "error 4"},
	{"jump to a missing chain", `*filter
-A INPUT -j nosuchchain
COMMIT
`, "error 2"},
	{"policy on a user chain", `*filter
:a ACCEPT [0:0]
COMMIT
`, "error 2"},
	{"chain declared twice", `*filter
:a - [0:0]
:a - [0:0]
COMMIT
`, "error 3"},
	{"new chain that exists", `*filter
:a - [0:0]
-N a
COMMIT
`, "error 3"},
	{"loop", `*filter
:a - [0:0]
:b - [0:0]
-A a -j b
-A b -j a
-A INPUT -j a
COMMIT
`, "error 5"},
	{"table without COMMIT", `*filter
-A INPUT -j ACCEPT
`, "error 3"},
	{"line outside a table", `-A INPUT -j ACCEPT
`, "error 1"},
	{"-t inside a table", `*filter
-t filter -A INPUT -j ACCEPT
COMMIT
`, "error 2"},
	{"COMMIT with a trailing blank is a command", `*filter
-A INPUT -j ACCEPT
COMMIT 
`, "error 3"},
	{"-6 lines are skipped", `*filter
-A INPUT -6 -s ::1 -j ACCEPT
-A INPUT -4 -s 10.0.0.1 -j DROP
COMMIT
`, `*filter
:INPUT ACCEPT [0:0]
:FORWARD ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
-A INPUT -s 10.0.0.1/32 -j DROP
COMMIT
`},
	{"counters, comments, blank lines and a spaced table name", `# comment

* filter
:INPUT ACCEPT [12:34]
# another
[1:2] -A INPUT -j ACCEPT
-A INPUT -c 3 4 -j DROP
COMMIT
`, `*filter
:INPUT ACCEPT [0:0]
:FORWARD ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
-A INPUT -j ACCEPT
-A INPUT -j DROP
COMMIT
`},
	{"second block of a table flushes the first", `*filter
:a - [0:0]
-A INPUT -j DROP
COMMIT
*filter
-A INPUT -j ACCEPT
COMMIT
`, `*filter
:INPUT ACCEPT [0:0]
:FORWARD ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
-A INPUT -j ACCEPT
COMMIT
`},
	{"long options and clustered flags", `*filter
--append INPUT --source 10.1.2.3/255.255.0.0 --in-interface eth0 -p tcp -vj ACCEPT
-A INPUT ! --src 10.0.0.0/8 ! -i eth+ -j DROP
COMMIT
`, `*filter
:INPUT ACCEPT [0:0]
:FORWARD ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
-A INPUT -s 10.1.0.0/16 -i eth0 -p tcp -j ACCEPT
-A INPUT ! -s 10.0.0.0/8 ! -i eth+ -j DROP
COMMIT
`},
	{"non-contiguous masks and short addresses", `*filter
-A INPUT -s 10.11.12.13/255.0.255.0 -d 10.1 -j DROP
COMMIT
`, `*filter
:INPUT ACCEPT [0:0]
:FORWARD ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
-A INPUT -s 10.0.12.0/255.0.255.0 -d 10.1.0.0/32 -j DROP
COMMIT
`},
	{"protocols and fragments", `*filter
-A INPUT ! -p udp -f -j DROP
-A INPUT -p 47 ! -f -j ACCEPT
-A INPUT -p all -j ACCEPT
COMMIT
`, `*filter
:INPUT ACCEPT [0:0]
:FORWARD ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
-A INPUT ! -p udp -f -j DROP
-A INPUT -p gre ! -f -j ACCEPT
-A INPUT -j ACCEPT
COMMIT
`},
	{"the newest instance of a match gets its options", `*filter
-A INPUT -p udp -m multiport ! --sports 53,5353 -m multiport --ports 67:68 -j DROP
-A INPUT -p tcp -m tcp --dport 22 -m multiport --dports 80,443 -m tcp --sport 1000 -j DROP
COMMIT
`, `*filter
:INPUT ACCEPT [0:0]
:FORWARD ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
-A INPUT -p udp -m multiport ! --sports 53,5353 -m multiport --ports 67:68 -j DROP
-A INPUT -p tcp -m tcp --dport 22 -m multiport --dports 80,443 -m tcp --sport 1000 -j DROP
COMMIT
`},
	{"-o in INPUT", `*filter
-A INPUT -o eth0 -j DROP
COMMIT
`, "error 2"},
	{"-i in OUTPUT", `*filter
-A OUTPUT -i eth0 -j DROP
COMMIT
`, "error 2"},
	{"-i in a user chain", `*filter
:x - [0:0]
-A x -i eth0 -o eth1 -j DROP
COMMIT
`, `*filter
:INPUT ACCEPT [0:0]
:FORWARD ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
:x - [0:0]
-A x -i eth0 -o eth1 -j DROP
COMMIT
`},
	{"never matching protocol", `*filter
-A INPUT ! -p all -j DROP
COMMIT
`, "error 2"},
	{"rule without target", `*filter
-A INPUT -s 10.0.0.1
COMMIT
`, `*filter
:INPUT ACCEPT [0:0]
:FORWARD ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
-A INPUT -s 10.0.0.1/32
COMMIT
`},
	{"intrapositioned negation", `*filter
-A INPUT -s ! 10.0.0.1 -j DROP
COMMIT
`, "error 2"},
	{"interface name too long", `*filter
-A INPUT -i abcdefghijklmnop -j DROP
COMMIT
`, "error 2"},
}
