package loader

import (
	"net"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cilium/ebpf"

	"bpfwall/codegen"
	"bpfwall/internal/testenv"
	"bpfwall/internal/topology"
)

// peerNetns moves veth0 into a second fresh namespace, addressed
// 10.9.0.1/24, and gives veth1 10.9.0.2/24: packets sent from the peer
// arrive on veth1. It returns a function that runs f on a thread inside
// the peer namespace.
func peerNetns(t *testing.T) (inPeer func(f func())) {
	t.Helper()
	peer := testenv.NewNetns(t)
	if err := peer.MoveLink("veth0"); err != nil {
		t.Fatal(err)
	}
	ip(t, "addr", "add", "10.9.0.2/24", "dev", "veth1")
	veth1, err := net.InterfaceByName("veth1")
	if err != nil {
		t.Fatal(err)
	}
	err = peer.Do(func() error {
		return topology.RunLines(
			"ip link set lo up",
			"ip addr add 10.9.0.1/24 dev veth0",
			"ip link set veth0 up",
			// A permanent neighbour: under load an ARP probe can time out
			// and the peer would drop datagrams before they reach the
			// filter.
			"ip neigh replace 10.9.0.2 lladdr "+veth1.HardwareAddr.String()+" dev veth0 nud permanent",
		)
	})
	if err != nil {
		t.Fatalf("in the peer: %v", err)
	}
	return peer.Run
}

// udpCounter counts the datagrams arriving on a port of 10.9.0.2.
type udpCounter struct {
	conn *net.UDPConn
	n    atomic.Int64
}

func listenUDP(t *testing.T, port int) *udpCounter {
	conn, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(10, 9, 0, 2), Port: port})
	if err != nil {
		t.Fatal(err)
	}
	conn.SetReadBuffer(16 << 20)
	c := &udpCounter{conn: conn}
	go func() {
		buf := make([]byte, 2048)
		for {
			if _, err := conn.Read(buf); err != nil {
				return
			}
			c.n.Add(1)
		}
	}()
	t.Cleanup(func() { conn.Close() })
	return c
}

// TestSwapUnderLoad: a sender streams two flows through veth1 while 100
// swaps alternate between two rule sets that agree on one flow (udp 5001,
// accepted) and disagree on the other (udp 5002: dropped by A, accepted
// by B). The agreeing flow loses no packet, and every packet of the other
// is decided by exactly one program: the counters of A's DROP rule and
// B's ACCEPT rule, read from each program after it was replaced, add up
// to what was sent, and B's to what arrived.
func TestSwapUnderLoad(t *testing.T) {
	for _, c := range []struct {
		hook codegen.Hook
		mode XDPMode
	}{{codegen.HookXDP, XDPNative}, {codegen.HookXDP, XDPGeneric}, {codegen.HookTCIngress, XDPAuto}} {
		name := c.hook.String()
		if c.hook == codegen.HookXDP {
			name += "-" + c.mode.String()
		}
		t.Run(name, func(t *testing.T) { swapUnderLoad(t, c.hook, c.mode) })
	}
}

