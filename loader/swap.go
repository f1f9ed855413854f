package loader

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"

	"bpfwall/codegen"
	"bpfwall/codegen/abi"
)

// Swap installs a compiled program as the filter at a place: it attaches
// the program to the interfaces not yet filtered there, and replaces the
// program of the links already attached. Everything the new filter needs
// is built, verified and pinned beside the old one first; a failure
// before the links switch leaves the running filter untouched.
type Swap struct {
	Place   Place
	Program *codegen.Program
	// Meta describes Program (see NewMeta); Run fills in the load time,
	// the verified instructions and the interfaces.
	Meta Meta
	// Ifaces are the interfaces to attach to, besides those the filter is
	// attached to already.
	Ifaces  []string
	XDPMode XDPMode
	// Counters are the counters the rules start with, by rule ID, the
	// policy's last (nil: zero).
	Counters []abi.Counter
	// Since, when set, is the snapshot of the running filter Counters were
	// computed from: what the old program counts after it is added to the
	// rules that continue old ones (see Snapshot.Carry).
	Since *Snapshot
	// Update makes one link run new instead of old, failing if it does not
	// run old; ReplaceProgram when nil. Tests inject failures here.
	Update func(l link.Link, new, old *ebpf.Program) error

	// inDecision: the swap is one of several that a decision pinned by
	// SwapAll decides (decision.go).
	inDecision bool
	// shared, set by SwapAll, is the state the swaps' filters share.
	shared *sharedState
}

// Result describes a swap that happened.
type Result struct {
	Program  ebpf.ProgramID
	Replaced ebpf.ProgramID // the old program; 0 if there was none
	Attached []Iface        // interfaces attached by this swap
	// Critical is how long the links took to switch programs.
	Critical time.Duration
	// Sockets are the sk-lookup rules' sockets, found or not.
	Sockets []SocketState
	// Stage says the filter has a netfilter stage; Uppers are the upper
	// devices of its interfaces the stage evaluates too.
	Stage  bool
	Uppers []Iface
	// Muted are the veths the program runs on in native XDP mode while
	// it sends REJECT replies: a veth hands them to its peer only when
	// the peer runs NAPI (see xdpModes). A swap keeps a link's mode.
	Muted []Iface
}

// ErrChanged is returned, wrapped, when the filter is not the one a
// Snapshot was taken of.
var ErrChanged = errors.New("filter changed since its counters were read")

// ErrFamily is returned, wrapped, when a swap would replace a filter of
// one IP family with one of the other: the old family's packets would pass
// unfiltered from then on. A hook holds one family's filter; unload it
// first to change families.
var ErrFamily = errors.New("the filter there is of the other IP family")

// Run performs the swap.
func (s *Swap) Run() (*Result, error) {
	p, err := s.Prepare()
	if err != nil {
		return nil, err
	}
	defer p.Close()
	if err := p.Switch(); err != nil {
		return nil, err
	}
	return p.Commit()
}

// Prepared is a swap whose new filter is built, verified and pinned
// beside the running one (Swap.Prepare), and not yet switched to: a
// restore prepares the swaps of every place it changes before it
// switches any, so that a failure changes nothing. Its methods are
// called in order: Switch, then Commit; Abort at any point undoes what
// Switch did and drops the new filter; Close releases descriptors.
type Prepared struct {
	s   *Swap
	old *Active
	b   *build
	res *Result
	// real switches one link for good; update is Swap.Update or real.
	real, update func(l link.Link, new, old *ebpf.Program) error
	switched     []link.Link
	// filled says Switch put the program into a new dispatcher's slot.
	filled bool
	done   bool
}

