package loader

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/cilium/ebpf"
)

// A restore swaps several places at once (SwapAll): every chain of a
// rule set at its netfilter hook. The pins of each place say how far its
// own swap got (see recover.go), but alone they would let a process that
// died between two places leave the first completing its new filter and
// the second keeping its old one: half of a rule set. So SwapAll pins a
// decision in the network namespace's directory before it builds
// anything, a map holding decisionPreparing; once the new filter of every
// place is complete it writes decisionMade, one map update, and only then
// switches a link; when every place is committed it removes the pin.
// Recover follows the decision at every place of the namespace: a new
// filter that is complete is dropped while the decision is being
// prepared (no link can have switched yet), and completed once it is
// made. Every command recovers first (RecoverNetNS), which also removes
// a decision that no swap needs any more.
//
// A restore also unloads the chains its rule set leaves nothing to do.
// Those places get the decision pinned as pinUnload with newSuffix, a
// pending pin like a swap's: while the decision is being prepared the
// mark goes and the chain keeps running; once it is made the chain is
// unloaded, by SwapAll or by the recovery.

// pinSwapDecision is the decision's pin in a namespace's directory.
const pinSwapDecision = "swap_decision"

// The decision's values; a new map holds decisionPreparing.
const (
	decisionPreparing uint32 = 0
	decisionMade      uint32 = 1
)

// decision is the pinned decision of a swap of several places.
type decision struct {
	m    *ebpf.Map
	path string
}

// decisionPath is the decision's pin for the namespace of place p.
func decisionPath(p Place) string { return filepath.Join(filepath.Dir(p.Dir()), pinSwapDecision) }

// beginDecision recovers what earlier swaps in the namespace of the
// places left, and pins a decision being prepared for a swap of all of
// them. They are in one namespace.
func beginDecision(places []Place) (*decision, error) {
	first := places[0]
	for _, p := range places[1:] {
		if p.Root != first.Root || p.NetNS != first.NetNS {
			return nil, fmt.Errorf("swap: %s and %s are in different network namespaces or pin directories", first.Name(), p.Name())
		}
	}
	if err := first.makeDir(); err != nil {
		return nil, err
	}
	if _, err := RecoverNetNS(first.Root, first.NetNS); err != nil {
		return nil, err
	}
	m, err := ebpf.NewMap(&ebpf.MapSpec{Name: "bpfwall_decide", Type: ebpf.Array, KeySize: 4, ValueSize: 4, MaxEntries: 1})
	if err != nil {
		return nil, fmt.Errorf("swap decision: %w", err)
	}
	d := &decision{m: m, path: decisionPath(first)}
	if err := m.Pin(d.path); err != nil {
		m.Close()
		return nil, fmt.Errorf("swap decision: %w", err)
	}
	reached("pin " + pinSwapDecision)
	return d, nil
}

// markUnload marks place p to be unloaded when the decision is made.
func (d *decision) markUnload(p Place) error {
	// A descriptor of its own: Map.Pin of a pinned map moves its pin.
	m, err := d.m.Clone()
	if err != nil {
		return fmt.Errorf("swap decision: %w", err)
	}
	defer m.Close()
	if err := m.Pin(filepath.Join(p.Dir(), pinUnload+newSuffix)); err != nil {
		return fmt.Errorf("swap decision: mark %s to unload: %w", p.Name(), err)
	}
	reached("mark unload " + p.Name())
	return nil
}

// unmark removes the marks of places to unload, for a swap that did not
// make its decision.
func unmark(drops []Place) {
	for _, p := range drops {
		os.Remove(filepath.Join(p.Dir(), pinUnload+newSuffix))
	}
}

// make decides for the new filters: from here on, a swap that dies is
// completed at every place.
func (d *decision) make() error {
	if err := d.m.Put(uint32(0), decisionMade); err != nil {
		return fmt.Errorf("swap decision: %w", err)
	}
	reached("decide")
	return nil
}

// end removes the decision's pin, which no place needs any more, and
// releases it.
func (d *decision) end() {
	os.Remove(d.path)
	d.m.Close()
}

// decided reports what the decision pinned for place p's namespace says:
// made, or no decision (a swap of one place, which its own pins decide);
// false while a swap of several places prepares.
func decided(p Place) (bool, error) {
	m, err := ebpf.LoadPinnedMap(decisionPath(p), nil)
	if errors.Is(err, os.ErrNotExist) {
		return true, nil
	}
	if err != nil {
		return false, fmt.Errorf("swap decision: %w", err)
	}
	defer m.Close()
	var v uint32
	if err := m.Lookup(uint32(0), &v); err != nil {
		return false, fmt.Errorf("swap decision: %w", err)
	}
	switch v {
	case decisionPreparing:
		return false, nil
	case decisionMade:
		return true, nil
	}
	return false, fmt.Errorf("swap decision: %s holds %d, neither being prepared nor made", decisionPath(p), v)
}

// settleDecision recovers the swap of several places that a decision
// pinned in p's namespace belongs to, if any, before a swap of p alone:
// that swap's own pins, not the old decision, must decide it.
func settleDecision(p Place) error {
	if _, err := os.Stat(decisionPath(p)); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	_, err := RecoverNetNS(p.Root, p.NetNS)
	return err
}
