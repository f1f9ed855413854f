package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/spf13/pflag"

	"bpfwall/internal/testenv"
)

// writeManPages runs bpfwall man --dir and returns the directory.
func writeManPages(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	if _, errOut, code := runCmd(t, "man", "--dir", dir); code != 0 {
		t.Fatalf("man --dir: exit %d: %s", code, errOut)
	}
	return dir
}

// roffOption is how a page spells an option or a name:
// "\fB\%\-\-noflush\fR".
func roffOption(opt string) string {
	return `\fB\%` + strings.ReplaceAll(opt, "-", `\-`) + `\fR`
}

// TestManPages: bpfwall(8) and a page per command, the same on stdout
// and on every run; bpfwall(8) lists every command in its synopsis and
// points at its page.
func TestManPages(t *testing.T) {
	dir := writeManPages(t)
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var files []string
	for _, e := range entries {
		files = append(files, e.Name())
	}
	top, err := os.ReadFile(filepath.Join(dir, "bpfwall.8"))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"bpfwall.8"}
	for _, c := range commands {
		want = append(want, "bpfwall-"+c.name+".8")
		for _, s := range []string{`.SY "bpfwall ` + c.name + `"`, roffOption("bpfwall-"+c.name) + "(8)"} {
			if !strings.Contains(string(top), s) {
				t.Errorf("bpfwall.8 does not contain %q", s)
			}
		}
	}
	slices.Sort(want)
	if !slices.Equal(files, want) {
		t.Errorf("man --dir wrote %q, want %q", files, want)
	}
	for _, s := range []string{".SH EXIT STATUS", roffOption("BPFWALL_ROOT"), roffOption("BPFWALL_LOCKFILE"), roffOption("iptables-restore") + "(8)", roffOption("bpftool") + "(8)"} {
		if !strings.Contains(string(top), s) {
			t.Errorf("bpfwall.8 does not contain %q", s)
		}
	}

	out, errOut, code := runCmd(t, "man")
	if code != 0 || out != string(top) {
		t.Errorf("man: exit %d, stderr %q; stdout differs from bpfwall.8: %t", code, errOut, out != string(top))
	}
	again := writeManPages(t)
	for _, name := range files {
		a, _ := os.ReadFile(filepath.Join(dir, name))
		b, _ := os.ReadFile(filepath.Join(again, name))
		if string(a) != string(b) {
			t.Errorf("%s differs between two runs", name)
		}
	}
	if _, _, code := runCmd(t, "man", "extra"); code != 2 {
		t.Errorf("man extra: exit %d, want 2", code)
	}
}

// TestManRestoreOptions: every option restore --help lists is in
// bpfwall-restore.8, as an option entry, with its value's name.
func TestManRestoreOptions(t *testing.T) {
	help, _, code := runCmd(t, "restore", "--help")
	if code != 0 {
		t.Fatalf("restore --help: exit %d", code)
	}
	page, err := os.ReadFile(filepath.Join(writeManPages(t), "bpfwall-restore.8"))
	if err != nil {
		t.Fatal(err)
	}
	// "  -T, --table TABLE   restore only TABLE of the input", and
	// "  -w, --wait SECS[=forever]", whose value may be left out.
	line := regexp.MustCompile(`(?m)^  (?:-(\S), |    )--([a-z0-9-]+)(?: ([A-Z]+)(\[=)?)?`)
	found := line.FindAllStringSubmatch(help, -1)
	if len(found) < 10 {
		t.Fatalf("read %d options from restore --help:\n%s", len(found), help)
	}
	for _, m := range found {
		tag := roffOption("--" + m[2])
		if m[1] != "" {
			tag = roffOption("-"+m[1]) + ", " + tag
		}
		switch {
		case m[4] != "":
			tag += ` [\fI\%` + m[3] + `\fR]`
		case m[3] != "":
			tag += ` \fI\%` + m[3] + `\fR`
		}
		if !strings.Contains(string(page), ".TP\n"+tag) {
			t.Errorf("bpfwall-restore.8 has no entry %q for %q", tag, m[0])
		}
	}
}