// Prepare builds, verifies and pins the new filter beside the running
// one. A chain at its netfilter hook that nothing ran gets its link, whose
// dispatcher's slot stays empty (and passes every packet, as before)
// until Switch.
func (s *Swap) Prepare() (*Prepared, error) {
	hook := s.Program.Hook
	if hook != s.Place.Hook {
		return nil, fmt.Errorf("swap %s filter: program is for %s", s.Place.Name(), hook)
	}
	if ir := s.Program.IR; hook == codegen.HookNetfilter &&
		(s.Place.Family != ir.Family || s.Place.Table != ir.Table || s.Place.Chain != ir.Chains[0].Name) {
		return nil, fmt.Errorf("swap %s filter: program is for %s %s %s", s.Place.Name(), ir.Family, ir.Table, ir.Chains[0].Name)
	}
	name := s.Place.Name()
	if err := s.Place.makeDir(); err != nil {
		return nil, err
	}
	if !s.inDecision {
		if err := settleDecision(s.Place); err != nil {
			return nil, err
		}
	}
	if _, err := Recover(s.Place); err != nil {
		return nil, err
	}
	old, err := openToReplace(s.Place)
	switch {
	case errors.Is(err, os.ErrNotExist):
		old = nil
	case err != nil:
		return nil, err
	}
	fail := func(err error) (*Prepared, error) {
		if old != nil {
			old.Close()
		}
		return nil, err
	}
	res := &Result{}
	if old != nil {
		res.Replaced = programID(old.Program)
	}
	if s.Since != nil && (old == nil || res.Replaced != s.Since.Program) {
		return fail(fmt.Errorf("swap %s filter: %w", name, ErrChanged))
	}
	if fam := s.Program.IR.Family.String(); old != nil && old.Meta.Family != "" && old.Meta.Family != fam {
		return fail(fmt.Errorf("swap %s filter: %w: it filters %s (from %s), these rules %s; bpfwall unload --hook %s first, or put the %s rules on another hook",
			name, ErrFamily, old.Meta.Family, old.Meta.File, fam, hook, fam))
	}
	if err := checkShared(s.Place, s.Program); err != nil {
		return fail(fmt.Errorf("swap %s filter: %w", name, err))
	}
	b, err := s.build(old)
	if err != nil {
		return fail(fmt.Errorf("swap %s filter: %w", name, err))
	}
	res.Program = programID(b.loaded.prog)
	res.Attached = b.attached
	res.Sockets = b.sockets
	res.Stage, res.Uppers = b.loaded != nil && b.loaded.nfProg != nil, b.uppers
	if res.Muted, err = mutedVeths(s.Program, b.described.Ifaces); err != nil {
		return fail(fmt.Errorf("swap %s filter: %w", name, err))
	}
	p := &Prepared{s: s, old: old, b: b, res: res, real: ReplaceProgram}
	if old != nil && old.dispatcher != nil {
		p.real = dispatchUpdate(old.maps[pinDispatch])
	}
	p.update = s.Update
	if p.update == nil {
		p.update = p.real
	}
	return p, nil
}

// Switch makes the links run the new program, one by one, each
// atomically; the kernel refuses a link that no longer runs the old
// program. On failure the links switched so far switch back and the new
// filter goes.
func (p *Prepared) Switch() error {
	s, old, b := p.s, p.old, p.b
	start := time.Now()
	if b.slot != nil {
		// A chain's new dispatcher, attached by build: from here on its
		// slot runs the program.
		if err := b.slot.Put(uint32(0), b.loaded.prog); err != nil {
			p.Abort()
			return fmt.Errorf("swap %s filter: dispatcher slot: %w", s.Place.Name(), err)
		}
		p.filled = true
		reached("fill " + pinDispatch)
	}
	if s.Place.Accelerator() && b.slot == nil && old != nil && old.dispatcher != nil {
		// An accelerator has no link: its slot in its namespace's
		// dispatcher switches (dispatchUpdate takes no link).
		if err := p.update(nil, b.loaded.prog, old.Program); err != nil {
			p.Abort()
			return fmt.Errorf("swap %s filter: %w", s.Place.Name(), err)
		}
		p.switched = append(p.switched, nil)
		reached("switch " + pinDispatch)
	}
	for _, i := range b.keep {
		l := old.Links[i]
		if err := p.update(l, b.loaded.prog, old.Program); err != nil {
			p.Abort()
			return fmt.Errorf("swap %s filter on %s: %w", s.Place.Name(), ifaceName(i), err)
		}
		p.switched = append(p.switched, l)
		reached("switch " + filepath.Base(linkPin(s.Place.Dir(), i)))
	}
	p.res.Critical = time.Since(start)
	return nil
}

