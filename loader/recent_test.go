package loader

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"bpfwall/codegen"
	"bpfwall/internal/testenv"
)

// TestRecentParameters: the loader accepts xt_recent's defaults and an
// absent module, and refuses other table sizes.
func TestRecentParameters(t *testing.T) {
	cases := []struct {
		name    string
		files   map[string]string
		wantErr string
	}{
		{"defaults", map[string]string{"ip_list_tot": "100\n", "ip_pkt_list_tot": "0\n", "ip_list_hash_size": "128\n"}, ""},
		{"no module", nil, ""},
		{"more addresses", map[string]string{"ip_list_tot": "200\n", "ip_pkt_list_tot": "0\n"}, "ip_list_tot is 200 in this kernel, bpfwall's recent tables are built for 100"},
		{"fixed stamps", map[string]string{"ip_list_tot": "100\n", "ip_pkt_list_tot": "20\n"}, "ip_pkt_list_tot is 20"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			for name, text := range tc.files {
				if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			err := checkRecentParameters(dir)
			if tc.wantErr == "" && err != nil || tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
				t.Errorf("error %v, want %q", err, tc.wantErr)
			}
		})
	}
	// This machine's kernel is the one bpfwall is built for; only root
	// may read some of xt_recent's parameters.
	t.Run("this kernel", func(t *testing.T) {
		testenv.RequireRoot(t)
		if _, err := os.Stat(recentParametersDir); err == nil {
			if err := checkRecentParameters(recentParametersDir); err != nil {
				t.Errorf("this kernel: %v", err)
			}
		}
	})
}

// TestRecentTooLargeNamesRule: a program whose recent matches' loops
// exhaust the verifier's steps is refused at the costliest recent match's
// position, not with the verifier's log alone.
func TestRecentTooLargeNamesRule(t *testing.T) {
	testenv.RequireRoot(t)
	var b strings.Builder
	b.WriteString("*filter\n:INPUT ACCEPT [0:0]\n:FORWARD ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n")
	b.WriteString("-A INPUT -p udp -m recent --rcheck --name small\n")
	for i := range 40 {
		fmt.Fprintf(&b, "-A INPUT -p udp -m udp --dport %d -m recent --update --seconds 60 --hitcount 1000 --reap --name T%d -j DROP\n", 1000+i, i)
	}
	b.WriteString("COMMIT\n")
	_, p := compileText(t, codegen.HookXDP, b.String())
	l, err := Load(p, Options{})
	if err == nil {
		l.Close()
		t.Fatal("40 recent matches with 1024-stamp rings and --reap loaded")
	}
	if !errors.Is(err, ErrTooLarge) {
		t.Fatalf("error %v, want ErrTooLarge", err)
	}
	// The first of the heavy rules (line 6), at its recent match.
	if want := "test.rules:6:38: recent match (a ring of 1024 stamps)"; !strings.HasPrefix(err.Error(), want) {
		t.Errorf("error %.300s, want it to start with %q", err, want)
	}
}

// TestRecentConfig: xt_recent loads on demand, so parameters it would get
// from modprobe's configuration or the kernel's command line are refused
// as the loaded module's are; a file of an earlier directory hides one of
// the same name in a later one.
func TestRecentConfig(t *testing.T) {
	cases := []struct {
		name    string
		etc     map[string]string // files of the first directory
		lib     map[string]string // of the last
		cmdline string
		wantErr string
	}{
		{"nothing", nil, nil, "", ""},
		{"other modules and parameters", map[string]string{"a.conf": "options nf_conntrack hashsize=1\noptions xt_recent ip_list_perms=0600 ip_list_hash_size=64\n"}, nil, "quiet xt_hashlimit.x=1", ""},
		{"defaults spelled out", map[string]string{"a.conf": "options xt_recent ip_list_tot=100 ip_pkt_list_tot=0\n"}, nil, "xt_recent.ip_list_tot=100", ""},
		{"modprobe.d", nil, map[string]string{"r.conf": "# comment\noptions xt_recent ip_list_tot=1000\n"}, "", "r.conf:2 sets xt_recent's ip_list_tot to 1000"},
		{"continued line, dash", map[string]string{"r.conf": "options xt-recent \\\n ip_pkt_list_tot=20\n"}, nil, "", "r.conf:1 sets xt_recent's ip_pkt_list_tot to 20"},
		{"hidden by an earlier file", map[string]string{"r.conf": "\n"}, map[string]string{"r.conf": "options xt_recent ip_list_tot=1000\n"}, "", ""},
		{"not a number", map[string]string{"r.conf": "options xt_recent ip_list_tot=lots\n"}, nil, "", "sets xt_recent's ip_list_tot to lots"},
		{"command line", nil, nil, "ro quiet xt_recent.ip_pkt_list_tot=50", "the kernel's command line sets xt_recent's ip_pkt_list_tot to 50"},
		{"init's arguments", nil, nil, "quiet -- xt_recent.ip_list_tot=5", ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			etc, lib := t.TempDir(), t.TempDir()
			for dir, files := range map[string]map[string]string{etc: tc.etc, lib: tc.lib} {
				for name, text := range files {
					if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o600); err != nil {
						t.Fatal(err)
					}
				}
			}
			cmdline := filepath.Join(t.TempDir(), "cmdline")
			if err := os.WriteFile(cmdline, []byte(tc.cmdline+"\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			err := checkRecentConfig([]string{etc, filepath.Join(etc, "missing"), lib}, cmdline)
			if tc.wantErr == "" && err != nil || tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
				t.Errorf("error %v, want %q", err, tc.wantErr)
			}
		})
	}
	// This machine is one bpfwall is built for.
	if err := checkRecentConfig(modprobeDirs, "/proc/cmdline"); err != nil {
		t.Errorf("this machine: %v", err)
	}
}
