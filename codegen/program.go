package codegen

import (
	"fmt"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"

	"bpfwall/codegen/abi"
	"bpfwall/codegen/reject"
	"bpfwall/codegen/sklookup"
	"bpfwall/internal/mapkv"
	"bpfwall/ir"
	"bpfwall/rules"
)

// Level is an optimization level. Its zero value is the default, -O1, so
// that Options which name no level never select the plain program.
type Level uint8

const (
	// O1 runs the ir passes and classifies runs of rules with map
	// lookups: the default.
	O1 Level = iota
	// O0 is the plain rule-by-rule program, the baseline.
	O0
	numLevels
)

// Levels are the optimization levels, the plain one first.
var Levels = []Level{O0, O1}

// ParseLevel returns the level -On names.
func ParseLevel(n int) (Level, error) {
	switch n {
	case 0:
		return O0, nil
	case 1:
		return O1, nil
	}
	return 0, fmt.Errorf("optimization level -O%d does not exist (only -O0 and -O1)", n)
}

// Number is the level's n in -On.
func (l Level) Number() int {
	if l == O0 {
		return 0
	}
	return 1
}

func (l Level) String() string { return fmt.Sprintf("-O%d", l.Number()) }

// Options control compilation. The zero value (but for Hook) compiles
// what a user gets by default.
type Options struct {
	Hook Hook
	// Level is the optimization level; the zero value is -O1.
	Level Level
	// ForceLookups makes -O1 classify every run of rules it can, however
	// short, and look every table up in a map, whatever the cost: for
	// tests of the classifier on small rule sets.
	ForceLookups bool
	// Trace records how each packet was decided in abi.DecisionMap, for
	// trace and the test runs that ask (loader.Loaded.Run). The zero
	// value, what restore and load attach, records nothing: a per-packet
	// map write that only trace reads.
	Trace bool
	// Accelerate compiles an accelerator (Accelerator's program) for
	// HookXDP: it passes what it cannot judge as the chains would.
	Accelerate bool
}

// Program is a compiled rule set: a pure, deterministic description;
// nothing is loaded.
type Program struct {
	// Spec holds the program abi.ProgramName and the maps abi.CountersMap,
	// abi.DecisionMap (with Options.Trace), abi.IfacesMap and abi.ScratchMap, abi.LogMap and abi.LogLostMap when
	// there are LOG rules, and at -O1 the classifier's tables; address
	// sets are LPM tries. Those maps come with their contents.
	Spec *ebpf.CollectionSpec
	IR   *ir.Program
	Hook Hook
	// Ifaces are the interface patterns (Name, Prefix; Dir and Neg are
	// ignored) of the -i (xdp, tc-ingress) or -o (tc-egress) matches: bit i
	// of an abi.IfacesMap value means "this interface's name matches
	// Ifaces[i]".
	Ifaces []ir.Iface

	Level Level
	// Accelerator is set for an accelerator (Options.Accelerate), which
	// looks every TCP and UDP packet up in conntrack.
	Accelerator bool
	// Classified is how many of the rules (after the ir passes) the
	// classifier decides by its tables rather than in plain code.
	Classified int

	// Warnings say, rule by rule, where the program knows less than
	// netfilter by design, so that some packets may get another verdict
	// (see ingressStateWarnings and stageRejectWarnings).
	Warnings []*rules.Error

	// Netfilter is the netfilter stage of an xdp or tc-ingress program
	// that tests the conntrack state (netfilter.go): it decides the
	// packets this program defers. It shares this program's maps; nil
	// for other programs.
	Netfilter *Program

	// unreachable lists the rules that have no code: no packet reaches them.
	unreachable []*ir.Rule
	// removed lists the rules the ir passes removed.
	removed []ir.Removal

	// uses is what the loader asks of the rules' matches, found in one
	// walk over them when the program is compiled: a walk per question
	// was 80 ms of a 100k-rule restore.
	uses usedMatches

	// flats are the arrays the contents of the classifier's maps view
	// (FlatContents).
	flats map[string][]mapkv.Flat
}

// FlatContents returns the arrays whose views are the contents of map
// name in Spec, in order, when they are such arrays (the classifier's
// tables and bucket arrays): a loader may write batches of entries
// straight from them, where it would copy each batch out of the MapKVs.
// Nil for other maps.
func (p *Program) FlatContents(name string) []mapkv.Flat { return p.flats[name] }

