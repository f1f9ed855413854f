package ir_test

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"bpfwall/internal/testenv"
	"bpfwall/ir"
	"bpfwall/parser/iptables"
	"bpfwall/rules"
)

// benchParseAndLower measures the whole front end: text to ir.Program.
func benchParseAndLower(b *testing.B, name string, src []byte, chain string) {
	b.SetBytes(int64(len(src)))
	b.ReportAllocs()
	for b.Loop() {
		rs, err := iptables.Parse(name, src, iptables.Options{})
		if err != nil {
			b.Fatal(err)
		}
		// Lowering collects an error for every unsupported match and still
		// lowers every rule, so a rule set with some (TUM uses limit and
		// recent) measures the full work too.
		var list rules.ErrorList
		if _, err := ir.Lower(rs, ir.LowerOptions{Chain: chain}); err != nil && !errors.As(err, &list) {
			b.Fatal(err)
		}
	}
}

// BenchmarkParseAndLower100k: 100,000 rules of the bpfilter benchmark shape.
func BenchmarkParseAndLower100k(b *testing.B) {
	var src bytes.Buffer
	src.WriteString("*filter\n:INPUT ACCEPT [0:0]\n:FORWARD ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n")
	for i := range 100_000 {
		fmt.Fprintf(&src, "-A INPUT -s 10.%d.%d.%d/32 -p udp -m udp --dport %d -j DROP\n", i>>16&255, i>>8&255, i&255, 1024+i%60000)
	}
	src.WriteString("COMMIT\n")
	benchParseAndLower(b, "gen", src.Bytes(), "INPUT")
}

// BenchmarkParseAndLowerTUM: the 5,556-rule TUM dump, FORWARD chain (its anonymized MACs,
// which iptables rejects, replaced by a valid one).
func BenchmarkParseAndLowerTUM(b *testing.B) {
	src, err := os.ReadFile(filepath.Join(testenv.Corpus(b, "real"), "tum-netintum-iptables-save-2016-06-27"))
	if err != nil {
		b.Fatal(err)
	}
	src = bytes.ReplaceAll(src, []byte("XX:XX:XX:XX:XX:XX"), []byte("02:00:00:00:00:01"))
	benchParseAndLower(b, "tum", src, "FORWARD")
}
