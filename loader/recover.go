package loader

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
)

// A swap can die at any moment: a SIGKILL, the OOM killer, a systemd
// stop timeout. The kernel then closes its descriptors, and what is left
// is what it pinned. A swap pins the new filter's objects beside the old
// ones with newSuffix, the meta map last; switches the links; and then
// moves the new pins over the old ones, the program first and the meta
// map last (see build.commit). So the pins alone say how far it got:
//
//   - no pin with newSuffix: no swap was under way, or it finished;
//   - new pins but no new meta map: it died building the new filter,
//     before any link switched. The new links, attached only to
//     interfaces not filtered yet, and the new netfilter stage are held
//     only by their new pins: removing those detaches them, and the old
//     filter is as it was;
//   - a new meta map: the new filter was complete, and links may already
//     run it. The swap is decided: Recover switches the links that still
//     run the old program and finishes the commit, so that the new filter
//     runs everywhere and the pins describe it. In a swap of several
//     places, a decision pinned in the namespace's directory decides
//     instead until it is made (see decision.go): before that no link
//     switched, and the new filter goes as in the case above.
//
// Recovery itself can die at any moment too and is done again by the next
// command, since each step is idempotent.

// Recovery says what Recover found and did.
type Recovery int

const (
	// NothingToRecover: no swap was interrupted there.
	NothingToRecover Recovery = iota
	// RolledBack: a swap died before its links switched; its objects are
	// gone and the filter that ran before it runs.
	RolledBack
	// Completed: a swap died after the new filter was complete; it now
	// runs on every link, and the pins describe it.
	Completed
)

func (r Recovery) String() string {
	switch r {
	case RolledBack:
		return "rolled back"
	case Completed:
		return "completed"
	}
	return "nothing to recover"
}

// Recover finishes or undoes a swap at p that its process died in. The
// caller holds the lock exclusively (Acquire). Swap.Run calls it first.
func Recover(p Place) (Recovery, error) {
	dir := p.Dir()
	pending, err := pendingPins(dir)
	if err != nil || len(pending) == 0 {
		return NothingToRecover, err
	}
	made, err := decided(p)
	if err != nil {
		return NothingToRecover, fmt.Errorf("recover an interrupted %s swap: %w", p.Hook, err)
	}
	if len(pending) == 1 && pending[0] == pinUnload {
		// A filter that a swap of several places unloads (decision.go).
		if !made {
			removeNewPins(dir)
			return RolledBack, nil
		}
		_, err := Unload(p, nil)
		if errors.Is(err, os.ErrNotExist) {
			// Unload died removing the pins: remove the rest.
			err = os.RemoveAll(dir)
			removeIfOnlyMarked(filepath.Dir(dir))
		}
		if err != nil {
			return NothingToRecover, fmt.Errorf("recover an interrupted %s swap: %w", p.Hook, err)
		}
		return Completed, nil
	}
	if pending[len(pending)-1] != pinMeta || !made {
		removeNewPins(dir)
		// The build may have turned conntrack on for its program.
		if err := releaseConntrackAt(p); err != nil {
			return RolledBack, fmt.Errorf("recover an interrupted %s swap: %w", p.Hook, err)
		}
		return RolledBack, nil
	}
	if err := finishSwap(dir, pending); err != nil {
		return NothingToRecover, fmt.Errorf("recover an interrupted %s swap: %w", p.Hook, err)
	}
	if err := releaseConntrackAt(p); err != nil {
		return Completed, fmt.Errorf("recover an interrupted %s swap: %w", p.Hook, err)
	}
	return Completed, nil
}

// RecoverNetNS recovers the interrupted swaps at every hook of network
// namespace ns, the calling thread's, under root, and the kernel tables
// of an interrupted SwapAll (kernel.go). It returns what had one, by
// name (Place.Name, KernelTables.Name), with what was done.
func RecoverNetNS(root string, ns uint64) (map[string]Recovery, error) {
	if err := checkRoot(root); err != nil {
		return nil, err
	}
	out := make(map[string]Recovery)
	places := allPlaces(root, ns)
	for _, p := range places {
		r, err := Recover(p)
		if err != nil {
			return out, err
		}
		if r != NothingToRecover {
			out[p.Name()] = r
		}
	}
	// Every place has recovered: the kernel tables follow the same
	// decision, and then a swap of several places that died has no use
	// for it any more (decision.go).
	made, err := decided(places[0])
	if err != nil {
		return out, err
	}
	name, r, err := recoverKernel(decisionPath(places[0]), made)
	if r != NothingToRecover {
		out[name] = r
	}
	if err != nil {
		return out, err
	}
	if err := os.Remove(decisionPath(places[0])); err != nil && !errors.Is(err, os.ErrNotExist) {
		return out, fmt.Errorf("remove the decision of an interrupted swap: %w", err)
	}
	return out, nil
}

