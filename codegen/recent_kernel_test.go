package codegen_test

import (
	"encoding/binary"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/gopacket/gopacket/layers"

	"bpfwall/codegen"
	"bpfwall/codegen/abi"
	"bpfwall/internal/testenv"
	"bpfwall/rules"
)

// BenchmarkRecent measures the per-packet cost of a recent match: the
// same rule set with and without it in front of the rule that decides, on
// a packet that reaches it. The table is empty, or full (100 addresses,
// none the packet's: the search compares them all), or full with the
// packet's address last (the SSH pattern: a --set and an --update
// --seconds --hitcount that counts its 32 stamps). It reports the instructions the verifier
// processed too.
func BenchmarkRecent(b *testing.B) {
	testenv.RequireRoot(b)
	base := "*filter\n:INPUT DROP [0:0]\n:FORWARD ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n-A INPUT -p tcp -m tcp --dport 22 -j ACCEPT\n" +
		"-A INPUT -p udp -m udp --dport 54 -m recent --set --name F -j DROP\n"
	cases := []struct {
		name, rule string
		fill       int // addresses set before, in slots 0, 1, ...
	}{
		{"none", "-A INPUT -p udp -m udp --dport 53 -j ACCEPT\n", 0},
		{"rcheck-empty", "-A INPUT -p udp -m udp --dport 53 -m recent ! --rcheck --name F -j ACCEPT\n", 0},
		{"rcheck-full", "-A INPUT -p udp -m udp --dport 53 -m recent ! --rcheck --name F -j ACCEPT\n", 100},
		// The packet's address takes the last slot.
		{"set-update-full", "-A INPUT -p udp -m udp --dport 53 -m recent --set --name F\n" +
			"-A INPUT -p udp -m udp --dport 53 -m recent ! --update --seconds 60 --hitcount 30 --name F -j ACCEPT\n", 99},
	}
	data := frame4(b, layers.IPProtocolUDP, "192.0.2.1", "192.0.2.2", 40000, 53)
	for _, tc := range cases {
		b.Run(tc.name, func(b *testing.B) {
			p := compileText(b, base+tc.rule+"COMMIT\n", rules.IPv4, codegen.HookXDP)
			coll, err := ebpf.NewCollection(p.Spec)
			if err != nil {
				b.Fatal(err)
			}
			defer coll.Close()
			prog := coll.Programs[abi.ProgramName]
			for i := range tc.fill {
				f := frame4(b, layers.IPProtocolUDP, fmt.Sprintf("10.0.%d.%d", i/200, i%200+1), "192.0.2.2", 40000, 54)
				if _, err := prog.Run(&ebpf.RunOptions{Data: f}); err != nil {
					b.Fatal(err)
				}
			}
			verified := 0
			if info, err := prog.Info(); err == nil {
				if n, ok := info.VerifiedInstructions(); ok {
					verified = int(n)
				}
			}
			b.ResetTimer()
			_, d, err := prog.Benchmark(data, b.N, nil)
			if err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(float64(d.Nanoseconds()), "ns/pkt")
			b.ReportMetric(float64(verified), "verified-insns")
		})
	}
}

// BenchmarkRecentFlood measures a flood of new sources against a full
// table: every packet's --set misses, evicts the least recently updated
// entry (the search for the lru head, and the last slot moved into its
// place) and lists the new address. The table's ring is the default 32
// stamps, or 1024 (a --hitcount 1000 rule names the table too). ns/pkt is
// the kernel's time for each packet (BPF_PROG_TEST_RUN, one run each).
func BenchmarkRecentFlood(b *testing.B) {
	testenv.RequireRoot(b)
	head := "*filter\n:INPUT ACCEPT [0:0]\n:FORWARD ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n-A INPUT -p udp -m recent --set --name F -j DROP\n"
	for _, tc := range []struct{ name, rule string }{
		{"ring32", ""},
		{"ring1024", "-A INPUT -p tcp -m recent --rcheck --seconds 60 --hitcount 1000 --name F -j DROP\n"},
	} {
		b.Run(tc.name, func(b *testing.B) {
			p := compileText(b, head+tc.rule+"COMMIT\n", rules.IPv4, codegen.HookXDP)
			coll, err := ebpf.NewCollection(p.Spec)
			if err != nil {
				b.Fatal(err)
			}
			defer coll.Close()
			prog := coll.Programs[abi.ProgramName]
			src := func(i int) string { return fmt.Sprintf("10.%d.%d.%d", i>>16&255, i>>8&255, i&255) }
			for i := range 100 {
				if _, err := prog.Run(&ebpf.RunOptions{Data: frame4(b, layers.IPProtocolUDP, src(i), "192.0.2.2", 40000, 53)}); err != nil {
					b.Fatal(err)
				}
			}
			frames := make([][]byte, b.N)
			for i := range frames {
				frames[i] = frame4(b, layers.IPProtocolUDP, src(100+i), "192.0.2.2", 40000, 53)
			}
			b.ResetTimer()
			var total time.Duration
			for _, f := range frames {
				_, d, err := prog.Benchmark(f, 1, nil)
				if err != nil {
					b.Fatal(err)
				}
				total += d
			}
			b.ReportMetric(float64(total.Nanoseconds())/float64(b.N), "ns/pkt")
		})
	}
}

