package difftest

import (
	"bpfwall/internal/testenv"
	"fmt"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	"bpfwall/codegen"
	"bpfwall/internal/topology"
	"bpfwall/ir"
	"bpfwall/loader"
	"bpfwall/rules"
)

// hashlimitRules is a FORWARD chain whose probes are delivered when
// hashlimit table name, keyed by source, pays for them. extra is a rule
// before it.
func hashlimitRules(name string, burst int, extra string) string {
	return fmt.Sprintf(`*filter
:INPUT ACCEPT [0:0]
:FORWARD DROP [0:0]
:OUTPUT ACCEPT [0:0]
%s-A FORWARD -p udp -m udp --dport 5353 -m hashlimit --hashlimit-upto 2/sec --hashlimit-burst %d --hashlimit-mode srcip --hashlimit-name %s -j ACCEPT
COMMIT
`, extra, burst, name)
}

// restoreGap is the pause after the rules are replaced: a bucket regains
// one packet's worth of credit (2/sec), so the second burst also shows
// whether a kept bucket's refill goes on from where it was.
const restoreGap = 500 * time.Millisecond

// TestHashLimitAcrossRestore: a burst empties each source's bucket, the
// rules are replaced (iptables-restore in the kernel, a swap in bpfwall),
// and a second burst follows. xt_hashlimit's table survives a restore
// whose rules name it (hashlimit_mt_check_common finds it before the old
// rules let it go), so the second burst finds the buckets as the first
// left them; a table of another name starts with full ones. Each run's
// counts must lie within a token bucket's bounds for the measured times
// (limitBounds): one bucket across both bursts when the table is kept, a
// fresh one per burst otherwise (the two ranges are apart: 2/sec with a
// burst of 20). When the new rules give the table another burst, the
// kernel keeps the running table's, which bpfwall refuses to pretend:
// the swap fails and the running program goes on.
func TestHashLimitAcrossRestore(t *testing.T) {
	requireKernel(t)
	topo := NewTopology(t, TopologyOptions{})
	root := testenv.BPFFS(t)
	t.Cleanup(func() {
		if err := os.RemoveAll(root); err != nil {
			t.Error(err)
		}
	})
	sources := []string{"192.0.2.2", "198.51.100.1"}
	var probes [][]byte
	for _, src := range sources {
		probes = append(probes, limitProbe(t, netip.MustParseAddr(src)))
	}
	before := hashlimitRules("t", 20, "")
	for _, c := range []struct {
		name, after string
		kept        bool
		refused     string // bpfwall's error
	}{
		{name: "same table", kept: true, after: hashlimitRules("t", 20, "-A FORWARD -p tcp -m tcp --dport 22 -j DROP\n")},
		{name: "another name", after: hashlimitRules("u", 20, "")},
		{name: "another burst", kept: true, after: hashlimitRules("t", 40, ""), refused: "--hashlimit-burst 20 where these rules say 40"},
	} {
		t.Run(c.name, func(t *testing.T) {
			rs, prog := limitProgram(t, limitCase{name: "before", rules: before}, rules.IPv4)
			var m ir.HashLimit
			for _, r := range prog.Rules {
				for _, x := range r.Matches {
					if h, ok := x.(ir.HashLimit); ok {
						m = h
					}
				}
			}
			p, err := codegen.Compile(prog, codegen.Options{Trace: true, Hook: codegen.HookXDP})
			if err != nil {
				t.Fatal(err)
			}
			rsAfter, progAfter := limitProgram(t, limitCase{name: "after", rules: c.after}, rules.IPv4)
			pAfter, err := codegen.Compile(progAfter, codegen.Options{Trace: true, Hook: codegen.HookXDP})
			if err != nil {
				t.Fatal(err)
			}

			// The kernel: iptables-legacy-restore between the bursts.
			if err := topo.Load(rules.IPv4, []byte(before)); err != nil {
				t.Fatal(err)
			}
			var restoreErr error
			kernel := sendBurstsBetween(t, topo, probes, 2, func() {
				restoreErr = topo.Load(rules.IPv4, []byte(c.after))
				time.Sleep(restoreGap)
			})
			if restoreErr != nil {
				t.Fatal(restoreErr)
			}
			if err := clearNetfilter(topo); err != nil {
				t.Fatal(err)
			}

			// bpfwall: a swap between the bursts.
			detach := attach(t, topo, root, rs, p)
			var swapErr error
			bpf := sendBurstsBetween(t, topo, probes, 2, func() {
				swapErr = swapIn(topo, root, rsAfter, pAfter)
				time.Sleep(restoreGap)
			})
			if err := detach(); err != nil {
				t.Fatal(err)
			}
			switch {
			case c.refused == "" && swapErr != nil:
				t.Fatal(swapErr)
			case c.refused != "" && (swapErr == nil || !strings.Contains(swapErr.Error(), c.refused)):
				t.Fatalf("swap: %v, want a refusal saying %q", swapErr, c.refused)
			case swapErr != nil:
				t.Logf("bpfwall refuses: %v", swapErr)
			}

			for _, run := range []struct {
				who string
				r   burstRun
			}{{"kernel", kernel}, {"bpfwall", bpf}} {
				lo, hi := limitBounds(m, run.r)
				if !c.kept {
					lo, hi = 0, 0
					for i := range run.r.start {
						one := burstRun{start: run.r.start[i : i+1], end: run.r.end[i : i+1]}
						l, h := limitBounds(m, one)
						lo, hi = lo+l, hi+h
					}
				}
				for i, src := range sources {
					got := run.r.delivered[i]
					t.Logf("%s from %s: %d of %d delivered over %v (bursts %v); the table %s allows %d..%d",
						run.who, src, got, 2*limitBurstSize, run.r.elapsed(), run.r.perBurst[i], map[bool]string{true: "kept", false: "anew"}[c.kept], lo, hi)
					if got < lo || got > hi {
						t.Errorf("%s from %s delivered %d, outside %d..%d", run.who, src, got, lo, hi)
					}
				}
			}
		})
	}
}

// swapIn swaps p in for the filter attach loaded, as `bpfwall load` (or
// restore) of new rules does.
func swapIn(topo *Topology, root string, rs *rules.Ruleset, p *codegen.Program) error {
	meta, counters, err := loader.NewMeta(rs, p, "after")
	if err != nil {
		return err
	}
	return topology.Do(topo.Firewall, func() error {
		place, err := loader.Here(root, codegen.HookXDP)
		if err != nil {
			return err
		}
		_, err = (&loader.Swap{Place: place, Program: p, Meta: meta, Counters: counters, XDPMode: loader.XDPGeneric}).Run()
		return err
	})
}
