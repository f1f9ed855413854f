package bench

import (
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"

	"bpfwall/codegen"
	"bpfwall/internal/packets"
	"bpfwall/internal/topology"
	"bpfwall/ir"
	"bpfwall/model"
	"bpfwall/parser/iptables"
	"bpfwall/rules"
)

// inIface is the interface the frames arrive on: the firewall's ingress
// veth of the end-to-end topology.
const inIface = "fwin"

// lower parses and lowers a workload's chain.
func lower(w *Workload) (*rules.Ruleset, *ir.Program, error) {
	rs, err := iptables.Parse(w.Family+".rules", w.Rules, iptables.Options{})
	if err != nil {
		return nil, nil, err
	}
	// The chain runs alone here: the recent tables and token buckets it
	// shares with other hooks in netfilter (SharedState) only it spends.
	p, err := ir.Lower(rs, ir.LowerOptions{Chain: w.Chain, SharedState: true})
	if err != nil {
		return nil, nil, err
	}
	return rs, p, nil
}

// hook is where the micro benchmark runs a workload's chain.
func (w *Workload) hook() codegen.Hook {
	if w.Netfilter {
		return codegen.HookNetfilter
	}
	return codegen.HookXDP
}

// meta is what ir.Eval knows of a test run's frame: at xdp, it arrives
// on the interface the end-to-end frames arrive on (see measure). At a
// netfilter hook, bpf_prog_test_run_nf gives the hook state the loopback
// device as its output device and no input device, whatever the hook:
// verify_and_copy_hook_state picks the devices by the default hook
// (NF_INET_LOCAL_OUT) before it copies the one asked for.
func (w *Workload) meta() model.Meta {
	if w.Netfilter {
		return model.Meta{OutIface: "lo", Forwarded: w.Chain == "FORWARD"}
	}
	return model.Meta{InIface: inIface}
}

// decode decodes a test run's frame as the program sees it. The
// loopback device of a netfilter test run has no MAC header xt_mac reads.
func (w *Workload) decode(frame []byte) (*model.Packet, error) {
	pkt, err := model.Decode(frame, w.meta())
	if err == nil && w.Netfilter {
		pkt.SrcMAC = nil
	}
	return pkt, err
}

// compile compiles a workload for hook at an optimization level.
func compile(w *Workload, level int, hook codegen.Hook) (*rules.Ruleset, *codegen.Program, error) {
	rs, p, err := lower(w)
	if err != nil {
		return nil, nil, err
	}
	l, err := codegen.ParseLevel(level)
	if err != nil {
		return nil, nil, err
	}
	prog, err := codegen.Compile(p, codegen.Options{Hook: hook, Level: l})
	return rs, prog, err
}

// probe is a frame and the verdict ir.Eval gives it.
type probe struct {
	frame []byte
	want  ir.Verdict
}

// probes are the frames a workload is measured with.
type probes struct {
	noMatch, last *probe
	random        []probe
}

// randomProbes is how many frames the random measurement cycles through.
const randomProbes = 32

// findProbes evaluates the workload's frames with ir.Eval, checking that
// they do what the family says, and aims randomProbes frames at random
// rules. Families without frames of their own (tum) get them here: a
// frame the policy decides, one aimed at the last rule of the chain, and
// as Flood the dropped frame that walks the most rules.
func findProbes(w *Workload, p *ir.Program, seed uint64) (probes, error) {
	var out probes
	meta := w.meta()
	eval := func(frame []byte) (ir.Result, error) {
		pkt, err := w.decode(frame)
		if err != nil {
			return ir.Result{}, err
		}
		return p.Eval(pkt), nil
	}
	entry := p.Chains[0].Rules
	if len(entry) == 0 {
		return out, fmt.Errorf("%s/%d: chain %s has no rules", w.Family, w.N, w.Chain)
	}
	lastRule := entry[len(entry)-1]
	g := packets.NewGenerator(p, seed)
	if w.NoMatch == nil && w.Last == nil {
		w.Last = addressed(g.Aim(lastRule, packets.AimOptions{Meta: meta})[0].Frame)
		var best *ir.Rule
		for range 256 {
			f := addressed(g.Random().Data)
			res, err := eval(f)
			if err != nil || res.Skipped != "" {
				continue
			}
			if res.Rule == nil && w.NoMatch == nil {
				w.NoMatch = f
			}
			if res.Verdict == ir.VerdictDrop && (best == nil || res.Rule != nil && res.Rule.ID > best.ID) {
				w.Flood, best = f, res.Rule
			}
		}
	}
	if w.NoMatch != nil {
		res, err := eval(w.NoMatch)
		if err != nil || res.Rule != nil {
			return out, fmt.Errorf("%s/%d: the no-match frame is decided by %v (%v)", w.Family, w.N, res, err)
		}
		out.noMatch = &probe{w.NoMatch, res.Verdict}
	}
	if w.Last != nil {
		res, err := eval(w.Last)
		switch {
		case err != nil:
			return out, fmt.Errorf("%s/%d: last-rule frame: %w", w.Family, w.N, err)
		case res.Rule == lastRule:
			out.last = &probe{w.Last, res.Verdict}
		case w.Family != "tum":
			return out, fmt.Errorf("%s/%d: the last-rule frame is decided by %v", w.Family, w.N, res)
		}
	}
	// A program at xdp that tests the conntrack state passes packets of
	// class U (neither TCP nor UDP, or fragments) to its netfilter stage:
	// their verdict at xdp is not the rule set's.
	defers := p.TestsConntrack() && !w.Netfilter
	rng := rand.New(rand.NewPCG(seed, 1))
	for range randomProbes {
		r := p.Rules[rng.IntN(len(p.Rules))]
		f := addressed(g.Aim(r, packets.AimOptions{Meta: meta})[0].Frame)
		res, err := eval(f)
		if err != nil {
			continue
		}
		if pkt, err := w.decode(f); defers && (err != nil || pkt.Proto != 6 && pkt.Proto != 17 || pkt.FragOffset != 0 || pkt.MoreFragments) {
			continue
		}
		out.random = append(out.random, probe{f, res.Verdict})
	}
	return out, nil
}

// addressed returns frame sent from the topology's sender to the
// firewall.
func addressed(frame []byte) []byte {
	f := append([]byte(nil), frame...)
	copy(f[0:6], topology.FirewallInMAC)
	copy(f[6:12], topology.SenderMAC)
	return f
}

// reason says briefly why a rule set does not compile or load: its
// distinct error messages without positions, most frequent first.
func reason(err error) string {
	list, ok := rules.AsErrorList(err)
	if !ok {
		msg, _, _ := strings.Cut(err.Error(), "\n")
		return msg
	}
	count := make(map[string]int)
	for _, e := range list {
		count[e.Msg]++
	}
	msgs := make([]string, 0, len(count))
	for m := range count {
		msgs = append(msgs, m)
	}
	sort.Slice(msgs, func(i, j int) bool {
		if count[msgs[i]] != count[msgs[j]] {
			return count[msgs[i]] > count[msgs[j]]
		}
		return msgs[i] < msgs[j]
	})
	for i, m := range msgs {
		msgs[i] = fmt.Sprintf("%d× %s", count[m], m)
	}
	return strings.Join(msgs, "; ")
}
