package loader

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"
)

// DefaultLockFile serializes bpfwall commands, as /run/xtables.lock does
// iptables commands.
const DefaultLockFile = "/run/bpfwall.lock"

// lockInterval is how often a waiting command retries the lock.
const lockInterval = 50 * time.Millisecond

// ErrLocked is returned, wrapped, when another command holds the lock.
var ErrLocked = errors.New("another bpfwall command holds the lock")

// Lock is the lock of the bpfwall commands: held exclusively by one
// command that changes filters at a time, or shared by readers that must
// not see a filter half swapped.
type Lock struct{ f *os.File }

// Acquire takes the lock in file path (DefaultLockFile when empty),
// waiting up to wait for another command to release it.
func Acquire(path string, wait time.Duration) (*Lock, error) {
	return acquire(path, wait, lockInterval, unix.LOCK_EX)
}

// AcquireEvery is Acquire, trying every interval (lockInterval if 0); a
// negative wait waits for as long as it takes.
func AcquireEvery(path string, wait, interval time.Duration) (*Lock, error) {
	if interval <= 0 {
		interval = lockInterval
	}
	return acquire(path, wait, interval, unix.LOCK_EX)
}

// AcquireShared takes the lock in file path as a reader: readers hold it
// together, and no command changes a filter meanwhile.
func AcquireShared(path string, wait time.Duration) (*Lock, error) {
	return acquire(path, wait, lockInterval, unix.LOCK_SH)
}

func acquire(path string, wait, interval time.Duration, how int) (*Lock, error) {
	if path == "" {
		path = DefaultLockFile
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, fmt.Errorf("create lock file: %w", err)
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open lock file: %w", err)
	}
	deadline := time.Now().Add(wait)
	for {
		err := unix.Flock(int(f.Fd()), how|unix.LOCK_NB)
		if err == nil {
			return &Lock{f}, nil
		}
		if !errors.Is(err, unix.EWOULDBLOCK) {
			f.Close()
			return nil, fmt.Errorf("lock %s: %w", path, err)
		}
		if wait < 0 {
			time.Sleep(interval)
			continue
		}
		if !time.Now().Before(deadline) {
			f.Close()
			return nil, fmt.Errorf("lock %s: %w", path, ErrLocked)
		}
		time.Sleep(min(interval, time.Until(deadline)))
	}
}

// Release releases the lock.
func (l *Lock) Release() error { return l.f.Close() }