// TestManGroff: every page renders without a warning.
func TestManGroff(t *testing.T) {
	testenv.RequireTool(t, "groff")
	dir := writeManPages(t)
	pages, _ := filepath.Glob(filepath.Join(dir, "*.8"))
	if len(pages) != len(commands)+1 {
		t.Fatalf("%d pages, want %d", len(pages), len(commands)+1)
	}
	for _, p := range pages {
		out, err := exec.Command("groff", "-man", "-Tutf8", "-ww", "-z", p).CombinedOutput()
		if err != nil || len(out) != 0 {
			t.Errorf("groff -man -Tutf8 -ww -z %s: %v\n%s", filepath.Base(p), err, out)
		}
	}
}

// TestManFlagUsages reads pflag's help of every kind of option back.
func TestManFlagUsages(t *testing.T) {
	fs := pflag.NewFlagSet("x", pflag.ContinueOnError)
	fs.SortFlags = false
	fs.BoolP("test", "t", false, "parse only")
	fs.CountP("verbose", "v", "say more")
	fs.StringP("table", "T", "", "restore only `TABLE`")
	fs.String("hook", "xdp", "the hook")
	var w waitFlags
	w.register(fs)
	var l levelFlags
	l.register(fs)
	fs.Int("count", 0, "first line\nsecond line")
	got, err := parseFlagUsages(fs.FlagUsages())
	if err != nil {
		t.Fatal(err)
	}
	want := []option{
		{short: "t", long: "test", usage: "parse only"},
		{short: "v", long: "verbose", usage: "say more"},
		{short: "T", long: "table", arg: "TABLE", usage: "restore only TABLE"},
		{long: "hook", arg: "string", usage: `the hook (default "xdp")`},
		{short: "w", long: "wait", arg: "SECS", optionalArg: true, usage: "wait for another bpfwall command to finish: up to SECS, or without SECS as long as it takes"},
		{short: "W", long: "wait-interval", arg: "USECS", usage: "with -w, retry the lock every USECS microseconds (default 50000)"},
		{short: "O", long: "optimize", arg: "LEVEL", optionalArg: true, usage: "optimization LEVEL: 0, the plain rule-by-rule program, or 1, all optimizations (default 1)"},
		{long: "count", arg: "int", usage: "first line second line"},
	}
	if !slices.Equal(got, want) {
		t.Errorf("parseFlagUsages of\n%s\ngot  %+v\nwant %+v", fs.FlagUsages(), got, want)
	}
	if _, err := parseFlagUsages("usage: bpfwall x\n"); err == nil {
		t.Error("parseFlagUsages took a line that is not an option")
	}
}

// TestManRoff: text cannot turn into requests or escapes, and the
// synopsis sets options in bold and values in italics.
func TestManRoff(t *testing.T) {
	tests := []struct {
		name, in, want string
		f              func(string) string
	}{
		{"backslash", `a\b`, `a\eb`, roffEscape},
		{"hyphens", "--no-flush", `\-\-no\-flush`, roffEscape},
		{"quotes", "it's \"x\" `y`", `it\(aqs \(dqx\(dq \(gay\(ga`, roffEscape},
		{"options and values", "[-w [SECS]] -i IFACE... FILE", `[\fB\%\-w\fR\ [\fI\%SECS\fR]] \fB\%\-i\fR\ \fI\%IFACE\fR... \fI\%FILE\fR`, synopsisArgs},
		{"alternatives", "(FILE | --from-kernel) [-O0|-O1]", `(\fI\%FILE\fR\ |\ \fB\%\-\-from\-kernel\fR) [\fB\%\-O0\fR|\fB\%\-O1\fR]`, synopsisArgs},
		{"lists", "[--sizes N,...] bash|zsh", `[\fB\%\-\-sizes\fR\ \fI\%N\fR,...] \fB\%bash\fR|\fB\%zsh\fR`, synopsisArgs},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.f(tt.in); got != tt.want {
				t.Errorf("%q: got %q, want %q", tt.in, got, tt.want)
			}
		})
	}
	var w roffWriter
	w.text(".SH not a request")
	w.text("'quoted")
	w.line("'escaped elsewhere")
	if got, want := w.String(), "\\&.SH not a request\n\\(aqquoted\n\\&'escaped elsewhere\n"; got != want {
		t.Errorf("text lines: got %q, want %q", got, want)
	}
}

