package codegen_test

import (
	"fmt"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/gopacket/gopacket/layers"

	"bpfwall/codegen"
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
			prog := coll.Programs[codegen.ProgramName]
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