func swapUnderLoad(t *testing.T, hook codegen.Hook, mode XDPMode) {
	ns := inFreshNetns(t)
	inPeer := peerNetns(t)
	place := testPlace(t, ns, hook)
	agree, differ := listenUDP(t, 5001), listenUDP(t, 5002)

	sets := [2]string{
		ruleset(hook, "-p udp -m udp --dport 5001 -j ACCEPT", "-p udp -m udp --dport 5002 -j DROP"),
		ruleset(hook, "-p udp -m udp --dport 5002 -j ACCEPT", "-p udp -m udp --dport 5001 -j ACCEPT"),
	}
	// Rule IDs of the 5001 and 5002 rules in each set.
	agreeRule, differRule := [2]int{0, 1}, [2]int{1, 0}
	s := newSwap(t, place, sets[0], "veth1")
	s.XDPMode = mode
	mustSwap(t, s)

	var sent [2]atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go inPeer(func() {
		defer wg.Done()
		var conns [2]*net.UDPConn
		for i, port := range []int{5001, 5002} {
			c, err := net.DialUDP("udp4", nil, &net.UDPAddr{IP: net.IPv4(10, 9, 0, 2), Port: port})
			if err != nil {
				t.Errorf("dial: %v", err)
				return
			}
			defer c.Close()
			conns[i] = c
		}
		payload := make([]byte, 32)
		for {
			select {
			case <-stop:
				return
			default:
			}
			for i, c := range conns {
				if _, err := c.Write(payload); err == nil {
					sent[i].Add(1)
				}
			}
			time.Sleep(20 * time.Microsecond)
		}
	})

	var decidedBy [2]uint64 // 5002 packets counted by A's DROP, B's ACCEPT
	var critical, total []time.Duration
	const swaps = 100
	for i := 1; i <= swaps; i++ {
		cur, next := (i-1)%2, i%2
		old, err := ebpf.LoadPinnedMap(filepath.Join(place.Dir(), pinCounters), nil)
		if err != nil {
			t.Fatal(err)
		}
		a, err := Open(place)
		if err != nil {
			t.Fatal(err)
		}
		snap, err := a.Snapshot()
		a.Close()
		if err != nil {
			t.Fatal(err)
		}
		s := newSwap(t, place, sets[next])
		s.Counters, s.Since = snap.Carry(s.Program), snap
		start := time.Now()
		res := mustSwap(t, s)
		total = append(total, time.Since(start))
		critical = append(critical, res.Critical)
		final, err := readCounters(old, len(snap.Counters))
		old.Close()
		if err != nil {
			t.Fatal(err)
		}
		decidedBy[cur] += final[differRule[cur]].Packets
		time.Sleep(5 * time.Millisecond)
	}
	last := swaps % 2
	time.Sleep(20 * time.Millisecond)
	close(stop)
	wg.Wait()
	time.Sleep(100 * time.Millisecond) // let the receivers drain
	a, err := Open(place)
	if err != nil {
		t.Fatal(err)
	}
	c, err := a.Counters()
	a.Close()
	if err != nil {
		t.Fatal(err)
	}
	// The last program's 5002 rule has not been carried over anywhere:
	// only the current counters hold it, minus its base (zero).
	decidedBy[last] += c[differRule[last]].Packets

	sentAgree, sentDiffer := uint64(sent[0].Load()), uint64(sent[1].Load())
	if sentAgree < swaps {
		t.Fatalf("only %d packets sent", sentAgree)
	}
	if got := uint64(agree.n.Load()); got != sentAgree {
		t.Errorf("agreeing flow: %d of %d packets arrived", got, sentAgree)
	}
	if got := c[agreeRule[last]].Packets; got != sentAgree {
		t.Errorf("agreeing rule counted %d packets across %d swaps, %d were sent", got, swaps, sentAgree)
	}
	if decidedBy[0]+decidedBy[1] != sentDiffer {
		t.Errorf("disagreeing flow: A dropped %d and B accepted %d, %d were sent", decidedBy[0], decidedBy[1], sentDiffer)
	}
	if got := uint64(differ.n.Load()); got != decidedBy[1] {
		t.Errorf("disagreeing flow: %d packets arrived, B accepted %d", got, decidedBy[1])
	}
	if decidedBy[0] == 0 || decidedBy[1] == 0 {
		t.Errorf("one rule set decided nothing: %v", decidedBy)
	}
	slices.Sort(critical)
	slices.Sort(total)
	t.Logf("%s %s: %d swaps under %d+%d packets; links switch in median %v, max %v; whole swap (load, verify, pin, switch) median %v, max %v",
		hook, mode, swaps, sentAgree, sentDiffer, critical[len(critical)/2], critical[len(critical)-1], total[len(total)/2], total[len(total)-1])
}
