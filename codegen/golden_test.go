package codegen_test

import (
	"bytes"
	"slices"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/tools/txtar"

	"bpfwall/codegen"
	"bpfwall/internal/golden"
	"bpfwall/ir"
	"bpfwall/parser/iptables"
	"bpfwall/parser/nft"
	"bpfwall/rules"
)

// TestGolden compiles each testdata/*.txtar file's "input" section
// (iptables-save text, or nft text with "format nft") and compares the dump with its "dump" section, or
// the compile errors with its "errors" section. An optional "options"
// section holds "hook H", "chain NAME", "table NAME", "family ipv6",
// "segment-branches N", "level N", "force-lookups", "format nft" and
// "show-parser" lines; an "ipset" section holds ipset save text.
// BPFWALL_UPDATE=1 rewrites the expected sections.
//
// A dump shows the packet parser's functions by name only, unless the
// options say "show-parser": the parse*.txtar files show it for each hook
// and family, and the files about what changes it (interface names, TCP
// options, conntrack's stage) and about the socket lookup, whose parser
// reads no packet, show theirs.
func TestGolden(t *testing.T) {
	golden.Run(t, []string{"dump", "errors"}, func(t *testing.T, ar *txtar.Archive) (string, string) { return compileGolden(t, loadGolden(t, ar)) })
}

// goldenCase is a golden file's rule set and options.
type goldenCase struct {
	prog *ir.Program
	hook codegen.Hook
	// segmentBranches, when not 0, splits chains into segments after so
	// many conditional jumps.
	segmentBranches int
	level           codegen.Level
	// forceLookups is Options.ForceLookups.
	forceLookups bool
	// showParser shows the parser's functions in the dump.
	showParser bool
}

// loadGolden parses and lowers the archive's input with its options.
func loadGolden(t *testing.T, ar *txtar.Archive) goldenCase {
	t.Helper()
	input, ok := golden.Section(ar, "input")
	if !ok {
		t.Fatal("no input section")
	}
	var popts iptables.Options
	var lopts ir.LowerOptions
	g := goldenCase{level: codegen.O0} // goldens show the plain program unless they say "level 1"
	nftInput := false
	if opts, ok := golden.Section(ar, "options"); ok {
		for _, line := range strings.Split(strings.TrimSpace(opts), "\n") {
			key, value, _ := strings.Cut(line, " ")
			switch key {
			case "hook":
				h, err := codegen.ParseHook(value)
				if err != nil {
					t.Fatal(err)
				}
				g.hook = h
			case "table":
				lopts.Table = value
			case "chain":
				lopts.Chain = value
			case "segment-branches":
				n, err := strconv.Atoi(value)
				if err != nil {
					t.Fatalf("option %q: %v", line, err)
				}
				g.segmentBranches = n
			case "level":
				n, err := strconv.Atoi(value)
				if err != nil {
					t.Fatalf("option %q: %v", line, err)
				}
				if g.level, err = codegen.ParseLevel(n); err != nil {
					t.Fatalf("option %q: %v", line, err)
				}
			case "force-lookups":
				g.forceLookups = true
			case "show-parser":
				g.showParser = true
			case "format":
				if value != "nft" {
					t.Fatalf("option %q: only nft", line)
				}
				nftInput = true
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
	name := "rules.v4"
	if popts.ForceFamily && popts.Family == rules.IPv6 {
		name = "rules.v6"
	}
	if sets, ok := golden.Section(ar, "ipset"); ok {
		var err error
		if popts.Sets, err = iptables.ParseIPSets("ipset", []byte(sets)); err != nil {
			t.Fatalf("ipset section: %v", err)
		}
	}
	var rs *rules.Ruleset
	var err error
	if nftInput {
		rs, err = nft.Parse("rules.nft", []byte(input), nft.Options{Family: popts.Family})
	} else {
		rs, err = iptables.Parse(name, []byte(input), popts)
	}
	if err != nil {
		t.Fatalf("parse input: %v", err)
	}
	g.prog, err = ir.Lower(rs, lopts)
	if err != nil {
		t.Fatalf("lower input: %v", err)
	}
	return g
}

// compileGolden returns the dump and "dump", or the errors and "errors".
func compileGolden(t *testing.T, g goldenCase) (string, string) {
	t.Helper()
	if g.segmentBranches != 0 {
		defer codegen.SetMaxSegmentBranches(g.segmentBranches)()
	}
	opts := codegen.Options{Trace: true, Hook: g.hook, Level: g.level, ForceLookups: g.forceLookups}
	p, err := codegen.Compile(g.prog, opts)
	if err != nil {
		return err.Error() + "\n", "errors"
	}
	var b bytes.Buffer
	if err := p.Dump(&b); err != nil {
		t.Fatal(err)
	}
	// The same input gives the same program.
	again, err := codegen.Compile(g.prog, opts)
	if err != nil {
		t.Fatalf("second compile: %v", err)
	}
	var b2 bytes.Buffer
	if err := again.Dump(&b2); err != nil {
		t.Fatal(err)
	}
	if b.String() != b2.String() {
		t.Errorf("two compilations differ")
	}
	if !g.showParser {
		return hideParser(b.String()), "dump"
	}
	return b.String(), "dump"
}

// parserFunctions are the functions of the packet parser.
var parserFunctions = []string{"parse", "parse_hop_by_hop", "walk_ext_hdrs", "walk_tcp_options"}

// hidden is what a dump shows of the parser.
const hidden = "\t; the packet parser, shown in the parse goldens\n"

// hideParser replaces the body of each of the parser's functions in a
// dump with a line that says where it is shown, and so the parser's code
// in main, from parse_frame to parse_done. A dump's functions are its
// blocks of lines between empty lines, each starting with its name.
func hideParser(dump string) string {
	blocks := strings.Split(dump, "\n\n")
	for i, block := range blocks {
		name, _, _ := strings.Cut(block, ":\n")
		if slices.Contains(parserFunctions, name) {
			blocks[i] = name + ":\n" + strings.TrimSuffix(hidden, "\n")
			if strings.HasSuffix(block, "\n") {
				blocks[i] += "\n"
			}
			continue
		}
		start := strings.Index(block, "\nparse_frame:\n")
		end := strings.Index(block, "\nparse_done:\n")
		if start >= 0 && end > start {
			blocks[i] = block[:start+1] + hidden + block[end+1:]
		}
	}
	return strings.Join(blocks, "\n\n")
}