// usedMatches are the stateful matches of a program's rules.
type usedMatches struct {
	conntrack bool
	recent    []RecentTable
	hashLimit []HashLimitTable
}

// matchesOf walks the matches of p's rules.
func matchesOf(p *ir.Program) usedMatches {
	var u usedMatches
	for _, r := range p.Rules {
		for _, m := range r.Matches {
			if _, ok := m.(ir.CTState); ok {
				u.conntrack = true
			}
			if m, ok := m.(ir.Recent); ok {
				for len(u.recent) <= m.Table {
					u.recent = append(u.recent, RecentTable{})
				}
				u.recent[m.Table] = RecentTable{Name: m.Name, Map: abi.RecentMap(m.Table), Stamps: m.Stamps, Mask: m.Mask}
			}
			if m, ok := m.(ir.HashLimit); ok {
				for len(u.hashLimit) <= m.Table {
					u.hashLimit = append(u.hashLimit, HashLimitTable{})
				}
				if u.hashLimit[m.Table].Map == "" {
					cfg := m
					cfg.Table, cfg.Name, cfg.Pos, cfg.Above = 0, "", rules.Pos{}, false
					u.hashLimit[m.Table] = HashLimitTable{Name: m.Name, Map: abi.HashLimitMap(m.Table), Config: cfg, Pos: m.Pos}
				}
			}
		}
	}
	return u
}

// xdpHasFrags is BPF_F_XDP_HAS_FRAGS.
const xdpHasFrags = 1 << 5

// ifacesMapSize is how many interfaces abi.IfacesMap can describe.
const ifacesMapSize = 4096

// maxInstructions is the kernel's limit on the size of a program
// (BPF_COMPLEXITY_LIMIT_INSNS).
const maxInstructions = 1_000_000

// maxChainDepth is how deeply chains can nest: the main function and the
// entry chain take two of the eight call frames BPF allows.
const maxChainDepth = 6

// Compile compiles p for opts.Hook. Rules the hook cannot express are
// errors at their positions, collected in a rules.ErrorList.
func Compile(p *ir.Program, opts Options) (*Program, error) {
	if !opts.Hook.valid() || opts.Hook == HookStage {
		return nil, fmt.Errorf("compile: unknown hook %d", opts.Hook)
	}
	if opts.Accelerate && opts.Hook != HookXDP {
		return nil, fmt.Errorf("compile: an accelerator runs at xdp, not %s", opts.Hook)
	}
	if opts.Level >= numLevels {
		return nil, fmt.Errorf("compile for %s: optimization level %d does not exist (only -O0 and -O1)", opts.Hook, opts.Level)
	}
	if err := ir.Verify(p); err != nil {
		return nil, fmt.Errorf("compile for %s: invalid program: %w", opts.Hook, err)
	}
	orig := p
	if opts.Level != O0 {
		var err error
		if p, err = ir.Optimize(p, ir.OptimizeOptions{}); err != nil {
			return nil, fmt.Errorf("compile for %s: %w", opts.Hook, err)
		}
	}
	build := func(callParse bool) (*compiler, asm.Instructions, error) {
		c := newCompiler(p, orig, opts.Hook, opts.Level, opts.ForceLookups, opts.Trace)
		c.callParse = callParse
		if opts.Accelerate {
			// The route lookup takes the TOS, and finds the output
			// device after the tables.
			c.accel, c.readsDSCP, c.cls.NoOutIface = true, true, true
		}
		c.log = c.hasLog()
		c.check()
		if err := c.errs.Err(); err != nil {
			return nil, nil, err
		}
		insns, err := c.program()
		if err != nil {
			return nil, nil, fmt.Errorf("compile for %s: %w", opts.Hook, err)
		}
		return c, insns, nil
	}
	c, insns, err := build(false)
	if err != nil {
		return nil, err
	}
	if depth, _ := stackDepth(insns, frameGranule); c.inlineParse && depth > maxStack {
		// main's frame holds the parser's slots too: with chains that
		// nest deep, the call chain would not fit the stack.
		if c, insns, err = build(true); err != nil {
			return nil, err
		}
	}
	insns, removed, err := eliminateDeadCode(insns)
	if err != nil {
		return nil, fmt.Errorf("compile for %s: %w", opts.Hook, err)
	}
	if depth, path := stackDepth(insns, jitFrameGranule); depth > maxStack && path != nil {
		// Every verifier refuses it: a rule set whose chains nest too
		// deep is refused at the jump, which restore can delegate. (A
		// frame stackDepth cannot measure, it has no path for: the
		// verifier decides.)
		return nil, c.stackError(depth, path)
	}
	if n := rawLen(insns); n > maxInstructions {
		msg := fmt.Sprintf("%d rules make %d instructions, more than the %d a BPF program may have", len(p.Rules), n, maxInstructions)
		if entry := orig.Chains[0]; len(entry.Rules) > 0 {
			// At the chain's first rule: restore delegates the chain, as
			// it does a rule it cannot compile.
			return nil, rules.Errorf(entry.Rules[0].Pos, "compile chain %s for %s: %s", entry.Name, opts.Hook, msg)
		}
		return nil, fmt.Errorf("compile for %s: %s", opts.Hook, msg)
	}
	out := &Program{
		IR:          orig,
		Hook:        opts.Hook,
		Level:       opts.Level,
		Accelerator: c.accel,
		Ifaces:      c.ifaces,
		Spec:        c.spec(insns),
		Classified:  c.cls.Classified(),
		flats:       c.cls.Flats(),
		removed:     origRemovals(orig, p.Removed),
		uses:        matchesOf(orig),
	}
	if !c.accel {
		out.Warnings = ingressStateWarnings(p, opts.Hook)
	}
	if c.defers() {
		if out.Netfilter, err = c.compileStage(); err != nil {
			return nil, fmt.Errorf("compile the netfilter stage of %s: %w", opts.Hook, err)
		}
		out.Warnings = append(out.Warnings, stageRejectWarnings(p)...)
		rules.ErrorList(out.Warnings).Sort()
	}
	for _, r := range p.Rules {
		if removed[c.b.Canonical(ruleLabel(r))] {
			out.unreachable = append(out.unreachable, orig.Rules[r.ID])
		}
	}
	return out, nil
}

