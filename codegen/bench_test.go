package codegen_test

import (
	"fmt"
	"net"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"

	"bpfwall/codegen"
	"bpfwall/internal/testenv"
	"bpfwall/rules"
)

// BenchmarkRun measures the kernel's time per packet for -O0 programs of
// growing size with BPF_PROG_TEST_RUN, for a TCP SYN no rule matches: the
// worst case, which walks every rule.
func BenchmarkRun(b *testing.B) {
	testenv.RequireRoot(b)
	eth := &layers.Ethernet{SrcMAC: net.HardwareAddr{2, 0, 0, 0, 0, 2}, DstMAC: make(net.HardwareAddr, 6), EthernetType: layers.EthernetTypeIPv4}
	ip := &layers.IPv4{Version: 4, TTL: 64, Protocol: layers.IPProtocolTCP, SrcIP: net.IP{192, 0, 2, 1}, DstIP: net.IP{192, 0, 2, 2}}
	tcp := &layers.TCP{SrcPort: 40000, DstPort: 65000, SYN: true}
	tcp.SetNetworkLayerForChecksum(ip)
	buf := gopacket.NewSerializeBuffer()
	if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true}, eth, ip, tcp); err != nil {
		b.Fatal(err)
	}
	frame := buf.Bytes()
	for _, n := range []int{1, 32, 1000, 8000} {
		for _, hook := range []codegen.Hook{codegen.HookXDP, codegen.HookTCIngress} {
			b.Run(fmt.Sprintf("%s/rules=%d", hook, n), func(b *testing.B) {
				p := compileText(b, linearRules(n, rules.IPv4), rules.IPv4, hook)
				coll, err := ebpf.NewCollection(p.Spec)
				if err != nil {
					b.Fatal(err)
				}
				defer coll.Close()
				prog := coll.Programs[codegen.ProgramName]
				b.ResetTimer()
				_, d, err := prog.Benchmark(frame, b.N, nil)
				if err != nil {
					b.Fatal(err)
				}
				b.ReportMetric(float64(d.Nanoseconds()), "ns/packet")
			})
		}
	}
}
