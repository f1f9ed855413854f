package bench

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"

	"bpfwall/codegen"
	"bpfwall/internal/topology"
	"bpfwall/loader"
)

// E2EConfig describes an end-to-end run.
type E2EConfig struct {
	Families []Family
	Sizes    []int
	// Levels are the optimization levels bpfwall runs at.
	Levels []int
	// Duration is how long the sender floods per run, Runs how many runs
	// make a measurement: the median counts.
	Duration time.Duration
	Runs     int
	Seed     uint64
	// BPFFS is the directory of bpffs where bpfwall's filters are pinned
	// while they run; it is removed after. When empty, a bpffs of the
	// run's own is mounted in a temporary directory.
	BPFFS string
	// Bpfwall is the bpfwall binary: the bpfwall-nf engine restores the
	// rules with it, as a user runs bpfwall restore without -i (each chain
	// at its netfilter hook, the kernel answering REJECTs). Without it
	// that engine is skipped.
	Bpfwall string
	Log     io.Writer
}

// E2EResult is one firewall's rate for one workload. Rates are per second,
// the median of the runs. Dropped is what the sender put on its veth less
// what the firewall forwarded (its egress veth's transmitted packets).
type E2EResult struct {
	Family       string  `json:"family"`
	N            int     `json:"n"`
	Engine       string  `json:"engine"`
	Skipped      string  `json:"skipped,omitempty"`
	SentPPS      float64 `json:"sent_pps,omitempty"`
	DroppedPPS   float64 `json:"dropped_pps,omitempty"`
	ForwardedPPS float64 `json:"forwarded_pps,omitempty"`
}

// Handled is the rate at which the firewall disposed of frames: dropped
// or, without a firewall, forwarded.
func (r E2EResult) Handled() float64 { return r.DroppedPPS + r.ForwardedPPS }

// engine is a firewall on the firewall namespace's ingress.
type engine interface {
	name() string
	// install loads the workload's rules; a skipError says why it cannot.
	install(topo *topology.Topology, w *Workload) error
	// close undoes what install left outside the namespace.
	close() error
}

// skipError is an engine that cannot run a workload, and why.
type skipError struct{ reason string }

func (e skipError) Error() string { return e.reason }

// Engines names the engines of an end-to-end run, in order.
func engines(levels []int, bpffs, bpfwall string) []engine {
	out := []engine{noFirewall{}, &xdpDropEngine{}, iptablesEngine{}, nftEngine{}}
	for _, l := range levels {
		out = append(out, &bpfwallEngine{level: l, root: bpffs})
	}
	for _, l := range levels {
		out = append(out, &bpfwallEngine{level: l, root: bpffs, netfilter: true, bin: bpfwall})
	}
	for _, l := range levels {
		out = append(out, &bpfwallEngine{level: l, root: bpffs, netfilter: true, accelerate: true, bin: bpfwall})
	}
	return out
}

// EndToEnd floods a fresh sender → firewall → receiver topology with each
// workload's Flood frame, for each engine in turn.
func EndToEnd(cfg E2EConfig) ([]E2EResult, error) {
	if cfg.BPFFS == "" {
		dir, err := os.MkdirTemp("", "bpfwall-bench-")
		if err != nil {
			return nil, err
		}
		defer os.RemoveAll(dir)
		if err := unix.Mount("bpf", dir, "bpf", 0, "mode=0700"); err != nil {
			return nil, fmt.Errorf("mount a bpffs for the benchmark: %w", err)
		}
		defer unix.Unmount(dir, unix.MNT_DETACH)
		cfg.BPFFS = filepath.Join(dir, "bpfwall")
	}
	defer os.RemoveAll(cfg.BPFFS)
	var out []E2EResult
	for _, fam := range cfg.Families {
		for _, n := range fam.sizesOf(cfg.Sizes) {
			w, err := fam.Generate(n, cfg.Seed)
			if err != nil {
				out = append(out, E2EResult{Family: fam.Name, N: n, Skipped: err.Error()})
				continue
			}
			if w.Flood == nil {
				if _, p, err := lower(w); err == nil {
					findProbes(w, p, cfg.Seed) // fills Flood for families without frames
				}
			}
			for _, e := range engines(cfg.Levels, cfg.BPFFS, cfg.Bpfwall) {
				r := E2EResult{Family: fam.Name, N: w.N, Engine: e.name()}
				if cfg.Log != nil {
					fmt.Fprintf(cfg.Log, "e2e %-10s N=%-6d %-16s ...\n", r.Family, r.N, r.Engine)
				}
				if w.Flood == nil {
					r.Skipped = "no frame that the rules drop"
				} else if err := measureE2E(&r, cfg, e, w); err != nil {
					return out, err
				}
				if cfg.Log != nil {
					fmt.Fprintf(cfg.Log, "e2e %-10s N=%-6d %-16s %s\n", r.Family, r.N, r.Engine, e2eSummary(r))
				}
				out = append(out, r)
			}
		}
	}
	return out, nil
}

