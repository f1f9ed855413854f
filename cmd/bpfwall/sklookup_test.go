package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// tcpListener listens without multipath TCP, which SOCKHASH refuses, and
// reports the local address of every connection it accepts.
func tcpListener(t *testing.T, addr string) (*net.TCPListener, <-chan string) {
	t.Helper()
	var lc net.ListenConfig
	lc.SetMultipathTCP(false)
	ln, err := lc.Listen(context.Background(), "tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	got := make(chan string, 16)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			got <- c.LocalAddr().String()
			c.Close()
		}
	}()
	return ln.(*net.TCPListener), got
}

func lnPort(ln net.Listener) int { return ln.Addr().(*net.TCPAddr).Port }

// reaches connects to addr and expects the connection to land on the
// listener behind got, with addr as its local address.
func reaches(t *testing.T, addr string, got <-chan string) {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		t.Fatalf("connect to %s: %v", addr, err)
	}
	c.Close()
	select {
	case local := <-got:
		if local != addr {
			t.Errorf("connection to %s arrived as %s", addr, local)
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("connection to %s: nothing accepted", addr)
	}
}

// TestSkLookupOperatorPath loads TPROXY rules at the sk-lookup hook with the
// command, hands sockets over with register (by pid and descriptor, and
// as systemd's LISTEN_FDS), and reads status and trace.
func TestSkLookupOperatorPath(t *testing.T) {
	bin := buildBpfwall(t)
	freshNetns(t)
	c := cli{t, bin}
	if out, err := exec.Command("ip", "route", "add", "local", "192.0.2.0/24", "dev", "lo").CombinedOutput(); err != nil {
		t.Fatalf("ip route: %v\n%s", err, out)
	}
	a, gotA := tcpListener(t, "127.0.0.1:0")
	b, _ := tcpListener(t, "127.0.0.1:0")
	portB := lnPort(b)
	b.Close() // not there at load time
	rulesText := fmt.Sprintf(`*mangle
:PREROUTING ACCEPT [0:0]
:INPUT ACCEPT [0:0]
:FORWARD ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
:POSTROUTING ACCEPT [0:0]
-A PREROUTING -d 192.0.2.0/24 -p tcp -m tcp --dport 80 -j TPROXY --on-port %d --on-ip 127.0.0.1
-A PREROUTING -d 192.0.2.0/24 -p tcp -m tcp --dport 81 -j TPROXY --on-port %d --on-ip 127.0.0.1
-A PREROUTING -d 192.0.2.0/24 -p tcp -m tcp --dport 82 -j TPROXY --on-port 9999 --on-ip 127.0.0.1
COMMIT
`, lnPort(a), portB)
	_, warn, code := c.run(rulesText, "load", "--hook", "sk-lookup", "-w", "30", "-")
	if code != 0 || !strings.Contains(warn, fmt.Sprintf("no socket for tcp 127.0.0.1:%d", portB)) {
		t.Fatalf("load: exit %d, want a warning for port %d:\n%s", code, portB, warn)
	}
	t.Cleanup(func() { c.run("", "unload", "--hook", "sk-lookup", "-w", "30") })
	reaches(t, "192.0.2.7:80", gotA)

	st := c.status()
	if len(st) != 1 || st[0].Hook != "sk-lookup" || len(st[0].Sockets) != 3 {
		t.Fatalf("status: %+v", st)
	}
	if s := st[0].Sockets[0]; s.Cookie == 0 || s.PID != os.Getpid() || s.Target != fmt.Sprintf("tcp 127.0.0.1:%d", lnPort(a)) {
		t.Errorf("status of the socket found: %+v, want pid %d", s, os.Getpid())
	}
	if s := st[0].Sockets[1]; s.Cookie != 0 {
		t.Errorf("status of the missing socket: %+v", s)
	}

	// Registered by descriptor: the rule for port 81 steers to it.
	b, gotB := tcpListener(t, fmt.Sprintf("127.0.0.1:%d", portB))
	rc, err := b.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var fd int
	rc.Control(func(f uintptr) { fd = int(f) })
	c.ok("", "register", "-w", "30", "--pid", strconv.Itoa(os.Getpid()), "--fd", strconv.Itoa(fd))
	reaches(t, "192.0.2.7:81", gotB)

	// Handed over as systemd's LISTEN_FDS (a blocking socket, as systemd
	// passes them), for another target: the rule for port 82 steers to it.
	s, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	sf := os.NewFile(uintptr(s), "listen socket")
	defer sf.Close()
	if err := unix.Bind(s, &unix.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	if err := unix.Listen(s, 8); err != nil {
		t.Fatal(err)
	}
	// A target the socket cannot serve, or one --target for two sockets,
	// is refused before anything is registered.
	for _, tc := range []struct{ env, target, want string }{
		{"LISTEN_FDS=1", "udp:127.0.0.1:9999", "is tcp, not udp"},
		{"LISTEN_FDS=1", "tcp:[::1]:9999", "IPv4 and cannot take IPv6"},
		{"LISTEN_FDS=2", "tcp:127.0.0.1:9999", "LISTEN_FDS passed 2 sockets"},
	} {
		cmd := exec.Command("sh", "-c", `LISTEN_PID=$$ `+tc.env+` exec "$0" register -w 30 --target `+tc.target, bin)
		cmd.ExtraFiles = []*os.File{sf, sf}
		out, err := cmd.CombinedOutput()
		if err == nil || !strings.Contains(string(out), tc.want) {
			t.Errorf("register %s --target %s: %v\n%s\nwant an error with %q", tc.env, tc.target, err, out, tc.want)
		}
	}
	if st := c.status(); st[0].Sockets[2].Cookie != 0 {
		t.Errorf("a refused register registered a socket: %+v", st[0].Sockets[2])
	}

	cmd := exec.Command("sh", "-c", `LISTEN_PID=$$ LISTEN_FDS=1 exec "$0" register -w 30 --target tcp:127.0.0.1:9999`, bin)
	cmd.ExtraFiles = []*os.File{sf}
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("register LISTEN_FDS: %v\n%s", err, out)
	}
	conn, err := net.DialTimeout("tcp", "192.0.2.7:82", 2*time.Second)
	if err != nil {
		t.Fatalf("connect to 192.0.2.7:82: %v", err)
	}
	conn.Close()
	nfd, _, err := unix.Accept(s) // the connection waits in the backlog
	if err != nil {
		t.Fatal(err)
	}
	local, err := unix.Getsockname(nfd)
	unix.Close(nfd)
	if a, ok := local.(*unix.SockaddrInet4); err != nil || !ok || a.Addr != [4]byte{192, 0, 2, 7} || a.Port != 82 {
		t.Errorf("connection to 192.0.2.7:82 arrived as %+v (%v)", local, err)
	}
	st = c.status()
	for i, s := range st[0].Sockets {
		if s.Cookie == 0 {
			t.Errorf("socket %d not registered: %+v", i, s)
		}
	}

	// trace runs lookups described as packets.
	packets := writeFile(t, "lookups.jsonl", `{"proto":"tcp","src":"10.1.1.1","dst":"192.0.2.7","dport":81}
{"proto":"tcp","src":"10.1.1.1","dst":"192.0.2.7","dport":83}
`)
	rulesFile := writeFile(t, "tproxy.rules", rulesText)
	out := c.ok("", "trace", "--hook", "sk-lookup", "--packets", packets, rulesFile)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 2 || !strings.Contains(lines[0], `"verdict":"TPROXY"`) || !strings.Contains(lines[0], "tproxy.rules:8") ||
		!strings.HasPrefix(lines[1], `{"packet":2,"summary":"lookup of IP 10.1.1.1.1234 > 192.0.2.7.83: Flags [S], length 24"`) ||
		!strings.Contains(lines[1], `"verdict":"ACCEPT","rule":"policy"`) {
		t.Errorf("trace:\n%s", out)
	}

	// Unloaded, the lookups go to the kernel's own lookup: refused.
	c.ok("", "unload", "--hook", "sk-lookup", "-w", "30")
	if conn, err := net.DialTimeout("tcp", "192.0.2.7:80", 2*time.Second); err == nil {
		conn.Close()
		t.Error("connection to 192.0.2.7:80 after unload")
	} else if !strings.Contains(err.Error(), syscall.ECONNREFUSED.Error()) {
		t.Errorf("after unload: %v", err)
	}
}