// Abort switches back what Switch switched and removes the new filter;
// the old one runs as before. It does nothing after Commit.
func (p *Prepared) Abort() {
	if p.done {
		return
	}
	p.done = true
	switchBack(p.real, p.switched, p.old, p.b)
	p.switched = nil
	if p.filled {
		// Empty again: the dispatcher passes every packet until its link
		// goes with the new pins.
		p.b.slot.Delete(uint32(0))
	}
	p.b.abort()
}

// Commit moves the new pins over the old ones, after Switch; the swap is
// then done. A failure to move the pins switches back.
func (p *Prepared) Commit() (*Result, error) {
	s, old, b, res := p.s, p.old, p.b, p.res
	name := s.Place.Name()
	if err := b.commit(old); err != nil {
		p.Abort()
		return nil, fmt.Errorf("swap %s filter: %w", name, err)
	}
	p.done = true
	if !s.Program.UsesConntrack() && old != nil && old.Meta.HoldsConntrack() {
		if err := releaseConntrackAt(s.Place); err != nil {
			return res, fmt.Errorf("swap %s filter: the new program runs, but: %w", name, err)
		}
		reached("release conntrack")
	}
	if s.Since != nil {
		if err := s.carry(old, b); err != nil {
			return res, fmt.Errorf("swap %s filter: the new program runs, but: %w", name, err)
		}
		reached("carry counters")
	}
	return res, nil
}

// Close releases the descriptors of the swap; pinned objects stay.
func (p *Prepared) Close() {
	p.b.close()
	if p.old != nil {
		p.old.Close()
	}
}

// switchBack returns the links to the old program after a failed swap,
// with update, which switches one.
func switchBack(update func(l link.Link, new, old *ebpf.Program) error, links []link.Link, old *Active, b *build) {
	for _, l := range links {
		// Nothing else can be done if this fails; the error of the swap
		// is reported.
		_ = update(l, old.Program, b.loaded.prog)
	}
}

// carry adds what the old program counted after s.Since to the rules of
// the new program that continue old ones. The old program no longer runs,
// and the base map is not written by any program.
func (s *Swap) carry(old *Active, b *build) error {
	final, err := old.Counters()
	if err != nil {
		return err
	}
	add := make([]abi.Counter, len(b.counters))
	for id, o := range pairRules(&s.Since.Meta, s.Program) {
		if o < 0 || o >= len(final) {
			continue
		}
		was := s.Since.Counters[o]
		if final[o].Packets < was.Packets || final[o].Bytes < was.Bytes {
			continue
		}
		if final[o] == was {
			continue
		}
		add[id] = abi.Counter{
			Packets: b.counters[id].Packets + final[o].Packets - was.Packets,
			Bytes:   b.counters[id].Bytes + final[o].Bytes - was.Bytes,
		}
	}
	return writeBase(b.base, add)
}

// build is a new filter, loaded and pinned beside the running one.
type build struct {
	dir    string
	loaded *Loaded
	base   *ebpf.Map
	meta   *ebpf.Map
	// described is what the meta map holds.
	described *Meta
	counters  []abi.Counter
	// keep are the interfaces whose links switch programs. (The links
	// that outlived their interface are dropped with the old pins.)
	keep     []int
	links    map[int]link.Link // new links, on interfaces not yet filtered
	attached []Iface
	// nfLink is the new netfilter stage's link, attached by build;
	// uppers are the upper devices it evaluates besides the interfaces.
	nfLink link.Link
	// dispatcher and slot are a chain's new dispatcher and its slot
	// (nfchain.go), made when no filter ran the chain.
	dispatcher *ebpf.Program
	slot       *ebpf.Map
	uppers     []Iface
	sockets    []SocketState
	// heldConntrack says the build created bpfwall's conntrack table,
	// which abort removes; addedSockets are the keys it put into a
	// sockets map the running filter shares, which abort deletes.
	heldConntrack bool
	addedSockets  []abi.SocketKey
}

