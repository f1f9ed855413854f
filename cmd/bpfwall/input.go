package main

import (
	"flag"
	"fmt"
	"io"
	"os"

	"bpfwall/parser/iptables"
	"bpfwall/parser/nft"
	"bpfwall/rules"
)

// inputFlags are the flags every command that reads a rule set takes.
type inputFlags struct {
	ipv6   bool
	ipset  string
	format string // iptables, nft, or empty to detect
	// fragment inputs apply on top of a rule set not known here (check -n);
	// base is what the previous inputs built.
	fragment bool
	base     *rules.Ruleset
	// fromKernel reads the nftables rule set of the network namespace
	// instead of a file.
	fromKernel bool
}

// kernelInput names the kernel's rule set where a file name would be.
const kernelInput = "kernel"

func (f *inputFlags) register(fs *flag.FlagSet) {
	fs.BoolVar(&f.ipv6, "6", false, "read the input as ip6tables input")
	fs.StringVar(&f.ipset, "ipset", "", "read ipset definitions from `FILE` (ipset save output)")
	fs.StringVar(&f.format, "format", "", "input format: `iptables` or nft (detected from the content by default)")
	fs.BoolVar(&f.fromKernel, "from-kernel", false, "compile the nftables rule set of this network namespace, read from the kernel over netlink, instead of FILE")
}

// inputs returns the rule sets the command reads: the files named, or,
// with --from-kernel, which excludes them, the kernel's.
func (f *inputFlags) inputs(files []string) ([]string, error) {
	if !f.fromKernel {
		return files, nil
	}
	if len(files) > 0 {
		return nil, fmt.Errorf("%w: --from-kernel reads no FILE", errUsage)
	}
	return []string{kernelInput}, nil
}

// loadKernel reads the nftables rule set of the network namespace.
func (f *inputFlags) loadKernel() (*rules.Ruleset, error) {
	if f.ipset != "" || f.fragment {
		return nil, fmt.Errorf("%s: --ipset and fragments apply to iptables input only", kernelInput)
	}
	if f.format != "" && f.format != "nft" {
		return nil, fmt.Errorf("%w: --from-kernel reads nft rule sets, not --format %s", errUsage, f.format)
	}
	fam := rules.IPv4
	if f.ipv6 {
		fam = rules.IPv6
	}
	return nft.ReadKernel(nft.Options{Family: fam})
}

// readFile reads a named file, or stdin for "-".
func readFile(name string) ([]byte, error) {
	if name == "-" {
		return rules.ReadSource("<stdin>", os.Stdin)
	}
	return rules.ReadFile(name)
}

// load reads and parses one rule set file.
func (f *inputFlags) load(name string, stderr io.Writer) (*rules.Ruleset, error) {
	if f.fromKernel {
		return f.loadKernel()
	}
	opts := iptables.Options{ForceFamily: f.ipv6, Noflush: f.fragment, Fragment: f.fragment, Base: f.base}
	if f.ipv6 {
		opts.Family = rules.IPv6
	}
	if f.ipset != "" {
		src, err := readFile(f.ipset)
		if err != nil {
			return nil, err
		}
		sets, err := iptables.ParseIPSets(f.ipset, src)
		if err != nil {
			return nil, err
		}
		opts.Sets = sets
	}
	src, err := readFile(name)
	if err != nil {
		return nil, err
	}
	displayName := name
	if name == "-" {
		displayName = "<stdin>"
	}
	format := f.format
	if format == "" {
		format = "iptables"
		if nft.Detect(src) {
			format = "nft"
		}
	}
	var rs *rules.Ruleset
	switch format {
	case "nft":
		if f.ipset != "" || f.fragment {
			return nil, fmt.Errorf("%s: --ipset and fragments apply to iptables input only", displayName)
		}
		fam := opts.Family
		if !f.ipv6 {
			// An ip6-only rule set is for IPv6 packets: read as IPv4 it
			// would compile to nothing and pass them all.
			if fam, err = nft.Family(displayName, src, nft.Options{}); err != nil {
				return nil, err
			}
		}
		return nft.Parse(displayName, src, nft.Options{Family: fam})
	case "iptables":
	default:
		return nil, fmt.Errorf("unknown --format %q: want iptables or nft", format)
	}
	rs, err = iptables.Parse(displayName, src, opts)
	if rs != nil {
		printWarnings(stderr, rs.Warnings)
	}
	return rs, err
}

// printWarnings writes warnings as FILE:LINE:COL: warning: MESSAGE.
func printWarnings(w io.Writer, warnings []*rules.Error) {
	for _, x := range warnings {
		fmt.Fprintf(w, "%s: warning: %s\n", x.Pos, x.Msg)
	}
}
