package loader

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"

	"bpfwall/codegen"
	"bpfwall/codegen/abi"
	"bpfwall/codegen/reject"
	"bpfwall/rules"
)

// A chain at its own netfilter hook (codegen.HookNetfilter) is a filter
// of its own, one per family, table and builtin chain, pinned under
// netfilter-FAMILY-TABLE-CHAIN. Its netfilter link, attached at the
// chain's hook and its table's priority, runs a dispatcher: a program of
// three instructions that tail-calls the filter's program through a
// PROG_ARRAY of one slot. Netfilter links cannot change their program
// (BPF_LINK_UPDATE is EOPNOTSUPP) and netfilter refuses a second BPF
// program at a priority one holds (EBUSY), so a swap cannot attach the
// new program beside the old one at the table's place; it writes the new
// program into the slot instead, which the kernel does in one step. A
// packet runs the old program or the new one, never both, never neither.
// The dispatcher and its slot are carried from swap to swap, as the link.
const (
	pinDispatcher = "dispatcher"
	pinDispatch   = "dispatch"
)

// NetfilterChain is a builtin chain bpfwall runs at its own netfilter
// hook.
type NetfilterChain struct {
	Table, Chain string
	Hook         link.NetfilterInetHook
	Priority     int32
}

// A chain runs just below its table's priority: the kernel's own table
// of that name (an iptables or nft table, or one bpfwall delegated) holds
// the table's priority, and it must run after the chain, since it answers
// the chain's REJECT rules (EnsureAnswers). At one priority, netfilter
// runs the hook function registered last first (nf_hook_entries_grow), so
// at its table's priority a chain would run after a kernel table that a
// later restore creates, which would then see no REJECT to answer: the
// packet would pass. Netfilter also refuses a BPF program at a priority
// that any other hook function holds (EBUSY). The chain takes the nearest
// free priority below its table's within slack, which keeps it between
// the same neighbours: conntrack (-200), nat (-100 before routing, 100
// after) and security (50) are farther away than slack.
const prioritySlack = 40

// priorities are the priorities the chain may take, nearest first.
func (c NetfilterChain) priorities() []int32 {
	var out []int32
	for d := int32(1); d <= prioritySlack; d++ {
		out = append(out, c.Priority-d)
	}
	return out
}

// NetfilterChains are the chains bpfwall runs at their netfilter hooks, in
// the order netfilter runs them: by hook, then by the tables' priorities
// (NF_IP_PRI_RAW -300, NF_IP_PRI_MANGLE -150, NF_IP_PRI_FILTER 0; IPv6's
// are the same). The nat table is not among them: no BPF program rewrites
// addresses here.
var NetfilterChains = []NetfilterChain{
	{"raw", "PREROUTING", link.NetfilterInetPreRouting, -300},
	{"mangle", "PREROUTING", link.NetfilterInetPreRouting, -150},
	{"mangle", "INPUT", link.NetfilterInetLocalIn, -150},
	{"filter", "INPUT", link.NetfilterInetLocalIn, 0},
	{"mangle", "FORWARD", link.NetfilterInetForward, -150},
	{"filter", "FORWARD", link.NetfilterInetForward, 0},
	{"raw", "OUTPUT", link.NetfilterInetLocalOut, -300},
	{"mangle", "OUTPUT", link.NetfilterInetLocalOut, -150},
	{"filter", "OUTPUT", link.NetfilterInetLocalOut, 0},
	{"mangle", "POSTROUTING", link.NetfilterInetPostRouting, -150},
}

// LookupNetfilterChain returns where netfilter runs chain of table.
func LookupNetfilterChain(table, chain string) (NetfilterChain, bool) {
	for _, c := range NetfilterChains {
		if c.Table == table && c.Chain == chain {
			return c, true
		}
	}
	return NetfilterChain{}, false
}

// ChainPlace is the place of chain of table, for family, at its own
// netfilter hook in network namespace ns.
func ChainPlace(root string, ns uint64, family rules.Family, table, chain string) Place {
	return Place{Root: root, NetNS: ns, Hook: codegen.HookNetfilter, Family: family, Table: table, Chain: chain}
}

// allPlaces are the places a filter of network namespace ns can have: the
// hooks of Hooks, then every netfilter chain of both families, each
// family's followed by its accelerator.
func allPlaces(root string, ns uint64) []Place {
	var out []Place
	for _, h := range Hooks {
		out = append(out, Place{Root: root, NetNS: ns, Hook: h})
	}
	for _, fam := range []rules.Family{rules.IPv4, rules.IPv6} {
		for _, c := range NetfilterChains {
			out = append(out, ChainPlace(root, ns, fam, c.Table, c.Chain))
		}
		out = append(out, AcceleratorPlace(root, ns, fam))
	}
	return out
}

