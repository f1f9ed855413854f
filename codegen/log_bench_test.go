package codegen_test

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/ringbuf"
	"github.com/gopacket/gopacket/layers"

	"bpfwall/codegen"
	"bpfwall/codegen/abi"
	"bpfwall/internal/testenv"
)

// logBenchRules is a small INPUT chain; with log, its first rule logs SSH
// connections before the second accepts them.
func logBenchRules(log bool) string {
	s := "*filter\n:INPUT DROP [0:0]\n:FORWARD ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n"
	if log {
		s += "-A INPUT -p tcp -m tcp --dport 22 -j LOG --log-prefix \"ssh: \" --log-tcp-options\n"
	}
	return s + "-A INPUT -p tcp -m tcp --dport 22 -j ACCEPT\n-A INPUT -p tcp -m tcp --dport 80 -j ACCEPT\nCOMMIT\n"
}

// BenchmarkLog measures the kernel's time per packet with
// BPF_PROG_TEST_RUN for the same rule set with and without a LOG rule: a
// packet the LOG rule logs (its ring buffer drained by a reader, or full,
// when every event is counted lost), and a packet it does not match.
func BenchmarkLog(b *testing.B) {
	testenv.RequireRoot(b)
	ssh := frame4(b, layers.IPProtocolTCP, "192.0.2.1", "192.0.2.2", 40000, 22)
	web := frame4(b, layers.IPProtocolTCP, "192.0.2.1", "192.0.2.2", 40000, 80)
	for _, hook := range []codegen.Hook{codegen.HookXDP, codegen.HookTCIngress} {
		for _, level := range codegen.Levels {
			for _, c := range []struct {
				name  string
				log   bool
				frame []byte
				drain bool
			}{
				{"ssh/nolog", false, ssh, false},
				{"ssh/log", true, ssh, true},
				{"ssh/log-batched", true, ssh, false},
				{"ssh/log-ringfull", true, ssh, false},
				{"web/nolog", false, web, false},
				{"web/log", true, web, false},
			} {
				b.Run(fmt.Sprintf("%s/%v/%s", hook, level, c.name), func(b *testing.B) {
					p := compileLog(b, logBenchRules(c.log), hook, level)
					coll, err := ebpf.NewCollection(p.Spec)
					if err != nil {
						b.Fatal(err)
					}
					defer coll.Close()
					prog := coll.Programs[abi.ProgramName]
					if c.log {
						rd, err := ringbuf.NewReader(coll.Maps[abi.LogMap])
						if err != nil {
							b.Fatal(err)
						}
						defer rd.Close()
						if c.drain {
							done := make(chan struct{})
							defer func() { rd.Close(); <-done }()
							go func() {
								defer close(done)
								var rec ringbuf.Record
								for {
									if err := rd.ReadInto(&rec); errors.Is(err, os.ErrClosed) {
										return
									}
								}
							}()
						} else if c.frame[37] == 22 && !strings.HasSuffix(c.name, "batched") {
							// Fill the ring buffer first: from then on,
							// every event is lost.
							if _, _, err := prog.Benchmark(c.frame, 4096, nil); err != nil {
								b.Fatal(err)
							}
						}
					}
					if strings.HasSuffix(c.name, "batched") {
						b.ReportMetric(batched(b, prog, coll.Maps[abi.LogMap], c.frame), "ns/packet")
						return
					}
					b.ResetTimer()
					_, d, err := prog.Benchmark(c.frame, b.N, nil)
					if err != nil {
						b.Fatal(err)
					}
					b.ReportMetric(float64(d.Nanoseconds()), "ns/packet")
				})
			}
		}
	}
}

// batched runs frame b.N times in batches the ring buffer has room for,
// emptying it between batches with no reader running meanwhile: the cost
// of logging alone. It returns the mean time per run.
func batched(b *testing.B, prog *ebpf.Program, ring *ebpf.Map, frame []byte) float64 {
	rd, err := ringbuf.NewReader(ring)
	if err != nil {
		b.Fatal(err)
	}
	defer rd.Close()
	const batch = 1000 // of some 1900 events the ring holds
	var total time.Duration
	b.ResetTimer()
	for done := 0; done < b.N; {
		n := min(batch, b.N-done)
		_, d, err := prog.Benchmark(frame, n, nil)
		if err != nil {
			b.Fatal(err)
		}
		total += d * time.Duration(n)
		done += n
		b.StopTimer()
		rd.SetDeadline(time.Now())
		var rec ringbuf.Record
		for k := 0; k < n; k++ {
			if err := rd.ReadInto(&rec); err != nil {
				b.Fatalf("event %d of %d: %v", k, n, err)
			}
		}
		b.StartTimer()
	}
	return float64(total.Nanoseconds()) / float64(b.N)
}

func compileLog(tb testing.TB, src string, hook codegen.Hook, level codegen.Level) *codegen.Program {
	tb.Helper()
	prog, err := codegen.Compile(lowerInput(tb, src), codegen.Options{Hook: hook, Level: level})
	if err != nil {
		tb.Fatal(err)
	}
	return prog
}
