package main

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"bpfwall/codegen"
	"bpfwall/codegen/abi"
	"bpfwall/ir"
	"bpfwall/loader"
	"bpfwall/rules"
)

// filterStatus is what status says about one filter.
type filterStatus struct {
	NetNS         uint64         `json:"netns"`
	Hook          string         `json:"hook"`
	Program       uint32         `json:"program_id"`
	Tag           string         `json:"tag"`
	Rules         int            `json:"rules"`
	Table         string         `json:"table"`
	Chain         string         `json:"chain"`
	File          string         `json:"file"`
	LoadedAt      time.Time      `json:"loaded_at"`
	VerifiedInsns int            `json:"verified_insns"`
	Level         string         `json:"level"` // "-O0" or "-O1"
	Instructions  int            `json:"instructions"`
	Family        string         `json:"family"`
	Ifaces        []ifaceStatus  `json:"ifaces"`
	Counters      countersStatus `json:"counters"`
	// Policy is the entry chain's policy, which the policy counters count.
	Policy string `json:"policy"`
	// RuleCounters are the counters of each compiled rule (status --json
	// --rules, and metrics).
	RuleCounters []ruleCounter `json:"rule_counters,omitempty"`
	// Sockets are the sk-lookup filter's TPROXY targets.
	Sockets []socketStatus `json:"sockets,omitempty"`
	// Conntrack says, for a program that tests the conntrack state, how
	// conntrack is kept on in the namespace; ConntrackHeld says whether
	// it is.
	Conntrack     string `json:"conntrack,omitempty"`
	ConntrackHeld *bool  `json:"conntrack_held,omitempty"`
	// Log describes the LOG rules' ring buffer, when there are LOG rules.
	Log *logStatus `json:"log,omitempty"`
	// Recent are the -m recent tables and the addresses they list.
	Recent []loader.RecentTableState `json:"recent,omitempty"`
	// Netfilter describes the netfilter stage of an xdp or tc-ingress
	// filter that tests the conntrack state.
	Netfilter *loader.NetfilterStage `json:"netfilter,omitempty"`
	// ChainHook says where a chain run at its own netfilter hook runs.
	ChainHook *loader.ChainHook `json:"netfilter_hook,omitempty"`
}

// logStatus is what status says about a filter's LOG rules.
type logStatus struct {
	Rules int    `json:"rules"`
	Lost  uint64 `json:"lost"` // events that found the ring buffer full
}

type ifaceStatus struct {
	Name  string `json:"name"`
	Index int    `json:"ifindex"`
	Mode  string `json:"mode,omitempty"`
	Link  uint32 `json:"link_id"`
	// Gone says the interface was deleted or moved to another namespace:
	// the filter no longer runs there.
	Gone bool `json:"gone,omitempty"`
}

// ruleCounter is what one compiled rule counted.
type ruleCounter struct {
	// Rule is where the rule was written, FILE:LINE; a rule that iptables
	// made several of (-s a,b) is FILE:LINE#2 from its second on.
	Rule   string `json:"rule"`
	Chain  string `json:"chain"`
	Target string `json:"target"` // empty for a rule without -j
	// Line is the rule's line in the text bpfwall save prints.
	Line    int    `json:"save_line"`
	Packets uint64 `json:"packets"`
	Bytes   uint64 `json:"bytes"`
}

// countersStatus sums a filter's counters.
type countersStatus struct {
	RulesHit      int    `json:"rules_hit"` // rules that matched a packet
	RulePackets   uint64 `json:"rule_packets"`
	RuleBytes     uint64 `json:"rule_bytes"`
	PolicyPackets uint64 `json:"policy_packets"`
	PolicyBytes   uint64 `json:"policy_bytes"`
	// DroppedPackets and DroppedBytes are what an accelerator dropped;
	// its rules count each drop and the rules on the way to it.
	DroppedPackets uint64 `json:"dropped_packets,omitempty"`
	DroppedBytes   uint64 `json:"dropped_bytes,omitempty"`
}

