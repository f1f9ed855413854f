package main

import (
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strings"

	"github.com/cilium/ebpf"
	"github.com/spf13/pflag"

	"bpfwall/codegen"
	"bpfwall/ir"
	"bpfwall/loader"
	"bpfwall/parser/iptables"
	"bpfwall/rules"
)

// This file holds what the commands that change or read the kernel's
// filters (load, restore, save, status, unload) share.

// ifaceList is a repeatable -i flag.
type ifaceList []string

func (l *ifaceList) String() string { return strings.Join(*l, ",") }

func (l *ifaceList) Type() string { return "IFACE" }

func (l *ifaceList) Set(s string) error {
	*l = append(*l, s)
	return nil
}

// pinRoot is where filters are pinned and lockFile the lock that
// serializes commands: the production paths, unless BPFWALL_ROOT (a
// directory on a bpffs) and BPFWALL_LOCKFILE (as iptables'
// XTABLES_LOCKFILE) name others, so that a test or a second instance
// never touches the filters and lock of the bpfwall that runs the host.
//
// Under ip netns exec, whose mount namespace hides the host's bpffs, the
// default root is reached through an ancestor's (loader.HostRoot), so
// that filters pinned there stay after the command, as iptables rules do.
var (
	pinRoot  = loader.HostRoot(envOr("BPFWALL_ROOT", loader.DefaultRoot))
	lockFile = envOr("BPFWALL_LOCKFILE", loader.DefaultLockFile)
)

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// acquireLock takes bpfwall's lock as iptables takes the xtables lock,
// with its messages when another command holds it.
func acquireLock(wait waitFlags, stderr io.Writer) (*loader.Lock, error) {
	l, err := loader.AcquireEvery(lockFile, wait.timeout(), wait.interval)
	if errors.Is(err, loader.ErrLocked) {
		if wait.timeout() > 0 {
			fmt.Fprintf(stderr, "Another app is currently holding the bpfwall lock. Stopped waiting after %ss.\n", wait.wait.String())
		} else {
			fmt.Fprintln(stderr, "Another app is currently holding the bpfwall lock. Perhaps you want to use the -w option?")
		}
		// As iptables: 4, a resource problem.
		return nil, exitError{4}
	}
	if err != nil {
		return nil, privileged(err)
	}
	if err := recoverSwaps(stderr); err != nil {
		l.Release()
		return nil, err
	}
	return l, nil
}

// recoverSwaps finishes or undoes the swaps of this network namespace
// that a command killed in the middle left (see loader.Recover), and says
// so. The caller holds the lock.
func recoverSwaps(stderr io.Writer) error {
	ns, err := loader.NetNS()
	if err != nil {
		return err
	}
	done, err := loader.RecoverNetNS(pinRoot, ns)
	for _, name := range slices.Sorted(maps.Keys(done)) {
		fmt.Fprintf(stderr, "bpfwall: a command that was killed while it swapped the %s left the swap half done: %s\n", recoveredName(name), done[name])
	}
	return privileged(err)
}

// recoveredName is how a recovery message names what RecoverNetNS
// recovered: a hook's filter ("xdp"), a chain ("netfilter ipv4 filter
// INPUT"), or the kernel's tables.
func recoveredName(name string) string {
	if chain, ok := strings.CutPrefix(name, "netfilter "); ok {
		return chain + " chain"
	}
	if strings.HasPrefix(name, "kernel's ") {
		return name
	}
	return name + " filter"
}

// recoverIdle recovers, as recoverSwaps, for a command that reads the
// filters without the lock, so that what it reads is what runs: if a
// swap was left half done and no other command holds the lock.
func recoverIdle(stderr io.Writer) error {
	ns, err := loader.NetNS()
	if err != nil || !loader.Interrupted(pinRoot, ns) {
		return nil
	}
	l, err := loader.Acquire(lockFile, 0)
	if err != nil {
		// A command that holds the lock swaps, or will recover.
		return nil
	}
	defer l.Release()
	return recoverSwaps(stderr)
}

// privileged adds what bpfwall needs to an error that says permission
// was denied; a verifier's rejection is not such an error.
func privileged(err error) error {
	var verr *ebpf.VerifierError
	var perr privilegeError
	if err == nil || !errors.Is(err, os.ErrPermission) || errors.As(err, &verr) || errors.As(err, &perr) {
		return err
	}
	return privilegeError{err}
}

