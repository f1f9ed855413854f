package codegen_test

import (
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/gopacket/gopacket/layers"
	"golang.org/x/sys/unix"

	"bpfwall/codegen"
	"bpfwall/codegen/abi"
	"bpfwall/internal/testenv"
	"bpfwall/ir"
	"bpfwall/parser/nft"
	"bpfwall/rules"
)

// TestLimitAcrossCPUs runs a program on every CPU at once, each CPU
// hammering one token bucket with BPF_PROG_TEST_RUN's repeat, and checks
// that the CPUs together get exactly what the bucket holds: the rates are
// so slow (1/minute, 1/hour) that the run's refill is far below the cost
// of one packet, so every payment is from the initial bucket, and a lost
// update between CPUs would let more through.
func TestLimitAcrossCPUs(t *testing.T) {
	testenv.RequireRoot(t)
	cpus := runtime.NumCPU()
	if cpus < 2 {
		t.Skip("one CPU: nothing runs concurrently")
	}
	cases := []struct {
		name  string
		nft   bool
		rules string
		burst uint64
	}{
		{"xt_limit", false, "*filter\n:INPUT DROP [0:0]\n:FORWARD ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n-A INPUT -p udp -m limit --limit 1/min --limit-burst 1000 -j ACCEPT\nCOMMIT\n", 1000},
		{"hashlimit", false, "*filter\n:INPUT DROP [0:0]\n:FORWARD ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n-A INPUT -p udp -m hashlimit --hashlimit-upto 1/min --hashlimit-burst 2000 --hashlimit-mode dstip --hashlimit-name x -j ACCEPT\nCOMMIT\n", 2000},
		{"nft_limit", true, "table ip filter {\n\tchain input {\n\t\ttype filter hook input priority 0; policy drop;\n\t\tmeta l4proto udp limit rate 1/hour burst 5000 packets accept\n\t}\n}\n", 5000},
	}
	const perCPU = 20000
	data := frame4(t, layers.IPProtocolUDP, "192.0.2.1", "192.0.2.2", 40000, 53)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var p *codegen.Program
			if tc.nft {
				rs, err := nft.Parse("rules", []byte(tc.rules), nft.Options{Family: rules.IPv4})
				if err != nil {
					t.Fatal(err)
				}
				prog, err := ir.Lower(rs, ir.LowerOptions{})
				if err != nil {
					t.Fatal(err)
				}
				if p, err = codegen.Compile(prog, codegen.Options{Trace: true, Hook: codegen.HookXDP}); err != nil {
					t.Fatal(err)
				}
			} else {
				p = compileText(t, tc.rules, rules.IPv4, codegen.HookXDP)
			}
			coll, err := ebpf.NewCollection(p.Spec)
			if err != nil {
				t.Fatal(err)
			}
			defer coll.Close()
			prog := coll.Programs[abi.ProgramName]
			onEachCPU(t, cpus, func(int) error {
				return runTimes(prog, data, perCPU)
			})
			// Rule 0's counter on each CPU.
			var blocks []abi.CounterBlock
			if err := coll.Maps[abi.CountersMap].Lookup(abi.CounterKey(0), &blocks); err != nil {
				t.Fatal(err)
			}
			var passed uint64
			var busy int
			for _, b := range blocks {
				c := b[abi.CounterIndex(0)]
				passed += c.Packets
				if c.Packets > 0 {
					busy++
				}
			}
			t.Logf("%d CPUs × %d packets: %d passed the limit (on %d CPUs), the bucket holds %d", cpus, perCPU, passed, busy, tc.burst)
			if passed != tc.burst {
				t.Errorf("%d packets passed, want the bucket's %d", passed, tc.burst)
			}
		})
	}
}

// onEachCPU runs f(cpu) on each of the first cpus CPUs at once, each on a
// runTimes runs prog on data n times, one test run each: a test run of
// n repetitions that a signal interrupts (the Go runtime preempts threads
// with SIGURG) is started again whole by cilium/ebpf, which would run the
// program more than n times.
func runTimes(prog *ebpf.Program, data []byte, n int) error {
	for range n {
		if _, err := prog.Run(&ebpf.RunOptions{Data: data}); err != nil {
			return err
		}
	}
	return nil
}

