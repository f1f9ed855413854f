package nft

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"bpfwall/rules"
)

// TestInclude: included files are read relative to the including file,
// patterns in order; what is no regular file, or no rule set, is refused
// without hanging and without echoing its content.
func TestInclude(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		t.Helper()
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	write("a.nft", "# chains\n\ntable inet f { chain in { type filter hook input priority 0; tcp dport 22 drop; } }\n")
	write("b.nft", "add rule inet f in tcp dport 23 drop\n")
	write("empty.nft", "# nothing yet\n")
	write("secret", "root:$6$salt$hash:19000:0:99999:7:::\n")
	write("typo.nft", "table inet g { chain c { type filter hook input priority 0; tcp dport 22 drop; }\n")
	fifo := filepath.Join(dir, "fifo")
	if err := unix.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}

	main := write("main.nft", "include \"a.nft\"\ninclude \"[b]*.nft\"\ninclude \"empty.nft\"\n")
	rs, err := Parse(main, mustRead(t, main), Options{Family: rules.IPv4})
	if err != nil {
		t.Fatalf("relative includes: %v", err)
	}
	if n := len(rs.Tables[0].Chains[0].Rules); n != 2 {
		t.Errorf("%d rules from the included files, want 2", n)
	}

	for _, c := range []struct {
		include string
		want    string
		never   string
	}{
		{fifo, "not a regular file", ""},
		{"/dev/zero", "not a regular file", ""},
		{"secret", `not an nft rule set`, "root"},
		{"typo.nft", "typo.nft:2:", ""}, // a rule set's own errors keep their position
	} {
		done := make(chan error, 1)
		src := []byte("include \"" + c.include + "\"\n")
		go func() {
			_, err := Parse(filepath.Join(dir, "main.nft"), src, Options{Family: rules.IPv4})
			done <- err
		}()
		select {
		case err := <-done:
			switch {
			case err == nil || !strings.Contains(err.Error(), c.want):
				t.Errorf("include %s: %v, want %q", c.include, err, c.want)
			case c.never != "" && strings.Contains(err.Error(), c.never):
				t.Errorf("include %s: %v echoes the file", c.include, err)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("include %s hangs", c.include)
		}
	}
}

func mustRead(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
