package loader

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"bpfwall/codegen"
	"bpfwall/internal/testenv"
	"bpfwall/ir"
	"bpfwall/rules"
)

// The crash helper is this test binary run again with crashEnv set: it
// swaps a rule set in and kills itself with SIGKILL at one step of the
// swap, as the OOM killer or a systemd stop timeout would.
const (
	crashEnv    = "BPFWALL_TEST_CRASH_AT" // the step to die at; "list" prints them
	crashRoot   = "BPFWALL_TEST_CRASH_ROOT"
	crashHook   = "BPFWALL_TEST_CRASH_HOOK"
	crashRules  = "BPFWALL_TEST_CRASH_RULES" // a file
	crashIfaces = "BPFWALL_TEST_CRASH_IFACES"
	// crashChains: swap every chain of the rules at its netfilter hook
	// at once (SwapAll) instead, with the kernel's nat table that
	// crashChains names (see natTables).
	crashChains = "BPFWALL_TEST_CRASH_CHAINS"
)

func TestMain(m *testing.M) {
	if at := os.Getenv(crashEnv); at != "" {
		if err := crashHelper(at); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(3)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func crashHelper(at string) error {
	n, list := 0, at == "list"
	stop, _ := strconv.Atoi(at)
	swapStep = func(step string) {
		if list {
			fmt.Println(step)
			return
		}
		if n == stop {
			unix.Kill(os.Getpid(), unix.SIGKILL)
			select {}
		}
		n++
	}
	text, err := os.ReadFile(os.Getenv(crashRules))
	if err != nil {
		return err
	}
	if os.Getenv(crashChains) != "" {
		ns, err := NetNS()
		if err != nil {
			return err
		}
		swaps, err := buildChainSwaps(os.Getenv(crashRoot), ns, rules.IPv4, string(text), "B.rules")
		if err != nil {
			return err
		}
		kernel, err := natTables(os.Getenv(crashChains))
		if err != nil {
			return err
		}
		_, err = SwapAll(swaps, unneeded(os.Getenv(crashRoot), ns, swaps), kernel)
		return err
	}
	hook, err := codegen.ParseHook(os.Getenv(crashHook))
	if err != nil {
		return err
	}
	rs, prog, err := compileRules(hook, string(text))
	if err != nil {
		return err
	}
	meta, counters, err := NewMeta(rs, prog, "B.rules")
	if err != nil {
		return err
	}
	ns, err := NetNS()
	if err != nil {
		return err
	}
	place := Place{Root: os.Getenv(crashRoot), NetNS: ns, Hook: hook}
	if hook == codegen.HookNetfilter {
		place = ChainPlace(place.Root, ns, rules.IPv4, "filter", "INPUT")
	}
	s := &Swap{
		Place: place, Program: prog, Meta: meta, Counters: counters,
		Ifaces: strings.Fields(os.Getenv(crashIfaces)), XDPMode: XDPGeneric,
	}
	_, err = s.Run()
	return err
}

// natTables are the kernel's nat table of a rule set, for SwapAll, with
// one rule: a REDIRECT of tcp port, which says which rule set it is.
func natTables(port string) (*KernelTables, error) {
	path, err := exec.LookPath("iptables-restore")
	if err != nil {
		return nil, err
	}
	backup, err := exec.Command("iptables-save", "-c", "-t", "nat").Output()
	if err != nil {
		return nil, fmt.Errorf("iptables-save: %w", err)
	}
	if len(bytes.TrimSpace(backup)) == 0 {
		backup = []byte("*nat\nCOMMIT\n") // the table is not there
	}
	return &KernelTables{Name: "kernel's ipv4 tables nat", Restore: path, Text: []byte(natRuleset(port)), Backup: backup}, nil
}

// natRuleset is natTables' table as iptables-restore input.
func natRuleset(port string) string {
	return "*nat\n:PREROUTING ACCEPT [0:0]\n:INPUT ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n:POSTROUTING ACCEPT [0:0]\n" +
		"-A PREROUTING -p tcp -m tcp --dport " + port + " -j REDIRECT --to-ports 81\nCOMMIT\n"
}

// natPort is the port of the REDIRECT in the kernel's nat table, "" when
// it has none.
func natPort(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("iptables-save", "-t", "nat").Output()
	if err != nil {
		t.Fatalf("iptables-save: %v", err)
	}
	if m := regexp.MustCompile(`--dport (\d+) -j REDIRECT`).FindAllSubmatch(out, -1); len(m) == 1 {
		return string(m[0][1])
	} else if len(m) > 1 {
		t.Fatalf("nat table holds %d REDIRECTs:\n%s", len(m), out)
	}
	return ""
}

// unneeded returns the IPv4 chains loaded in namespace ns under root
// that swaps leave nothing to do, as restore unloads them.
func unneeded(root string, ns uint64, swaps []*Swap) []Place {
	var out []Place
	for _, c := range NetfilterChains {
		p := ChainPlace(root, ns, rules.IPv4, c.Table, c.Chain)
		if slices.ContainsFunc(swaps, func(s *Swap) bool { return s.Place == p }) {
			continue
		}
		if a, err := Open(p); err == nil {
			a.Close()
			out = append(out, p)
		}
	}
	return out
}

// runCrashHelper swaps rules into place, attaching to ifaces, in a new
// process in the calling thread's network namespace that dies at step at
// ("list": it does not die, and the steps are returned).
func runCrashHelper(t *testing.T, place Place, rules string, ifaces []string, at string, env ...string) []string {
	t.Helper()
	file := filepath.Join(t.TempDir(), "B.rules")
	if err := os.WriteFile(file, []byte(rules), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), crashEnv+"="+at, crashRoot+"="+place.Root, crashHook+"="+place.Hook.String(),
		crashRules+"="+file, crashIfaces+"="+strings.Join(ifaces, " "))
	cmd.Env = append(cmd.Env, env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case at == "list" && err != nil:
		t.Fatalf("crash helper: %v\n%s", err, stderr.Bytes())
	case at == "list":
		var steps []string
		for sc := bufio.NewScanner(&stdout); sc.Scan(); {
			steps = append(steps, sc.Text())
		}
		return steps
	case !errors.As(err, &exit):
		t.Fatalf("crash helper at step %s: %v, want it killed\n%s", at, err, stderr.Bytes())
	}
	if ws, ok := exit.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("crash helper at step %s: %v, want it killed\n%s", at, err, stderr.Bytes())
	}
	return nil
}

