package main

import (
	"fmt"
	"io"

	"bpfwall/rules"
)

func runFmt(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("fmt", stderr)
	var in inputFlags
	in.register(fs)
	counters := fs.Bool("c", false, "print rule counters")
	files, err := parseFlags(fs, args)
	if err != nil {
		return err
	}
	if files, err = in.inputs(files); err != nil {
		fmt.Fprintln(stderr, err)
		return err
	}
	if len(files) != 1 {
		fmt.Fprintln(stderr, "usage: bpfwall fmt [-6] [-c] [--ipset FILE] (FILE | --from-kernel)")
		return errUsage
	}
	rs, err := in.load(files[0], stderr)
	if err != nil {
		return err
	}
	_, err = stdout.Write(rs.Save(rules.SaveOptions{Counters: *counters}))
	return err
}
