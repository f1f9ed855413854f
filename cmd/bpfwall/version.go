package main

import (
	"fmt"
	"io"
	"runtime/debug"
)

// printVersion prints bpfwall's version as the build recorded it: the
// module version (a tag, or a pseudo-version naming the commit), else the
// commit, its time and whether the tree had changes when the build
// stamped them, and the Go toolchain.
func printVersion(w io.Writer) {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		fmt.Fprintln(w, "bpfwall (version unknown: built without module information)")
		return
	}
	version := info.Main.Version
	if version == "" {
		version = "(devel)"
	}
	var rev, when string
	dirty := false
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.time":
			when = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	line := "bpfwall " + version
	if rev != "" && version == "(devel)" {
		// A pseudo-version names the commit already.
		if len(rev) > 12 {
			rev = rev[:12]
		}
		line += " commit " + rev
		if dirty {
			line += "+changes"
		}
		if when != "" {
			line += " of " + when
		}
	}
	fmt.Fprintf(w, "%s, %s\n", line, info.GoVersion)
}
