package codegen_test

import (
	"fmt"
	"strings"
	"testing"

	"bpfwall/codegen"
	"bpfwall/codegen/abi"
	"bpfwall/internal/testenv"
	"bpfwall/ir"
	"bpfwall/parser/iptables"
)

// TestCounterBlocks: the counters of rules in every block of the
// counters map, past the first CountersPerBlock, add up as the model
// counts, whether a rule counts by its own code (-O0, a constant key and
// offset) or by a lookup that found it (-O1, the key and offset from the
// rule's ID in a register).
func TestCounterBlocks(t *testing.T) {
	testenv.RequireRoot(t)
	const n = 3*abi.CountersPerBlock + 40
	var b strings.Builder
	b.WriteString("*filter\n:INPUT ACCEPT [0:0]\n:FORWARD ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n:CH - [0:0]\n")
	for i := range n {
		switch {
		case i%50 == 49:
			// Plain rules among the classified ones: a jump to a chain
			// that returns.
			fmt.Fprintf(&b, "-A INPUT -s 10.2.%d.%d/32 -j CH\n", i>>8, i&0xff)
		case i%2 == 0:
			fmt.Fprintf(&b, "-A INPUT -s 10.1.%d.%d/32 -j DROP\n", i>>8, i&0xff)
		default:
			fmt.Fprintf(&b, "-A INPUT -d 10.1.%d.%d/32 -p udp -m udp --dport %d -j ACCEPT\n", i>>8, i&0xff, 1000+i)
		}
	}
	b.WriteString("-A CH -j RETURN\nCOMMIT\n")
	rs, err := iptables.Parse("blocks", []byte(b.String()), iptables.Options{})
	if err != nil {
		t.Fatal(err)
	}
	prog, err := ir.Lower(rs, ir.LowerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ns := newNetns(t)
	for _, level := range codegen.Levels {
		t.Run(level.String(), func(t *testing.T) {
			p, err := codegen.Compile(prog, codegen.Options{Trace: true, Hook: codegen.HookXDP, Level: level})
			if err != nil {
				t.Fatal(err)
			}
			if m := p.Spec.Maps[abi.CountersMap]; int(m.MaxEntries) != abi.CounterBlocks(len(p.IR.Rules)+1) || m.MaxEntries < 4 {
				t.Fatalf("counters: %d blocks for %d rules", m.MaxEntries, len(p.IR.Rules))
			}
			if level == codegen.O1 && p.Classified < n*9/10 {
				t.Fatalf("%d of %d rules classified", p.Classified, len(p.IR.Rules))
			}
			got := checkProgram(t, p, ns, 11, 3000)
			// Every block counted some rule's packets.
			hit := make([]int, abi.CounterBlocks(len(got)))
			for id, c := range got[:len(got)-1] {
				if c.Packets > 0 {
					hit[abi.CounterKey(id)]++
				}
			}
			for k, h := range hit {
				if h == 0 {
					t.Errorf("block %d: no rule of it counted a packet (%v)", k, hit)
				}
			}
			t.Logf("rules that counted packets, by block: %v", hit)
		})
	}
}
