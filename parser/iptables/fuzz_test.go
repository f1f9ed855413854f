package iptables

import (
	"bytes"
	"os"
	"testing"

	"bpfwall/rules"
)

// FuzzParse checks that no input makes the parser panic and that what fmt
// prints parses back to the same text.
func FuzzParse(f *testing.F) {
	for _, tc := range restoreCases {
		f.Add([]byte(tc.input), false)
	}
	if src, err := os.ReadFile("../../testdata/examples/web-server.rules.v4"); err == nil {
		f.Add(src, false)
	}
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
