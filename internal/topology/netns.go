package topology

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// netnsDir is where `ip netns` keeps the named namespaces.
const netnsDir = "/run/netns/"

// Run runs a command and returns its error with its output.
func Run(name string, args ...string) error {
	return RunInput(nil, name, args...)
}

// RunLines runs commands written as lines, split at spaces, in turn,
// and stops at the first that fails.
func RunLines(lines ...string) error {
	for _, l := range lines {
		f := strings.Fields(l)
		if err := Run(f[0], f[1:]...); err != nil {
			return err
		}
	}
	return nil
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

// Netns is a network namespace held open by a file descriptor: it lives
// at least until Close, whoever else leaves it.
type Netns struct{ fd int }

// OpenNetns opens the network namespace at path: a name's file under
// /run/netns, or /proc/PID/ns/net.
func OpenNetns(path string) (*Netns, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open netns: %w", err)
	}
	return &Netns{fd}, nil
}

// NewNetns creates a network namespace with nothing in it but a loopback
// device that is down.
func NewNetns() (*Netns, error) {
	var ns *Netns
	errc := make(chan error, 1)
	go func() {
		// Never unlocked: the thread, now in the new namespace, ends
		// with the goroutine.
		runtime.LockOSThread()
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			errc <- fmt.Errorf("unshare netns: %w", err)
			return
		}
		var err error
		ns, err = OpenNetns("/proc/thread-self/ns/net")
		errc <- err
	}()
	return ns, <-errc
}

// CurrentNetns opens the calling thread's network namespace.
func CurrentNetns() (*Netns, error) { return OpenNetns("/proc/thread-self/ns/net") }

// Enter moves the calling thread into the namespace. The caller has
// locked the goroutine to its thread (runtime.LockOSThread).
func (ns *Netns) Enter() error {
	if err := unix.Setns(ns.fd, unix.CLONE_NEWNET); err != nil {
		return fmt.Errorf("enter netns: %w", err)
	}
	return nil
}

// Close lets the namespace go; it ends when nothing else holds it.
func (ns *Netns) Close() { unix.Close(ns.fd) }

// Do runs f on an OS thread that has joined the namespace, and returns
// f's error. Sockets f opens stay in the namespace after it returns.
// Calls may run at once, each on a thread of its own.
func (ns *Netns) Do(f func() error) error {
	errc := make(chan error, 1)
	go func() {
		// The thread is locked for good if the way back fails: Go then
		// ends it with the goroutine rather than reuse it elsewhere.
		runtime.LockOSThread()
		self, err := CurrentNetns()
		if err != nil {
			errc <- err
			return
		}
		defer self.Close()
		if err := ns.Enter(); err != nil {
			errc <- err
			return
		}
		ferr := f()
		if err := self.Enter(); err != nil {
			errc <- fmt.Errorf("leave: %w", err)
			return
		}
		runtime.UnlockOSThread()
		errc <- ferr
	}()
	return <-errc
}

// Run runs f as Do does, for callers whose f cannot fail; it panics if
// the thread cannot enter or leave the namespace.
func (ns *Netns) Run(f func()) {
	if err := ns.Do(func() error { f(); return nil }); err != nil {
		panic(err)
	}
}

// MoveLink moves the link of that name from the calling thread's
// namespace into ns.
func (ns *Netns) MoveLink(name string) error {
	l, err := netlink.LinkByName(name)
	if err != nil {
		return fmt.Errorf("link %s: %w", name, err)
	}
	if err := netlink.LinkSetNsFd(l, ns.fd); err != nil {
		return fmt.Errorf("move link %s: %w", name, err)
	}
	return nil
}

// Do runs f on an OS thread that has joined the named network namespace.
// Sockets f opens stay in that namespace after it returns.
func Do(name string, f func() error) error {
	ns, err := OpenNetns(netnsDir + name)
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	defer ns.Close()
	return ns.Do(f)
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