// TestRecentAcrossCPUs: every CPU runs a recent match on one table at once
// (BPF_PROG_TEST_RUN, repeated), each for its own address; the table's
// spin lock makes every match one step, as recent_lock does: every --set
// takes a sequence number of its own, and a table whose rules set and
// remove an address ends empty, its count of entries exact.
func TestRecentAcrossCPUs(t *testing.T) {
	testenv.RequireRoot(t)
	testenv.RequireCPUs(t, 2) // on one CPU nothing runs concurrently
	cpus := runtime.NumCPU()
	const perCPU = 20000
	head := "*filter\n:INPUT DROP [0:0]\n:FORWARD ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n"
	cases := []struct {
		name, rules string
		entries     int // at the end
		nstamps     uint16
	}{
		{"set", "-A INPUT -p udp -m recent --set -j ACCEPT\n", cpus, 32},
		{"set and remove", "-A INPUT -p udp -m recent --set\n-A INPUT -p udp -m recent --remove -j ACCEPT\n", 0, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := compileText(t, head+tc.rules+"COMMIT\n", rules.IPv4, codegen.HookXDP)
			coll, err := ebpf.NewCollection(p.Spec)
			if err != nil {
				t.Fatal(err)
			}
			defer coll.Close()
			prog := coll.Programs[abi.ProgramName]
			onEachCPU(t, cpus, func(cpu int) error {
				data := frame4(t, layers.IPProtocolUDP, fmt.Sprintf("10.0.0.%d", cpu+1), "192.0.2.2", 40000, 53)
				return runTimes(prog, data, perCPU)
			})
			stamps := codegen.RecentTables(p)[0].Stamps
			value := make([]byte, abi.RecentValueSize(stamps))
			if err := coll.Maps[abi.RecentMap(0)].Lookup(uint32(0), &value); err != nil {
				t.Fatal(err)
			}
			seq := binary.NativeEndian.Uint64(value[8:])
			entries := binary.NativeEndian.Uint32(value[16:])
			slots := abi.RecentSlots(value, stamps)
			t.Logf("%d CPUs × %d: sequence %d, %d entries", cpus, perCPU, seq, entries)
			if seq != uint64(cpus*perCPU) {
				t.Errorf("sequence number %d after %d sets", seq, cpus*perCPU)
			}
			if int(entries) != tc.entries || len(slots) != tc.entries {
				t.Errorf("%d entries counted, %d slots used; want %d", entries, len(slots), tc.entries)
			}
			for _, s := range slots {
				if s.NStamps != tc.nstamps {
					t.Errorf("slot %+v: %d stamps, want %d", s.Addr, s.NStamps, tc.nstamps)
				}
			}
		})
	}
}

// TestRecentReapMovesEntry: when --reap removes the least recently
// updated entry, the last slot in use moves into its place; an --update
// whose entry was that slot stamps it where it moved. The entry's stamp
// is set old in the map, so that no wait decides the outcome.
func TestRecentReapMovesEntry(t *testing.T) {
	testenv.RequireRoot(t)
	testenv.RequireTool(t, "ip")
	ns := newNetns(t)
	src := "*filter\n:INPUT DROP [0:0]\n:FORWARD ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n" +
		"-A INPUT -p udp -m udp --dport 1 -m recent --set -j ACCEPT\n" +
		"-A INPUT -p udp -m udp --dport 2 -m recent --update --seconds 10 --reap -j ACCEPT\nCOMMIT\n"
	p := compileText(t, src, rules.IPv4, codegen.HookXDP)
	l := load(t, p, ns)
	send := func(from string, dport uint16) abi.Decision {
		t.Helper()
		_, d, err := l.run(frame4(t, layers.IPProtocolUDP, from, "192.0.2.2", 40000, dport), ns.devs[1], 0)
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	send("10.0.0.1", 1) // slot 0
	send("10.0.0.2", 1) // slot 1
	table := l.coll.Maps[abi.RecentMap(0)]
	stamps := codegen.RecentTables(p)[0].Stamps
	value := make([]byte, abi.RecentValueSize(stamps))
	if err := table.Lookup(uint32(0), &value); err != nil {
		t.Fatal(err)
	}
	// 10.0.0.1 was last seen a minute before 10.0.0.2.
	off := codegen.RecentStampOffset(stamps, 0, 0)
	binary.NativeEndian.PutUint64(value[off:], binary.NativeEndian.Uint64(value[codegen.RecentStampOffset(stamps, 1, 0):])-60*250)
	if err := table.Put(uint32(0), value); err != nil {
		t.Fatal(err)
	}
	if d := send("10.0.0.2", 2); d.Kind != abi.DecidedByRule || d.Rule != 1 {
		t.Fatalf("update of 10.0.0.2: decision %+v, want rule 1's", d)
	}
	if err := table.Lookup(uint32(0), &value); err != nil {
		t.Fatal(err)
	}
	slots := abi.RecentSlots(value, stamps)
	if len(slots) != 1 || slots[0].Addr[0] != 0x0a000002 || slots[0].NStamps != 2 || slots[0].Index != 2 {
		t.Errorf("after the reap: %+v, want 10.0.0.2 alone with two stamps", slots)
	}
	if binary.NativeEndian.Uint64(value[codegen.RecentStampOffset(stamps, 0, 1):]) == 0 {
		t.Errorf("the update's stamp is not in slot 0, where 10.0.0.2 moved")
	}
}