// privilegeError is a permission error, with what bpfwall needs.
type privilegeError struct{ err error }

// memlockHint is what cilium/ebpf adds to every EPERM of a load: since
// Linux 5.11 BPF memory is charged to the memory cgroup, not
// RLIMIT_MEMLOCK, and a user without the capabilities gets EPERM for
// lacking them.
const memlockHint = " (MEMLOCK may be too low, consider rlimit.RemoveMemlock)"

func (e privilegeError) Error() string {
	msg := e.err.Error()
	if os.Geteuid() != 0 {
		msg = strings.ReplaceAll(msg, memlockHint, "")
	}
	return msg + " (bpfwall needs root, or CAP_BPF, CAP_NET_ADMIN and CAP_SYS_ADMIN)"
}

func (e privilegeError) Unwrap() error { return e.err }

// target is one filter a command changes: where it runs, and a snapshot
// of what runs there now (nil when nothing does).
type target struct {
	place loader.Place
	snap  *loader.Snapshot
	// gone are the interfaces of the filter that are gone (deleted, or
	// moved to another namespace), as found with the snapshot.
	gone []loader.Iface
}

// findTargets returns the filters a command acts on: at hookName (xdp
// when empty) if interfaces are named, else every filter loaded in this
// network namespace (at hookName, if given). Each comes with a snapshot.
// (An interface named "" asks for the place at hookName, loaded or not:
// see attachTo.)
func findTargets(hookName string, ifaces []string, stderr io.Writer) ([]target, error) {
	if err := recoverIdle(stderr); err != nil {
		return nil, err
	}
	ns, err := loader.NetNS()
	if err != nil {
		return nil, err
	}
	var places []loader.Place
	if hookName == codegen.HookNetfilter.String() && len(ifaces) == 0 {
		// Every chain run at its netfilter hook, of both families.
		all, err := loader.Places(pinRoot, ns)
		if err != nil {
			return nil, err
		}
		for _, p := range all {
			// The accelerators judge by the chains' rules: they go with
			// them.
			if p.Hook == codegen.HookNetfilter || p.Accelerator() {
				places = append(places, p)
			}
		}
		if len(places) == 0 {
			return nil, nothingLoaded("no chain runs at its netfilter hook in this network namespace")
		}
	} else if len(ifaces) > 0 || hookName != "" {
		name := hookName
		if name == "" {
			name = "xdp"
		}
		hook, err := codegen.ParseHook(name)
		if err != nil {
			return nil, fmt.Errorf("%w: %v", errUsage, err)
		}
		places = []loader.Place{{Root: pinRoot, NetNS: ns, Hook: hook}}
	} else if places, err = loader.Places(pinRoot, ns); err != nil {
		return nil, err
	}
	var out []target
	for _, p := range places {
		t := target{place: p}
		a, err := loader.Open(p)
		switch {
		case errors.Is(err, os.ErrNotExist):
			if len(ifaces) == 0 {
				return nil, nothingLoaded(fmt.Sprintf("no %s filter is loaded in this network namespace; name interfaces with -i", p.Hook))
			}
		case err != nil:
			return nil, privileged(err)
		default:
			t.snap, err = a.Snapshot()
			t.gone = a.GoneIfaces()
			a.Close()
			if err != nil {
				return nil, err
			}
		}
		out = append(out, t)
	}
	if len(out) == 0 {
		return nil, nothingLoaded("no filter is loaded in this network namespace; name interfaces with -i")
	}
	return out, nil
}

// goneEverywhere unloads the filter at t if every interface it is
// attached to is gone (deleted, or moved to another namespace), since it
// filters nothing, and says whether it did.
func goneEverywhere(t target, stderr io.Writer) (bool, error) {
	gone := t.gone
	if t.snap == nil || len(gone) == 0 || len(gone) < len(t.snap.Meta.Ifaces) {
		return false, nil
	}
	if _, err := loader.Unload(t.place, nil); err != nil {
		return false, err
	}
	var names []string
	for _, ifc := range gone {
		names = append(names, fmt.Sprintf("%s (ifindex %d)", ifc.Name, ifc.Index))
	}
	fmt.Fprintf(stderr, "bpfwall: the %s filter was attached only to interfaces that are gone, %s: unloaded it\n", t.place.Name(), strings.Join(names, ", "))
	return true, nil
}

