package loader

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"

	"bpfwall/codegen"
	"bpfwall/ir"
	"bpfwall/parser/iptables"
	"bpfwall/rules"
)

// chainSwaps compiles every chain of text that names rules, for family,
// and returns their swaps in NetfilterChains' order.
func chainSwaps(t *testing.T, root string, ns uint64, family rules.Family, text string) []*Swap {
	t.Helper()
	swaps, err := buildChainSwaps(root, ns, family, text, "test.rules")
	if err != nil {
		t.Fatal(err)
	}
	return swaps
}

// buildChainSwaps is chainSwaps for a caller without a test (the crash
// helper), whose rules come from file.
func buildChainSwaps(root string, ns uint64, family rules.Family, text, file string) ([]*Swap, error) {
	rs, err := iptables.Parse(file, []byte(text), iptables.Options{Family: family, ForceFamily: family == rules.IPv6})
	if err != nil {
		return nil, err
	}
	var out []*Swap
	for _, c := range NetfilterChains {
		tb := rs.Table(c.Table)
		if tb == nil || len(tb.Chain(c.Chain).Rules) == 0 {
			continue
		}
		p, err := ir.Lower(rs, ir.LowerOptions{Table: c.Table, Chain: c.Chain})
		if err != nil {
			return nil, err
		}
		prog, err := codegen.Compile(p, codegen.Options{Hook: codegen.HookNetfilter})
		if err != nil {
			return nil, err
		}
		meta, counters, err := NewMeta(rs, prog, file)
		if err != nil {
			return nil, err
		}
		place := ChainPlace(root, ns, family, c.Table, c.Chain)
		out = append(out, &Swap{Place: place, Program: prog, Meta: meta, Counters: counters})
	}
	// With a dispatcher in the namespace, the family's accelerator too.
	if on, err := AcceleratedIfaces(root, ns); err != nil || len(on) == 0 {
		return out, err
	}
	var chains [2]*ir.Program
	for i, name := range []string{"INPUT", "FORWARD"} {
		if chains[i], err = ir.Lower(rs, ir.LowerOptions{Table: "filter", Chain: name}); err != nil {
			return nil, err
		}
	}
	p, err := codegen.Accelerator(chains[0], chains[1])
	if err != nil || p == nil {
		return out, err
	}
	prog, err := codegen.Compile(p, codegen.Options{Hook: codegen.HookXDP, Accelerate: true})
	if err != nil {
		return nil, err
	}
	meta := NewMetaSource(rs).AcceleratorMeta(prog, file)
	return append(out, &Swap{Place: AcceleratorPlace(root, ns, family), Program: prog, Meta: meta}), nil
}

// slotProgram is the program the dispatcher slot at p holds; 0 for none.
func slotProgram(t *testing.T, p Place) ebpf.ProgramID {
	t.Helper()
	m, err := ebpf.LoadPinnedMap(filepath.Join(p.Dir(), pinDispatch), nil)
	if errors.Is(err, os.ErrNotExist) {
		return 0
	}
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	var id ebpf.ProgramID
	if err := m.Lookup(uint32(0), &id); err != nil {
		t.Fatal(err)
	}
	return id
}

// dialOutcome connects to 127.0.0.1:port from the calling thread's
// namespace: "open", "refused" or "timeout".
func dialOutcome(port int) string {
	c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", port), 300*time.Millisecond)
	switch {
	case err == nil:
		c.Close()
		return "open"
	case strings.Contains(err.Error(), "refused"):
		return "refused"
	case strings.Contains(err.Error(), "timeout"):
		return "timeout"
	}
	return err.Error()
}