// pinnedPlaces names this network namespace and lists the filters pinned
// for it.
func pinnedPlaces(stderr io.Writer) (uint64, []loader.Place, error) {
	if err := recoverIdle(stderr); err != nil {
		return 0, nil, err
	}
	ns, err := loader.NetNS()
	if err != nil {
		return 0, nil, err
	}
	places, err := loader.Places(pinRoot, ns)
	if err != nil {
		return 0, nil, privileged(err)
	}
	return ns, places, nil
}

// runStatus describes the filters of this network namespace.
func runStatus(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("status", stdout, stderr)
	asJSON := fs.Bool("json", false, "print JSON")
	withRules := fs.Bool("rules", false, "with --json, the counters of every compiled rule too")
	files, err := parseFlags(fs, args)
	if err != nil {
		return err
	}
	if len(files) != 0 {
		fmt.Fprintln(stderr, "usage: bpfwall status [--json]")
		return errUsage
	}
	ns, places, err := pinnedPlaces(stderr)
	if err != nil {
		return err
	}
	out := []filterStatus{}
	for _, p := range places {
		st, err := statusOf(p, *withRules && *asJSON)
		if err != nil {
			return privileged(err)
		}
		out = append(out, st)
	}
	stray, err := loader.Stray(pinRoot, ns)
	if err != nil {
		return privileged(err)
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		enc.SetEscapeHTML(false)
		if err := enc.Encode(out); err != nil {
			return err
		}
		return reportStray(stray, stderr)
	}
	if len(out) == 0 {
		fmt.Fprintf(stdout, "no filter loaded in network namespace %d\n", ns)
	}
	for _, st := range out {
		printStatus(stdout, st)
	}
	if on, err := loader.AcceleratedIfaces(pinRoot, ns); err != nil {
		return privileged(err)
	} else if len(on) > 0 {
		var names []string
		for _, ifc := range on {
			names = append(names, ifc.Name)
		}
		fmt.Fprintf(stdout, "accelerator dispatcher at xdp on %s: it runs the accelerators listed above; a family without one passes\n", strings.Join(names, ", "))
	}
	for _, fam := range []rules.Family{rules.IPv4, rules.IPv6} {
		tables, err := kernelDelegated(fam)
		if err != nil {
			return err
		}
		for _, name := range tableOrder(slices.Collect(maps.Keys(tables))) {
			n := 0
			for line := range strings.Lines(string(tables[name])) {
				if strings.HasPrefix(line, "-A ") || strings.Contains(line, "] -A ") {
					n++
				}
			}
			fmt.Fprintf(stdout, "%s table %s: %d rules run by the kernel's netfilter, delegated by bpfwall restore (%s-save -t %s shows them)\n", fam, name, n, toolOf(fam), name)
		}
	}
	// Filters of other namespaces: a deleted namespace stays while a
	// filter's netfilter link holds it.
	if ids, alive, err := loader.OtherNetNS(pinRoot); err == nil {
		for i, id := range ids {
			if alive[i] {
				fmt.Fprintf(stdout, "network namespace %d also has filters pinned\n", id)
			} else {
				fmt.Fprintf(stdout, "network namespace %d has filters pinned but no process or /run/netns holds it (deleted?): its netfilter links keep it alive; bpfwall unload --netns %d removes them\n", id, id)
			}
		}
	}
	return reportStray(stray, stderr)
}

