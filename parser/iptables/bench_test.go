package iptables

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"bpfwall/internal/testenv"
)

// generated returns an iptables-save file with n rules of the bpfilter
// benchmark shape: one source address and UDP port per rule.
func generated(n int) []byte {
	var b bytes.Buffer
	b.WriteString("*filter\n:INPUT ACCEPT [0:0]\n:FORWARD ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n")
	for i := range n {
		fmt.Fprintf(&b, "-A INPUT -s 10.%d.%d.%d/32 -p udp -m udp --dport %d -j DROP\n", i>>16&255, i>>8&255, i&255, 1024+i%60000)
	}
	b.WriteString("COMMIT\n")
	return b.Bytes()
}

func BenchmarkParse100k(b *testing.B) {
	src := generated(100_000)
	b.SetBytes(int64(len(src)))
	for b.Loop() {
		if _, err := Parse("gen", src, Options{}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkParseTUM parses the 5,556-rule TUM dump. Its MAC addresses were
// anonymized to XX:XX:XX:XX:XX:XX, which iptables rejects; they are replaced
// by a valid address here.
func BenchmarkParseTUM(b *testing.B) {
	src, err := os.ReadFile(filepath.Join(testenv.Corpus(b, "real"), "tum-netintum-iptables-save-2016-06-27"))
	if err != nil {
		b.Fatal(err)
	}
	src = bytes.ReplaceAll(src, []byte("XX:XX:XX:XX:XX:XX"), []byte("02:00:00:00:00:01"))
	b.SetBytes(int64(len(src)))
	for b.Loop() {
		if _, err := Parse("tum", src, Options{}); err != nil {
			b.Fatal(err)
		}
	}
}
