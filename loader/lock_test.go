package loader

import (
	"errors"
	"path/filepath"
	"testing"
	"time"
)

func TestLock(t *testing.T) {
	path := filepath.Join(t.TempDir(), "bpfwall.lock")
	held, err := Acquire(path, 0)
	if err != nil {
		t.Fatal(err)
	}

	start := time.Now()
	if _, err := Acquire(path, 0); !errors.Is(err, ErrLocked) {
		t.Fatalf("second lock without waiting: %v, want ErrLocked", err)
	}
	if d := time.Since(start); d > 50*time.Millisecond {
		t.Errorf("without waiting, failing took %v", d)
	}

	start = time.Now()
	if _, err := Acquire(path, 200*time.Millisecond); !errors.Is(err, ErrLocked) {
		t.Fatalf("second lock waiting 200ms: %v, want ErrLocked", err)
	}
	if d := time.Since(start); d < 200*time.Millisecond {
		t.Errorf("gave up after %v, before the 200ms wait was over", d)
	}

	go func() {
		time.Sleep(100 * time.Millisecond)
		held.Release()
	}()
	start = time.Now()
	l, err := Acquire(path, 2*time.Second)
	if err != nil {
		t.Fatalf("lock released after 100ms, waiting 2s: %v", err)
	}
	if d := time.Since(start); d < 90*time.Millisecond || d > time.Second {
		t.Errorf("got the lock after %v, want about 100ms", d)
	}
	l.Release()
}

// TestSharedLock: readers share the lock, and exclude the commands that
// change filters, which exclude them.
func TestSharedLock(t *testing.T) {
	path := filepath.Join(t.TempDir(), "bpfwall.lock")
	r1, err := AcquireShared(path, 0)
	if err != nil {
		t.Fatal(err)
	}
	r2, err := AcquireShared(path, 0)
	if err != nil {
		t.Fatalf("second reader: %v", err)
	}
	if _, err := Acquire(path, 0); !errors.Is(err, ErrLocked) {
		t.Fatalf("writer while readers hold the lock: %v, want ErrLocked", err)
	}
	r1.Release()
	if _, err := Acquire(path, 0); !errors.Is(err, ErrLocked) {
		t.Fatalf("writer while one reader holds the lock: %v, want ErrLocked", err)
	}
	r2.Release()
	w, err := Acquire(path, 0)
	if err != nil {
		t.Fatalf("writer after the readers left: %v", err)
	}
	if _, err := AcquireShared(path, 0); !errors.Is(err, ErrLocked) {
		t.Fatalf("reader while a writer holds the lock: %v, want ErrLocked", err)
	}
	w.Release()
}
