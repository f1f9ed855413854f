package main

import (
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"bpfwall/codegen"
)

// Options are parsed as iptables parses them (getopt_long): short options
// bundle (-tv), take their value attached or as the next word (-T filter,
// -Tfilter), long options take --name=value or --name value, and options
// may follow the positional arguments.

// errHelp is returned after -h or --help printed the command's help on
// stdout: the command did what was asked and exits 0.
var errHelp = errors.New("help shown")

// newFlagSet returns the flag set of command name; its help goes to
// stdout, as iptables prints its help.
func newFlagSet(name string, stdout, stderr io.Writer) *pflag.FlagSet {
	fs := pflag.NewFlagSet("bpfwall "+name, pflag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.SortFlags = false
	fs.Usage = func() {
		if u := commandUsage(name); u != "" {
			fmt.Fprintf(stdout, "usage: bpfwall %s\n\n", u)
		}
		// pflag writes a switch as --name[=true|false]; iptables' help, as
		// --name. Blanks keep the columns.
		fmt.Fprint(stdout, strings.ReplaceAll(fs.FlagUsages(), "[=true|false]", "             "))
	}
	return fs
}

// parseFlags parses args and returns the positional arguments. A usage
// error says what was wrong and how to get help, as iptables does.
func parseFlags(fs *pflag.FlagSet, args []string) ([]string, error) {
	if err := fs.Parse(joinOptionalValues(fs, args)); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			return nil, errHelp
		}
		return nil, fmt.Errorf("%w: %v (try `%s --help')", errUsage, err, fs.Name())
	}
	return fs.Args(), nil
}

// joinOptionalValues lets an option whose value is optional (-w, as
// iptables' --wait) take it as the next word too, as iptables does
// ("-w 5"), when that word is a number: getopt, and pflag, take an
// optional value only attached ("-w5", "--wait=5").
func joinOptionalValues(fs *pflag.FlagSet, args []string) []string {
	out := make([]string, 0, len(args))
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			return append(out, args[i:]...)
		}
		var f *pflag.Flag
		switch {
		case strings.HasPrefix(a, "--") && !strings.Contains(a, "="):
			f = fs.Lookup(a[2:])
		case len(a) >= 2 && a[0] == '-' && a[1] != '-':
			f = fs.ShorthandLookup(a[1:2])
			if optionalValue(f) && len(a) > 2 && isNumber(a[2:]) {
				// -w5, -O0: pflag would read the digits as more options.
				out = append(out, "--"+f.Name+"="+a[2:])
				continue
			}
			if len(a) > 2 {
				f = nil
			}
		}
		if optionalValue(f) && i+1 < len(args) && isNumber(args[i+1]) {
			out = append(out, "--"+f.Name+"="+args[i+1])
			i++
			continue
		}
		out = append(out, a)
	}
	return out
}

// optionalValue says whether f takes a value that may be left out (not a
// switch, which pflag gives an optional value too).
func optionalValue(f *pflag.Flag) bool {
	if f == nil || f.NoOptDefVal == "" {
		return false
	}
	t := f.Value.Type()
	return t != "bool" && t != "count"
}

func isNumber(s string) bool {
	_, err := strconv.ParseFloat(s, 64)
	return err == nil && !strings.HasPrefix(s, "-")
}

// commandUsage is the usage line of command name, from the command table.
func commandUsage(name string) string {
	for _, c := range commands {
		if c.name == name {
			return c.usage
		}
	}
	return ""
}

// waitFlags are iptables' -w/--wait[=SECS] and -W/--wait-interval=USECS:
// how long a command that changes filters waits for another to finish.
// Without -w it does not wait; -w alone waits as long as it takes.
type waitFlags struct {
	wait     waitValue
	interval time.Duration
}

func (f *waitFlags) register(fs *pflag.FlagSet) {
	fl := fs.VarPF(&f.wait, "wait", "w", "wait for another bpfwall command to finish: up to `SECS`, or without SECS as long as it takes")
	fl.NoOptDefVal = "forever"
	fs.VarP(usecsValue{&f.interval}, "wait-interval", "W", "with -w, retry the lock every `USECS` microseconds (default 50000)")
}

// timeout is how long to wait for the lock; negative waits for ever.
func (f *waitFlags) timeout() time.Duration { return time.Duration(f.wait) }

// waitValue is a number of seconds, or "forever" (-1).
type waitValue time.Duration

func (v *waitValue) String() string {
	if *v < 0 {
		return "forever"
	}
	return strconv.FormatFloat(time.Duration(*v).Seconds(), 'g', -1, 64)
}

func (v *waitValue) Set(s string) error {
	if s == "forever" {
		*v = -1
		return nil
	}
	secs, err := strconv.ParseFloat(s, 64)
	if err != nil || secs < 0 || math.IsInf(secs, 0) || secs > math.MaxInt64/float64(time.Second) {
		return fmt.Errorf("wait time %q is not a number of seconds", s)
	}
	*v = waitValue(secs * float64(time.Second))
	return nil
}

func (v *waitValue) Type() string { return "seconds" }

// usecsValue is a whole number of microseconds.
type usecsValue struct{ d *time.Duration }

func (v usecsValue) String() string {
	if v.d == nil || *v.d == 0 {
		return ""
	}
	return strconv.FormatInt(v.d.Microseconds(), 10)
}

func (v usecsValue) Set(s string) error {
	n, err := strconv.ParseUint(s, 10, 32)
	if err != nil {
		return fmt.Errorf("wait interval %q is not a number of microseconds", s)
	}
	*v.d = time.Duration(n) * time.Microsecond
	return nil
}

func (v usecsValue) Type() string { return "usecs" }

// levelFlags are -O LEVEL (-O0, -O1, --optimize=LEVEL), taken by every
// command that compiles; -O alone is -O1, the default.
type levelFlags struct{ n int }

func (f *levelFlags) register(fs *pflag.FlagSet) {
	fs.IntVarP(&f.n, "optimize", "O", 1, "optimization `LEVEL`: 0, the plain rule-by-rule program, or 1, all optimizations")
	fs.Lookup("optimize").NoOptDefVal = "1"
}

// level is the optimization level the flags select.
func (f *levelFlags) level() (codegen.Level, error) {
	switch f.n {
	case 0:
		return codegen.O0, nil
	case 1:
		return codegen.O1, nil
	}
	return 0, fmt.Errorf("%w: no optimization level -O%d (0 or 1)", errUsage, f.n)
}

// familyFlags are -4/--ipv4 and -6/--ipv6: which family's rule set a
// command reads or acts on.
type familyFlags struct{ ipv4, ipv6 bool }

func (f *familyFlags) register(fs *pflag.FlagSet, what string) {
	fs.BoolVarP(&f.ipv4, "ipv4", "4", false, what+" IPv4 (iptables; the default)")
	fs.BoolVarP(&f.ipv6, "ipv6", "6", false, what+" IPv6 (ip6tables)")
}

func (f *familyFlags) check() error {
	if f.ipv4 && f.ipv6 {
		return fmt.Errorf("%w: -4 and -6 exclude each other", errUsage)
	}
	return nil
}

// versionFlag is -V/--version in a command, as iptables-restore -V.
func versionFlag(fs *pflag.FlagSet) *bool {
	return fs.BoolP("version", "V", false, "print the version and exit")
}

// modprobeFlag takes iptables' -M/--modprobe and ignores it: bpfwall
// loads no kernel modules.
func modprobeFlag(fs *pflag.FlagSet) {
	fs.StringP("modprobe", "M", "", "accepted for iptables compatibility; bpfwall loads no modules")
}