// newDispatch makes the dispatcher of a chain's netfilter link and its
// slot, empty: the swap's Switch fills it.
func newDispatch(name string) (*ebpf.Program, *ebpf.Map, error) {
	slot, err := ebpf.NewMap(&ebpf.MapSpec{Name: "bpfwall_slot", Type: ebpf.ProgramArray, KeySize: 4, ValueSize: 4, MaxEntries: 1})
	if err != nil {
		return nil, nil, fmt.Errorf("dispatcher slot: %w", err)
	}
	disp, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Name:       name[:min(len(name), 15)],
		Type:       ebpf.Netfilter,
		AttachType: ebpf.AttachNetfilter,
		License:    "GPL",
		Instructions: asm.Instructions{
			asm.LoadMapPtr(asm.R2, slot.FD()),
			asm.Mov.Imm(asm.R3, 0),
			asm.FnTailCall.Call(),
			// An empty slot: the chain of a swap not switched yet, or
			// aborted, passes packets as when nothing ran there. A swap
			// that replaces a program never empties the slot.
			asm.Mov.Imm(asm.R0, nfAccept),
			asm.Return(),
		},
	})
	if err != nil {
		slot.Close()
		return nil, nil, fmt.Errorf("dispatcher: %w", err)
	}
	return disp, slot, nil
}

// attachChain attaches the dispatcher disp of the chain at p with a
// netfilter link at the chain's hook and its table's priority; defrag
// holds defragmentation for the link, for a program that tests the
// conntrack state (conntrack sees reassembled datagrams).
func attachChain(disp *ebpf.Program, p Place, defrag bool) (link.Link, error) {
	c, ok := LookupNetfilterChain(p.Table, p.Chain)
	if !ok {
		return nil, fmt.Errorf("%s %s does not run at a netfilter hook", p.Table, p.Chain)
	}
	pf := link.NetfilterProtoIPv4
	if p.Family == rules.IPv6 {
		pf = link.NetfilterProtoIPv6
	}
	var flags link.NetfilterAttachFlags
	if defrag {
		flags = bpfNetfilterIPDefrag
	}
	var err error
	for _, prio := range c.priorities() {
		var l link.Link
		l, err = link.AttachNetfilter(link.NetfilterOptions{Program: disp, ProtocolFamily: pf, Hook: c.Hook, Priority: prio, NetfilterFlags: flags})
		if err == nil {
			return l, nil
		}
		if !errors.Is(err, unix.EBUSY) {
			break
		}
	}
	if errors.Is(err, unix.EBUSY) {
		return nil, fmt.Errorf("attach %s: every priority within %d of %d is held by another hook function: %w", p.Name(), prioritySlack, c.Priority, err)
	}
	return nil, fmt.Errorf("attach %s: %w", p.Name(), err)
}

// dispatchUpdate returns the Swap.Update of a chain whose slot is slot:
// it writes new into the slot, if the slot holds old.
func dispatchUpdate(slot *ebpf.Map) func(_ link.Link, new, old *ebpf.Program) error {
	return func(_ link.Link, new, old *ebpf.Program) error {
		var running ebpf.ProgramID
		if err := slot.Lookup(uint32(0), &running); err != nil {
			return fmt.Errorf("dispatcher slot: %w", err)
		}
		if want := programID(old); running != want {
			return fmt.Errorf("dispatcher slot runs program %d, not %d: %w", running, want, ErrReplaced)
		}
		if err := slot.Put(uint32(0), new); err != nil {
			return fmt.Errorf("dispatcher slot: %w", err)
		}
		return nil
	}
}

// finishDispatch makes the slot pinned in dir, if any, hold prog: what
// finishSwap does to the links of other hooks. ok is false without one.
func finishDispatch(dir string, prog *ebpf.Program) (ok bool, err error) {
	slot, err := ebpf.LoadPinnedMap(filepath.Join(dir, pinDispatch), nil)
	if errors.Is(err, os.ErrNotExist) {
		slot, err = ebpf.LoadPinnedMap(filepath.Join(dir, pinDispatch+newSuffix), nil)
	}
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	defer slot.Close()
	return true, slot.Put(uint32(0), prog)
}

