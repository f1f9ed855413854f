package loader

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"bpfwall/codegen"
	"bpfwall/ir"
	"bpfwall/parser/iptables"
	"bpfwall/rules"
)

// mangle is a mangle table whose PREROUTING chain holds the rules given.
func mangle(lines ...string) string {
	var b strings.Builder
	b.WriteString("*mangle\n:PREROUTING ACCEPT [0:0]\n:INPUT ACCEPT [0:0]\n:FORWARD ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n:POSTROUTING ACCEPT [0:0]\n")
	for _, l := range lines {
		b.WriteString("-A PREROUTING " + l + "\n")
	}
	b.WriteString("COMMIT\n")
	return b.String()
}

// lookupSwap returns a swap of an sk-lookup rule set of family fam into
// place.
func lookupSwap(t testing.TB, place Place, fam rules.Family, text string) *Swap {
	t.Helper()
	rs, err := iptables.Parse("test.rules", []byte(text), iptables.Options{Family: fam, ForceFamily: true})
	if err != nil {
		t.Fatalf("parse: %v", err)
	}
	p, err := ir.Lower(rs, ir.LowerOptions{Table: "mangle", Chain: "PREROUTING"})
	if err != nil {
		t.Fatalf("lower: %v", err)
	}
	prog, err := codegen.Compile(p, codegen.Options{Hook: codegen.HookSkLookup})
	if err != nil {
		t.Fatalf("compile: %v", err)
	}
	meta, counters, err := NewMeta(rs, prog, "test.rules")
	if err != nil {
		t.Fatal(err)
	}
	return &Swap{Place: place, Program: prog, Meta: meta, Counters: counters}
}

// listenTCP listens on addr without multipath TCP, which SOCKHASH refuses,
// and accepts connections in the background, sending each accepted
// connection's local address on the channel.
func listenTCP(t *testing.T, addr string) (net.Listener, <-chan string) {
	t.Helper()
	var lc net.ListenConfig
	lc.SetMultipathTCP(false)
	ln, err := lc.Listen(context.Background(), "tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	got := make(chan string, 1024)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			select {
			case got <- c.LocalAddr().String():
			default:
			}
			c.Close()
		}
	}()
	return ln, got
}

func port(a net.Addr) int { return int(netip.MustParseAddrPort(a.String()).Port()) }

// dial connects to addr over TCP and returns the error.
func dial(addr string) error {
	c, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		return err
	}
	return c.Close()
}

// expectLocal dials addr and expects the listener to accept a connection
// whose local address is addr.
func expectLocal(t *testing.T, addr string, got <-chan string) {
	t.Helper()
	if err := dial(addr); err != nil {
		t.Fatalf("connect to %s: %v", addr, err)
	}
	select {
	case local := <-got:
		if local != addr {
			t.Errorf("connection to %s: listener's local address is %s", addr, local)
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("connection to %s: the listener accepted nothing", addr)
	}
}

func expectRefused(t *testing.T, addr string) {
	t.Helper()
	if err := dial(addr); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("connect to %s: %v, want connection refused", addr, err)
	}
}

