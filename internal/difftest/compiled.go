package difftest

import (
	"errors"
	"fmt"
	"os"

	"bpfwall/codegen"
	"bpfwall/codegen/abi"
	"bpfwall/internal/topology"
	"bpfwall/ir"
	"bpfwall/loader"
	"bpfwall/rules"
)

// compile compiles c's FORWARD chain for the xdp hook (which compiles
// INPUT unless told otherwise: the harness's probes cross FORWARD). The
// program sees the TTL before forwarding decrements it, as c.Program's
// TTL matches expect. Rules the hook cannot express are Unsupported.
func compile(c *Case, opts codegen.Options) (*codegen.Program, error) {
	opts.Hook = codegen.HookXDP
	p, err := codegen.Compile(c.Program, opts)
	if list, ok := rules.AsErrorList(err); ok && len(list) > 0 {
		return nil, &Unsupported{Reason: list[0].Msg}
	}
	if err != nil {
		return nil, fmt.Errorf("compile %s: %w", c.Name, err)
	}
	return p, nil
}

// TestRun is the compiled program (see compile) run by
// BPF_PROG_TEST_RUN on every probe, as if it arrived on the firewall's
// ingress interface: loader.Loaded.Run, which `bpfwall trace` uses. It
// judges the probes that reach the FORWARD chain (see Forwarded); XDP
// runs before the routing that decides the fate of the others.
type TestRun struct {
	Opts codegen.Options // the level; the hook is xdp
}

func (s TestRun) Name() string { return "test-run" + optsSuffix(s.Opts) }

// optsSuffix tells the sources of the optimized programs apart.
func optsSuffix(o codegen.Options) string {
	s := " " + o.Level.String()
	if o.ForceLookups {
		s += " lookups"
	}
	return s
}

func (s TestRun) Outcomes(c *Case) ([]Outcome, error) {
	opts := s.Opts
	opts.Trace = true // the decision says which rule decided
	p, err := compile(c, opts)
	if err != nil {
		return nil, err
	}
	l, err := loader.Load(p, loader.Options{})
	if err != nil {
		return nil, fmt.Errorf("case %s: %w", c.Name, err)
	}
	defer l.Close()
	out := make([]Outcome, len(c.Probes))
	for i, f := range c.Probes {
		pkt, err := decode(c, f)
		if err != nil {
			return nil, err
		}
		if why := Forwarded(pkt, f); why != "" {
			out[i] = Outcome{Skip: true, Why: why}
			continue
		}
		o, err := l.Run(f, c.InIface)
		if err != nil {
			return nil, fmt.Errorf("case %s, probe %d: %w", c.Name, i, err)
		}
		out[i] = Outcome{Delivered: o.Verdict == ir.VerdictAccept, Why: decision(c, o)}
	}
	return out, nil
}

// decision describes how the program decided, as ir.Result does.
func decision(c *Case, o loader.Outcome) string {
	d := o.Decision
	rule := func() string {
		if int(d.Rule) >= len(c.Program.Rules) {
			return fmt.Sprintf("rule %d (no such rule)", d.Rule)
		}
		r := c.Program.Rules[d.Rule]
		return fmt.Sprintf("%s r%d line %d", c.Program.Chains[r.Chain].Name, r.ID, r.Pos.Line)
	}
	switch d.Kind {
	case abi.DecidedByRule:
		return fmt.Sprintf("%s at %s", o.Verdict, rule())
	case abi.DecidedByPolicy:
		return fmt.Sprintf("%s by policy", o.Verdict)
	case abi.Hotdrop:
		return fmt.Sprintf("%s (hotdrop) at %s", o.Verdict, rule())
	case abi.SkippedInvalid:
		return fmt.Sprintf("%s (invalid)", o.Verdict)
	case abi.SkippedNotIP:
		return fmt.Sprintf("%s (not IP or the other family)", o.Verdict)
	case abi.LaterFragment:
		return fmt.Sprintf("%s (later fragment)", o.Verdict)
	case abi.TinyFragment:
		return fmt.Sprintf("%s (tiny first fragment)", o.Verdict)
	case abi.TTLExpired:
		return fmt.Sprintf("%s (ttl expires before FORWARD)", o.Verdict)
	}
	return fmt.Sprintf("%s (decision kind %s)", o.Verdict, d.Kind)
}

// Attached is the compiled program (see compile) attached to the ingress
// interface of a topology whose firewall has no iptables rules, by
// loader.Swap as `bpfwall load` does it (generic XDP, pinned under Root):
// the first case attaches it, the next ones swap their programs in. A
// probe is delivered when it reaches the receiver.
type Attached struct {
	Topo *Topology
	Root string          // a bpffs directory of the harness's own
	Opts codegen.Options // the level; the hook is xdp
}

func (a Attached) Name() string { return "attached" + optsSuffix(a.Opts) }

func (a Attached) Outcomes(c *Case) ([]Outcome, error) {
	if err := a.Topo.fits(c); err != nil {
		return nil, err
	}
	p, err := compile(c, a.Opts)
	if err != nil {
		return nil, err
	}
	meta, counters, err := loader.NewMeta(c.Ruleset, p, c.Name)
	if err != nil {
		return nil, fmt.Errorf("case %s: %w", c.Name, err)
	}
	err = topology.Do(a.Topo.Firewall, func() error {
		place, err := loader.Here(a.Root, codegen.HookXDP)
		if err != nil {
			return err
		}
		swap := loader.Swap{Place: place, Program: p, Meta: meta, Counters: counters, Ifaces: []string{a.Topo.InIface}, XDPMode: loader.XDPGeneric}
		err = runSwap(&swap)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("case %s: %w", c.Name, err)
	}
	return a.Topo.deliveries(c)
}

// runSwap swaps the program in, as `bpfwall load` does; where the filter
// holds the other IP family's rules, it unloads that first, as an operator
// must (loader.ErrFamily).
func runSwap(s *loader.Swap) error {
	_, err := s.Run()
	if !errors.Is(err, loader.ErrFamily) {
		return err
	}
	if _, err := loader.Unload(s.Place, nil); err != nil {
		return err
	}
	_, err = s.Run()
	return err
}

// Detach unloads the program and removes Root.
func (a Attached) Detach() error {
	err := topology.Do(a.Topo.Firewall, func() error {
		place, err := loader.Here(a.Root, codegen.HookXDP)
		if err != nil {
			return err
		}
		if _, err := loader.Unload(place, nil); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
		return nil
	})
	return errors.Join(err, os.RemoveAll(a.Root))
}

// Share counts the rules a compiled program decides by the classifier's
// tables, to tell how much of a run tested the classifier rather than
// plain code.
type Share struct{ Classified, Rules int }

// AddShare compiles c with opts and adds its rules to s; a case the
// hook cannot compile adds nothing.
func (s *Share) AddShare(c *Case, opts codegen.Options) {
	p, err := compile(c, opts)
	if err != nil {
		return
	}
	s.Classified += p.Classified
	s.Rules += len(c.Program.Rules)
}

func (s Share) String() string {
	if s.Rules == 0 {
		return "no rules"
	}
	return fmt.Sprintf("%d of %d rules (%.0f%%) in lookups", s.Classified, s.Rules, 100*float64(s.Classified)/float64(s.Rules))
}