// origRemovals are the passes' removals rms, of the optimized copy of
// orig, as orig's rules: the Program keeps no pointer into the copy,
// whose rules hold their cached forms, so that the copy is garbage once
// Compile returns (a quarter of a 100k-rule compile's heap).
func origRemovals(orig *ir.Program, rms []ir.Removal) []ir.Removal {
	out := make([]ir.Removal, len(rms))
	for i, rm := range rms {
		out[i] = ir.Removal{Rule: orig.Rules[rm.Rule.ID], CoveredBy: orig.Rules[rm.CoveredBy.ID]}
	}
	return out
}

func (c *compiler) spec(insns asm.Instructions) *ebpf.CollectionSpec {
	typ, attach := ebpf.XDP, ebpf.AttachXDP
	switch c.hook {
	case HookTCIngress:
		typ, attach = ebpf.SchedCLS, ebpf.AttachTCXIngress
	case HookTCEgress:
		typ, attach = ebpf.SchedCLS, ebpf.AttachTCXEgress
	case HookSkLookup:
		typ, attach = ebpf.SkLookup, ebpf.AttachSkLookup
	case HookNetfilter, HookStage:
		typ, attach = ebpf.Netfilter, ebpf.AttachNetfilter
	}
	var flags uint32
	if c.hook == HookXDP {
		// Every packet byte is read with bpf_xdp_load_bytes, which sees
		// all the buffers of a multi-buffer frame: the program may be
		// attached where frames are larger than a page.
		flags = xdpHasFrags
	}
	spec := &ebpf.CollectionSpec{
		Programs: map[string]*ebpf.ProgramSpec{
			abi.ProgramName: {
				Name:         c.objectName()[:min(len(c.objectName()), 15)],
				Type:         typ,
				AttachType:   attach,
				Flags:        flags,
				License:      "GPL",
				Instructions: farJumps(insns),
			},
		},
		Maps: map[string]*ebpf.MapSpec{
			abi.CountersMap: {
				Name:       abi.CountersMap,
				Key:        btfU32,
				Value:      btfCounterBlock,
				Type:       ebpf.PerCPUArray,
				KeySize:    4,
				ValueSize:  abi.CounterBlockSize,
				MaxEntries: uint32(abi.CounterBlocks(len(c.p.Rules) + 1)),
			},
			abi.ScratchMap: {
				Name:       abi.ScratchMap,
				Type:       ebpf.PerCPUArray,
				KeySize:    4,
				ValueSize:  scratchSize,
				MaxEntries: 1,
			},
			abi.IfacesMap: {
				Name:       abi.IfacesMap,
				Key:        btfU32,
				Value:      btfIfaceMask,
				Type:       ebpf.Hash,
				KeySize:    4,
				ValueSize:  8,
				MaxEntries: ifacesMapSize,
			},
		},
	}
	if c.ifaceSlots() {
		spec.Maps[abi.IfaceSlotsMap] = &ebpf.MapSpec{
			Name:       abi.IfaceSlotsMap,
			Key:        btfU32,
			Value:      btfIfaceSlot,
			Type:       ebpf.Array,
			KeySize:    4,
			ValueSize:  16,
			MaxEntries: abi.IfaceSlots,
		}
	}
	if c.trace {
		spec.Maps[abi.DecisionMap] = &ebpf.MapSpec{
			Name:       abi.DecisionMap,
			Key:        btfU32,
			Value:      btfDecision,
			Type:       ebpf.PerCPUArray,
			KeySize:    4,
			ValueSize:  8,
			MaxEntries: 1,
		}
	}
	for _, m := range c.maps {
		spec.Maps[m.Name] = m
	}
	if c.log {
		for _, m := range logMaps() {
			spec.Maps[m.Name] = m
		}
	}
	if c.hook == HookSkLookup {
		for _, m := range sklookup.Maps(c.p.Family, c.p.Rules) {
			spec.Maps[m.Name] = m
		}
	}
	for _, m := range c.rejectMaps() {
		spec.Maps[m.Name] = m
	}
	for _, m := range c.stageMaps() {
		spec.Maps[m.Name] = m
	}
	return spec
}