func e2eSummary(r E2EResult) string {
	if r.Skipped != "" {
		return "skipped: " + r.Skipped
	}
	return fmt.Sprintf("sent %.0f/s, dropped %.0f/s, forwarded %.0f/s", r.SentPPS, r.DroppedPPS, r.ForwardedPPS)
}

// warmup is how long the sender floods before the runs.
const warmup = 200 * time.Millisecond

func measureE2E(r *E2EResult, cfg E2EConfig, e engine, w *Workload) (err error) {
	topo, err := topology.New(topology.Options{Prefix: "bwbench"})
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, topo.Close()) }()
	if err := e.install(topo, w); err != nil {
		var skip skipError
		if errors.As(err, &skip) {
			r.Skipped = skip.reason
			return e.close()
		}
		return errors.Join(fmt.Errorf("%s: %w", e.name(), err), e.close())
	}
	defer func() { err = errors.Join(err, e.close()) }()
	s, err := openSender(topo.Sender, topology.SenderIface)
	if err != nil {
		return err
	}
	defer s.Close()
	cpu := runtime.NumCPU() - 1
	if _, _, err := s.flood(w.Flood, warmup, cpu); err != nil {
		return err
	}
	var sent, dropped, forwarded []float64
	for range max(1, cfg.Runs) {
		before, err := txPackets(topo.Firewall, topo.OutIface)
		if err != nil {
			return err
		}
		n, took, err := s.flood(w.Flood, cfg.Duration, cpu)
		if err != nil {
			return err
		}
		time.Sleep(50 * time.Millisecond) // for the queues to drain
		after, err := txPackets(topo.Firewall, topo.OutIface)
		if err != nil {
			return err
		}
		fwd := after - before
		secs := took.Seconds()
		sent = append(sent, float64(n)/secs)
		forwarded = append(forwarded, float64(fwd)/secs)
		dropped = append(dropped, float64(max(int64(n)-int64(fwd), 0))/secs)
	}
	r.SentPPS, r.DroppedPPS, r.ForwardedPPS = median(sent), median(dropped), median(forwarded)
	return nil
}

// txPackets reads an interface's transmitted-packets counter.
func txPackets(ns, iface string) (uint64, error) {
	out, err := topology.Output(nil, "ip", "-n", ns, "-s", "-j", "link", "show", "dev", iface)
	if err != nil {
		return 0, err
	}
	var links []struct {
		Stats struct {
			TX struct {
				Packets uint64 `json:"packets"`
			} `json:"tx"`
		} `json:"stats64"`
	}
	if err := json.Unmarshal(out, &links); err != nil || len(links) != 1 {
		return 0, fmt.Errorf("statistics of %s in %s: %v in %q", iface, ns, err, out)
	}
	return links[0].Stats.TX.Packets, nil
}

// noFirewall forwards everything.
type noFirewall struct{}

func (noFirewall) name() string                                { return "none" }
func (noFirewall) install(*topology.Topology, *Workload) error { return nil }
func (noFirewall) close() error                                { return nil }

// xdpDropEngine is the floor: an XDP program that drops every frame.
type xdpDropEngine struct {
	prog *ebpf.Program
	link link.Link
}

func (*xdpDropEngine) name() string { return "xdp-drop" }

func (e *xdpDropEngine) install(topo *topology.Topology, _ *Workload) error {
	var err error
	if e.prog, err = bareXDP(xdpDrop); err != nil {
		return err
	}
	return topology.Do(topo.Firewall, func() error {
		ifi, err := netInterface(topo.InIface)
		if err != nil {
			return err
		}
		e.link, err = link.AttachXDP(link.XDPOptions{Program: e.prog, Interface: ifi, Flags: link.XDPDriverMode})
		if err != nil {
			return fmt.Errorf("attach xdp drop to %s: %w", topo.InIface, err)
		}
		return nil
	})
}

func (e *xdpDropEngine) close() error {
	var errs []error
	if e.link != nil {
		errs = append(errs, e.link.Close())
	}
	if e.prog != nil {
		errs = append(errs, e.prog.Close())
	}
	e.link, e.prog = nil, nil
	return errors.Join(errs...)
}

// iptablesEngine loads the rules with iptables-legacy-restore.
type iptablesEngine struct{}

func (iptablesEngine) name() string { return "iptables-legacy" }

func (iptablesEngine) install(topo *topology.Topology, w *Workload) error {
	if _, err := exec.LookPath("iptables-legacy-restore"); err != nil {
		return skipError{"iptables-legacy-restore is not installed"}
	}
	if err := topology.RunInput(w.Rules, "ip", "netns", "exec", topo.Firewall, "iptables-legacy-restore"); err != nil {
		return skipError{"iptables-legacy-restore refuses the rules: " + firstLine(err.Error())}
	}
	return nil
}

func (iptablesEngine) close() error { return nil }

// nftEngine loads the rules with nft -f, as iptables-restore-translate
// translates them (with a counter in every rule, as iptables counts).
type nftEngine struct{}

func (nftEngine) name() string { return "nftables" }