// reportStray says which bpfwall programs run that no pin this command
// sees describes, and fails the command if any do: "no filter loaded"
// would be false.
func reportStray(stray []loader.StrayProgram, stderr io.Writer) error {
	if len(stray) == 0 {
		return nil
	}
	for _, s := range stray {
		fmt.Fprintf(stderr, "bpfwall: a bpfwall program (id %d) runs at %s on %s, and no pin under %s describes it\n", s.Program, s.Hook, s.Iface, pinRoot)
	}
	hint := "its pins are on a bpffs this command does not see, or were removed"
	if !loader.OnBPFFS(filepath.Dir(pinRoot)) {
		hint = fmt.Sprintf("bpffs is not mounted at %s in this command's mount namespace (ip netns exec hides it: run bpfwall with nsenter --net=/run/netns/NAME)", filepath.Dir(pinRoot))
	}
	fmt.Fprintf(stderr, "bpfwall: %s; bpftool net shows what is attached\n", hint)
	return exitError{1}
}

// statusOf describes the filter at p; withRules reads every rule's
// counters too.
func statusOf(p loader.Place, withRules bool) (filterStatus, error) {
	a, err := loader.Open(p)
	if err != nil {
		return filterStatus{}, err
	}
	defer a.Close()
	info, err := a.Program.Info()
	if err != nil {
		return filterStatus{}, fmt.Errorf("read %s program info: %w", p.Hook, err)
	}
	id, _ := info.ID()
	m := a.Meta
	st := filterStatus{
		NetNS: p.NetNS, Hook: p.Hook.String(), Program: uint32(id), Tag: info.Tag,
		Rules: len(m.Lines), Table: m.Table, Chain: m.Chain, File: m.File,
		LoadedAt: m.LoadedAt, VerifiedInsns: m.VerifiedInsns, Level: m.Level, Instructions: m.Instructions,
		Family: metaFamily(&m).String(),
	}
	if p.Accelerator() {
		st.Hook = "accelerator"
	}
	gone := a.GoneIfaces()
	for _, ifc := range m.Ifaces {
		is := ifaceStatus{Name: ifc.Name, Index: ifc.Index, Mode: ifc.Mode, Gone: slices.Contains(gone, ifc)}
		if l := a.Links[ifc.Index]; l != nil {
			if li, err := l.Info(); err == nil {
				is.Link = uint32(li.ID)
			}
		}
		st.Ifaces = append(st.Ifaces, is)
	}
	if m.HoldsConntrack() {
		held, err := loader.ConntrackHeld()
		st.ConntrackHeld = &held
		switch {
		case err != nil:
			return filterStatus{}, err
		case held:
			st.Conntrack = fmt.Sprintf("on: the rules test the conntrack state; nftables table inet %s keeps conntrack tracking in this namespace", loader.ConntrackTable)
		default:
			st.Conntrack = fmt.Sprintf("missing: the rules test the conntrack state, but nftables table inet %s is gone; load the rule set again", loader.ConntrackTable)
		}
	}
	if st.Netfilter, err = a.Netfilter(); err != nil {
		return filterStatus{}, err
	}
	if st.ChainHook, err = a.ChainHook(); err != nil {
		return filterStatus{}, err
	}
	if logs := m.LogRules(); len(logs) > 0 {
		lost, err := a.LogLost()
		if err != nil {
			return filterStatus{}, err
		}
		st.Log = &logStatus{Rules: len(logs), Lost: lost}
	}
	if st.Recent, err = a.RecentTables(); err != nil {
		return filterStatus{}, err
	}
	c, err := a.Counters()
	if err != nil {
		return filterStatus{}, err
	}
	for _, rc := range c[:len(c)-1] {
		if rc.Packets > 0 {
			st.Counters.RulesHit++
		}
		st.Counters.RulePackets += rc.Packets
		st.Counters.RuleBytes += rc.Bytes
	}
	if last := c[len(c)-1]; p.Accelerator() {
		st.Counters.DroppedPackets, st.Counters.DroppedBytes = last.Packets, last.Bytes
	} else {
		st.Counters.PolicyPackets, st.Counters.PolicyBytes = last.Packets, last.Bytes
	}
	if st.Policy, st.RuleCounters, err = ruleCounters(&m, c, withRules); err != nil {
		return filterStatus{}, err
	}
	if p.Hook == codegen.HookSkLookup {
		if st.Sockets, err = lookupSockets(a); err != nil {
			return filterStatus{}, err
		}
	}
	return st, nil
}

