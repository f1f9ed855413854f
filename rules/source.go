package rules

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"

	"golang.org/x/sys/unix"
)

// MaxSource is the size of the largest rule set input bpfwall reads:
// iptables-save prints a million rules in about 80 MiB. Larger input
// (/dev/zero, a runaway generator) is refused before it exhausts memory.
const MaxSource = 256 << 20

// maxSource is MaxSource; tests lower it.
var maxSource = MaxSource

// ErrTooLarge is returned, wrapped, for input larger than MaxSource.
var ErrTooLarge = errors.New("input too large")

// ReadSource reads a rule set from r, named name in errors, refusing one
// larger than MaxSource.
func ReadSource(name string, r io.Reader) ([]byte, error) {
	// In chunks joined once: growing one buffer to MaxSource by appends
	// copies and faults in several times as much.
	var chunks [][]byte
	for n := 0; n <= maxSource; {
		chunk := make([]byte, 1<<20)
		k, err := io.ReadFull(r, chunk)
		chunks, n = append(chunks, chunk[:k]), n+k
		switch {
		case n > maxSource:
		case err == io.EOF || err == io.ErrUnexpectedEOF:
			return bytes.Join(chunks, nil), nil
		case err != nil:
			return nil, fmt.Errorf("read %s: %w", name, err)
		}
	}
	return nil, fmt.Errorf("read %s: %w: more than %d MiB, the most bpfwall reads", name, ErrTooLarge, maxSource>>20)
}

// ReadFile reads the rule set in file name, as ReadSource. Any file that
// can be read to its end will do: a pipe or process substitution too.
func ReadFile(name string) ([]byte, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return ReadSource(name, f)
}

// ReadRegular reads the regular file name, as ReadSource: for files a
// rule set includes, which a FIFO would hang on and a device flood. It
// opens without blocking, so that a FIFO is refused, not waited for.
func ReadRegular(name string) ([]byte, error) {
	fd, err := unix.Open(name, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: name, Err: err}
	}
	f := os.NewFile(uintptr(fd), name)
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("%s: not a regular file (%v)", name, st.Mode().Type())
	}
	return ReadSource(name, f)
}
