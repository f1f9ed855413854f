package nft

import (
	"bytes"
	"fmt"
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

// TestFormatNftTLoads: the listing of a valid line of nft's tests that
// bpfwall reads, loaded
// with nft -f, lists as the line itself does: Format changes no rule's
// meaning, whatever construct the line uses. Every NFTT_EVERY-th case
// (default 8; 1 for all) of those the installed nft loads.
func TestFormatNftTLoads(t *testing.T) {
	testenv.RequireRoot(t)
	testenv.RequireTool(t, "nft", "unshare")
	every := 8
	if s := os.Getenv("NFTT_EVERY"); s != "" {
		fmt.Sscan(s, &every)
	}
	loaded, same := 0, 0
	for i, c := range nftTCases(t) {
		if !c.ok || i%every != 0 {
			continue
		}
		fam := rules.IPv4
		if c.family == "ip6" {
			fam = rules.IPv6
		}
		if _, err := Parse(c.file, []byte(c.script), Options{Family: fam}); err != nil {
			continue // fmt prints what bpfwall reads; TestNftT counts the rest
		}
		want, ok := testenv.NftList(t, []byte(c.script), "nft -s list ruleset", "")
		if !ok {
			continue // newer syntax than the installed nft's
		}
		loaded++
		listing, err := Format(c.file, []byte(c.script), FormatOptions{})
		if err != nil {
			t.Errorf("%s: %q: Format: %v", c.file, c.rule, err)
			continue
		}
		got, ok := testenv.NftList(t, listing, "nft -s list ruleset", "")
		if !ok || got != want {
			t.Errorf("%s (%s): %q: the listing lists\n%s\nthe line\n%s\nlisting:\n%s", c.file, c.family, c.rule, got, want, listing)
			continue
		}
		same++
	}
	t.Logf("%d nft-t lines the installed nft loads; %d list the same from their listing", loaded, same)
	if loaded == 0 {
		t.Error("nft loaded no nft-t line")
	}
}
