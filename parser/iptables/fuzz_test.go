package iptables

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"bpfwall/internal/testenv"
	"bpfwall/rules"
)

// FuzzParse checks that no input makes the parser panic and that what fmt
// prints parses back to the same text.
func FuzzParse(f *testing.F) {
	for _, tc := range restoreCases {
		f.Add([]byte(tc.input), false)
	}
	// Real rule sets, and the damage a review did to them by hand.
	files, _ := filepath.Glob("../../testdata/examples/*.rules.v4")
	files = append(files, testenv.CorpusFiles(f, "real", "*")...)
	for _, name := range files {
		src, err := os.ReadFile(name)
		if err != nil || filepath.Ext(name) == ".md" {
			continue
		}
		v6 := strings.Contains(name, "ip6") || strings.HasSuffix(name, ".v6")
		f.Add(src, v6)
		for _, m := range testenv.Mutations(src) {
			f.Add(m, v6)
		}
	}
	f.Add(testenv.DeepChains(300), false)
	f.Add(testenv.DeepChains(3000), false)
	f.Add([]byte("*filter\n-A INPUT -s 2001:db8::/32 -p ipv6-icmp -m icmp6 --icmpv6-type 128 -j ACCEPT\nCOMMIT\n"), true)
	f.Add([]byte("*filter\n-A INPUT -p tcp --dport 22 -m recent --set --name SSH\n-A INPUT -m recent ! --update --seconds 60 --hitcount 4 --rttl --reap --name SSH -j DROP\n-A INPUT -m recent --rcheck --mask 255.255.0.0 --rdest -j DROP\nCOMMIT\n"), false)
	f.Add([]byte("*filter\n-A INPUT -m recent --remove --name \"a b\" --mask ffff:ffff:ffff:ffff:: -j ACCEPT\nCOMMIT\n"), true)
	f.Fuzz(func(t *testing.T, src []byte, ipv6 bool) {
		opts := Options{ForceFamily: true}
		if ipv6 {
			opts.Family = rules.IPv6
		}
		rs, err := Parse("fuzz", src, opts)
		if err != nil {
			return
		}
		once := rs.Save(rules.SaveOptions{})
		again, err := Parse("fmt", once, opts)
		if err != nil {
			t.Fatalf("fmt output does not parse: %v\ninput:\n%s\nfmt:\n%s", err, src, once)
		}
		if twice := again.Save(rules.SaveOptions{}); !bytes.Equal(once, twice) {
			t.Fatalf("fmt is not stable:\nfirst:\n%s\nsecond:\n%s", once, twice)
		}
	})
}