// build loads, fills and pins the new filter, and attaches it to the
// interfaces not yet filtered.
func (s *Swap) build(old *Active) (b *build, err error) {
	b = &build{dir: s.Place.Dir(), links: make(map[int]link.Link)}
	defer func() {
		if err != nil {
			b.abort()
			b.close()
		}
	}()
	ifaces, add, err := s.targets(old, b)
	if err != nil {
		return b, err
	}
	if err := s.load(old, b, append(ifaces, add...)); err != nil {
		return b, err
	}
	if err := s.pin(old, b); err != nil {
		return b, err
	}
	if err := s.attachLinks(b, add); err != nil {
		return b, err
	}
	return b, s.pinMeta(b, ifaces)
}

// targets returns the interfaces the old filter is attached to, which
// the swap keeps (in b.keep), and those it adds.
func (s *Swap) targets(old *Active, b *build) (ifaces, add []Iface, err error) {
	if s.Place.Accelerator() {
		// The dispatcher runs on the interfaces; the accelerator needs
		// their names for its -i matches.
		if len(s.Ifaces) > 0 {
			return nil, nil, errors.New("an accelerator runs where its dispatcher is attached (AttachAccelerator)")
		}
		if ifaces, err = AcceleratedIfaces(s.Place.Root, s.Place.NetNS); err == nil && len(ifaces) == 0 {
			err = errors.New("the accelerator's dispatcher runs on no interface")
		}
		return ifaces, nil, err
	}
	attached := make(map[int]bool)
	lookup := s.Program.Hook == codegen.HookSkLookup
	// An sk-lookup filter, and a chain at its netfilter hook, attach to
	// the network namespace, which netnsIndex stands for.
	nsWide := lookup || s.Program.Hook == codegen.HookNetfilter
	if old != nil {
		for _, i := range old.ifindexes() {
			if i == netnsIndex && nsWide {
				b.keep = append(b.keep, i)
				attached[i] = true
				ifaces = append(ifaces, netnsIface)
				continue
			}
			ifi, err := net.InterfaceByIndex(i)
			if err != nil {
				continue
			}
			b.keep = append(b.keep, i)
			attached[i] = true
			ifaces = append(ifaces, Iface{Index: i, Name: ifi.Name, Mode: oldMode(old, i)})
		}
	}
	if nsWide && len(s.Ifaces) > 0 {
		return nil, nil, fmt.Errorf("a %s filter attaches to the network namespace, not to interfaces (%s)", s.Program.Hook, strings.Join(s.Ifaces, ", "))
	}
	for _, name := range s.Ifaces {
		ifi, err := net.InterfaceByName(name)
		if err != nil {
			return nil, nil, fmt.Errorf("interface %s: %w", name, err)
		}
		if attached[ifi.Index] {
			continue
		}
		attached[ifi.Index] = true
		add = append(add, Iface{Index: ifi.Index, Name: ifi.Name})
	}
	if nsWide && !attached[netnsIndex] {
		add = append(add, netnsIface)
	}
	if len(ifaces)+len(add) == 0 {
		return nil, nil, errors.New("no interface to attach to")
	}
	return ifaces, add, nil
}

// load loads the program and its maps into b, with the state carried
// from old, and tells them the interfaces.
func (s *Swap) load(old *Active, b *build, all []Iface) error {
	lookup := s.Program.Hook == codegen.HookSkLookup
	if !lookup {
		kept, release, err := carryAll(s.Program, old, b.dir)
		if err != nil {
			return err
		}
		defer release()
		maps := make(map[string]*ebpf.Map)
		for _, c := range kept {
			for name, m := range c.maps {
				maps[name] = m
			}
		}
		if s.shared != nil {
			if err := s.shared.use(s.Program, s.Place, maps); err != nil {
				return err
			}
		}
		if b.loaded, err = Load(s.Program, Options{Maps: maps}); err != nil {
			return err
		}
		if s.shared != nil {
			if err := s.shared.keep(b.loaded); err != nil {
				return err
			}
		}
		for _, c := range kept {
			if c.loaded == nil {
				continue
			}
			if err := c.loaded(b.loaded); err != nil {
				return err
			}
		}
		for _, ifc := range all {
			if ifc.Index == netnsIndex {
				continue
			}
			if err := b.loaded.SetIface(uint32(ifc.Index), ifc.Name); err != nil {
				return err
			}
			if err := b.loaded.setNetfilterIface(uint32(ifc.Index)); err != nil {
				return err
			}
		}
		if s.Place.Accelerator() {
			// A forwarded packet leaves through any of them (-o).
			if err := b.loaded.setAllIfaces(); err != nil {
				return err
			}
		}
		if b.loaded.nfProg != nil {
			// Netfilter sees the packets of these interfaces on their
			// upper devices too.
			var idx []int
			for _, ifc := range all {
				idx = append(idx, ifc.Index)
			}
			if b.uppers, err = stageUppers(idx); err != nil {
				return err
			}
			for _, u := range b.uppers {
				if err := b.loaded.SetIface(uint32(u.Index), u.Name); err != nil {
					return err
				}
				if err := b.loaded.setNetfilterIface(uint32(u.Index)); err != nil {
					return err
				}
			}
		}
		if s.Program.UsesConntrack() {
			// Before the program runs: its lookups need a tracked table.
			if b.heldConntrack, err = HoldConntrack(); err != nil {
				return err
			}
		}
	} else if err := b.loadLookup(s.Program); err != nil {
		return err
	}
	return nil
}

