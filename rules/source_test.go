package rules

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// zeros is an endless input, as /dev/zero.
type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}

func TestReadSourceBounded(t *testing.T) {
	defer func(n int) { maxSource = n }(maxSource)
	maxSource = 3 << 20
	if _, err := ReadSource("zeros", zeros{}); !errors.Is(err, ErrTooLarge) || !strings.Contains(err.Error(), "more than 3 MiB") {
		t.Errorf("endless input: %v, want %v", err, ErrTooLarge)
	}
	for _, n := range []int{0, 1, 1 << 20, 3 << 20} {
		in := bytes.Repeat([]byte{'x'}, n)
		got, err := ReadSource("x", io.MultiReader(bytes.NewReader(in[:n/2]), bytes.NewReader(in[n/2:])))
		if err != nil || !bytes.Equal(got, in) {
			t.Errorf("%d bytes: read %d, %v", n, len(got), err)
		}
	}
	if _, err := ReadSource("x", bytes.NewReader(make([]byte, 3<<20+1))); !errors.Is(err, ErrTooLarge) {
		t.Errorf("one byte too many: %v", err)
	}
}

func TestReadRegular(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	if err := unix.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := ReadRegular(fifo)
		done <- err
	}()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "not a regular file") {
			t.Errorf("FIFO: %v, want a refusal", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("ReadRegular waits for a writer of a FIFO")
	}
	if _, err := ReadRegular("/dev/zero"); err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Errorf("/dev/zero: %v, want a refusal", err)
	}
	if _, err := ReadRegular(dir); err == nil {
		t.Error("a directory was read")
	}
	file := filepath.Join(dir, "r")
	if err := os.WriteFile(file, []byte("table ip t {}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if b, err := ReadRegular(file); err != nil || string(b) != "table ip t {}\n" {
		t.Errorf("regular file: %q, %v", b, err)
	}
}