// active returns the rule set running at t, with its live counters.
func (t target) active() (*rules.Ruleset, error) {
	rs, err := activeRuleset(&t.snap.Meta)
	if err != nil {
		return nil, fmt.Errorf("read the active %s rule set: %w", t.place.Name(), err)
	}
	if err := t.snap.Apply(rs); err != nil {
		return nil, err
	}
	return rs, nil
}

// activeRuleset parses the rule set the filter that m describes was
// compiled from, with its counters as read then and the ipsets it names.
func activeRuleset(m *loader.Meta) (*rules.Ruleset, error) {
	fam := metaFamily(m)
	sets, err := metaSets(m)
	if err != nil {
		return nil, err
	}
	return iptables.Parse(activeName, []byte(m.Source), iptables.Options{Counters: true, Family: fam, ForceFamily: fam == rules.IPv6, Sets: sets})
}

// metaSets are the ipsets the filter m describes was compiled with.
func metaSets(m *loader.Meta) (map[string]*rules.IPSet, error) {
	if m.Sets == "" {
		return nil, nil
	}
	sets, err := iptables.ParseIPSets(activeName, []byte(m.Sets))
	if err != nil {
		return nil, fmt.Errorf("read the active rule set's ipsets: %w", err)
	}
	return sets, nil
}

// nothingLoaded is why findTargets found no filter.
type nothingLoaded string

func (e nothingLoaded) Error() string { return string(e) }

// isNothingLoaded says whether err is findTargets finding no filter.
func isNothingLoaded(err error) bool {
	var e nothingLoaded
	return errors.As(err, &e)
}

// activeName is the file name of the active rule set in positions.
const activeName = "(active rule set)"

// chain returns the entry chain to compile for t: flag if given, else the
// running filter's, else the hook's default.
func (t target) chain(flag string) string {
	switch {
	case flag != "":
		return flag
	case t.snap != nil:
		return t.snap.Meta.Chain
	case t.place.Hook == codegen.HookTCEgress:
		return "OUTPUT"
	case t.place.Hook == codegen.HookSkLookup:
		return "PREROUTING"
	}
	return "INPUT"
}

// compileFor lowers and compiles rs's chain for t's hook, and prints the
// program's warnings to stderr.
func compileFor(rs *rules.Ruleset, t target, chain string, level codegen.Level, warn *warner, stderr io.Writer) (*codegen.Program, error) {
	table := "filter"
	if t.place.Hook == codegen.HookSkLookup {
		table = "mangle"
	}
	p, err := ir.Lower(rs, ir.LowerOptions{Table: table, Chain: chain})
	if err != nil {
		return nil, err
	}
	prog, err := codegen.Compile(p, codegen.Options{Hook: t.place.Hook, Level: level})
	if err != nil {
		return nil, err
	}
	warn.print(stderr, prog.Warnings)
	return prog, nil
}

// swapFlags are the flags of the commands that attach programs.
type swapFlags struct {
	levelFlags
	ifaces  ifaceList
	hook    string
	chain   string
	xdpMode string
	waitFlags
}

func (f *swapFlags) register(fs *pflag.FlagSet) {
	fs.VarP(&f.ifaces, "interface", "i", "attach to `IFACE` (repeatable)")
	fs.StringVar(&f.hook, "hook", "", "attach at `HOOK`: xdp, tc-ingress, tc-egress, sk-lookup, or netfilter for every chain at its own hook (default xdp with -i; without -i, every loaded filter, or netfilter when none is loaded at an interface)")
	fs.StringVar(&f.chain, "chain", "", "entry `CHAIN` (default INPUT, OUTPUT for tc-egress, or the loaded filter's)")
	fs.StringVar(&f.xdpMode, "xdp-mode", "auto", "XDP `MODE`: native, generic or auto (native, falling back to generic; generic on a veth for a program that sends REJECT replies)")
	f.waitFlags.register(fs)
	f.levelFlags.register(fs)
}

// counterMode is where a swapped-in filter's counters come from.
type counterMode uint8