// pin makes the counters' base and the dispatcher a netfilter chain
// needs, and pins every object beside the old ones, the netfilter stage's
// link last.
func (s *Swap) pin(old *Active, b *build) error {
	var err error
	n := len(s.Program.IR.Rules) + 1
	b.counters = s.Counters
	if b.counters == nil {
		b.counters = make([]abi.Counter, n)
	}
	if len(b.counters) != n {
		return fmt.Errorf("%d starting counters for %d rules and the policy", len(b.counters), n)
	}
	if b.base, err = newBaseMap(b.counters); err != nil {
		return err
	}

	pins := map[string]pinner{
		pinProgram:  b.loaded.prog,
		pinCounters: b.loaded.coll.Maps[abi.CountersMap],
		pinIfaces:   b.loaded.coll.Maps[abi.IfacesMap],
		pinBase:     b.base,
	}
	if m := b.loaded.coll.Maps[abi.DecisionMap]; m != nil {
		pins[pinDecision] = m
	}
	for name, obj := range featurePins(b.loaded) {
		pins[name] = obj
	}
	if s.Program.Hook == codegen.HookNetfilter || s.Place.Accelerator() {
		// A dispatcher that runs stays pinned as it is (nfchain.go); an
		// accelerator's is its namespace's (accelerate.go).
		if old == nil || old.dispatcher == nil {
			if s.Place.Accelerator() {
				b.dispatcher, b.slot, err = openAcceleratorSlot(s.Place)
			} else {
				b.dispatcher, b.slot, err = newDispatch("bpfwall_dispatch")
			}
			if err != nil {
				return err
			}
			pins[pinDispatcher], pins[pinDispatch] = b.dispatcher, b.slot
		}
	}
	for name, obj := range pins {
		if err := pinNew(obj, filepath.Join(b.dir, name)); err != nil {
			return err
		}
		reached("pin " + name)
	}
	if b.loaded.nfProg != nil {
		// The stage runs from here on: before the links switch to the
		// program that defers packets to it (see netfilter.go).
		if b.nfLink, err = b.loaded.attachNetfilter(); err != nil {
			return err
		}
		if err := pinNew(b.nfLink, filepath.Join(b.dir, pinNFLink)); err != nil {
			return err
		}
		reached("pin " + pinNFLink)
	}
	return nil
}

// attachLinks attaches the program (a netfilter chain's dispatcher) to the
// interfaces it adds, and pins the links.
func (s *Swap) attachLinks(b *build, add []Iface) error {
	modes, err := xdpModes(s.Program, add, s.XDPMode)
	if err != nil {
		return err
	}
	for _, ifc := range add {
		var l link.Link
		var mode string
		if s.Program.Hook == codegen.HookNetfilter {
			l, err = attachChain(b.dispatcher, s.Place, s.Program.UsesConntrack())
		} else {
			l, mode, err = attach(b.loaded.prog, s.Program.Hook, ifc, modes[ifc.Index])
		}
		if err != nil {
			return err
		}
		b.links[ifc.Index] = l
		if err := pinNew(l, linkPin(b.dir, ifc.Index)); err != nil {
			return err
		}
		reached("pin " + filepath.Base(linkPin(b.dir, ifc.Index)))
		ifc.Mode = mode
		b.attached = append(b.attached, ifc)
	}

	return nil
}

