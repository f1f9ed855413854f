package main

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestRereader: a regular file is read again as it was read first, and a
// file that changed since is an error, not another rule set; a FIFO, which
// cannot be read again, has no rereader, and its caller keeps the input.
func TestRereader(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "rules")
	text := "*filter\n:INPUT ACCEPT [0:0]\n-A INPUT -j DROP\nCOMMIT\n"
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	src, err := readFile(path)
	if err != nil {
		t.Fatal(err)
	}
	again := rereader(path, src)
	if again == nil {
		t.Fatal("no rereader for a regular file")
	}
	if b, err := again(); err != nil || string(b) != text {
		t.Fatalf("read again: %q, %v", b, err)
	}
	if err := os.WriteFile(path, []byte(strings.Replace(text, "DROP", "ACCEPT", 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	if b, err := again(); err == nil || !strings.Contains(err.Error(), "it changed since it was read") {
		t.Errorf("read again after a change: %q, %v", b, err)
	}
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	if rereader(fifo, src) != nil {
		t.Error("a rereader for a FIFO")
	}
}
