package nft

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"bpfwall/internal/testenv"
	"bpfwall/rules"
)

// FuzzParse checks that no nft input makes the parser panic, that every
// error it reports has a line to point at, that what it accepts prints as
// iptables-save text, that its listing (Format) parses and lists the
// same again, and that what prints as nft text (Print) reads back and
// prints the same.
func FuzzParse(f *testing.F) {
	f.Add([]byte("table inet f {\n\tchain in {\n\t\ttype filter hook input priority 0; policy drop;\n\t\tct state established,related accept\n\t\ttcp dport { 22, 80-90 } accept\n\t}\n}\n"), false)
	f.Add([]byte("define nets = { 10.0.0.0/8, 192.168.0.0/16 }\ntable ip t { set s { type ipv4_addr . inet_service; elements = { 10.0.0.1 . 22 } }\nchain c { type filter hook input priority filter; ip saddr $nets ip saddr . tcp dport @s drop; } }\n"), false)
	f.Add([]byte("table ip6 t { chain c { type filter hook forward priority -10; meta l4proto ipv6-icmp icmpv6 type echo-request limit rate 5/second accept; } }\n"), true)
	f.Add([]byte("add table ip t\nadd chain ip t c { type filter hook input priority 0 ; }\nadd rule ip t c iifname \"eth*\" counter reject with icmp type host-unreachable\ninclude \"other.nft\"\n"), false)
	f.Add([]byte("table ip filter {\n\tchain INPUT {\n\t\ttype filter hook input priority filter; policy accept;\n\t\txt match recent counter packets 0 bytes 0\n\t}\n\tchain c { type nat hook postrouting priority 100; masquerade; }\n}\n"), false)
	// Real rule sets and the nftables project's listings, and the
	// damage a review did to them by hand.
	var files []string
	for _, dir := range []string{"nft-real", "nft-dumps"} {
		for _, pattern := range []string{"*.nft", "*/dumps/*.nft"} {
			files = append(files, testenv.CorpusFiles(f, dir, pattern)...)
		}
	}
	for i, name := range files {
		src, err := os.ReadFile(name)
		if err != nil {
			continue
		}
		v6 := filepath.Base(filepath.Dir(filepath.Dir(name))) == "ip6"
		f.Add(src, v6)
		if i%8 == 0 || filepath.Base(filepath.Dir(name)) == "nft-real" {
			for _, m := range testenv.Mutations(src) {
				f.Add(m, v6)
			}
		}
	}
	f.Fuzz(func(t *testing.T, src []byte, ipv6 bool) {
		fam := rules.IPv4
		if ipv6 {
			fam = rules.IPv6
		}
		noFiles := func(name string) ([]byte, error) { return nil, errors.New("the fuzzer reads no files") }
		rs, err := Parse("fuzz.nft", src, Options{Family: fam, ReadFile: noFiles})
		if err != nil {
			var list rules.ErrorList
			var one *rules.Error
			switch {
			case errors.As(err, &list):
				for _, e := range list {
					if e.Pos.Line < 1 {
						t.Fatalf("error without a line: %v\ninput:\n%s", e, src)
					}
				}
			case errors.As(err, &one):
				if one.Pos.Line < 1 {
					t.Fatalf("error without a line: %v\ninput:\n%s", one, src)
				}
			default:
				t.Fatalf("error without a position: %v\ninput:\n%s", err, src)
			}
			return
		}
		rs.Save(rules.SaveOptions{})
		// The listing (fmt --nft) of what parses parses too, in the same
		// family, and lists the same again.
		listing, err := Format("fuzz.nft", src, FormatOptions{Counters: true, ReadFile: noFiles})
		if err != nil {
			t.Fatalf("Format: %v\ninput:\n%s", err, src)
		}
		if _, err := Parse("listing.nft", listing, Options{Family: fam, ReadFile: noFiles}); err != nil {
			t.Fatalf("the listing does not parse: %v\ninput:\n%s\nlisting:\n%s", err, src, listing)
		}
		if again, err := Format("listing.nft", listing, FormatOptions{Counters: true, ReadFile: noFiles}); err != nil || string(again) != string(listing) {
			t.Fatalf("the listing is not stable (%v):\ninput:\n%s\nlisting:\n%s\nthen:\n%s", err, src, listing, again)
		}
		// What prints must read back and print the same.
		text, err := Print(rs)
		if err != nil {
			return // a construct with no nft form in the model
		}
		rs2, err := Parse("printed.nft", text, Options{Family: fam, ReadFile: noFiles})
		if err != nil {
			t.Fatalf("the printed text does not parse: %v\ninput:\n%s\nprinted:\n%s", err, src, text)
		}
		again, err := Print(rs2)
		if err != nil || string(again) != string(text) {
			t.Fatalf("printing is not stable (%v):\ninput:\n%s\nprinted:\n%s\nthen:\n%s", err, src, text, again)
		}
	})
}
