package loader

import (
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"bpfwall/codegen"
	"bpfwall/codegen/abi"
	"bpfwall/ir"
	"bpfwall/parser/iptables"
	"bpfwall/rules"
)

// parseCounted parses src, read from file, with its counters.
func parseCounted(t *testing.T, file, src string) *rules.Ruleset {
	t.Helper()
	rs, err := iptables.Parse(file, []byte(src), iptables.Options{Counters: true})
	if err != nil {
		t.Fatal(err)
	}
	return rs
}

// compileChain compiles chain of table of rs for its netfilter hook.
func compileChain(t *testing.T, rs *rules.Ruleset, table, chain string) *codegen.Program {
	t.Helper()
	p, err := ir.Lower(rs, ir.LowerOptions{Table: table, Chain: chain})
	if err != nil {
		t.Fatal(err)
	}
	prog, err := codegen.Compile(p, codegen.Options{Hook: codegen.HookNetfilter})
	if err != nil {
		t.Fatal(err)
	}
	return prog
}

// TestMetaSourceFiles: the rules of a restore's input and those of a
// table kept from the active rule set come from two files, at the same
// lines and columns; each compiled rule gets the saved line and the
// counters of its own rule, and the rules one address list expands into
// pair in order. The input's user chain comes before INPUT, which Save
// prints first: the positions are not in the saved order.
func TestMetaSourceFiles(t *testing.T) {
	rs := parseCounted(t, "input.rules", "*filter\n:INPUT ACCEPT [0:0]\n:FORWARD ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n:MY - [0:0]\n"+
		"[3:30] -A MY -s 10.0.0.9 -j DROP\n[5:50] -A INPUT -s 10.0.0.1,10.0.0.3 -j DROP\n[4:40] -A INPUT -j MY\nCOMMIT\n")
	kept := parseCounted(t, "active.rules", "# kept\n*raw\n:PREROUTING ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n\n\n"+
		"[7:70] -A PREROUTING -s 10.0.0.2 -j DROP\nCOMMIT\n")
	if rs.Table("filter").Chain("INPUT").Rules[0].Pos.Line != kept.Tables[0].Chains[0].Rules[0].Pos.Line {
		t.Fatal("the two rules are not at the same line")
	}
	rs.Tables = append(rs.Tables, kept.Tables...)
	ms := NewMetaSource(rs)
	if ms.byPos == nil {
		t.Fatal("the positions are not in the saved order, and the source has no order by position")
	}
	text, err := ms.text.String()
	if err != nil {
		t.Fatal(err)
	}
	saved := strings.Split(text, "\n")
	for _, tc := range []struct {
		table, chain string
		want         []string // the saved lines of the compiled rules
		counters     []abi.Counter
		origins      []string
	}{
		{"filter", "INPUT", []string{"[5:50] -A INPUT -s 10.0.0.1/32 -j DROP", "[5:50] -A INPUT -s 10.0.0.3/32 -j DROP", "[4:40] -A INPUT -j MY", "[3:30] -A MY -s 10.0.0.9/32 -j DROP"},
			[]abi.Counter{{Packets: 5, Bytes: 50}, {Packets: 5, Bytes: 50}, {Packets: 4, Bytes: 40}, {Packets: 3, Bytes: 30}},
			[]string{"input.rules:7", "input.rules:7", "input.rules:8", "input.rules:6"}},
		{"raw", "PREROUTING", []string{"[7:70] -A PREROUTING -s 10.0.0.2/32 -j DROP"}, []abi.Counter{{Packets: 7, Bytes: 70}}, []string{"active.rules:7"}},
	} {
		prog := compileChain(t, rs, tc.table, tc.chain)
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
			if m.Origins[id] != tc.origins[id] {
				t.Errorf("%s %s rule %d: origin %q, want %q", tc.table, tc.chain, id, m.Origins[id], tc.origins[id])
			}
		}
	}
}

// TestDecimalLen: decimalLen is the length of strconv.Itoa's digits, so
// that Meta's origins fill the buffer made for them exactly.
func TestDecimalLen(t *testing.T) {
	for _, n := range []int{0, 1, 9, 10, 99, 100, 999, 1000, 123456, 1 << 31, -1, -10, -99} {
		if got, want := decimalLen(n), len(strconv.Itoa(n)); got != want {
			t.Errorf("decimalLen(%d) = %d, want %d", n, got, want)
		}
	}
}