// thread pinned to its CPU, and fails t on the first error.
func onEachCPU(t *testing.T, cpus int, f func(cpu int) error) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make([]error, cpus)
	for cpu := range cpus {
		wg.Add(1)
		go func() {
			defer wg.Done()
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			var set unix.CPUSet
			set.Set(cpu)
			if err := unix.SchedSetaffinity(0, &set); err != nil {
				errs[cpu] = err
				return
			}
			errs[cpu] = f(cpu)
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
}

// BenchmarkLimit measures the per-packet cost of a limit rule: the same
// rule set with and without the limit match in front of the rule that
// decides, on a packet that reaches it (and, once the bucket is empty,
// fails it and goes on to the policy).
func BenchmarkLimit(b *testing.B) {
	testenv.RequireRoot(b)
	base := "*filter\n:INPUT DROP [0:0]\n:FORWARD ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n-A INPUT -p tcp -m tcp --dport 22 -j ACCEPT\n"
	cases := []struct{ name, rule string }{
		{"none", "-A INPUT -p udp -m udp --dport 53 -j ACCEPT\n"},
		{"limit", "-A INPUT -p udp -m udp --dport 53 -m limit --limit 10/sec -j ACCEPT\n"},
		{"hashlimit", "-A INPUT -p udp -m udp --dport 53 -m hashlimit --hashlimit-upto 10/sec --hashlimit-mode srcip,dstport --hashlimit-name b -j ACCEPT\n"},
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
			b.ResetTimer()
			_, d, err := prog.Benchmark(data, b.N, nil)
			if err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(float64(d.Nanoseconds()), "ns/pkt")
		})
	}
}