func (nftEngine) install(topo *topology.Topology, w *Workload) error {
	for _, tool := range []string{"nft", "iptables-restore-translate"} {
		if _, err := exec.LookPath(tool); err != nil {
			return skipError{tool + " is not installed"}
		}
	}
	f, err := os.CreateTemp("", "bpfwall-bench-*.rules")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	if _, err := f.Write(w.Rules); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	text, err := topology.Output(nil, "iptables-restore-translate", "-f", f.Name())
	if err != nil {
		return skipError{"iptables-restore-translate fails: " + firstLine(err.Error())}
	}
	if err := topology.RunInput(text, "ip", "netns", "exec", topo.Firewall, "nft", "-f", "-"); err != nil {
		return skipError{"nft -f refuses the translation: " + firstLine(err.Error())}
	}
	return nil
}

func (nftEngine) close() error { return nil }

// bpfwallEngine compiles the rules and loads them as `bpfwall load` does,
// on XDP in the driver's (veth's) native mode; with netfilter, it runs
// `bpfwall restore` (the binary bin), which puts each chain at its own
// netfilter hook, and with accelerate also an accelerator on the
// firewall's ingress (restore --accelerate).
type bpfwallEngine struct {
	level      int
	root       string
	netfilter  bool
	accelerate bool
	bin        string
	place      *loader.Place
	ns         string
	// restored is the lock file of a netfilter restore, whose unload
	// close runs; empty when none is loaded.
	restored string
}

func (e *bpfwallEngine) name() string {
	if e.accelerate {
		return fmt.Sprintf("bpfwall-nf+xdp -O%d", e.level)
	}
	if e.netfilter {
		return fmt.Sprintf("bpfwall-nf -O%d", e.level)
	}
	return fmt.Sprintf("bpfwall -O%d", e.level)
}

func (e *bpfwallEngine) install(topo *topology.Topology, w *Workload) error {
	if e.netfilter {
		return e.installNetfilter(topo, w)
	}
	rs, prog, err := compile(w, e.level, codegen.HookXDP)
	if err != nil {
		return skipError{"does not compile: " + reason(err)}
	}
	meta, counters, err := loader.NewMeta(rs, prog, w.Family)
	if err != nil {
		return err
	}
	e.ns = topo.Firewall
	err = topology.Do(topo.Firewall, func() error {
		place, err := loader.Here(e.root, codegen.HookXDP)
		if err != nil {
			return err
		}
		e.place = &place
		swap := loader.Swap{Place: place, Program: prog, Meta: meta, Counters: counters, Ifaces: []string{topo.InIface}, XDPMode: loader.XDPNative}
		_, err = swap.Run()
		return err
	})
	if errors.Is(err, loader.ErrTooLarge) {
		return skipError{"does not load: " + firstLine(err.Error())}
	}
	return err
}

// installNetfilter restores the workload's rules with the bpfwall binary
// in the firewall's namespace, on a pin root and lock of the run's own.
func (e *bpfwallEngine) installNetfilter(topo *topology.Topology, w *Workload) error {
	if e.bin == "" {
		return skipError{"needs the bpfwall binary (bpfwall bench --e2e runs it)"}
	}
	dir, err := os.MkdirTemp("", "bpfwall-bench-restore-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	file := filepath.Join(dir, w.Family+".rules")
	if err := os.WriteFile(file, w.Rules, 0o600); err != nil {
		return err
	}
	e.ns, e.restored = topo.Firewall, filepath.Join(os.TempDir(), fmt.Sprintf("bpfwall-bench-%d.lock", os.Getpid()))
	args := []string{"restore", "-q", fmt.Sprintf("-O%d", e.level), file}
	if e.accelerate {
		args = append(args, "--accelerate", topo.InIface)
	} else {
		args = append(args, "--hook", "netfilter")
	}
	out, err := e.run(args...)
	if err != nil {
		e.close()
		return skipError{"restore fails: " + firstLine(strings.TrimSpace(out))}
	}
	return nil
}

// run runs the bpfwall binary in the firewall's namespace with the run's
// pin root and lock.
func (e *bpfwallEngine) run(args ...string) (string, error) {
	cmd := exec.Command("ip", append([]string{"netns", "exec", e.ns, e.bin}, args...)...)
	cmd.Env = append(os.Environ(), "BPFWALL_ROOT="+e.root, "BPFWALL_LOCKFILE="+e.restored)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func (e *bpfwallEngine) close() error {
	if e.restored != "" {
		out, err := e.run("unload", "--hook", "netfilter")
		os.Remove(e.restored)
		e.restored = ""
		if err != nil {
			return fmt.Errorf("bpfwall unload: %v: %s", err, out)
		}
		return nil
	}
	if e.place == nil {
		return nil
	}
	place := *e.place
	e.place = nil
	err := topology.Do(e.ns, func() error {
		if _, err := loader.Unload(place, nil); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
		return nil
	})
	return errors.Join(err, os.RemoveAll(filepath.Dir(place.Dir())))
}

func firstLine(s string) string {
	for i := range len(s) {
		if s[i] == '\n' {
			return s[:i]
		}
	}
	return s
}