func printStatus(w io.Writer, st filterStatus) {
	level := st.Level
	if level == "" {
		level = "level unknown"
	}
	fmt.Fprintf(w, "netns %d %s: program %d tag %s, %d rules of %s %s, %s, %d instructions, %d processed by the verifier\n",
		st.NetNS, st.Hook, st.Program, st.Tag, st.Rules, st.Table, st.Chain, level, st.Instructions, st.VerifiedInsns)
	fmt.Fprintf(w, "  loaded %s from %s\n", st.LoadedAt.Local().Format(time.DateTime), st.File)
	var ifs []string
	gone := 0
	for _, ifc := range st.Ifaces {
		s := fmt.Sprintf("%s (ifindex %d, link %d", ifc.Name, ifc.Index, ifc.Link)
		if ifc.Mode != "" {
			s += ", " + ifc.Mode
		}
		if ifc.Gone {
			s += ", gone: deleted or moved to another namespace"
			gone++
		}
		ifs = append(ifs, s+")")
	}
	switch h := st.ChainHook; {
	case h != nil:
		fmt.Fprintf(w, "  runs at netfilter %s %s, priority %d (link %d, dispatcher program %d), for every packet of the network namespace\n",
			h.Family, h.Hook, h.Priority, h.Link, h.Dispatcher)
	case st.Hook == "accelerator":
		var names []string
		for _, ifc := range st.Ifaces {
			names = append(names, ifc.Name)
		}
		fmt.Fprintf(w, "  runs at xdp on %s, in front of the chains at their netfilter hooks: it drops what filter INPUT and FORWARD would drop, and passes the rest to them\n", strings.Join(names, ", "))
		c := st.Counters
		fmt.Fprintf(w, "  dropped %d packets %d bytes at xdp (bpfwall save -c counts them with what the chains saw)\n", c.DroppedPackets, c.DroppedBytes)
		return
	default:
		fmt.Fprintf(w, "  attached to %s\n", strings.Join(ifs, ", "))
	}
	if gone > 0 && gone == len(st.Ifaces) {
		fmt.Fprintf(w, "  every interface is gone: the filter filters nothing; the next restore, or bpfwall unload --hook %s, removes it\n", st.Hook)
	}
	c := st.Counters
	fmt.Fprintf(w, "  counters: %d of %d rules matched, %d packets %d bytes; policy %d packets %d bytes\n",
		c.RulesHit, st.Rules, c.RulePackets, c.RuleBytes, c.PolicyPackets, c.PolicyBytes)
	printSockets(w, st.Sockets)
	if st.Conntrack != "" {
		fmt.Fprintf(w, "  conntrack %s\n", st.Conntrack)
	}
	if nf := st.Netfilter; nf != nil {
		fmt.Fprintf(w, "  netfilter stage attached: link %d, program %d, %s %s priority %d (after conntrack), for ifindexes %v\n",
			nf.Link, nf.Program, nf.Family, nf.Hook, nf.Priority, nf.Ifaces)
		fmt.Fprintf(w, "    %d packets deferred (state only conntrack knows), %d evaluated after conntrack, %d REJECTs dropped without a reply\n",
			nf.Counts.Deferred, nf.Counts.Evaluated, nf.Counts.RejectDropped)
		var ups, later []string
		for _, u := range nf.Uppers {
			ups = append(ups, fmt.Sprintf("%s (%d)", u.Name, u.Index))
		}
		for _, u := range nf.NotFollowed {
			later = append(later, fmt.Sprintf("%s (%d)", u.Name, u.Index))
		}
		if len(ups) > 0 {
			fmt.Fprintf(w, "    upper devices evaluated too: %s\n", strings.Join(ups, ", "))
		}
		fmt.Fprintln(w, "    upper devices (VLAN, macvlan, ipvlan, bond, team, bridge) created after the load are not followed until the next load or restore")
		if len(later) > 0 {
			fmt.Fprintf(w, "    warning: not followed, created since the load: %s: their packets of class U pass unevaluated; load or restore again\n", strings.Join(later, ", "))
		}
	}
	if st.Log != nil {
		fmt.Fprintf(w, "  log: %d LOG rules, %d events lost to a full ring buffer (read them with bpfwall log)\n", st.Log.Rules, st.Log.Lost)
	}
	for _, t := range st.Recent {
		fmt.Fprintf(w, "  recent table %s: %d of %d addresses\n", t.Name, t.Entries, ir.RecentListTot)
	}
}

