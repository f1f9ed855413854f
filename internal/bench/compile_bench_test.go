package bench

import (
	"testing"

	"bpfwall/codegen"
	"bpfwall/ir"
	"bpfwall/parser/iptables"
)

// BenchmarkCompile100k measures what restore does with each family's
// 100,000-rule chain before the kernel sees it: parse, lower and compile
// for the chain's netfilter hook at the default level. The allocations
// it reports are what sets a restore's peak memory.
//
//	go test ./internal/bench -run '^$' -bench Compile100k -benchtime 3x
func BenchmarkCompile100k(b *testing.B) {
	for _, fam := range Families("") {
		if fam.Fixed {
			continue
		}
		w, err := fam.Generate(100_000, 1)
		if err != nil {
			b.Fatal(err)
		}
		b.Run(fam.Name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(w.Rules)))
			for b.Loop() {
				rs, err := iptables.Parse(w.Family+".rules", w.Rules, iptables.Options{})
				if err != nil {
					b.Fatal(err)
				}
				p, err := ir.Lower(rs, ir.LowerOptions{Chain: w.Chain})
				if err != nil {
					b.Fatal(err)
				}
				if _, err := codegen.Compile(p, codegen.Options{Hook: codegen.HookNetfilter}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
