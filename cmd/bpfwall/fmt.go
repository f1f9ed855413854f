package main

import (
	"fmt"
	"io"

	"bpfwall/parser/nft"
	"bpfwall/parser/nft/kernel"
	"bpfwall/rules"
)

func runFmt(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("fmt", stdout, stderr)
	var in inputFlags
	in.register(fs)
	counters := fs.BoolP("counters", "c", false, "print rule counters")
	fs.BoolVarP(&in.fragment, "noflush", "n", false, "read a fragment applied with iptables-restore -n: chains defined elsewhere allowed")
	asNFT := fs.Bool("nft", false, "print an nft rule set as \"nft list ruleset\" lists it after \"nft -f\" (as \"nft -s list ruleset\" without -c)")
	files, err := parseFlags(fs, args)
	if err != nil {
		return err
	}
	if files, err = in.inputs(files); err != nil {
		return err
	}
	if len(files) != 1 {
		return fmt.Errorf("%w: fmt reads one FILE, or --from-kernel", errUsage)
	}
	rs, err := in.load(files[0], stderr)
	if err != nil {
		return err
	}
	if *asNFT {
		if !in.readNFT {
			return fmt.Errorf("fmt --nft prints nft rule sets: %s is iptables text (iptables-restore-translate writes it as nft)", files[0])
		}
		src, name := in.src, files[0]
		if in.fromKernel {
			if src, err = kernel.Text(); err != nil {
				return err
			}
		} else if name == "-" {
			name = "<stdin>"
		}
		text, err := nft.Format(name, src, nft.FormatOptions{Counters: *counters})
		if err != nil {
			return fmt.Errorf("fmt --nft: %w", err)
		}
		_, err = stdout.Write(text)
		return err
	}
	_, err = stdout.Write(rs.Save(rules.SaveOptions{Counters: *counters, Fragment: in.fragment}))
	return err
}