// TestSwapAllNetfilterChains swaps several chains at their netfilter
// hooks as one, and injects a failure at each chain's switch of a second
// swap: the first rule set must go on running in every chain, with its
// programs, pins and counters, and the chain the second would have added
// must not stay attached.
func TestSwapAllNetfilterChains(t *testing.T) {
	ns := inFreshNetns(t)
	root := testRoot(t)
	t.Cleanup(func() { os.RemoveAll(filepath.Join(root, fmt.Sprint(ns))) })
	ln, _ := listenTCP(t, "127.0.0.1:0")
	open := port(ln.Addr())
	ln2, _ := listenTCP(t, "127.0.0.1:0")
	other := port(ln2.Addr())

	first := fmt.Sprintf(`*filter
:INPUT ACCEPT [0:0]
:FORWARD ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
-A INPUT -p tcp --dport %d -j DROP
-A OUTPUT -p tcp --dport 9 -j DROP
COMMIT
`, other)
	res, err := SwapAll(chainSwaps(t, root, ns, rules.IPv4, first), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != 2 {
		t.Fatalf("%d results, want 2", len(res))
	}
	if got := dialOutcome(other); got != "timeout" {
		t.Fatalf("INPUT drops port %d: the connection meets %s", other, got)
	}
	if got := dialOutcome(open); got != "open" {
		t.Fatalf("port %d: the connection meets %s", open, got)
	}
	input := ChainPlace(root, ns, rules.IPv4, "filter", "INPUT")
	output := ChainPlace(root, ns, rules.IPv4, "filter", "OUTPUT")
	forward := ChainPlace(root, ns, rules.IPv4, "filter", "FORWARD")
	running := map[Place]ebpf.ProgramID{input: res[0].Program, output: res[1].Program}
	for p, id := range running {
		if got := slotProgram(t, p); got != id {
			t.Fatalf("%s: the slot holds program %d, the swap loaded %d", p.Name(), got, id)
		}
	}
	a, err := Open(input)
	if err != nil {
		t.Fatal(err)
	}
	before, err := a.Counters()
	a.Close()
	if err != nil {
		t.Fatal(err)
	}
	if before[0].Packets == 0 {
		t.Fatal("the INPUT rule counted nothing")
	}

	// The second rule set swaps the ports, and adds FORWARD.
	second := fmt.Sprintf(`*filter
:INPUT ACCEPT [0:0]
:FORWARD DROP [0:0]
:OUTPUT ACCEPT [0:0]
-A INPUT -p tcp --dport %d -j DROP
-A FORWARD -p tcp -j ACCEPT
-A OUTPUT -p tcp --dport 10 -j DROP
COMMIT
`, open)
	for k := range 3 {
		t.Logf("failure at swap %d", k)
		swaps := chainSwaps(t, root, ns, rules.IPv4, second)
		if len(swaps) != 3 {
			t.Fatalf("%d chains, want 3", len(swaps))
		}
		swaps[k].Update = failUpdate
		if k == 1 {
			// FORWARD is new: nothing to update. Fail its preparation
			// instead, with a program for another place.
			swaps[k].Place = output
		}
		if _, err := SwapAll(swaps, nil, nil); err == nil {
			t.Fatalf("failure %d: the swap succeeded", k)
		}
		for p, id := range running {
			if got := slotProgram(t, p); got != id {
				t.Errorf("failure %d: %s runs program %d, not %d", k, p.Name(), got, id)
			}
			ents, _ := os.ReadDir(p.Dir())
			for _, e := range ents {
				if strings.HasSuffix(e.Name(), newSuffix) {
					t.Errorf("failure %d: %s keeps pin %s", k, p.Name(), e.Name())
				}
			}
		}
		if _, err := os.Stat(filepath.Join(forward.Dir(), pinProgram)); err == nil {
			t.Errorf("failure %d: FORWARD stays loaded", k)
		}
		if got := dialOutcome(other); got != "timeout" {
			t.Errorf("failure %d: port %d meets %s; the old INPUT drops it", k, other, got)
		}
		if got := dialOutcome(open); got != "open" {
			t.Errorf("failure %d: port %d meets %s; the old INPUT accepts it", k, open, got)
		}
	}
	a, err = Open(input)
	if err != nil {
		t.Fatal(err)
	}
	after, err := a.Counters()
	a.Close()
	if err != nil {
		t.Fatal(err)
	}
	if after[0].Packets <= before[0].Packets {
		t.Errorf("the INPUT rule's counter went from %d to %d packets", before[0].Packets, after[0].Packets)
	}
	dispatchers := map[ebpf.ProgramID]bool{}
	for p := range running {
		dispatchers[pinnedDispatcher(t, p)] = true
	}
	if n := netfilterLinks(t, dispatchers); n != 2 {
		t.Errorf("%d netfilter links in the namespace, want 2", n)
	}

	// Now for good; the swap replaces the programs in the slots.
	res, err = SwapAll(chainSwaps(t, root, ns, rules.IPv4, second), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := dialOutcome(other); got != "open" {
		t.Errorf("after the swap, port %d meets %s", other, got)
	}
	if got := dialOutcome(open); got != "timeout" {
		t.Errorf("after the swap, port %d meets %s", open, got)
	}
	if res[0].Replaced != running[input] || slotProgram(t, input) != res[0].Program {
		t.Errorf("INPUT: program %d replaced %d, the slot holds %d", res[0].Program, res[0].Replaced, slotProgram(t, input))
	}
	dispatchers[pinnedDispatcher(t, forward)] = true
	if n := netfilterLinks(t, dispatchers); n != 3 {
		t.Errorf("%d netfilter links in the namespace, want 3", n)
	}
	for _, p := range []Place{input, forward, output} {
		if _, err := Unload(p, nil); err != nil {
			t.Fatal(err)
		}
	}
	if n := netfilterLinks(t, dispatchers); n != 0 {
		t.Errorf("after unload, %d netfilter links", n)
	}
}

// pinnedDispatcher is the dispatcher pinned at p.
func pinnedDispatcher(t *testing.T, p Place) ebpf.ProgramID {
	t.Helper()
	prog, err := ebpf.LoadPinnedProgram(filepath.Join(p.Dir(), pinDispatcher), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer prog.Close()
	return programID(prog)
}

// netfilterLinks counts the netfilter links that run one of progs.
func netfilterLinks(t *testing.T, progs map[ebpf.ProgramID]bool) int {
	t.Helper()
	count := func() (int, error) {
		n := 0
		it := new(link.Iterator)
		for it.Next() {
			l := it.Take()
			info, err := l.Info()
			l.Close()
			if err == nil && info.Type == link.NetfilterType && progs[info.Program] {
				n++
			}
		}
		return n, it.Err()
	}
	for try := 0; ; try++ {
		n, err := count()
		// The iteration visits every link of the host: one released
		// meanwhile (by a process just killed) cannot be opened, and
		// the kernel says EAGAIN or ENOENT; count again.
		if err == nil || try == 10 || !errors.Is(err, unix.EAGAIN) && !errors.Is(err, os.ErrNotExist) {
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestNetfilterSwapSurvivesKill kills a chain's swap at its netfilter
// hook at every one of its steps, a first load and a swap: after the next
// command recovers, the slot runs the program the pins describe, the old
// rules if the swap died before its new filter was complete and the new
// ones from then on, one link runs the chain, and the next swap succeeds.
func TestNetfilterSwapSurvivesKill(t *testing.T) {
	for _, first := range []bool{true, false} {
		name := map[bool]string{true: "first load", false: "swap"}[first]
		t.Run(name, func(t *testing.T) {
			var steps []string
			var a, b int
			setup := func(t *testing.T) Place {
				ns := inFreshNetns(t)
				root := testRoot(t)
				t.Cleanup(func() { os.RemoveAll(filepath.Join(root, fmt.Sprint(ns))) })
				la, _ := listenTCP(t, "127.0.0.1:0")
				lb, _ := listenTCP(t, "127.0.0.1:0")
				a, b = port(la.Addr()), port(lb.Addr())
				place := ChainPlace(root, ns, rules.IPv4, "filter", "INPUT")
				if !first {
					s := chainSwaps(t, root, ns, rules.IPv4, ruleset(codegen.HookXDP, fmt.Sprintf("-p tcp --dport %d -j DROP", a)))[0]
					s.Meta.File = "A.rules"
					if _, err := SwapAll([]*Swap{s}, nil, nil); err != nil {
						t.Fatal(err)
					}
				}
				return place
			}
			next := func() string { return ruleset(codegen.HookXDP, fmt.Sprintf("-p tcp --dport %d -j DROP", b)) }
			check := func(t *testing.T, place Place, file string) {
				t.Helper()
				ents, _ := os.ReadDir(place.Dir())
				for _, e := range ents {
					if strings.HasSuffix(e.Name(), newSuffix) {
						t.Errorf("pin %s left behind", e.Name())
					}
				}
				act, err := Open(place)
				if file == "" {
					if !errors.Is(err, os.ErrNotExist) {
						t.Errorf("open: %v, want nothing loaded", err)
						if err == nil {
							act.Close()
						}
					}
					if dialOutcome(a) != "open" || dialOutcome(b) != "open" {
						t.Errorf("nothing loaded, but ports %d, %d meet %s, %s", a, b, dialOutcome(a), dialOutcome(b))
					}
					return
				}
				if err != nil {
					t.Fatalf("open: %v", err)
				}
				defer act.Close()
				if act.Meta.File != file {
					t.Errorf("the pins describe %s, want %s", act.Meta.File, file)
				}
				if got, want := slotProgram(t, place), programID(act.Program); got != want {
					t.Errorf("the slot runs program %d, the pins describe %d", got, want)
				}
				if n := netfilterLinks(t, map[ebpf.ProgramID]bool{pinnedDispatcher(t, place): true}); n != 1 {
					t.Errorf("%d links run the dispatcher, want 1", n)
				}
				dropped, open := a, b
				if file == "B.rules" {
					dropped, open = b, a
				}
				if got := dialOutcome(dropped); got != "timeout" {
					t.Errorf("%s drops port %d: it meets %s", file, dropped, got)
				}
				if got := dialOutcome(open); got != "open" {
					t.Errorf("%s lets port %d through: it meets %s", file, open, got)
				}
			}
			t.Run("steps", func(t *testing.T) {
				place := setup(t)
				steps = runCrashHelper(t, place, next(), nil, "list")
				check(t, place, "B.rules")
			})
			decided := slices.Index(steps, "pin "+pinMeta)
			done := slices.Index(steps, "commit "+pinMeta)
			if decided < 0 || done < decided || !slices.Contains(steps, "fill "+pinDispatch) == first {
				t.Fatalf("steps %q", steps)
			}
			for k, step := range steps {
				t.Run(fmt.Sprintf("%02d %s", k, step), func(t *testing.T) {
					place := setup(t)
					runCrashHelper(t, place, next(), nil, strconv.Itoa(k))
					if _, err := Recover(place); err != nil {
						t.Fatalf("recover: %v", err)
					}
					switch {
					case k >= decided:
						check(t, place, "B.rules")
					case !first:
						check(t, place, "A.rules")
					default:
						check(t, place, "")
					}
					s := chainSwaps(t, place.Root, place.NetNS, rules.IPv4, ruleset(codegen.HookXDP, fmt.Sprintf("-p tcp --dport %d -j DROP", a)))[0]
					s.Meta.File = "A.rules"
					if _, err := SwapAll([]*Swap{s}, nil, nil); err != nil {
						t.Fatal(err)
					}
					check(t, place, "A.rules")
				})
			}
		})
	}
}