func TestSkLookupSteersTCPAndUDP(t *testing.T) {
	ns := inFreshNetns(t)
	ip(t, "route", "add", "local", "192.0.2.0/24", "dev", "lo")
	place := testPlace(t, ns, codegen.HookSkLookup)

	ln1, got1 := listenTCP(t, "127.0.0.1:0")
	ln2, got2 := listenTCP(t, "127.0.0.1:0")
	ln3, _ := listenTCP(t, "127.0.0.1:0")
	var lc net.ListenConfig
	udp, err := lc.ListenPacket(context.Background(), "udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer udp.Close()
	free, _ := listenTCP(t, "127.0.0.1:0") // a port nothing listens on once closed
	freePort := port(free.Addr())
	free.Close()

	swap := lookupSwap(t, place, rules.IPv4, mangle(
		"-d 192.0.2.8/32 -p tcp -m tcp --dport 80 -j ACCEPT",
		fmt.Sprintf("-d 192.0.2.0/24 -p tcp -m tcp --dport 80 -j TPROXY --on-port %d --on-ip 127.0.0.1", port(ln1.Addr())),
		fmt.Sprintf("-d 192.0.2.0/24 -p tcp -m multiport --dports 80,443 -j TPROXY --on-port %d --on-ip 127.0.0.1", port(ln2.Addr())),
		fmt.Sprintf("-d 192.0.2.0/24 -p udp -m udp --dport 53 -j TPROXY --on-port %d --on-ip 127.0.0.1 --tproxy-mark 0x1/0x1", port(udp.LocalAddr())),
		fmt.Sprintf("-d 192.0.2.0/24 -p tcp -m tcp --dport 81 -j TPROXY --on-port %d --on-ip 127.0.0.1", freePort),
		fmt.Sprintf("-d 192.0.2.0/24 -p tcp -m tcp --dport 83 -j TPROXY --on-port %d --on-ip 127.0.0.1", port(ln3.Addr())),
		"-d 192.0.2.9/32 -p tcp -j DROP",
	))
	res := mustSwap(t, swap)
	found := 0
	for _, s := range res.Sockets {
		if s.Cookie != 0 {
			found++
		}
	}
	if found != 4 || len(res.Sockets) != 5 {
		t.Fatalf("sockets found: %+v, want 4 of 5", res.Sockets)
	}

	// The first TPROXY rule for port 80 wins over the second, and the
	// ACCEPT before it over both: 192.0.2.8:80 is the kernel's own
	// lookup, where nothing listens.
	expectLocal(t, "192.0.2.7:80", got1)
	expectLocal(t, "192.0.2.200:80", got1)
	expectLocal(t, "192.0.2.7:443", got2)
	expectRefused(t, "192.0.2.8:80")
	// No rule: the kernel's lookup finds nothing.
	expectRefused(t, "192.0.2.7:82")
	// A rule whose socket never existed, one whose socket went away, and
	// a DROP refuse.
	expectRefused(t, "192.0.2.7:81")
	ln3.Close()
	expectRefused(t, "192.0.2.7:83")
	if err := dial("127.0.0.1:" + fmt.Sprint(port(ln1.Addr()))); err != nil {
		t.Errorf("lookups no rule takes go on: %v", err)
	}
	l, err := net.Listen("tcp4", "192.0.2.9:22")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	expectRefused(t, "192.0.2.9:22")

	// UDP: the datagram reaches the socket bound to 127.0.0.1.
	c, err := net.Dial("udp", "192.0.2.7:53")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write([]byte("ping")); err != nil {
		t.Fatal(err)
	}
	udp.SetReadDeadline(time.Now().Add(5 * time.Second))
	buf := make([]byte, 16)
	n, from, err := udp.ReadFrom(buf)
	if err != nil || string(buf[:n]) != "ping" || from.String() != c.LocalAddr().String() {
		t.Errorf("udp datagram to 192.0.2.7:53: %q from %v (%v), want ping from %v", buf[:n], from, err, c.LocalAddr())
	}

	// The counters count the lookups each rule took.
	a, err := Open(place)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	cs, err := a.Counters()
	if err != nil {
		t.Fatal(err)
	}
	want := []uint64{1, 2, 1, 1, 1, 1, 1}
	for id, w := range want {
		if cs[id].Packets != w {
			t.Errorf("rule %d counted %d lookups, want %d (all: %v)", id, cs[id].Packets, w, cs)
		}
	}
}

func TestSkLookupIPv6(t *testing.T) {
	ns := inFreshNetns(t)
	ip(t, "-6", "route", "add", "local", "2001:db8::/64", "dev", "lo")
	place := testPlace(t, ns, codegen.HookSkLookup)
	ln, got := listenTCP(t, "[::1]:0")
	swap := lookupSwap(t, place, rules.IPv6, mangle(
		fmt.Sprintf("-d 2001:db8::/64 -p tcp -m tcp --dport 80 -j TPROXY --on-port %d --on-ip ::1", port(ln.Addr())),
	))
	if res := mustSwap(t, swap); len(res.Sockets) != 1 || res.Sockets[0].Cookie == 0 {
		t.Fatalf("sockets: %+v", res.Sockets)
	}
	expectLocal(t, "[2001:db8::7]:80", got)
	expectRefused(t, "[2001:db8::7]:81")
}

// inNetns runs f on a thread in the network namespace of the calling
// thread, for goroutines started by a test in inFreshNetns.
func inNetns(t *testing.T) func(f func()) {
	fd, err := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	return func(f func()) {
		runtime.LockOSThread() // the thread dies with the goroutine
		if err := unix.Setns(fd, unix.CLONE_NEWNET); err != nil {
			panic(err)
		}
		f()
	}
}

func TestSkLookupSwapUnderLoad(t *testing.T) {
	ns := inFreshNetns(t)
	ip(t, "route", "add", "local", "192.0.2.0/24", "dev", "lo")
	place := testPlace(t, ns, codegen.HookSkLookup)
	ln, _ := listenTCP(t, "127.0.0.1:0")
	sets := [2]string{
		mangle(fmt.Sprintf("-d 192.0.2.0/24 -p tcp -m tcp --dport 80 -j TPROXY --on-port %d --on-ip 127.0.0.1", port(ln.Addr()))),
		mangle(
			"-d 198.51.100.0/24 -p tcp -j ACCEPT",
			fmt.Sprintf("-d 192.0.2.7/32 -p tcp -m multiport --dports 79:81 -j TPROXY --on-port %d --on-ip 127.0.0.1", port(ln.Addr())),
		),
	}
	mustSwap(t, lookupSwap(t, place, rules.IPv4, sets[0]))

	var stop atomic.Bool
	var ok, failed atomic.Int64
	var firstErr atomic.Value
	var wg sync.WaitGroup
	run := inNetns(t)
	wg.Add(1)
	go func() {
		defer wg.Done()
		run(func() {
			for !stop.Load() {
				if err := dial("192.0.2.7:80"); err != nil {
					failed.Add(1)
					firstErr.CompareAndSwap(nil, err)
				} else {
					ok.Add(1)
				}
			}
		})
	}()
	for i := range 100 {
		mustSwap(t, lookupSwap(t, place, rules.IPv4, sets[(i+1)%2]))
	}
	stop.Store(true)
	wg.Wait()
	if failed.Load() != 0 || ok.Load() == 0 {
		t.Errorf("%d connections failed across 100 swaps (first: %v), %d succeeded", failed.Load(), firstErr.Load(), ok.Load())
	}
	t.Logf("%d connections across 100 swaps", ok.Load())
}
