package main

import (
	"errors"
	"fmt"
	"net"
	"os/exec"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"bpfwall/internal/testenv"
)

const rejectRules = `*filter
:INPUT ACCEPT [0:0]
:FORWARD ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
-A INPUT -p tcp -m tcp --dport 81 -j REJECT --reject-with tcp-reset
-A INPUT -p udp -m udp --dport 82 -j REJECT --reject-with icmp-port-unreachable
COMMIT
`

// TestRejectRepliesToLocalSenders: the REJECT rules restore -i puts at
// xdp or tc answer a connection from the veth's peer as the kernel's do.
// The peer's sockets leave their checksums to the veth
// (CHECKSUM_PARTIAL), which the kernel counts as checked; and a veth
// drops what native XDP transmits unless its peer runs NAPI. Both kept
// every reply from such a peer away while the hand-built probes of the
// differential test got theirs. Something listens on both ports: a
// packet the filter let through would connect, or be read.
func TestRejectRepliesToLocalSenders(t *testing.T) {
	testenv.RequireTool(t, "iptables-legacy-restore")
	bin := buildBpfwall(t)
	peer := freshNetns(t)
	c := cli{t, bin}
	ln, err := net.Listen("tcp4", "10.9.0.2:81")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			conn.Close()
		}
	}()
	udp, err := net.ListenPacket("udp4", "10.9.0.2:82")
	if err != nil {
		t.Fatal(err)
	}
	defer udp.Close()

	// Not subtests: the test's goroutine holds the thread in the
	// namespace.
	refused := func(what string) {
		t.Helper()
		for _, network := range []string{"tcp4", "udp4"} {
			port := map[string]int{"tcp4": 81, "udp4": 82}[network]
			err := peer.Do(func() error { return dialRefused(network, fmt.Sprintf("10.9.0.2:%d", port)) })
			if err != nil {
				t.Errorf("%s: %s to port %d from the peer: %v, want connection refused", what, network, port, err)
			}
		}
	}

	// The oracle: the kernel's own REJECT, on the same traffic.
	if out, err := restoreLegacy(rejectRules); err != nil {
		t.Fatalf("iptables-legacy-restore: %v\n%s", err, out)
	}
	refused("iptables")
	if out, err := restoreLegacy("*filter\n:INPUT ACCEPT [0:0]\nCOMMIT\n"); err != nil {
		t.Fatalf("flush: %v\n%s", err, out)
	}
	for _, run := range []struct {
		name, mode string
		args       []string
	}{
		// auto picks generic: native XDP_TX dies at the peer.
		{"xdp", "generic", nil},
		{"xdp generic", "generic", []string{"--xdp-mode", "generic"}},
		{"tc-ingress", "", []string{"--hook", "tc-ingress"}},
	} {
		c.ok(rejectRules, append([]string{"restore", "-i", "veth1"}, run.args...)...)
		st := c.status()
		if len(st) != 1 || len(st[0].Ifaces) != 1 || st[0].Ifaces[0].Mode != run.mode {
			t.Fatalf("%s: status: %+v, want one filter on veth1 in mode %q", run.name, st, run.mode)
		}
		refused(run.name)
		if got := c.status()[0].Counters.RulesHit; got != 2 {
			t.Errorf("%s: %d rules matched, want both", run.name, got)
		}
		c.ok("", "unload")
	}

	// A swap keeps a link's mode: REJECT rules replacing a filter that
	// runs native on the veth are told to go generic.
	c.ok("*filter\n:INPUT ACCEPT [0:0]\n-A INPUT -p tcp --dport 81 -j DROP\nCOMMIT\n", "restore", "-i", "veth1")
	if mode := c.status()[0].Ifaces[0].Mode; mode != "native" {
		t.Fatalf("a filter without REJECT on veth1 in mode %q, want native", mode)
	}
	_, stderr, code := c.run(rejectRules, "restore", "-i", "veth1")
	if code != 0 || !strings.Contains(stderr, "REJECT replies from native XDP on veth veth1") {
		t.Errorf("REJECT rules swapped in on a native veth: exit %d, stderr %q, want a warning", code, stderr)
	}
	c.ok("", "unload")
}

// restoreLegacy gives text to iptables-legacy-restore.
func restoreLegacy(text string) ([]byte, error) {
	cmd := exec.Command("iptables-legacy-restore")
	cmd.Stdin = strings.NewReader(text)
	return cmd.CombinedOutput()
}

// dialRefused connects to addr over network and, for UDP, sends a
// datagram and waits for the error the reply brings. It returns nil when
// the connection was refused, and otherwise what happened.
func dialRefused(network, addr string) error {
	conn, err := net.DialTimeout(network, addr, 2*time.Second)
	if err == nil && network == "udp4" {
		defer conn.Close()
		if _, err = conn.Write([]byte("bpfwall")); err == nil {
			conn.SetReadDeadline(time.Now().Add(2 * time.Second))
			_, err = conn.Read(make([]byte, 16))
		}
	} else if err == nil {
		conn.Close()
		return errors.New("connected")
	}
	if errors.Is(err, unix.ECONNREFUSED) {
		return nil
	}
	if err == nil {
		return errors.New("a reply from the listener")
	}
	return err
}
