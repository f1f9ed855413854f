package codegen_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"

	"bpfwall/codegen"
	"bpfwall/codegen/abi"
	"bpfwall/internal/testenv"
	"bpfwall/ir"
	"bpfwall/parser/iptables"
	"bpfwall/rules"
)

// BenchmarkRejectPath measures what a REJECT costs per packet over a
// DROP of the same packet by the same rule: the program's own time, which
// BPF_PROG_TEST_RUN reports, one packet per run (a run with repeats would
// run again on the reply it made of the packet). ns/op is REJECT's;
// drop-ns and ratio compare.
//
//	go test ./codegen -run '^$' -bench RejectPath -benchtime 20000x
func BenchmarkRejectPath(b *testing.B) {
	testenv.RequireRoot(b)
	cases := []struct {
		name  string
		fam   rules.Family
		rule  string
		frame func() []byte
	}{
		{"tcp-reset/syn", rules.IPv4, "-p tcp --dport 23 -j %s --reject-with tcp-reset", func() []byte { return findProbe(b, rules.IPv4, "syn") }},
		{"icmp/udp-10B", rules.IPv4, "-p udp --dport 103 -j %s", func() []byte { return findProbe(b, rules.IPv4, "udp code 3") }},
		{"icmp/udp-1400B", rules.IPv4, "-p udp --dport 103 -j %s", func() []byte { return findProbe(b, rules.IPv4, "large udp quoted to 548 bytes") }},
		{"icmp6/udp-1400B", rules.IPv6, "-p udp --dport 104 -j %s", func() []byte { return findProbe(b, rules.IPv6, "large udp quoted to 1232 bytes") }},
	}
	for _, tc := range cases {
		for _, hook := range []codegen.Hook{codegen.HookXDP, codegen.HookTCIngress} {
			b.Run(fmt.Sprintf("%s/%s", tc.name, hook), func(b *testing.B) {
				frame := tc.frame()
				reject := benchProgram(b, tc.fam, hook, strings.Replace(tc.rule, "%s", "REJECT", 1))
				drop := benchProgram(b, tc.fam, hook, strings.Split(strings.Replace(tc.rule, "%s", "DROP", 1), " --reject-with")[0])
				defer reject.Close()
				defer drop.Close()
				var rejectNs, dropNs time.Duration
				b.ResetTimer()
				for range b.N {
					rejectNs += runOnce(b, reject, hook, frame, true)
					dropNs += runOnce(b, drop, hook, frame, false)
				}
				b.StopTimer()
				b.ReportMetric(float64(rejectNs)/float64(b.N), "reject-ns")
				b.ReportMetric(float64(dropNs)/float64(b.N), "drop-ns")
				b.ReportMetric(float64(rejectNs)/float64(dropNs), "ratio")
			})
		}
	}
}

// findProbe is the frame of TestRejectReplies's probe called name.
func findProbe(tb testing.TB, fam rules.Family, name string) []byte {
	for _, p := range rejectProbes(tb, fam) {
		if p.name == name {
			return p.frame
		}
	}
	tb.Fatalf("no probe %q", name)
	return nil
}

func benchProgram(b *testing.B, fam rules.Family, hook codegen.Hook, rule string) *ebpf.Program {
	src := "*filter\n:INPUT ACCEPT [0:0]\n-A INPUT " + rule + "\nCOMMIT\n"
	rs, err := iptables.Parse("bench.rules", []byte(src), iptables.Options{Family: fam, ForceFamily: true})
	if err != nil {
		b.Fatal(err)
	}
	p, err := ir.Lower(rs, ir.LowerOptions{})
	if err != nil {
		b.Fatal(err)
	}
	prog, err := codegen.Compile(p, codegen.Options{Hook: hook})
	if err != nil {
		b.Fatal(err)
	}
	coll, err := ebpf.NewCollection(prog.Spec)
	if err != nil {
		b.Fatal(err)
	}
	pr := coll.DetachProgram(abi.ProgramName)
	coll.Close() // the program keeps its maps
	return pr
}

// runOnce runs frame through p once and returns the time the kernel
// measured. A tc test run receives the frame on lo, whose address is all
// zeros: the frame is addressed to it, as loader.Run does.
func runOnce(b *testing.B, p *ebpf.Program, hook codegen.Hook, frame []byte, wantSent bool) time.Duration {
	if hook != codegen.HookXDP {
		frame = append([]byte{0, 0, 0, 0, 0, 0}, frame[6:]...)
	}
	ret, d, err := p.Benchmark(frame, 1, nil)
	if err != nil {
		b.Fatal(err)
	}
	// The path measured must be the one meant: the reply sent, or the
	// packet dropped.
	sent := ret == 3 && hook == codegen.HookXDP || ret == 7 && hook != codegen.HookXDP
	dropped := ret == 1 && hook == codegen.HookXDP || ret == 2 && hook != codegen.HookXDP
	if sent == dropped || sent != wantSent {
		b.Fatalf("return code %d", ret)
	}
	return d
}