// TestManTitle: the title's date is the commit's, never the day's.
func TestManTitle(t *testing.T) {
	tests := []struct {
		name string
		info *debug.BuildInfo
		want titleSource
	}{
		{"no build information", nil, titleSource{version: "bpfwall"}},
		{"devel without vcs", &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}}, titleSource{version: "bpfwall"}},
		{"vcs time", &debug.BuildInfo{
			Main:     debug.Module{Version: "(devel)"},
			Settings: []debug.BuildSetting{{Key: "vcs.time", Value: "2025-03-04T05:06:07Z"}},
		}, titleSource{version: "bpfwall", date: "2025-03-04"}},
		{"tag", &debug.BuildInfo{Main: debug.Module{Version: "v1.2.0"}}, titleSource{version: "bpfwall v1.2.0"}},
		{"pseudo-version", &debug.BuildInfo{Main: debug.Module{Version: "v0.0.0-20240102030405-0123456789ab"}},
			titleSource{version: "bpfwall v0.0.0-20240102030405-0123456789ab", date: "2024-01-02"}},
		{"pseudo-version of a changed tree", &debug.BuildInfo{Main: debug.Module{Version: "v1.2.1-0.20240102030405-0123456789ab+dirty"}},
			titleSource{version: "bpfwall v1.2.1-0.20240102030405-0123456789ab+dirty", date: "2024-01-02"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := titleFrom(tt.info); got != tt.want {
				t.Errorf("got %+v, want %+v", got, tt.want)
			}
		})
	}
}

// TestCompletionBash: the bash script registers itself and completes
// command names, a command's options and the shells of completion.
func TestCompletionBash(t *testing.T) {
	testenv.RequireTool(t, "bash")
	script, errOut, code := runCmd(t, "completion", "bash")
	if code != 0 {
		t.Fatalf("completion bash: exit %d: %s", code, errOut)
	}
	file := writeFile(t, "bpfwall.bash", script)
	tests := []struct {
		name  string
		words string // COMP_WORDS, the last being completed
		want  string // in COMPREPLY
		not   string // not in COMPREPLY
	}{
		{"command", "bpfwall res", "restore", "save"},
		{"long option", "bpfwall restore --no", "--noflush", "--test"},
		{"short option", "bpfwall save -", "-t", "--noflush"},
		{"shell", "bpfwall completion ''", "fish", "--help"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			words := strings.Fields(tt.words)
			prog := `source "$1" && complete -p bpfwall && COMP_WORDS=(` + tt.words + `) && COMP_CWORD=` +
				strconv.Itoa(len(words)-1) + ` && _bpfwall && printf '%s\n' "${COMPREPLY[@]}"`
			out, err := exec.Command("bash", "--norc", "--noprofile", "-c", prog, "bash", file).CombinedOutput()
			if err != nil {
				t.Fatalf("bash: %v\n%s", err, out)
			}
			lines := strings.Split(strings.TrimSpace(string(out)), "\n")
			if lines[0] != "complete -o default -F _bpfwall bpfwall" {
				t.Errorf("complete -p bpfwall: %q", lines[0])
			}
			if reply := lines[1:]; !slices.Contains(reply, tt.want) || slices.Contains(reply, tt.not) {
				t.Errorf("COMPREPLY for %q = %q, want %q and not %q", tt.words, reply, tt.want, tt.not)
			}
		})
	}
}

