package main

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
)

func TestJoinOptionalValues(t *testing.T) {
	fs := pflag.NewFlagSet("t", pflag.ContinueOnError)
	var w waitFlags
	w.register(fs)
	var l levelFlags
	l.register(fs)
	fs.BoolP("test", "t", false, "")
	tests := []struct{ in, want []string }{
		{[]string{"-w", "5", "f"}, []string{"--wait=5", "f"}},
		{[]string{"--wait", "0.5"}, []string{"--wait=0.5"}},
		{[]string{"-w5"}, []string{"--wait=5"}},
		{[]string{"-w", "f"}, []string{"-w", "f"}},
		{[]string{"-O0"}, []string{"--optimize=0"}},
		{[]string{"-O", "1"}, []string{"--optimize=1"}},
		{[]string{"-t", "5"}, []string{"-t", "5"}},
		{[]string{"--", "-w", "5"}, []string{"--", "-w", "5"}},
	}
	for _, tc := range tests {
		if got := joinOptionalValues(fs, tc.in); !slices.Equal(got, tc.want) {
			t.Errorf("%q: %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestWaitFlags(t *testing.T) {
	tests := []struct {
		args     []string
		timeout  time.Duration
		interval time.Duration
	}{
		{nil, 0, 0},
		{[]string{"-w"}, -1, 0},
		{[]string{"--wait"}, -1, 0},
		{[]string{"-w", "2"}, 2 * time.Second, 0},
		{[]string{"-w0.25", "-W", "1000"}, 250 * time.Millisecond, time.Millisecond},
		{[]string{"--wait=3", "--wait-interval=20"}, 3 * time.Second, 20 * time.Microsecond},
	}
	for _, tc := range tests {
		fs := pflag.NewFlagSet("t", pflag.ContinueOnError)
		var w waitFlags
		w.register(fs)
		if _, err := parseFlags(fs, tc.args); err != nil {
			t.Errorf("%q: %v", tc.args, err)
			continue
		}
		if w.timeout() != tc.timeout || w.interval != tc.interval {
			t.Errorf("%q: wait %v every %v, want %v every %v", tc.args, w.timeout(), w.interval, tc.timeout, tc.interval)
		}
	}
	for _, bad := range [][]string{{"--wait=x"}, {"--wait=-1"}, {"-W", "x"}} {
		fs := pflag.NewFlagSet("t", pflag.ContinueOnError)
		var w waitFlags
		w.register(fs)
		if _, err := parseFlags(fs, bad); err == nil {
			t.Errorf("%q: accepted", bad)
		}
	}
}

// TestHelp: -h and --help print the help on stdout and exit 0, as
// iptables does; an unknown option is a usage error (2) that says where
// help is.
func TestHelp(t *testing.T) {
	for _, args := range [][]string{{"-h"}, {"--help"}, {"restore", "-h"}, {"save", "--help"}, {"check", "-h"}} {
		out, errOut, code := runCmd(t, args...)
		if code != 0 || errOut != "" || !strings.Contains(out, "usage: bpfwall") {
			t.Errorf("bpfwall %s: exit %d, stdout %q, stderr %q", strings.Join(args, " "), code, out, errOut)
		}
	}
	out, _, _ := runCmd(t, "restore", "--help")
	for _, opt := range []string{"--test", "--noflush", "--counters", "--verbose", "--table", "--wait", "--wait-interval", "--modprobe", "--ipv4", "--ipv6", "--version"} {
		if !strings.Contains(out, opt) {
			t.Errorf("restore --help does not list %s:\n%s", opt, out)
		}
	}
	_, errOut, code := runCmd(t, "restore", "--bogus")
	if code != 2 || !strings.Contains(errOut, "unknown flag: --bogus") || !strings.Contains(errOut, "(try `bpfwall restore --help')") {
		t.Errorf("restore --bogus: exit %d, stderr %q", code, errOut)
	}
	for _, args := range [][]string{{"restore", "-V"}, {"restore", "--version"}, {"save", "-V"}} {
		out, errOut, code := runCmd(t, args...)
		if code != 0 || !strings.HasPrefix(out, "bpfwall ") {
			t.Errorf("bpfwall %s: exit %d, stdout %q, stderr %q", strings.Join(args, " "), code, out, errOut)
		}
	}
}

// TestBundledOptions: short options bundle and take attached values, as
// getopt's do.
func TestBundledOptions(t *testing.T) {
	v6 := writeFile(t, "v6.rules", "*filter\n-A INPUT -s 2001:db8::1 -j DROP\nCOMMIT\n")
	for _, args := range [][]string{{"check", "-n6", v6}, {"check", "--ipv6", v6}, {"fmt", "-c6", v6}} {
		out, errOut, code := runCmd(t, args...)
		if code != 0 || !strings.Contains(out, "2001:db8::1") && !strings.Contains(out, "ipv6") {
			t.Errorf("bpfwall %s: exit %d, stdout %q, stderr %q", strings.Join(args, " "), code, out, errOut)
		}
	}
	if _, errOut, code := runCmd(t, "check", "-4", "-6", v6); code != 2 || !strings.Contains(errOut, "exclude each other") {
		t.Errorf("check -4 -6: exit %d, stderr %q", code, errOut)
	}
	if _, errOut, code := runCmd(t, "compile", "--dump", "-O2", example); code != 2 || !strings.Contains(errOut, "-O2") {
		t.Errorf("compile -O2: exit %d, stderr %q", code, errOut)
	}
	out, errOut, code := runCmd(t, "compile", "--dump", "-O0", example)
	if code != 0 || !strings.HasPrefix(out, "; bpfwall -O0 ") {
		t.Errorf("compile --dump -O0: exit %d, stderr %q, stdout %.80q", code, errOut, out)
	}
}

// TestWarningsOncePerCause: a warning given for many rules is one line,
// at the first, counting the others; -q silences warnings.
func TestWarningsOncePerCause(t *testing.T) {
	var b strings.Builder
	b.WriteString("*filter\n")
	for i := range 9 {
		fmt.Fprintf(&b, "-A INPUT -p tcp --dport %d -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT\n", 100+i)
	}
	b.WriteString("COMMIT\n")
	f := writeFile(t, "ct.rules", b.String())
	_, errOut, code := runCmd(t, "compile", "--dump", f)
	want := f + ":2:"
	if code != 0 || strings.Count(errOut, "\n") != 1 || !strings.HasPrefix(errOut, want) ||
		!strings.HasSuffix(errOut, "(also 8 more rules: line 3, 4, 5, 6, 7, and 3 more)\n") {
		t.Errorf("exit %d, stderr %q; want one line at %s counting 8 more rules", code, errOut, want)
	}
	if _, errOut, code := runCmd(t, "compile", "--dump", "-q", f); code != 0 || errOut != "" {
		t.Errorf("-q: exit %d, stderr %q", code, errOut)
	}
}