// Interrupted says whether a swap at a hook of network namespace ns under
// root has pins it did not commit: it is under way, or its process died.
func Interrupted(root string, ns uint64) bool {
	for _, p := range allPlaces(root, ns) {
		if pending, _ := pendingPins(p.Dir()); len(pending) > 0 {
			return true
		}
	}
	return false
}

// finishSwap completes a swap whose new filter, pinned in dir with the
// pending pins, was complete.
func finishSwap(dir string, pending []string) error {
	mp, err := ebpf.LoadPinnedMap(filepath.Join(dir, pinMeta+newSuffix), nil)
	if err != nil {
		return err
	}
	meta, err := readMeta(mp)
	mp.Close()
	if err != nil {
		return err
	}
	if pending[0] == pinProgram {
		if err := commitPin(filepath.Join(dir, pinProgram)); err != nil {
			return err
		}
		pending = pending[1:]
	}
	prog, err := ebpf.LoadPinnedProgram(filepath.Join(dir, pinProgram), nil)
	if err != nil {
		return err
	}
	defer prog.Close()
	if ok, err := finishDispatch(dir, prog); ok || err != nil {
		if err != nil {
			return err
		}
		_, err = commitPins(dir, pending, &meta)
		return err
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range ents {
		if !strings.HasPrefix(e.Name(), pinLink) {
			continue
		}
		if err := runOn(filepath.Join(dir, e.Name()), prog); err != nil {
			return err
		}
	}
	_, err = commitPins(dir, pending, &meta)
	return err
}

// commitPins moves the pending pins names, in pendingPins' order, into
// place; before the meta map, the last, it drops the old filter's pins
// that m, the new meta, does not name. It returns how many it moved.
func commitPins(dir string, names []string, m *Meta) (int, error) {
	for k, name := range names {
		if name == pinMeta {
			dropOldPins(dir, m)
			reached("drop old pins")
		}
		if err := commitPin(filepath.Join(dir, name)); err != nil {
			return k, err
		}
		reached("commit " + name)
	}
	return len(names), nil
}

// runOn makes the link pinned at path run prog if it runs another
// program.
func runOn(path string, prog *ebpf.Program) error {
	l, err := link.LoadPinnedLink(path, nil)
	if err != nil {
		return err
	}
	defer l.Close()
	running, want, ok := programIDs(l, prog)
	if !ok {
		return fmt.Errorf("%s: cannot tell which program it runs", filepath.Base(path))
	}
	if running == want {
		return nil
	}
	old, err := ebpf.NewProgramFromID(running)
	if err != nil {
		return fmt.Errorf("%s: %w", filepath.Base(path), err)
	}
	defer old.Close()
	return ReplaceProgram(l, prog, old)
}

// pendingPins returns the names, without newSuffix, of the pins in dir
// that a swap made and has not committed, in the order a commit moves
// them: the program first, whose move decides the swap, and the meta
// map, which describes the rest, last.
func pendingPins(dir string) ([]string, error) {
	ents, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list pins: %w", err)
	}
	var out []string
	for _, e := range ents {
		if name, ok := strings.CutSuffix(e.Name(), newSuffix); ok {
			out = append(out, name)
		}
	}
	rank := func(name string) int {
		switch name {
		case pinProgram:
			return 0
		case pinMeta:
			return 2
		}
		return 1
	}
	slices.SortStableFunc(out, func(a, b string) int { return rank(a) - rank(b) })
	return out, nil
}

// dropOldPins removes the pins in dir that the filter m describes does
// not have: those of the old filter's objects the new one has no use for
// (its LOG ring, recent and hashlimit tables no rule names any more, its
// netfilter stage, whose link detaches with its pin) and the links of
// interfaces that are gone. Pins of older versions name no Pins: then it
// removes nothing.
func dropOldPins(dir string, m *Meta) {
	if len(m.Pins) == 0 {
		return
	}
	// The sockets map and a chain's dispatcher outlive programs.
	keep := map[string]bool{pinSockets: true, pinDispatcher: true, pinDispatch: true, pinPending: true}
	for _, name := range m.Pins {
		keep[name] = true
	}
	for _, ifc := range m.Ifaces {
		keep[filepath.Base(linkPin(dir, ifc.Index))] = true
	}
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if name := e.Name(); !keep[name] && !strings.HasPrefix(name, pinAnswer) && !strings.HasSuffix(name, newSuffix) {
			os.Remove(filepath.Join(dir, name))
		}
	}
}

// swapStep, when set, is called as a swap reaches each of its steps: the
// crash tests kill the process there.
var swapStep func(step string)

func reached(step string) {
	if swapStep != nil {
		swapStep(step)
	}
}
