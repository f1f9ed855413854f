package loader

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
)

// Unload detaches the filter at p from the named interfaces, or from all
// of them when names is empty. A filter attached nowhere is removed with
// its pins. It returns the interfaces detached.
func Unload(p Place, names []string) ([]Iface, error) {
	a, err := Open(p)
	if err != nil {
		return nil, err
	}
	defer a.Close()
	dir := p.Dir()
	var detach []Iface
	if len(names) == 0 {
		for _, i := range a.ifindexes() {
			detach = append(detach, a.iface(i))
		}
	}
	for _, name := range names {
		k := slices.IndexFunc(a.Meta.Ifaces, func(ifc Iface) bool { return ifc.Name == name })
		if k < 0 || a.Links[a.Meta.Ifaces[k].Index] == nil {
			return nil, fmt.Errorf("unload %s filter: not attached to %s", p.Hook, name)
		}
		detach = append(detach, a.Meta.Ifaces[k])
	}
	for _, ifc := range detach {
		if err := detachLink(a.Links[ifc.Index], linkPin(dir, ifc.Index)); err != nil {
			return nil, fmt.Errorf("unload %s filter from %s: %w", p.Hook, ifc.Name, err)
		}
		delete(a.Links, ifc.Index)
		// Nothing comes from there to be deferred any more.
		if m := a.maps[pinNFIfaces]; m != nil {
			if err := m.Delete(uint32(ifc.Index)); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
				return nil, fmt.Errorf("unload %s filter from %s: netfilter stage: %w", p.Hook, ifc.Name, err)
			}
		}
	}
	if len(a.Links) == 0 {
		if err := os.RemoveAll(dir); err != nil {
			return detach, fmt.Errorf("unload %s filter: %w", p.Hook, err)
		}
		// The namespace's directory goes when its last filter does.
		os.Remove(filepath.Dir(dir))
		if a.Meta.Conntrack {
			if err := releaseConntrackAt(p); err != nil {
				return detach, fmt.Errorf("unload %s filter: %w", p.Hook, err)
			}
		}
		return detach, nil
	}
	meta := a.Meta
	meta.Ifaces = slices.DeleteFunc(slices.Clone(meta.Ifaces), func(ifc Iface) bool { return a.Links[ifc.Index] == nil })
	if m := a.maps[pinNFIfaces]; m != nil && len(meta.Uppers) > 0 {
		// Nor from the upper devices of the interfaces detached, unless
		// they are upper devices of one still attached.
		var left []int
		for i := range a.Links {
			left = append(left, i)
		}
		var still []Iface
		if links, err := listLinks(); err == nil {
			still, _ = uppersOf(links, left, false)
		}
		var keep []Iface
		for _, u := range meta.Uppers {
			if slices.ContainsFunc(still, func(v Iface) bool { return v.Index == u.Index }) {
				keep = append(keep, u)
				continue
			}
			if err := m.Delete(uint32(u.Index)); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
				return detach, fmt.Errorf("unload %s filter: netfilter stage: %s: %w", p.Hook, u.Name, err)
			}
		}
		meta.Uppers = keep
	}
	mp, err := newMetaMap(&meta)
	if err != nil {
		return detach, fmt.Errorf("unload %s filter: %w", p.Hook, err)
	}
	defer mp.Close()
	path := filepath.Join(dir, pinMeta)
	if err := pinNew(mp, path); err != nil {
		return detach, fmt.Errorf("unload %s filter: %w", p.Hook, err)
	}
	if err := commitPin(path); err != nil {
		return detach, fmt.Errorf("unload %s filter: %w", p.Hook, err)
	}
	return detach, nil
}

// detachLink detaches a link and removes its pin.
func detachLink(l link.Link, pin string) error {
	if d, ok := l.(interface{ Detach() error }); ok {
		if err := d.Detach(); err != nil && !errors.Is(err, link.ErrNotSupported) {
			return err
		}
	}
	if err := os.Remove(pin); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return l.Close()
}

// iface returns what Meta says about the interface ifindex.
func (a *Active) iface(ifindex int) Iface {
	for _, ifc := range a.Meta.Ifaces {
		if ifc.Index == ifindex {
			return ifc
		}
	}
	return Iface{Index: ifindex, Name: fmt.Sprintf("ifindex %d", ifindex)}
}