// TestSwapSurvivesKill kills a swap at every one of its steps, a first
// load and a swap that adds an interface, LOG maps and conntrack and
// drops a recent table. After the next command recovers, exactly one rule
// set runs on every link, the old one if the swap died before its new
// filter was complete and the new one from then on; the pins, and so
// status and save, describe it; nothing is left behind; and the next swap
// succeeds.
func TestSwapSurvivesKill(t *testing.T) {
	testenv.RequireRoot(t)
	old := []string{"-p udp -m udp --dport 53 -m recent --set --name S", "-p tcp -m tcp --dport 22 -j DROP"}
	next := []string{
		"-m conntrack --ctstate ESTABLISHED -j ACCEPT",
		"-p tcp -m tcp --dport 80 -j LOG --log-prefix web",
		"-p tcp -m tcp --dport 22 -j ACCEPT",
		"-p tcp -j DROP",
	}
	cases := []struct {
		name string
		old  []string // empty: a first load
	}{
		{"first load", nil},
		{"swap", old},
	}
	for _, hook := range []codegen.Hook{codegen.HookXDP, codegen.HookTCIngress} {
		for _, c := range cases {
			t.Run(hook.String()+"/"+c.name, func(t *testing.T) {
				ifaces := []string{"veth0", "veth1"}
				if c.old != nil {
					ifaces = []string{"veth1"} // besides veth0, where the old filter runs
				}
				var steps []string
				t.Run("steps", func(t *testing.T) {
					ns := inFreshNetns(t)
					place := testPlace(t, ns, hook)
					crashSetup(t, place, c.old)
					steps = runCrashHelper(t, place, ruleset(hook, next...), ifaces, "list")
					checkRunning(t, place, "B.rules", []string{"veth0", "veth1"})
				})
				decided, done := slices.Index(steps, "pin "+pinMeta), slices.Index(steps, "commit "+pinMeta)
				if decided < 0 || done < decided {
					t.Fatalf("steps %q: no meta pinned before the commit", steps)
				}
				for k, step := range steps {
					t.Run(fmt.Sprintf("%02d %s", k, step), func(t *testing.T) {
						ns := inFreshNetns(t)
						place := testPlace(t, ns, hook)
						crashSetup(t, place, c.old)
						runCrashHelper(t, place, ruleset(hook, next...), ifaces, strconv.Itoa(k))
						r, err := Recover(place)
						if err != nil {
							t.Fatalf("recover: %v", err)
						}
						switch {
						case k >= decided:
							if want := map[bool]Recovery{false: Completed, true: NothingToRecover}[k >= done]; r != want {
								t.Errorf("recovery %v, want %v", r, want)
							}
							checkRunning(t, place, "B.rules", []string{"veth0", "veth1"})
						case c.old != nil:
							if r != RolledBack {
								t.Errorf("recovery %v, want %v", r, RolledBack)
							}
							checkRunning(t, place, "A.rules", []string{"veth0"})
						default:
							checkRunning(t, place, "", nil)
						}
						if r, err := Recover(place); r != NothingToRecover || err != nil {
							t.Errorf("second recovery: %v, %v", r, err)
						}
						s := newSwap(t, place, ruleset(hook, old...), "veth0", "veth1")
						s.Meta.File = "C.rules"
						mustSwap(t, s)
						checkRunning(t, place, "C.rules", []string{"veth0", "veth1"})
					})
				}
			})
		}
	}
}