// TestMetaSourceTexts: the texts Texts gives the rules of a program
// lowered with NoText are those Lower prints, for every chain: rules one
// address list expands into, a user chain the input gives before the
// chain Save prints first, a rule with no match or target, and the
// rules of a table kept from another file.
func TestMetaSourceTexts(t *testing.T) {
	rs := parseCounted(t, "input.rules", "*filter\n:INPUT ACCEPT [0:0]\n:FORWARD ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n:MY - [0:0]\n"+
		"[3:30] -A MY -s 10.0.0.9 -p tcp -m tcp --dport 22 -m comment --comment \"ssh in\" -j DROP\n"+
		"[5:50] -A INPUT -s 10.0.0.1,10.0.0.3 -j DROP\n-A INPUT\n[4:40] -A INPUT -i eth0 -j MY\nCOMMIT\n")
	kept := parseCounted(t, "active.rules", "*raw\n:PREROUTING ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n"+
		"[7:70] -A PREROUTING -s 10.0.0.2 -j DROP\n-A PREROUTING -p udp -j ACCEPT\nCOMMIT\n")
	rs.Tables = append(rs.Tables, kept.Tables...)
	ms := NewMetaSource(rs)
	ms.Pack() // as a restore does
	for _, c := range []struct{ table, chain string }{{"filter", "INPUT"}, {"raw", "PREROUTING"}} {
		want, err := ir.Lower(rs, ir.LowerOptions{Table: c.table, Chain: c.chain})
		if err != nil {
			t.Fatal(err)
		}
		got, err := ir.Lower(rs, ir.LowerOptions{Table: c.table, Chain: c.chain, NoText: true})
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range got.Rules {
			if r.Text != "" {
				t.Fatalf("%s %s rule %d has the text %q with NoText", c.table, c.chain, r.ID, r.Text)
			}
		}
		if err := ms.Texts(got); err != nil {
			t.Fatal(err)
		}
		for i, r := range got.Rules {
			if text := got.TextOf(r); text != want.Rules[i].Text {
				t.Errorf("%s %s rule %d: text %q, want %q", c.table, c.chain, r.ID, text, want.Rules[i].Text)
			}
		}
	}
}

// TestMetaSourceCounters: a rule set saved without counters keeps none
// (s.counters is nil), and in one where only later rules count, each
// rule has its own, zero where it counted nothing.
func TestMetaSourceCounters(t *testing.T) {
	head := "*filter\n:INPUT ACCEPT [0:0]\n:FORWARD ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n"
	zero := NewMetaSource(parseCounted(t, "zero", head+"-A INPUT -s 10.0.0.1 -j DROP\n-A INPUT -s 10.0.0.2 -j DROP\nCOMMIT\n"))
	if zero.counters != nil {
		t.Errorf("a rule set without counters keeps %d", len(zero.counters))
	}
	rs := parseCounted(t, "some", head+"[0:0] -A INPUT -s 10.0.0.1 -j DROP\n[0:0] -A INPUT -s 10.0.0.2 -j DROP\n[9:90] -A INPUT -s 10.0.0.3 -j DROP\n[0:0] -A INPUT -s 10.0.0.4 -j DROP\nCOMMIT\n")
	prog := compileChain(t, rs, "filter", "INPUT")
	_, counters, err := NewMetaSource(rs).Meta(prog, "x")
	if err != nil {
		t.Fatal(err)
	}
	want := []abi.Counter{{}, {}, {Packets: 9, Bytes: 90}, {}}
	for id, w := range want {
		if counters[id] != w {
			t.Errorf("rule %d: counters %+v, want %+v", id, counters[id], w)
		}
	}
}

// TestMetaSourceEncodes: a meta a MetaSource makes, which holds the rule
// set in blocks, packed or not (Pack), reads back as the meta with the
// rule set in Source does, the saved rule set; packed, it is a fraction
// of the size.
func TestMetaSourceEncodes(t *testing.T) {
	var b strings.Builder
	b.WriteString("*filter\n:INPUT DROP [0:0]\n:FORWARD ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n")
	for i := range 8000 { // several blocks
		fmt.Fprintf(&b, "[%d:%d] -A INPUT -s 10.%d.%d.0/24 -p tcp -m tcp --dport %d -m comment --comment \"rule %d\" -j ACCEPT\n", i, 60*i, i>>8, i&255, 1+i%1000, i)
	}
	b.WriteString("COMMIT\n")
	rs := parseCounted(t, "big.rules", b.String())
	saved := string(rs.Save(rules.SaveOptions{Counters: true}))
	prog := compileChain(t, rs, "filter", "INPUT")
	for _, pack := range []bool{false, true} {
		ms := NewMetaSource(rs)
		if len(ms.text.blocks) < 2 {
			t.Fatalf("%d bytes in %d block", len(saved), len(ms.text.blocks))
		}
		if pack {
			ms.Pack()
		}
		m, _, err := ms.Meta(prog, "big.rules")
		if err != nil {
			t.Fatal(err)
		}
		if m.Source != "" || m.text == nil {
			t.Fatalf("packed %v: the meta holds %d bytes of source and blocks %v", pack, len(m.Source), m.text != nil)
		}
		got, err := encodeMeta(&m)
		if err != nil {
			t.Fatal(err)
		}
		plain := m
		plain.Source, plain.text = saved, nil
		want, err := encodeMeta(&plain)
		if err != nil {
			t.Fatal(err)
		}
		if pack && 3*len(got) > len(want) {
			t.Errorf("packed: %d bytes, with Source %d", len(got), len(want))
		}
		back, err := decodeMeta(got)
		if err != nil {
			t.Fatal(err)
		}
		if back.Source != saved {
			t.Errorf("packed %v: decoded source: %d bytes, want the %d saved", pack, len(back.Source), len(saved))
		}
		wantBack, err := decodeMeta(want)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(back, wantBack) {
			t.Errorf("packed %v: reads back as\n%+v\nnot as with Source\n%+v", pack, back, wantBack)
		}
	}
}