// pinMeta pins the meta, last: with it the swap is complete.
func (s *Swap) pinMeta(b *build, ifaces []Iface) error {
	meta := s.Meta
	meta.LoadedAt = time.Now().UTC()
	meta.VerifiedInsns = b.loaded.VerifiedInsns
	meta.Ifaces = append(ifaces, b.attached...)
	if err := recordFeatures(&meta, s.Program, b); err != nil {
		return err
	}
	pending, err := pendingPins(b.dir)
	if err != nil {
		return err
	}
	meta.Pins = append(pending, pinMeta)
	if b.meta, err = newMetaMap(&meta); err != nil {
		return err
	}
	b.described = &meta
	if err := pinNew(b.meta, filepath.Join(b.dir, pinMeta)); err != nil {
		return err
	}
	reached("pin " + pinMeta)
	return nil
}

// commit moves the new pins over the old ones: the program first, which
// decides the swap (see Recover), and the meta map last. The old filter's
// pins the new one has no use for go before the meta map moves. If a pin
// cannot be moved, the old objects are pinned back.
func (b *build) commit(old *Active) error {
	names, err := pendingPins(b.dir)
	if err != nil {
		return err
	}
	if k, err := commitPins(b.dir, names, b.described); err != nil {
		if old != nil {
			b.restore(old, names[:k])
		}
		return err
	}
	return nil
}

// restore pins the old filter's objects back after a failed commit.
func (b *build) restore(old *Active, names []string) {
	for _, name := range names {
		path := filepath.Join(b.dir, name)
		var obj pinner = old.maps[name]
		switch {
		case name == pinProgram:
			obj = old.Program
		case name == pinNFLink && old.nfLink != nil:
			obj = old.nfLink
		case name == pinNFLink:
			// A new stage: remove its pin, so that closing it detaches it.
			os.Remove(path)
			continue
		case old.maps[name] == nil:
			// A new link: remove its pin, so that closing it detaches it.
			os.Remove(path)
			continue
		}
		if pinNew(obj, path) == nil {
			commitPin(path)
		}
	}
}

// abort removes the new pins, detaching the new links, and undoes what
// the build changed for the running filter: the conntrack table it
// created and the sockets it added to the shared sockets map.
func (b *build) abort() {
	removeNewPins(b.dir)
	for _, l := range b.links {
		l.Close()
	}
	b.links = map[int]link.Link{}
	if b.nfLink != nil {
		b.nfLink.Close()
		b.nfLink = nil
	}
	if b.heldConntrack {
		dropConntrackTable()
		b.heldConntrack = false
	}
	for _, k := range b.addedSockets {
		b.loaded.Sockets().Delete(k)
	}
	b.addedSockets = nil
}

// close releases the file descriptors; pinned objects stay.
func (b *build) close() {
	for _, l := range b.links {
		l.Close()
	}
	if b.nfLink != nil {
		b.nfLink.Close()
	}
	if b.dispatcher != nil {
		b.dispatcher.Close()
	}
	for _, m := range []*ebpf.Map{b.base, b.meta, b.slot} {
		if m != nil {
			m.Close()
		}
	}
	if b.loaded != nil {
		b.loaded.Close()
	}
}

func oldMode(a *Active, ifindex int) string {
	for _, ifc := range a.Meta.Ifaces {
		if ifc.Index == ifindex {
			return ifc.Mode
		}
	}
	return ""
}

func ifaceName(ifindex int) string {
	if ifi, err := net.InterfaceByIndex(ifindex); err == nil {
		return ifi.Name
	}
	return fmt.Sprintf("ifindex %d", ifindex)
}

func programID(p *ebpf.Program) ebpf.ProgramID {
	info, err := p.Info()
	if err != nil {
		return 0
	}
	id, _ := info.ID()
	return id
}

