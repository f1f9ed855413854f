package nft

import (
	"bytes"
	"os"
	"testing"

	"bpfwall/internal/testenv"
	"bpfwall/rules"
)

// TestFormatRoundTrip: for every corpus rule set bpfwall reads (Parse
// takes it in some family) and the installed nft loads, the listing
// Format writes loads into nft and lists the same as the file itself:
// stateless, and with --counters the counters' values too.
func TestFormatRoundTrip(t *testing.T) {
	testenv.RequireRoot(t)
	testenv.RequireTool(t, "nft", "unshare")
	files := corpusFiles(t, "nft-dumps", "nft-real")
	loaded, same := 0, 0
	for _, f := range files {
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		_, err4 := Parse(f, src, Options{Family: rules.IPv4})
		_, err6 := Parse(f, src, Options{Family: rules.IPv6})
		if err4 != nil && err6 != nil {
			continue
		}
		want, ok := testenv.NftList(t, src, "nft list ruleset", "")
		if !ok {
			continue // newer syntax than the installed nft's, or a file of includes
		}
		loaded++
		for _, counters := range []bool{false, true} {
			text, err := Format(f, src, FormatOptions{Counters: counters})
			if err != nil {
				t.Errorf("%s: Format: %v", f, err)
				continue
			}
			wantList := want
			if !counters {
				wantList, _ = testenv.NftList(t, src, "nft -s list ruleset", "")
			}
			list := "nft list ruleset"
			if !counters {
				list = "nft -s list ruleset"
			}
			got, ok := testenv.NftList(t, text, list, "")
			switch {
			case !ok:
				t.Errorf("%s (counters %v): nft refuses the listing: %s\n%s", f, counters, got, text)
			case got != wantList:
				t.Errorf("%s (counters %v): the listing lists\n%s\nthe file\n%s\nprinted:\n%s", f, counters, got, wantList, text)
			default:
				if counters {
					same++
				}
			}
		}
	}
	t.Logf("%d corpus files bpfwall reads and nft loads; %d list the same printed", loaded, same)
	if loaded < 100 {
		t.Errorf("only %d corpus files loaded", loaded)
	}
}

// TestFormatStable: Format of Format's listing is the listing.
func TestFormatStable(t *testing.T) {
	for _, f := range corpusFiles(t, "nft-dumps", "nft-real") {
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		once, err := Format(f, src, FormatOptions{Counters: true})
		if err != nil {
			continue
		}
		twice, err := Format(f, once, FormatOptions{Counters: true})
		if err != nil {
			t.Errorf("%s: Format of the listing: %v\n%s", f, err, once)
			continue
		}
		if !bytes.Equal(once, twice) {
			t.Errorf("%s: Format is not stable:\n%s\nthen\n%s", f, once, twice)
		}
	}
}
