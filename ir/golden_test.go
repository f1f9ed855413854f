package ir_test

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/tools/txtar"

	"bpfwall/ir"
	"bpfwall/parser/iptables"
	"bpfwall/rules"
)

// TestGolden lowers each testdata/*.txtar file's "input" section
// (iptables-save text, with the ipsets of an optional "ipset" section) and
// compares the dump with its "ir" section, or the lowering errors with its
// "errors" section. An optional "options" section holds "table NAME",
// "chain NAME" and "family ipv6" lines. BPFWALL_UPDATE=1 rewrites the
// expected sections.
func TestGolden(t *testing.T) {
	files, err := filepath.Glob("testdata/*.txtar")
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatal("no golden files in testdata")
	}
	update := os.Getenv("BPFWALL_UPDATE") != ""
	for _, file := range files {
		t.Run(strings.TrimSuffix(filepath.Base(file), ".txtar"), func(t *testing.T) {
			ar, err := txtar.ParseFile(file)
			if err != nil {
				t.Fatal(err)
			}
			got, section := lowerGolden(t, ar)
			want, ok := sectionData(ar, section)
			if update {
				setSection(ar, section, got)
				if err := os.WriteFile(file, txtar.Format(ar), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			if !ok {
				t.Fatalf("no %q section; the result was:\n%s", section, got)
			}
			if got != want {
				t.Errorf("%s section differs (BPFWALL_UPDATE=1 rewrites it)\ngot:\n%s\nwant:\n%s", section, got, want)
			}
		})
	}
}

// lowerGolden parses and lowers the archive's input; it returns the dump
// and "ir", or the errors and "errors".
func lowerGolden(t *testing.T, ar *txtar.Archive) (string, string) {
	t.Helper()
	input, ok := sectionData(ar, "input")
	if !ok {
		t.Fatal("no input section")
	}
	var popts iptables.Options
	var lopts ir.LowerOptions
	if opts, ok := sectionData(ar, "options"); ok {
		for _, line := range strings.Split(strings.TrimSpace(opts), "\n") {
			key, value, _ := strings.Cut(line, " ")
			switch key {
			case "table":
				lopts.Table = value
			case "chain":
				lopts.Chain = value
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
	if sets, ok := sectionData(ar, "ipset"); ok {
		var err error
		if popts.Sets, err = iptables.ParseIPSets("ipset", []byte(sets)); err != nil {
			t.Fatalf("ipset section: %v", err)
		}
	}
	rs, err := iptables.Parse(inputName(popts), []byte(input), popts)
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

func sectionData(ar *txtar.Archive, name string) (string, bool) {
	for _, f := range ar.Files {
		if f.Name == name {
			return string(f.Data), true
		}
	}
	return "", false
}

// setSection replaces the expected sections with name's.
func setSection(ar *txtar.Archive, name, data string) {
	files := ar.Files[:0]
	for _, f := range ar.Files {
		if f.Name != "ir" && f.Name != "errors" {
			files = append(files, f)
		}
	}
	ar.Files = append(files, txtar.File{Name: name, Data: []byte(data)})
}

// inputName is the file name positions in the dumps show.
func inputName(opts iptables.Options) string {
	if opts.ForceFamily && opts.Family == rules.IPv6 {
		return "rules.v6"
	}
	return "rules.v4"
}
