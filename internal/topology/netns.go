package topology

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"

	"golang.org/x/sys/unix"
)

// netnsDir is where `ip netns` keeps the named namespaces.
const netnsDir = "/run/netns/"

// Run runs a command and returns its error with its output.
func Run(name string, args ...string) error {
	return RunInput(nil, name, args...)
}

// RunInput is Run with stdin.
func RunInput(stdin []byte, name string, args ...string) error {
	_, err := Output(stdin, name, args...)
	return err
}

// Output runs a command and returns its standard output; its error
// carries the standard error.
func Output(stdin []byte, name string, args ...string) ([]byte, error) {
	cmd := exec.Command(name, args...)
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err,
			bytes.TrimSpace(append(stderr.Bytes(), stdout.Bytes()...)))
	}
	return stdout.Bytes(), nil
}

// Do runs f on an OS thread that has joined the named network namespace.
// Sockets f opens stay in that namespace after it returns.
func Do(name string, f func() error) error {
	target, err := unix.Open(netnsDir+name, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open netns %s: %w", name, err)
	}
	defer unix.Close(target)
	errc := make(chan error, 1)
	go func() {
		// The thread is locked for good if the way back fails: Go then
		// ends it with the goroutine rather than reuse it elsewhere.
		runtime.LockOSThread()
		self, err := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			errc <- fmt.Errorf("open own netns: %w", err)
			return
		}
		defer unix.Close(self)
		if err := unix.Setns(target, unix.CLONE_NEWNET); err != nil {
			errc <- fmt.Errorf("enter netns %s: %w", name, err)
			return
		}
		ferr := f()
		if err := unix.Setns(self, unix.CLONE_NEWNET); err != nil {
			errc <- fmt.Errorf("leave netns %s: %w", name, err)
			return
		}
		runtime.UnlockOSThread()
		errc <- ferr
	}()
	return <-errc
}

// Sysctl writes values under /proc/sys in the named namespace; keys are
// paths below /proc/sys, such as "net/ipv4/ip_forward".
func Sysctl(ns string, kv ...string) error {
	return Do(ns, func() error {
		for i := 0; i+1 < len(kv); i += 2 {
			if err := os.WriteFile("/proc/sys/"+kv[i], []byte(kv[i+1]), 0); err != nil {
				return fmt.Errorf("sysctl in %s: %w", ns, err)
			}
		}
		return nil
	})
}
