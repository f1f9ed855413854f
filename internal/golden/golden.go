// Package golden runs the txtar golden tests of the packages: each archive
// in testdata/ holds an input and the expected result, and BPFWALL_UPDATE=1
// rewrites the expected result.
package golden

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"golang.org/x/tools/txtar"
)

// Run runs one subtest per testdata/*.txtar archive. produce returns the
// result for an archive and the name of the section it must equal; results
// names every section produce may return (say "dump" and "errors"), so that
// an update replaces whichever of them the archive had.
func Run(t *testing.T, results []string, produce func(t *testing.T, ar *txtar.Archive) (got, section string)) {
	t.Helper()
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
			got, section := produce(t, ar)
			want, ok := Section(ar, section)
			if update {
				ar.Files = slices.DeleteFunc(ar.Files, func(f txtar.File) bool { return slices.Contains(results, f.Name) })
				ar.Files = append(ar.Files, txtar.File{Name: section, Data: []byte(got)})
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

// Section returns the data of the archive's section called name.
func Section(ar *txtar.Archive, name string) (string, bool) {
	for _, f := range ar.Files {
		if f.Name == name {
			return string(f.Data), true
		}
	}
	return "", false
}