// ruleCounters returns the entry chain's policy and, with withRules, the
// counters c of each rule the program m describes compiled, in rule ID
// order.
func ruleCounters(m *loader.Meta, c []abi.Counter, withRules bool) (string, []ruleCounter, error) {
	if !withRules {
		return policyOf(m), nil, nil
	}
	rs, err := activeRuleset(m)
	if err != nil {
		return "", nil, fmt.Errorf("read the active rule set: %w", err)
	}
	t := rs.Table(m.Table)
	if t == nil {
		return "", nil, fmt.Errorf("read the active rule set: no table %s", m.Table)
	}
	policy := "-"
	if ch := t.Chain(m.Chain); ch != nil {
		policy = ch.Policy.String()
	}
	type placed struct {
		chain string
		rule  *rules.Rule
	}
	byLine := make(map[int]placed)
	policies := make(map[int]*rules.Chain) // an accelerator's policies, by the chains' lines
	for _, ch := range t.Chains {
		if ch.Builtin && m.Chain == loader.AcceleratorChain {
			policies[ch.Pos.Line] = ch
		}
		for _, r := range ch.Rules {
			byLine[r.Pos.Line] = placed{ch.Name, r}
		}
	}
	out := make([]ruleCounter, len(m.Lines))
	seen := make(map[string]int)
	for id, line := range m.Lines {
		if line == 0 && m.Chain == loader.AcceleratorChain {
			// A rule an accelerator adds: the stack decides what it
			// matches.
			out[id] = ruleCounter{Rule: fmt.Sprintf("accelerator#%d", id), Chain: m.Chain, Packets: c[id].Packets, Bytes: c[id].Bytes}
			continue
		}
		if ch := policies[line]; ch != nil {
			out[id] = ruleCounter{Rule: "policy", Chain: ch.Name, Target: ch.Policy.String(), Line: line, Packets: c[id].Packets, Bytes: c[id].Bytes}
			continue
		}
		pl, ok := byLine[line]
		if !ok {
			return "", nil, fmt.Errorf("read the active rule set: rule %d is not on line %d", id, line)
		}
		origin := fmt.Sprintf("%s:%d", activeName, line)
		if id < len(m.Origins) {
			origin = m.Origins[id]
		}
		seen[origin]++
		if n := seen[origin]; n > 1 {
			origin += "#" + strconv.Itoa(n)
		}
		target := ""
		if pl.rule.Target != nil {
			target = pl.rule.Target.Name()
		}
		out[id] = ruleCounter{Rule: origin, Chain: pl.chain, Target: target, Line: line, Packets: c[id].Packets, Bytes: c[id].Bytes}
	}
	return policy, out, nil
}

// policyOf is the entry chain's policy, from its line in m.Source, which
// is iptables-save text: a status need not parse a large rule set.
func policyOf(m *loader.Meta) string {
	table := false
	for _, line := range strings.Split(m.Source, "\n") {
		switch {
		case strings.HasPrefix(line, "*"):
			table = line[1:] == m.Table
		case table && strings.HasPrefix(line, ":"+m.Chain+" "):
			if f := strings.Fields(line); len(f) > 1 {
				return f[1]
			}
		}
	}
	return "-"
}
