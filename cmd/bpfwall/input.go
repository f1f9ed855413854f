package main

import (
	"bytes"
	"errors"
	"fmt"
	"hash/maphash"
	"io"
	"maps"
	"os"
	"strconv"
	"strings"

	"github.com/spf13/pflag"

	"bpfwall/loader"
	"bpfwall/parser/iptables"
	"bpfwall/parser/nft"
	"bpfwall/parser/nft/kernel"
	"bpfwall/rules"
)

// inputFlags are the flags every command that reads a rule set takes.
type inputFlags struct {
	familyFlags
	warner
	sets   setFlags
	format string // iptables, nft, or empty to detect
	// readNFT says that the last rule set load read was nft's (a file
	// or the kernel's), which restore does not take.
	readNFT bool
	// fragment inputs apply on top of a rule set not known here (check -n);
	// base is what the previous inputs built.
	fragment bool
	base     *rules.Ruleset
	// fromKernel reads the nftables rule set of the network namespace
	// instead of a file.
	fromKernel bool
	// src is the text of the last file load read.
	src []byte
}

// kernelInput names the kernel's rule set where a file name would be.
const kernelInput = "kernel"

func (f *inputFlags) register(fs *pflag.FlagSet) {
	f.familyFlags.register(fs, "read the input as")
	f.warner.register(fs)
	f.sets.register(fs, &f.warner)
	fs.StringVar(&f.format, "format", "", "input format: `iptables` or nft (detected from the content by default)")
	fs.BoolVar(&f.fromKernel, "from-kernel", false, "compile the nftables rule set of this network namespace, read from the kernel over netlink, instead of FILE")
}

// inputs returns the rule sets the command reads: the files named, or,
// with --from-kernel, which excludes them, the kernel's.
func (f *inputFlags) inputs(files []string) ([]string, error) {
	if err := f.familyFlags.check(); err != nil {
		return nil, err
	}
	if !f.fromKernel {
		return files, nil
	}
	if len(files) > 0 {
		return nil, fmt.Errorf("%w: --from-kernel reads no FILE", errUsage)
	}
	return []string{kernelInput}, nil
}

// loadKernel reads the nftables rule set of the network namespace.
func (f *inputFlags) loadKernel(stderr io.Writer) (*rules.Ruleset, error) {
	if f.fragment {
		return nil, fmt.Errorf("%s: fragments apply to iptables input only", kernelInput)
	}
	if f.format != "" && f.format != "nft" {
		return nil, fmt.Errorf("%w: --from-kernel reads nft rule sets, not --format %s", errUsage, f.format)
	}
	fam := rules.IPv4
	if f.ipv6 {
		fam = rules.IPv6
	}
	// iptables-nft's -m set names ipsets: --ipset FILE's or the kernel's.
	sets := func() (map[string]*rules.IPSet, error) { return f.sets.load(stderr) }
	return kernel.Read(nft.Options{Family: fam, IPSets: sets})
}

// readFile reads a named file, or stdin for "-".
func readFile(name string) ([]byte, error) {
	if name == "-" {
		return rules.ReadSource("<stdin>", os.Stdin)
	}
	return rules.ReadFile(name)
}

// rereader returns a function that reads the input name again, as
// readFile read it into src, and fails if it is not the same: nil when
// the input is not a regular file (a pipe), whose src the caller keeps.
// restore < rules.v4 need not keep a million-rule input (60 MB) in
// memory for the rare chain it parses again.
func rereader(name string, src []byte) func() ([]byte, error) {
	display, f, start := name, (*os.File)(nil), int64(0)
	if name == "-" {
		display, f = "<stdin>", os.Stdin
		st, err := f.Stat()
		if err != nil || !st.Mode().IsRegular() {
			return nil
		}
		// Read to its end: it started len(src) bytes back.
		end, err := f.Seek(0, io.SeekCurrent)
		if err != nil || end < int64(len(src)) {
			return nil
		}
		start = end - int64(len(src))
	} else if st, err := os.Stat(name); err != nil || !st.Mode().IsRegular() {
		return nil
	}
	seed := maphash.MakeSeed()
	sum, n := maphash.Bytes(seed, src), len(src)
	return func() ([]byte, error) {
		var again []byte
		var err error
		if f != nil {
			if _, err = f.Seek(start, io.SeekStart); err == nil {
				again, err = rules.ReadSource(display, f)
			}
		} else {
			again, err = rules.ReadFile(name)
		}
		if err != nil {
			return nil, fmt.Errorf("read %s again: %w", display, err)
		}
		if len(again) != n || maphash.Bytes(seed, again) != sum {
			return nil, fmt.Errorf("read %s again: it changed since it was read; nothing was changed, run the command again", display)
		}
		return again, nil
	}
}

