package ir_test

import (
	"bytes"
	"strings"
	"testing"

	"golang.org/x/tools/txtar"

	"bpfwall/internal/golden"
	"bpfwall/ir"
	"bpfwall/parser/iptables"
	"bpfwall/parser/nft"
	"bpfwall/rules"
)

// TestGolden lowers each testdata/*.txtar file's "input" section
// (iptables-save text, with the ipsets of an optional "ipset" section) and
// compares the dump with its "ir" section, or the lowering errors with its
// "errors" section. An optional "options" section holds "table NAME",
// "chain NAME", "family ipv6" and "format nft" (the input is nft text)
// lines. BPFWALL_UPDATE=1 rewrites the
// expected sections.
func TestGolden(t *testing.T) {
	golden.Run(t, []string{"ir", "errors"}, lowerGolden)
}

// lowerGolden parses and lowers the archive's input; it returns the dump
// and "ir", or the errors and "errors".
func lowerGolden(t *testing.T, ar *txtar.Archive) (string, string) {
	t.Helper()
	input, ok := golden.Section(ar, "input")
	if !ok {
		t.Fatal("no input section")
	}
	var popts iptables.Options
	var lopts ir.LowerOptions
	isNFT := false
	if opts, ok := golden.Section(ar, "options"); ok {
		for _, line := range strings.Split(strings.TrimSpace(opts), "\n") {
			key, value, _ := strings.Cut(line, " ")
			switch key {
			case "table":
				lopts.Table = value
			case "chain":
				lopts.Chain = value
			case "format":
				isNFT = value == "nft"
			case "family":
				popts.ForceFamily = true
				if value == "ipv6" {
					popts.Family = rules.IPv6
				}
			default:
				t.Fatalf("unknown option %q", line)
			}
		}
	}
	if sets, ok := golden.Section(ar, "ipset"); ok {
		var err error
		if popts.Sets, err = iptables.ParseIPSets("ipset", []byte(sets)); err != nil {
			t.Fatalf("ipset section: %v", err)
		}
	}
	var rs *rules.Ruleset
	var err error
	if isNFT {
		rs, err = nft.Parse("rules.nft", []byte(input), nft.Options{Family: popts.Family})
	} else {
		rs, err = iptables.Parse(inputName(popts), []byte(input), popts)
	}
	if err != nil {
		t.Fatalf("parse input: %v", err)
	}
	p, err := ir.Lower(rs, lopts)
	if err != nil {
		return err.Error() + "\n", "errors"
	}
	if err := ir.Verify(p); err != nil {
		t.Fatalf("Verify after Lower: %v\n%s", err, p)
	}
	var b bytes.Buffer
	if err := p.Format(&b); err != nil {
		t.Fatal(err)
	}
	return b.String(), "ir"
}

// inputName is the file name positions in the dumps show.
func inputName(opts iptables.Options) string {
	if opts.ForceFamily && opts.Family == rules.IPv6 {
		return "rules.v6"
	}
	return "rules.v4"
}
