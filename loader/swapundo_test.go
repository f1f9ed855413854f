package loader

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"

	"bpfwall/codegen"
	"bpfwall/codegen/abi"
	"bpfwall/rules"
)

// failUpdate makes a swap fail in its critical section.
func failUpdate(link.Link, *ebpf.Program, *ebpf.Program) error { return errors.New("injected failure") }

// TestFailedSwapReleasesConntrack: a swap to a rule set with state matches
// that fails, or is refused after the build took conntrack, leaves no
// conntrack table behind: conntrack would otherwise track (and defragment)
// every packet of the namespace for nothing.
func TestFailedSwapReleasesConntrack(t *testing.T) {
	stateful := ruleset(codegen.HookTCIngress, "-m conntrack --ctstate ESTABLISHED -j ACCEPT")
	heldAfter := func(t *testing.T, err error) {
		t.Helper()
		if err == nil {
			t.Fatal("the swap succeeded")
		}
		held, herr := ConntrackHeld()
		if herr != nil {
			t.Fatal(herr)
		}
		if held {
			t.Errorf("after the failed swap (%v), nftables table inet %s is still there", err, ConntrackTable)
		}
	}
	t.Run("update fails", func(t *testing.T) {
		place := testPlace(t, inFreshNetns(t), codegen.HookTCIngress)
		mustSwap(t, newSwap(t, place, ruleset(codegen.HookTCIngress, "-p udp -j ACCEPT"), "veth0"))
		s := newSwap(t, place, stateful)
		s.Update = failUpdate
		_, err := s.Run()
		heldAfter(t, err)
	})
}

// TestFailedSwapKeepsSockets: a failed sk-lookup swap leaves the running
// filter's sockets map as it was, although the build found a socket the
// running filter lacks (which it would otherwise start steering to).
func TestFailedSwapKeepsSockets(t *testing.T) {
	place := testPlace(t, inFreshNetns(t), codegen.HookSkLookup)
	free, _ := listenTCP(t, "127.0.0.1:0")
	p := port(free.Addr())
	free.Close()
	text := mangle(fmt.Sprintf("-d 192.0.2.0/24 -p tcp -m tcp --dport 80 -j TPROXY --on-port %d --on-ip 127.0.0.1", p))
	mustSwap(t, lookupSwap(t, place, rules.IPv4, text))
	entries := func() int {
		m, err := ebpf.LoadPinnedMap(filepath.Join(place.Dir(), pinSockets), nil)
		if err != nil {
			t.Fatal(err)
		}
		defer m.Close()
		n := 0
		var k abi.SocketKey
		var v uint64
		for it := m.Iterate(); it.Next(&k, &v); {
			n++
		}
		return n
	}
	if n := entries(); n != 0 {
		t.Fatalf("before the listener exists, %d sockets", n)
	}
	ln, _ := listenTCP(t, fmt.Sprintf("127.0.0.1:%d", p))
	defer ln.Close()

	s := lookupSwap(t, place, rules.IPv4, text)
	s.Update = failUpdate
	if _, err := s.Run(); err == nil {
		t.Fatal("the swap succeeded")
	}
	if n := entries(); n != 0 {
		t.Errorf("after the failed swap, the running filter's map holds %d sockets", n)
	}
	// The same swap without the failure takes the socket.
	mustSwap(t, lookupSwap(t, place, rules.IPv4, text))
	if n := entries(); n != 1 {
		t.Errorf("after the swap, %d sockets, want 1", n)
	}
}

// TestSkLookupRefusesInterfaces: an sk-lookup filter attaches to the
// namespace once; interfaces are an error, not a second link.
func TestSkLookupRefusesInterfaces(t *testing.T) {
	place := testPlace(t, inFreshNetns(t), codegen.HookSkLookup)
	s := lookupSwap(t, place, rules.IPv4, mangle("-d 192.0.2.0/24 -p tcp -m tcp --dport 80 -j TPROXY --on-port 8080 --on-ip 127.0.0.1"))
	s.Ifaces = []string{"veth0"}
	if _, err := s.Run(); err == nil || !strings.Contains(err.Error(), "not to interfaces") {
		t.Fatalf("swap with an interface: %v", err)
	}
	if _, err := os.Stat(filepath.Join(place.Dir(), pinProgram)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("after the refusal, program pin: %v", err)
	}
}