// TestSwapAllSurvivesKill kills a restore at every step of SwapAll: it
// replaces INPUT, adds FORWARD and unloads OUTPUT, which the new rule set
// leaves nothing to do. After the next command recovers (RecoverNetNS),
// every chain runs the old rule set if the process died before the
// decision was made, and every chain the new one from then on: never
// some chains of each. The kernel's nat table, which the restore writes
// too (KernelTables), holds the same rule set as the chains. No pin of
// the swap, nor its decision, is left, and the next restore succeeds.
func TestSwapAllSurvivesKill(t *testing.T) {
	testenv.RequireRoot(t)
	testenv.RequireTool(t, "iptables-restore", "iptables-save")
	old := "*filter\n:INPUT ACCEPT [0:0]\n:FORWARD ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n" +
		"-A INPUT -p tcp --dport 81 -j DROP\n-A OUTPUT -p tcp --dport 9 -j DROP\nCOMMIT\n"
	next := "*filter\n:INPUT ACCEPT [0:0]\n:FORWARD DROP [0:0]\n:OUTPUT ACCEPT [0:0]\n" +
		"-A INPUT -p tcp --dport 82 -j DROP\n-A FORWARD -p tcp -j ACCEPT\nCOMMIT\n"
	// Which chains each rule set has, and the port of its nat table.
	chains := map[string][]string{"A.rules": {"INPUT", "OUTPUT"}, "B.rules": {"INPUT", "FORWARD"}, "C.rules": {"INPUT", "FORWARD"}}
	nat := map[string]string{"A.rules": "1081", "B.rules": "1082", "C.rules": "1083"}
	// restore swaps text in from file, unloading the chains it leaves
	// nothing to do, with file's nat table.
	restore := func(t *testing.T, root string, ns uint64, text, file string) {
		t.Helper()
		swaps, err := buildChainSwaps(root, ns, rules.IPv4, text, file)
		if err != nil {
			t.Fatal(err)
		}
		kernel, err := natTables(nat[file])
		if err != nil {
			t.Fatal(err)
		}
		if _, err := SwapAll(swaps, unneeded(root, ns, swaps), kernel); err != nil {
			t.Fatalf("restore %s: %v", file, err)
		}
	}
	// setup loads the old rule set, as "A.rules", in a fresh namespace.
	setup := func(t *testing.T) (root string, ns uint64) {
		ns = inFreshNetns(t)
		root = testRoot(t)
		t.Cleanup(func() { os.RemoveAll(filepath.Join(root, strconv.FormatUint(ns, 10))) })
		// Both rule sets drop in INPUT: each has an accelerator.
		if _, err := AttachAccelerator(root, ns, []string{"veth0"}, XDPAuto); err != nil {
			t.Fatal(err)
		}
		restore(t, root, ns, old, "A.rules")
		return root, ns
	}
	// check checks that the chains of the rule set loaded from file run
	// it, and the others nothing, with nothing of a swap left.
	check := func(t *testing.T, root string, ns uint64, file string) {
		t.Helper()
		for _, c := range []string{"INPUT", "FORWARD", "OUTPUT"} {
			p := ChainPlace(root, ns, rules.IPv4, "filter", c)
			ents, _ := os.ReadDir(p.Dir())
			for _, e := range ents {
				if strings.HasSuffix(e.Name(), newSuffix) {
					t.Errorf("%s: pin %s left behind", c, e.Name())
				}
			}
			a, err := Open(p)
			if !slices.Contains(chains[file], c) {
				if !errors.Is(err, os.ErrNotExist) {
					t.Errorf("%s: open: %v, want nothing loaded", c, err)
				}
				if err == nil {
					a.Close()
				}
				if id := slotProgram(t, p); id != 0 {
					t.Errorf("%s: its dispatcher runs program %d", c, id)
				}
				continue
			}
			if err != nil {
				t.Errorf("%s: open: %v", c, err)
				continue
			}
			if a.Meta.File != file {
				t.Errorf("%s: the pins describe %s, want %s", c, a.Meta.File, file)
			}
			if got, want := slotProgram(t, p), programID(a.Program); got != want {
				t.Errorf("%s: the dispatcher runs program %d, the pins hold %d", c, got, want)
			}
			a.Close()
		}
		accel := AcceleratorPlace(root, ns, rules.IPv4)
		if a, err := Open(accel); err != nil {
			t.Errorf("accelerator: open: %v", err)
		} else {
			if a.Meta.File != file {
				t.Errorf("accelerator: the pins describe %s, want %s", a.Meta.File, file)
			}
			if got, want := slotProgram(t, accel), programID(a.Program); got != want {
				t.Errorf("accelerator: the dispatcher runs program %d, the pins hold %d", got, want)
			}
			a.Close()
		}
		if _, err := os.Stat(decisionPath(ChainPlace(root, ns, rules.IPv4, "filter", "INPUT"))); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("the swap's decision is left: %v", err)
		}
		if _, err := os.Stat(kernelPath(decisionPath(ChainPlace(root, ns, rules.IPv4, "filter", "INPUT")))); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("the kernel tables' pin is left: %v", err)
		}
		if got := natPort(t); got != nat[file] {
			t.Errorf("the kernel's nat table redirects port %q, want %s's %s", got, file, nat[file])
		}
	}
	var steps []string
	t.Run("steps", func(t *testing.T) {
		root, ns := setup(t)
		place := ChainPlace(root, ns, rules.IPv4, "filter", "INPUT")
		steps = runCrashHelper(t, place, next, nil, "list", crashChains+"="+nat["B.rules"])
		check(t, root, ns, "B.rules")
	})
	decide := slices.Index(steps, "decide")
	if decide < 0 || slices.Index(steps, "pin "+pinSwapDecision) != 0 || !slices.Contains(steps, "unloaded netfilter ipv4 filter OUTPUT") {
		t.Fatalf("steps %q: want the decision pinned first, made later, and OUTPUT unloaded", steps)
	}
	if w := slices.Index(steps, "wrote kernel's ipv4 tables nat"); w < 0 || w > decide || slices.Index(steps, "pin "+pinSwapKernel) > w {
		t.Fatalf("steps %q: want the kernel's old tables pinned, then the new ones written, before the decision", steps)
	}
	for k, step := range steps {
		t.Run(fmt.Sprintf("%02d %s", k, step), func(t *testing.T) {
			root, ns := setup(t)
			place := ChainPlace(root, ns, rules.IPv4, "filter", "INPUT")
			runCrashHelper(t, place, next, nil, strconv.Itoa(k), crashChains+"="+nat["B.rules"])
			if _, err := RecoverNetNS(root, ns); err != nil {
				t.Fatalf("recover: %v", err)
			}
			if k < decide {
				check(t, root, ns, "A.rules")
			} else {
				check(t, root, ns, "B.rules")
			}
			restore(t, root, ns, next, "C.rules")
			check(t, root, ns, "C.rules")
		})
	}
}