const (
	// countersFromRuleset: the rule set's own counters (restore: zero,
	// or the file's with -c).
	countersFromRuleset counterMode = iota
	// countersFollowRuleset: the rule set's counters, which came from the
	// running filter (restore -n), plus what it counts until the swap.
	countersFollowRuleset
	// countersCarry: every rule that continues one of the running filter
	// keeps its counters (load).
	countersCarry
)

// swapIn installs prog, compiled from rs read from file, at t.
func swapIn(t target, rs *rules.Ruleset, prog *codegen.Program, file string, f *swapFlags, mode counterMode) (*loader.Result, error) {
	xdpMode, err := loader.ParseXDPMode(f.xdpMode)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", errUsage, err)
	}
	meta, counters, err := loader.NewMeta(rs, prog, file)
	if err != nil {
		return nil, err
	}
	s := &loader.Swap{Place: t.place, Program: prog, Meta: meta, Ifaces: f.ifaces, XDPMode: xdpMode, Counters: counters}
	if t.snap != nil {
		switch mode {
		case countersCarry:
			s.Counters, s.Since = t.snap.Carry(prog), t.snap
		case countersFollowRuleset:
			s.Since = t.snap
		}
	}
	res, err := s.Run()
	return res, privileged(err)
}

// noteStage says, for a filter with a netfilter stage, which devices it
// evaluates: stacked devices created later are not followed; and names
// the veths where REJECT's replies may not reach the peer.
func noteStage(w io.Writer, t target, res *loader.Result) {
	for _, ifc := range res.Muted {
		fmt.Fprintf(w, "bpfwall: %s: REJECT replies from native XDP on veth %s reach its peer only when the peer runs NAPI (an XDP program or GRO on it); "+
			"bpfwall unload --hook xdp, then load again with --xdp-mode auto or generic, to attach in generic mode\n", t.place.Name(), ifc.Name)
	}
	if !res.Stage {
		return
	}
	var names []string
	for _, u := range res.Uppers {
		names = append(names, u.Name)
	}
	also := ""
	if len(names) > 0 {
		also = " and on their upper devices " + strings.Join(names, ", ")
	}
	fmt.Fprintf(w, "bpfwall: %s: the netfilter stage decides the packets of class U (ICMP, fragments, protocols other than TCP and UDP) "+
		"netfilter sees on the interfaces%s; a VLAN, macvlan, ipvlan, bond, team or bridge device created on them later is not followed until the next load or restore\n",
		t.place.Name(), also)
}

// describeSwap says what a swap did, for -v.
func describeSwap(w io.Writer, t target, res *loader.Result) {
	if res.Replaced != 0 {
		fmt.Fprintf(w, "%s: program %d replaced program %d in %v", t.place.Name(), res.Program, res.Replaced, res.Critical)
	} else {
		fmt.Fprintf(w, "%s: program %d loaded", t.place.Name(), res.Program)
	}
	for _, ifc := range res.Attached {
		fmt.Fprintf(w, "; attached to %s", ifc.Name)
		if ifc.Mode != "" {
			fmt.Fprintf(w, " (%s)", ifc.Mode)
		}
	}
	fmt.Fprintln(w)
}

// reportRuleErrors prints errors with positions one per line, followed
// by iptables-restore's "line N failed" when restoring, and returns exit
// status 1; other errors are returned as they are.
func reportRuleErrors(err error, restore bool, stderr io.Writer) error {
	var list rules.ErrorList
	var one *rules.Error
	line := 0
	switch {
	case errors.As(err, &list):
		fmt.Fprintln(stderr, list)
		line = iptables.FailedLine(list)
	case errors.As(err, &one):
		fmt.Fprintln(stderr, one)
		line = iptables.FailedLine(one)
	default:
		return err
	}
	if restore && line > 0 {
		fmt.Fprintf(stderr, "bpfwall restore: line %d failed\n", line)
	}
	return exitError{1}
}

// attachTo is what findTargets needs to find the place of a filter that
// may not be loaded yet: the interfaces, or for sk-lookup, which attaches
// to the network namespace, the place of the hook itself.
func attachTo(hook string, ifaces []string) []string {
	if len(ifaces) == 0 && hook == codegen.HookSkLookup.String() {
		return []string{""}
	}
	return ifaces
}
