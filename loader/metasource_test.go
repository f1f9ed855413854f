package loader

import (
	"strings"
	"testing"

	"bpfwall/codegen"
	"bpfwall/codegen/abi"
	"bpfwall/ir"
	"bpfwall/parser/iptables"
	"bpfwall/rules"
)

// TestMetaSourceFiles: the rules of a restore's input and those of a
// table kept from the active rule set come from two files, at the same
// lines and columns; each compiled rule gets the saved line and the
// counters of its own rule, and the rules one address list expands into
// pair in order. The input's user chain comes before INPUT, which Save
// prints first: the positions are not in the saved order.
func TestMetaSourceFiles(t *testing.T) {
	parse := func(file, src string) *rules.Ruleset {
		rs, err := iptables.Parse(file, []byte(src), iptables.Options{Counters: true})
		if err != nil {
			t.Fatal(err)
		}
		return rs
	}
	rs := parse("input.rules", "*filter\n:INPUT ACCEPT [0:0]\n:FORWARD ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n:MY - [0:0]\n"+
		"[3:30] -A MY -s 10.0.0.9 -j DROP\n[5:50] -A INPUT -s 10.0.0.1,10.0.0.3 -j DROP\n[4:40] -A INPUT -j MY\nCOMMIT\n")
	kept := parse("active.rules", "# kept\n*raw\n:PREROUTING ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n\n\n"+
		"[7:70] -A PREROUTING -s 10.0.0.2 -j DROP\nCOMMIT\n")
	if rs.Table("filter").Chain("INPUT").Rules[0].Pos.Line != kept.Tables[0].Chains[0].Rules[0].Pos.Line {
		t.Fatal("the two rules are not at the same line")
	}
	rs.Tables = append(rs.Tables, kept.Tables...)
	ms := NewMetaSource(rs)
	if ms.byPos == nil {
		t.Fatal("the positions are not in the saved order, and the source has no order by position")
	}
	saved := strings.Split(ms.source, "\n")
	for _, tc := range []struct {
		table, chain string
		want         []string // the saved lines of the compiled rules
		counters     []abi.Counter
	}{
		{"filter", "INPUT", []string{"[5:50] -A INPUT -s 10.0.0.1/32 -j DROP", "[5:50] -A INPUT -s 10.0.0.3/32 -j DROP", "[4:40] -A INPUT -j MY", "[3:30] -A MY -s 10.0.0.9/32 -j DROP"},
			[]abi.Counter{{Packets: 5, Bytes: 50}, {Packets: 5, Bytes: 50}, {Packets: 4, Bytes: 40}, {Packets: 3, Bytes: 30}}},
		{"raw", "PREROUTING", []string{"[7:70] -A PREROUTING -s 10.0.0.2/32 -j DROP"}, []abi.Counter{{Packets: 7, Bytes: 70}}},
	} {
		p, err := ir.Lower(rs, ir.LowerOptions{Table: tc.table, Chain: tc.chain})
		if err != nil {
			t.Fatal(err)
		}
		prog, err := codegen.Compile(p, codegen.Options{Hook: codegen.HookNetfilter})
		if err != nil {
			t.Fatal(err)
		}
		m, counters, err := ms.Meta(prog, "x")
		if err != nil {
			t.Fatal(err)
		}
		if len(m.Lines) != len(tc.want) {
			t.Fatalf("%s %s: %d rules, want %d", tc.table, tc.chain, len(m.Lines), len(tc.want))
		}
		for id, want := range tc.want {
			if got := saved[m.Lines[id]-1]; got != want {
				t.Errorf("%s %s rule %d: saved line %d is %q, want %q", tc.table, tc.chain, id, m.Lines[id], got, want)
			}
			if counters[id] != tc.counters[id] {
				t.Errorf("%s %s rule %d: counters %+v, want %+v", tc.table, tc.chain, id, counters[id], tc.counters[id])
			}
		}
	}
}