// PlaceError is SwapAll's failure to prepare the filter of one place:
// to load, verify or pin its program. Nothing changed.
type PlaceError struct {
	Place Place
	Err   error
}

func (e *PlaceError) Error() string { return e.Err.Error() }
func (e *PlaceError) Unwrap() error { return e.Err }

// SwapAll performs swaps at several places as one: it prepares every new
// filter, then switches each, then commits each. A failure before the
// commits switches back and removes every new filter, so that the old
// ones run everywhere as before; the places it had not reached were not
// touched. A process that dies on the way leaves the same choice to the
// next command's recovery: the old filters everywhere if it died before
// every new one was complete, the new ones everywhere after that (see
// decision.go). (Between the first switch and the last, a packet may
// meet new filters at some hooks and old ones at others, as when
// iptables-restore replaces one table after another.) The filters at
// drops, places the swaps leave nothing to do, are unloaded as part of
// it, after the commits. kernel, when not nil, are the kernel's own
// tables that go with the swaps: they are written once every new filter
// is complete, before the first switch, and written back on a failure
// (kernel.go). The places are in one network namespace, the calling
// thread's.
func SwapAll(swaps []*Swap, drops []Place, kernel *KernelTables) ([]*Result, error) {
	places := slices.Clone(drops)
	for _, s := range swaps {
		places = append(places, s.Place)
	}
	if len(places) == 0 {
		if kernel == nil {
			return nil, nil
		}
		// Nothing of bpfwall's to keep in step with.
		return nil, kernel.write(kernel.Text)
	}
	var prepared []*Prepared
	var d *decision
	written := false // kernel's new tables
	defer func() {
		for _, p := range prepared {
			p.Close()
		}
		if d != nil {
			d.end()
		}
	}()
	var errs []error
	abort := func() {
		for _, p := range prepared {
			p.Abort()
		}
		unmark(drops)
		if written {
			if err := runRestore(kernel.Restore, kernel.Backup); err != nil {
				errs = append(errs, fmt.Errorf("write back the %s: %w", kernel.Name, err))
			}
		}
		if d != nil {
			os.Remove(kernelPath(d.path))
		}
	}
	fail := func(err error) ([]*Result, error) {
		abort()
		return nil, errors.Join(append([]error{err}, errs...)...)
	}
	if len(places) > 1 || kernel != nil {
		for _, s := range swaps {
			s.inDecision = true
		}
		var err error
		if d, err = beginDecision(places); err != nil {
			return nil, err
		}
		for _, p := range drops {
			if err := d.markUnload(p); err != nil {
				return fail(err)
			}
		}
	}
	shared := newSharedState(swaps)
	defer shared.close()
	for _, s := range swaps {
		s.shared = shared
		p, err := s.Prepare()
		if err != nil {
			return fail(&PlaceError{Place: s.Place, Err: err})
		}
		prepared = append(prepared, p)
		reached("prepared " + s.Place.Name())
	}
	if kernel != nil {
		if err := d.pinKernel(kernel); err != nil {
			return fail(err)
		}
		written = true // or some of them: iptables-nft-restore
		if err := kernel.write(kernel.Text); err != nil {
			written = false // write wrote back
			return fail(err)
		}
		reached("wrote " + kernel.Name)
	}
	if d != nil {
		if err := d.make(); err != nil {
			return fail(err)
		}
	}
	for _, p := range prepared {
		if err := p.Switch(); err != nil {
			return fail(err)
		}
		reached("switched " + p.s.Place.Name())
	}
	out := make([]*Result, len(prepared))
	for i, p := range prepared {
		res, err := p.Commit()
		if err != nil && res == nil && i == 0 {
			// Nothing committed yet: the rest can still go back.
			return fail(err)
		}
		out[i] = res
		if err != nil {
			errs = append(errs, err)
		}
	}
	for _, p := range drops {
		if _, err := Unload(p, nil); err != nil {
			errs = append(errs, err)
			continue
		}
		reached("unloaded " + p.Name())
	}
	if kernel != nil {
		if err := os.Remove(kernelPath(d.path)); err != nil {
			errs = append(errs, fmt.Errorf("swap decision: %w", err))
		}
	}
	return out, errors.Join(errs...)
}
