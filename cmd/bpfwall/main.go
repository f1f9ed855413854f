// Command bpfwall compiles iptables and nftables rule sets into eBPF
// programs for XDP, tc and sk_lookup.
package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"runtime/debug"
	"sort"
)

// command is one subcommand.
type command struct {
	name  string
	usage string
	run   func(args []string, stdout, stderr io.Writer) error
}

var commands []command

func init() {
	commands = []command{
		{"check", "check [-4|-6] [-n] [--hook H] [--ipset FILE] (FILE... | --from-kernel)  would restore take the input: parse, lower and compile every chain for its netfilter hook (or the chain of --hook), saying what would go to the kernel; no kernel needed", runCheck},
		{"fmt", "fmt [-4|-6] [-cn] [--ipset FILE] (FILE | --from-kernel)  print as canonical iptables-save text", runFmt},
		{"load", "load -i IFACE... [--hook H] [--chain C] [-O0|-O1] [--xdp-mode M] [-w [SECS]] (FILE | --from-kernel)  compile, load, attach or swap", runLoad},
		{"restore", "restore [-chntvV] [-w [SECS]] [-W USECS] [-T TABLE] [-4|-6] [-i IFACE]... [--hook H] [-O0|-O1] [--ipset FILE] [--no-delegate] [FILE]  iptables-restore: without -i, every chain at its own netfilter hook, what BPF cannot do in the kernel's netfilter; stdin by default", runRestore},
		{"save", "save [-cV] [-t TABLE] [-f FILE] [-4|-6] [--hook H]  the active rule set as iptables-save text", runSave},
		{"status", "status [--json [--rules]]  the filters of this network namespace", runStatus},
		{"metrics", "metrics [--listen ADDR]  the filters' counters and facts as Prometheus metrics, printed or served at /metrics", runMetrics},
		{"log", "log [--hook H] [--json] [--count N] [--timeout D] [--syslog[=ADDR]]  print the LOG rules' events as the kernel's LOG lines, until interrupted", runLog},
		{"register", "register [--target PROTO:ADDR:PORT] [--pid PID --fd N] [-w [SECS]]  hand sockets (LISTEN_FDS, or another process's) to the sk-lookup filter's TPROXY rules", runRegister},
		{"unload", "unload [-i IFACE]... [--hook H] [-4|-6] [-w [SECS]] | --netns ID  detach filters and remove their pins, and flush the tables a restore left to the kernel", runUnload},
		{"compile", "compile [--hook H] [--chain C] [-O0|-O1] [--dump] [-v] (FILE | --from-kernel)  compile; --dump prints it, otherwise the kernel verifies it", runCompile},
		{"bench", "bench [--e2e] [--families F,...] [--sizes N,...] [--levels 0,1] [--json] [--svg FILE] [--repeat N] [--runs K]  measure per-packet cost, size and load time as rules grow", runBench},
		{"trace", "trace [--hook H] [--chain C] [-O0|-O1] [--no-conntrack] [-i IFACE] (--packets F.jsonl | --pcap F.pcap) (FILE | --from-kernel)  run packets through the program in the kernel, where conntrack sees them", runTrace},
		{"man", "man [--dir DIR]  the man pages: bpfwall(8) on stdout, or every page written into DIR", runMan},
		{"completion", "completion bash|zsh|fish  print the completion script of the shell", runCompletion},
	}
}

// errUsage marks errors in how the command was called (exit code 2).
var errUsage = errors.New("usage")

// exitError carries an exit code with an error that was already printed.
type exitError struct{ code int }

func (e exitError) Error() string { return fmt.Sprintf("exit status %d", e.code) }

func main() {
	if os.Getenv("GOGC") == "" {
		// A large restore keeps most of what it allocates until it swaps:
		// collecting at half the live heap instead of all of it cuts a
		// 100k-rule restore's peak RSS by 10-25% (411 -> 318-342 MB
		// mixed, 458 -> 391-401 MB realistic) at no cost in time (the
		// heap it does not grow is memory it does not fault in).
		debug.SetGCPercent(50)
	}
	startMemoryGuard(os.Stderr)
	stopProfiles := startProfiles(os.Stderr)
	err := run(os.Args[1:], os.Stdout, os.Stderr)
	stopProfiles()
	os.Exit(exitCode(err, os.Stderr))
}

func exitCode(err error, stderr io.Writer) int {
	var ee exitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ee):
		return ee.code
	case errors.Is(err, errHelp):
		return 0
	case errors.Is(err, errUsage):
		// A bare errUsage follows a usage line already printed; a wrapped
		// one says what was wrong.
		if err != errUsage {
			fmt.Fprintf(stderr, "bpfwall: %v\n", err)
		}
		return 2
	}
	fmt.Fprintf(stderr, "bpfwall: %v\n", privileged(err))
	return 1
}

func run(args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		printUsage(stderr)
		return errUsage
	}
	if args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		// As iptables -h: the help on stdout, exit 0.
		printUsage(stdout)
		return nil
	}
	if args[0] == "--version" || args[0] == "-V" || args[0] == "version" {
		// As iptables -V: the version on stdout.
		printVersion(stdout)
		return nil
	}
	for _, c := range commands {
		if c.name == args[0] {
			return c.run(args[1:], stdout, stderr)
		}
	}
	fmt.Fprintf(stderr, "bpfwall: unknown command %q\n", args[0])
	printUsage(stderr)
	return errUsage
}

func printUsage(w io.Writer) {
	fmt.Fprintln(w, "usage: bpfwall COMMAND [options] FILE")
	fmt.Fprintln(w, "       bpfwall --version")
	fmt.Fprintln(w)
	sorted := append([]command(nil), commands...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].name < sorted[j].name })
	for _, c := range sorted {
		fmt.Fprintf(w, "  bpfwall %s\n", c.usage)
	}
}