// Size is the number of instructions of the main program, as the
// loader records it (Meta.Instructions) and status and restore -v show it.
func (p *Program) Size() int {
	if spec := p.Spec.Programs[abi.ProgramName]; spec != nil {
		return len(spec.Instructions)
	}
	return 0
}

// IfaceMask returns the abi.IfacesMap value of an interface called name: the
// patterns of Ifaces that its name matches.
func (p *Program) IfaceMask(name string) uint64 {
	var mask uint64
	for i, pat := range p.Ifaces {
		if ifaceMatches(pat, name) {
			mask |= 1 << i
		}
	}
	return mask
}

// PutIface records in maps, the program's, which of its interface
// patterns the name of interface ifindex matches: in abi.IfacesMap, and
// in abi.IfaceSlotsMap when the program has it and the interface's slot
// is free or its own.
func (p *Program) PutIface(maps map[string]*ebpf.Map, ifindex uint32, name string) error {
	mask := p.IfaceMask(name)
	if err := maps[abi.IfacesMap].Put(ifindex, mask); err != nil {
		return err
	}
	slots := maps[abi.IfaceSlotsMap]
	if slots == nil {
		return nil
	}
	key := ifindex % abi.IfaceSlots
	var slot abi.IfaceSlot
	if err := slots.Lookup(key, &slot); err != nil {
		return err
	}
	if slot.Ifindex != 0 && slot.Ifindex != ifindex {
		return nil // the program finds it in abi.IfacesMap
	}
	return slots.Put(key, abi.IfaceSlot{Ifindex: ifindex, Mask: mask})
}

// ifaceMatches is ifname_compare_aligned's test of one pattern.
func ifaceMatches(pat ir.Iface, name string) bool {
	if pat.Prefix {
		return len(name) >= len(pat.Name) && name[:len(pat.Name)] == pat.Name
	}
	return name == pat.Name
}