// crashSetup loads rules, if any, from "A.rules" at place on veth0.
func crashSetup(t *testing.T, place Place, rules []string) {
	t.Helper()
	if rules == nil {
		return
	}
	s := newSwap(t, place, ruleset(place.Hook, rules...), "veth0")
	s.Meta.File = "A.rules"
	mustSwap(t, s)
}

// checkRunning checks that the filter loaded from file runs at place on
// exactly ifaces and nowhere else, as its pins say, with nothing left
// from another; file "" checks that none runs.
func checkRunning(t *testing.T, place Place, file string, ifaces []string) {
	t.Helper()
	ents, _ := os.ReadDir(place.Dir())
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
		if strings.HasSuffix(e.Name(), newSuffix) {
			t.Errorf("pin %s left behind", e.Name())
		}
	}
	if n := attachedPrograms(t, place.Hook); n != len(ifaces) {
		t.Errorf("%d programs attached to veth0 and veth1, want %d", n, len(ifaces))
	}
	a, err := Open(place)
	if file == "" {
		if !errors.Is(err, os.ErrNotExist) {
			t.Errorf("open: %v, want nothing loaded; pins %q", err, names)
		}
		if err == nil {
			a.Close()
		}
		return
	}
	if err != nil {
		t.Fatalf("open: %v; pins %q", err, names)
	}
	defer a.Close()
	if a.Meta.File != file {
		t.Errorf("pins describe %s, want %s", a.Meta.File, file)
	}
	id := programID(a.Program)
	var attached []string
	for _, ifc := range a.Meta.Ifaces {
		attached = append(attached, ifc.Name)
		l := a.Links[ifc.Index]
		if l == nil {
			t.Errorf("no link pinned for %s", ifc.Name)
			continue
		}
		if info, err := l.Info(); err != nil || info.Program != id {
			t.Errorf("link on %s runs program %v (%v), want the pinned %d", ifc.Name, info, err, id)
		}
	}
	slices.Sort(attached)
	if len(a.Links) != len(a.Meta.Ifaces) || !slices.Equal(attached, ifaces) {
		t.Errorf("meta names interfaces %q, %d links pinned; want %q", attached, len(a.Links), ifaces)
	}
	for _, name := range names {
		if !slices.Contains(a.Meta.Pins, name) && !strings.HasPrefix(name, pinLink) {
			t.Errorf("pin %s is not the filter's", name)
		}
	}
	held, err := ConntrackHeld()
	if err != nil || held != a.Meta.HoldsConntrack() {
		t.Errorf("conntrack held %v (%v), want %v", held, err, a.Meta.HoldsConntrack())
	}
	want := ir.VerdictDrop // tcp/22 in A.rules and C.rules
	if file == "B.rules" {
		want = ir.VerdictAccept
	}
	if v := pinnedVerdict(t, place, frame(t, "tcp", 22)); v != want {
		t.Errorf("tcp/22: %v, want %v", v, want)
	}
}