// TestCompletionScripts: every shell's script names every command and
// restore's options, and is valid for its shell where that is installed.
func TestCompletionScripts(t *testing.T) {
	syntax := map[string][]string{"bash": {"bash", "-n"}, "zsh": {"zsh", "-n"}, "fish": {"fish", "--no-execute"}}
	for _, shell := range completionShells {
		t.Run(shell, func(t *testing.T) {
			script, errOut, code := runCmd(t, "completion", shell)
			if code != 0 {
				t.Fatalf("completion %s: exit %d: %s", shell, code, errOut)
			}
			for _, c := range commands {
				if !strings.Contains(script, c.name) {
					t.Errorf("no command %s", c.name)
				}
			}
			for _, opt := range []string{"noflush", "wait-interval", "table"} {
				if !strings.Contains(script, opt) {
					t.Errorf("no option --%s", opt)
				}
			}
			cmd := syntax[shell]
			if _, err := exec.LookPath(cmd[0]); err != nil {
				t.Logf("%s not installed: syntax not checked", cmd[0])
				return
			}
			out, err := exec.Command(cmd[0], append(cmd[1:], writeFile(t, "script", script))...).CombinedOutput()
			if err != nil {
				t.Errorf("%s: %v\n%s", strings.Join(cmd, " "), err, out)
			}
		})
	}
	if _, _, code := runCmd(t, "completion", "ksh"); code != 2 {
		t.Errorf("completion ksh: exit %d, want 2", code)
	}
}

// TestInstall: make install puts the binary, the pages, the completion
// and the units, naming the installed binary, under DESTDIR and PREFIX;
// make uninstall removes them.
func TestInstall(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	testenv.RequireTool(t, "make", "man")
	dest := t.TempDir()
	vars := []string{"DESTDIR=" + dest, "PREFIX=/usr"}
	runMake := func(target string) {
		t.Helper()
		cmd := exec.Command("make", append([]string{"-C", "../..", target}, vars...)...)
		cmd.Env = os.Environ() // GOFLAGS and all as they are
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("make %s: %v\n%s", target, err, out)
		}
	}
	runMake("install")
	files := []string{
		"usr/bin/bpfwall",
		"usr/share/man/man8/bpfwall.8",
		"usr/share/bash-completion/completions/bpfwall",
		"usr/lib/systemd/system/bpfwall.service",
		"usr/lib/systemd/system/bpfwall6.service",
	}
	for _, c := range commands {
		files = append(files, "usr/share/man/man8/bpfwall-"+c.name+".8")
	}
	for _, f := range files {
		if _, err := os.Stat(filepath.Join(dest, f)); err != nil {
			t.Error(err)
		}
	}
	if fi, err := os.Stat(filepath.Join(dest, "usr/bin/bpfwall")); err == nil && fi.Mode().Perm()&0o111 == 0 {
		t.Errorf("usr/bin/bpfwall is not executable: %v", fi.Mode())
	}
	for _, unit := range []string{"bpfwall.service", "bpfwall6.service"} {
		text, err := os.ReadFile(filepath.Join(dest, "usr/lib/systemd/system", unit))
		if err != nil {
			continue // reported above
		}
		if n := strings.Count(string(text), "=/usr/bin/bpfwall "); n != 3 || strings.Contains(string(text), "/usr/local/bin/bpfwall") {
			t.Errorf("%s names /usr/bin/bpfwall %d times, want 3 (start, reload, stop), and /usr/local/bin/bpfwall never:\n%s", unit, n, text)
		}
	}
	for _, page := range []string{"bpfwall.8", "bpfwall-restore.8"} {
		cmd := exec.Command("man", "-l", filepath.Join(dest, "usr/share/man/man8", page))
		cmd.Env = append(os.Environ(), "MANPAGER=cat")
		out, err := cmd.Output()
		if err != nil || !strings.Contains(string(out), "SYNOPSIS") {
			t.Errorf("man -l %s: %v\n%.300s", page, err, out)
		}
	}
	runMake("uninstall")
	for _, f := range files {
		if _, err := os.Stat(filepath.Join(dest, f)); err == nil {
			t.Errorf("%s is left after make uninstall", f)
		}
	}
}