// load reads and parses one rule set file.
func (f *inputFlags) load(name string, stderr io.Writer) (*rules.Ruleset, error) {
	f.readNFT = f.fromKernel
	if f.fromKernel {
		return f.loadKernel(stderr)
	}
	opts := iptables.Options{ForceFamily: f.ipv6, Noflush: f.fragment, Fragment: f.fragment, Base: f.base}
	if f.ipv6 {
		opts.Family = rules.IPv6
	}
	src, err := readFile(name)
	if err != nil {
		return nil, err
	}
	// Those that load a program may need the kernel's tick rate.
	loader.StartHZ()
	f.src = src
	var base map[string]*rules.IPSet
	if f.base != nil {
		base = f.base.Sets
	}
	sets, err := f.sets.read(src, stderr)
	if err != nil {
		return nil, err
	}
	opts.Sets = overSets(base, sets)
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
		if f.sets.file != "" || f.fragment {
			return nil, fmt.Errorf("%s: --ipset and fragments apply to iptables input only", displayName)
		}
		fam := opts.Family
		if !f.ipv6 && !f.ipv4 {
			// An ip6-only rule set is for IPv6 packets: read as IPv4 it
			// would compile to nothing and pass them all.
			if fam, err = nft.Family(displayName, src, nft.Options{}); err != nil {
				return nil, err
			}
		}
		f.readNFT = true
		rs, err := nft.Parse(displayName, src, nft.Options{Family: fam})
		if rs != nil {
			f.print(stderr, rs.Warnings)
		}
		return rs, err
	case "iptables":
	default:
		return nil, fmt.Errorf("unknown --format %q: want iptables or nft", format)
	}
	rs, err = iptables.Parse(displayName, src, opts)
	if rs != nil {
		f.print(stderr, rs.Warnings)
	}
	return rs, err
}

// warner prints warnings as FILE:LINE:COL: warning: MESSAGE, one line
// per cause: a message given for several rules is printed at the first,
// saying how many more it applies to, and a command that compiles the
// rule set for several hooks prints it once. -q silences warnings.
type warner struct {
	quiet bool
	seen  map[string]bool
}

func (w *warner) register(fs *pflag.FlagSet) {
	fs.BoolVarP(&w.quiet, "quiet", "q", false, "print no warnings")
}

// maxListed is how many more rules' lines a warning names.
const maxListed = 5

func (w *warner) print(out io.Writer, warnings []*rules.Error) {
	if w.quiet || len(warnings) == 0 {
		return
	}
	if w.seen == nil {
		w.seen = make(map[string]bool)
	}
	byMsg := make(map[string][]*rules.Error)
	var order []string
	for _, x := range warnings {
		if byMsg[x.Msg] == nil {
			order = append(order, x.Msg)
		}
		byMsg[x.Msg] = append(byMsg[x.Msg], x)
	}
	for _, msg := range order {
		xs := byMsg[msg]
		key := xs[0].Pos.String() + "\x00" + msg
		if w.seen[key] {
			continue
		}
		w.seen[key] = true
		line := fmt.Sprintf("%s: warning: %s", xs[0].Pos, msg)
		if more := xs[1:]; len(more) > 0 {
			var lines []string
			for _, x := range more[:min(len(more), maxListed)] {
				if x.Pos.File == xs[0].Pos.File {
					lines = append(lines, strconv.Itoa(x.Pos.Line))
				} else {
					lines = append(lines, x.Pos.String())
				}
			}
			list := strings.Join(lines, ", ")
			if len(more) > maxListed {
				list += fmt.Sprintf(", and %d more", len(more)-maxListed)
			}
			rule := "rules"
			if len(more) == 1 {
				rule = "rule"
			}
			line += fmt.Sprintf(" (also %d more %s: line %s)", len(more), rule, list)
		}
		fmt.Fprintln(out, line)
	}
}

// setFlags are --ipset FILE: where the ipsets that rules name come from.
type setFlags struct {
	file string
	warn *warner
}

func (f *setFlags) register(fs *pflag.FlagSet, warn *warner) {
	f.warn = warn
	fs.StringVar(&f.file, "ipset", "", "read the ipsets that rules name from `FILE` (ipset save output) instead of the kernel")
}

// read returns the ipsets rules in src may name: --ipset FILE's or, as
// iptables finds its sets in the kernel, without one the kernel's when src
// names a set.
func (f *setFlags) read(src []byte, stderr io.Writer) (map[string]*rules.IPSet, error) {
	if f.file == "" && !bytes.Contains(src, []byte("--match-set")) {
		return nil, nil
	}
	return f.load(stderr)
}

// load returns --ipset FILE's sets, or else the kernel's.
func (f *setFlags) load(stderr io.Writer) (map[string]*rules.IPSet, error) {
	var sets map[string]*rules.IPSet
	switch {
	case f.file != "":
		text, err := readFile(f.file)
		if err != nil {
			return nil, err
		}
		if sets, err = iptables.ParseIPSets(f.file, text); err != nil {
			return nil, err
		}
	default:
		text, err := loader.SaveKernelSets()
		if errors.Is(err, os.ErrPermission) {
			// check without root: the rules' sets are not known.
			fmt.Fprintln(stderr, "bpfwall: warning: reading the kernel's ipsets needs root (CAP_NET_ADMIN): the rules' sets are taken as missing; --ipset FILE gives them")
			return nil, nil
		}
		if err != nil {
			return nil, privileged(err)
		}
		if sets, err = iptables.ParseIPSets("kernel ipsets", text); err != nil {
			return nil, err
		}
		if len(sets) > 0 && (f.warn == nil || !f.warn.quiet) {
			fmt.Fprintln(stderr, "bpfwall: warning: the rules' ipsets are compiled as the kernel holds them now: a later ipset add or del reaches the filter at the next restore")
		}
	}
	return sets, nil
}

// overSets returns sets over base (the active rule set's sets, for those
// sets does not give).
func overSets(base, sets map[string]*rules.IPSet) map[string]*rules.IPSet {
	if len(base) == 0 {
		return sets
	}
	out := maps.Clone(base)
	maps.Copy(out, sets)
	return out
}