// check reports every rule the hook cannot express, and chains nested more
// deeply than the call frames allow.
func (c *compiler) check() {
	for _, r := range c.p.Rules {
		for _, m := range r.Matches {
			if what := c.unsupportedMatch(m); what != "" {
				c.errs = append(c.errs, rules.Errorf(r.Pos, "%s is not supported on %s", what, c.hook))
			}
			if m, ok := m.(ir.Iface); ok && c.unknownIface(m) {
				flag, which := "-o", "output"
				if m.Dir == ir.IfaceIn {
					flag, which = "-i", "input"
				}
				c.errs = append(c.errs, rules.Errorf(r.Pos, "%s is not supported on %s in chain %s: the hook does not know the %s interface",
					flag, c.hook, c.p.Chains[0].Name, which))
			}
		}
		switch a := r.Action.(type) {
		case ir.Accept, ir.Drop, ir.Return, ir.Jump, ir.Goto, ir.None:
		case ir.TProxy:
			if c.hook != HookSkLookup {
				c.errs = append(c.errs, rules.Errorf(r.Pos, "TPROXY target is only supported on sk-lookup"))
			}
		case ir.Reject:
			if c.hook == HookStage {
				break // dropped: stageRejectWarnings
			}
			if c.hook == HookNetfilter {
				// The kernel's REJECT answers (nfchain.go).
				if !reject.Valid(a.With, c.p.Family == rules.IPv6) {
					c.errs = append(c.errs, rules.Errorf(r.Pos, "REJECT --reject-with %s is not supported for %s", a.With, c.p.Family))
				}
				break
			}
			if why := c.checkReject(a); why != "" {
				c.errs = append(c.errs, rules.Errorf(r.Pos, "%s", why))
			}
		case ir.Log:
			if c.hook == HookSkLookup {
				c.errs = append(c.errs, rules.Errorf(r.Pos, "LOG target is not supported on sk-lookup: a socket lookup has no packet to log"))
			} else if what := c.checkLog(r, a); what != "" {
				c.errs = append(c.errs, rules.Errorf(r.Pos, "%s", what))
			}
		default:
			c.errs = append(c.errs, rules.Errorf(r.Pos, "action %T is not supported on %s", a, c.hook))
		}
	}
	c.checkDepth()
}

func (c *compiler) unsupportedMatch(m ir.Match) string {
	return codeOf(m).unsupportedAt(c, m)
}

// skbHook reports whether the program sees the packet's sk_buff: a tc
// program, or the netfilter stage of one.
func (c *compiler) skbHook() bool {
	return c.hook.tc() || c.hook == HookNetfilter || c.hook == HookStage && c.ingress.tc()
}

// unknownIface reports whether m tests the interface the hook does not
// know, in a chain where netfilter does know it: the hook's program sees
// an empty name only where netfilter does too (no output interface in
// PREROUTING and INPUT, no input interface in OUTPUT).
func (c *compiler) unknownIface(m ir.Iface) bool {
	if c.knowsIface(m.Dir) || (m.Name == "" && m.Prefix) {
		return false // known, or "+", which every name matches
	}
	if c.hook == HookNetfilter {
		return false // netfilter gives the chain the same empty name
	}
	switch c.p.Chains[0].Name {
	case "PREROUTING", "INPUT":
		return m.Dir != ir.IfaceOut
	case "OUTPUT":
		return m.Dir != ir.IfaceIn
	}
	return true
}

// checkDepth reports the first jump or goto of every path through the
// chains that nests more than maxChainDepth chains below the entry chain.
func (c *compiler) checkDepth() {
	depth := make([]int, len(c.p.Chains)) // deepest nesting below each chain, memoized
	done := make([]bool, len(c.p.Chains))
	var below func(ci int) int
	below = func(ci int) int {
		if done[ci] {
			return depth[ci]
		}
		d := 0
		for _, r := range c.p.Chains[ci].Rules {
			if to, ok := ir.JumpTarget(r.Action); ok {
				d = max(d, 1+below(to))
			}
		}
		depth[ci], done[ci] = d, true
		return d
	}
	// Report at the jumps that lead deeper than allowed, from the entry.
	var report func(ci, level int)
	seen := make(map[int]bool)
	report = func(ci, level int) {
		for _, r := range c.p.Chains[ci].Rules {
			to, ok := ir.JumpTarget(r.Action)
			if !ok || level+below(to) < maxChainDepth {
				continue
			}
			if level+1 > maxChainDepth {
				if !seen[r.ID] {
					seen[r.ID] = true
					c.errs = append(c.errs, rules.Errorf(r.Pos, "jump to %s nests chains %d deep; bpfwall supports %d nested jumps and gotos below %s (BPF allows 8 call frames)",
						c.p.Chains[to].Name, level+1, maxChainDepth, c.p.Chains[0].Name))
				}
				continue
			}
			report(to, level+1)
		}
	}
	if below(0) > maxChainDepth {
		report(0, 0)
	}
}

// rawLen is the number of 8-byte instructions in insns.
func rawLen(insns asm.Instructions) int {
	n := 0
	for _, ins := range insns {
		n += int(ins.Size() / 8)
	}
	return n
}