// twoKeyTable loads a hashlimit rule whose table holds two source keys
// and expires them after expire (ms, and further table options), and
// returns the program and a function that runs a UDP packet from an
// address through it.
func twoKeyTable(t *testing.T, ns *netns, expire string) (*loaded, func(from string) abi.Decision) {
	src := "*filter\n:INPUT DROP [0:0]\n:FORWARD ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n" +
		"-A INPUT -p udp -m hashlimit --hashlimit-upto 10/sec --hashlimit-mode srcip --hashlimit-name t" +
		" --hashlimit-htable-size 2 --hashlimit-htable-max 2 --hashlimit-htable-expire " + expire + " -j ACCEPT\nCOMMIT\n"
	l := load(t, compileText(t, src, rules.IPv4, codegen.HookXDP), ns)
	return l, func(from string) abi.Decision {
		t.Helper()
		_, d, err := l.run(frame4(t, layers.IPProtocolUDP, from, "192.0.2.2", 40000, 53), ns.devs[1], 0)
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
}

// TestHashLimitSweepInterval: a full table is swept at most once per
// --hashlimit-htable-gcinterval, as the kernel's collector runs, not for
// every new key: an entry that expired after a sweep stays until the
// interval is over. The entries' and the sweep's times are set in the maps,
// so that no wait decides the outcome.
func TestHashLimitSweepInterval(t *testing.T) {
	testenv.RequireRoot(t)
	testenv.RequireTool(t, "ip")
	l, send := twoKeyTable(t, newNetns(t), "60000 --hashlimit-htable-gcinterval 60000")
	for _, from := range []string{"10.0.0.1", "10.0.0.2"} {
		if d := send(from); d.Kind != abi.DecidedByRule {
			t.Fatalf("%s: decision %+v, want the rule's", from, d)
		}
	}
	// Full, nothing expired: swept, and dropped.
	if d := send("10.0.0.3"); d.Kind != abi.Hotdrop {
		t.Fatalf("a third key with two live ones: decision %+v, want a hotdrop", d)
	}
	// 10.0.0.1 expires; the next sweep is a minute away.
	table := l.coll.Maps[abi.HashLimitMap(0)]
	key := abi.HashKey{Src: [4]uint32{0x0a000001}}
	var e abi.HashEntry
	if err := table.Lookup(key, &e); err != nil {
		t.Fatalf("entry of 10.0.0.1: %v", err)
	}
	e.Expires = 0
	if err := table.Put(key, e); err != nil {
		t.Fatal(err)
	}
	if d := send("10.0.0.4"); d.Kind != abi.Hotdrop {
		t.Errorf("a new key within the interval after a sweep: decision %+v, want a hotdrop", d)
	}
	// The interval is over: the sweep takes 10.0.0.1 out.
	if err := l.coll.Maps[abi.HashGCMap].Put(uint32(0), uint64(0)); err != nil {
		t.Fatal(err)
	}
	if d := send("10.0.0.4"); d.Kind != abi.DecidedByRule {
		t.Errorf("a new key after the interval: decision %+v, want the rule's", d)
	}
	if err := table.Lookup(key, &e); err == nil {
		t.Errorf("the expired entry of 10.0.0.1 survived the sweep")
	}
}

// TestHashLimitTableFull fills a table of two keys: a third key is
// dropped (hotdrop) while the two live, and admitted once they have
// expired and the sweep has taken them out.
func TestHashLimitTableFull(t *testing.T) {
	testenv.RequireRoot(t)
	testenv.RequireTool(t, "ip")
	cases := []struct {
		name   string
		expire string
		pause  time.Duration
		want   abi.DecisionKind // the third key's decision
	}{
		{"live", "60000", 0, abi.Hotdrop},
		{"expired", "1", 50 * time.Millisecond, abi.DecidedByRule},
	}
	ns := newNetns(t)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, send := twoKeyTable(t, ns, tc.expire)
			for _, from := range []string{"10.0.0.1", "10.0.0.2"} {
				if d := send(from); d.Kind != abi.DecidedByRule {
					t.Fatalf("%s: decision %+v, want the rule's", from, d)
				}
			}
			time.Sleep(tc.pause)
			if d := send("10.0.0.3"); d.Kind != tc.want {
				t.Errorf("a third key: decision %+v, want kind %s", d, tc.want)
			}
		})
	}
}

// BenchmarkHashLimitFullTable measures a packet with a new key on a full
// table of 65,536 live entries: the drop, and the sweep that comes with it
// at most once per gcinterval.
func BenchmarkHashLimitFullTable(b *testing.B) {
	testenv.RequireRoot(b)
	const max = 65536
	src := "*filter\n:INPUT DROP [0:0]\n:FORWARD ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n" +
		"-A INPUT -p udp -m hashlimit --hashlimit-upto 10/sec --hashlimit-mode srcip --hashlimit-name t" +
		" --hashlimit-htable-size 8192 --hashlimit-htable-max 65536 --hashlimit-htable-expire 600000 -j ACCEPT\nCOMMIT\n"
	p := compileText(b, src, rules.IPv4, codegen.HookXDP)
	coll, err := ebpf.NewCollection(p.Spec)
	if err != nil {
		b.Fatal(err)
	}
	defer coll.Close()
	table := coll.Maps[abi.HashLimitMap(0)]
	keys := make([]abi.HashKey, max)
	vals := make([]abi.HashEntry, max)
	for i := range keys {
		keys[i].Src[0] = 0x0b000000 + uint32(i)
		vals[i].Expires = 1 << 62 // live for the benchmark's duration
	}
	if _, err := table.BatchUpdate(keys, vals, nil); err != nil {
		b.Fatal(err)
	}
	data := frame4(b, layers.IPProtocolUDP, "10.0.0.1", "192.0.2.2", 40000, 53)
	prog := coll.Programs[abi.ProgramName]
	b.ResetTimer()
	_, d, err := prog.Benchmark(data, b.N, nil)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(d.Nanoseconds()), "ns/pkt")
}