// openDispatchPins opens the dispatcher and its slot pinned in dir, if
// any.
func (a *Active) openDispatchPins(dir string) error {
	disp, err := ebpf.LoadPinnedProgram(filepath.Join(dir, pinDispatcher), nil)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	a.dispatcher = disp
	slot, err := ebpf.LoadPinnedMap(filepath.Join(dir, pinDispatch), nil)
	if err != nil {
		return err
	}
	a.maps[pinDispatch] = slot
	return nil
}

// ChainHook describes where a chain's netfilter link runs it.
type ChainHook struct {
	Link       link.ID        `json:"link"`
	Dispatcher ebpf.ProgramID `json:"dispatcher"`
	Family     string         `json:"family"`
	Hook       string         `json:"hook"`
	Priority   int32          `json:"priority"`
}

// nfHookNames are the NF_INET_* hooks' names.
var nfHookNames = map[link.NetfilterInetHook]string{
	link.NetfilterInetPreRouting:  "prerouting",
	link.NetfilterInetLocalIn:     "input",
	link.NetfilterInetForward:     "forward",
	link.NetfilterInetLocalOut:    "output",
	link.NetfilterInetPostRouting: "postrouting",
}

// ChainHook describes the netfilter link of a chain's filter; nil at
// other hooks.
func (a *Active) ChainHook() (*ChainHook, error) {
	l := a.Links[netnsIndex]
	if a.dispatcher == nil || l == nil {
		return nil, nil
	}
	info, err := l.Info()
	if err != nil {
		return nil, fmt.Errorf("netfilter link: %w", err)
	}
	h := &ChainHook{Link: info.ID, Dispatcher: info.Program, Family: a.Place.Family.String(), Hook: "unknown"}
	if nf := info.Netfilter(); nf != nil {
		h.Priority = nf.Priority
		if name, ok := nfHookNames[nf.Hook]; ok {
			h.Hook = name
		}
	}
	return h, nil
}

// A chain whose program has REJECT rules has, beside its pins, the
// record its programs note a rejected packet in (abi.RejectPendingMap)
// and a socket filter per --reject-with that matches it
// (reject.Answer), for the kernel's rules that answer. Both outlive
// programs: the kernel's rules hold the answers, which hold the record.
const (
	pinPending = "reject_pending"
	pinAnswer  = "answer_"
)

// openPending opens the record pinned in dir for prog, a chain's program
// with REJECT rules; nil for another program, or when none is pinned.
func openPending(dir string, prog *codegen.Program) (*ebpf.Map, error) {
	if len(prog.Rejects()) == 0 {
		return nil, nil
	}
	m, err := ebpf.LoadPinnedMap(filepath.Join(dir, pinPending), nil)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	return m, err
}

// EnsureAnswers makes sure that the chain at p has the record and an
// answer for every --reject-with of prog, pinned, and returns the
// answers' pin paths by --reject-with, for the kernel's rules
// (-m bpf --object-pinned PATH -j REJECT --reject-with WITH), as
// iptables can open them (ForOthers). It changes
// nothing that runs: an answer matches only what a program notes.
func EnsureAnswers(p Place, prog *codegen.Program) (map[string]string, error) {
	withs := prog.Rejects()
	if len(withs) == 0 {
		return nil, nil
	}
	if err := p.makeDir(); err != nil {
		return nil, err
	}
	dir := p.Dir()
	pending, err := ebpf.LoadPinnedMap(filepath.Join(dir, pinPending), nil)
	if errors.Is(err, os.ErrNotExist) {
		spec := reject.Answer(p.Family, withs[0]).Maps[abi.RejectPendingMap]
		if pending, err = ebpf.NewMap(spec); err == nil {
			if err = pending.Pin(filepath.Join(dir, pinPending)); err != nil {
				pending.Close()
			}
		}
	}
	if err != nil {
		return nil, fmt.Errorf("%s: reject record: %w", p.Name(), err)
	}
	defer pending.Close()
	paths := make(map[string]string)
	for _, with := range withs {
		path := filepath.Join(dir, pinAnswer+with)
		paths[with] = ForOthers(path)
		if _, err := os.Stat(path); err == nil {
			continue
		}
		coll, err := ebpf.NewCollectionWithOptions(reject.Answer(p.Family, with), ebpf.CollectionOptions{MapReplacements: map[string]*ebpf.Map{abi.RejectPendingMap: pending}})
		if err != nil {
			return nil, fmt.Errorf("%s: answer of REJECT --reject-with %s: %w", p.Name(), with, err)
		}
		err = coll.Programs[abi.ProgramName].Pin(path)
		coll.Close()
		if err != nil {
			return nil, fmt.Errorf("%s: answer of REJECT --reject-with %s: %w", p.Name(), with, err)
		}
	}
	return paths, nil
}
