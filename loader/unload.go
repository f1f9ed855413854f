package loader

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"

	"bpfwall/codegen"
)

// checkUppersLeft refuses to detach a filter with a netfilter stage from
// some of its interfaces when a bond, team or bridge the stage follows
// would keep a port the filter stays attached to and lose one it leaves:
// the ingress program of the port left would still defer its packets of
// class U, which netfilter sees on the master, where the stage could no
// longer tell them from the other port's (as load refuses it).
func (a *Active) checkUppersLeft(detach []Iface) error {
	if a.maps[pinNFIfaces] == nil || len(a.Meta.UpperDevices()) == 0 {
		return nil
	}
	var left []int
	for i := range a.Links {
		if !slices.ContainsFunc(detach, func(d Iface) bool { return d.Index == i }) {
			left = append(left, i)
		}
	}
	if len(left) == 0 {
		return nil
	}
	links, err := listLinks()
	if err != nil {
		return fmt.Errorf("netfilter stage: %w", err)
	}
	if _, err := uppersOf(links, left, true); err != nil {
		return fmt.Errorf("%w; unload every port of it at once", err)
	}
	return nil
}

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
	if err := a.checkUppersLeft(detach); err != nil {
		return nil, fmt.Errorf("unload %s filter: %w", p.Hook, err)
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
		if p.Accelerator() {
			if err := emptyAccelerator(a); err != nil {
				return detach, fmt.Errorf("unload %s: %w", p.Name(), err)
			}
		}
		if err := os.RemoveAll(dir); err != nil {
			return detach, fmt.Errorf("unload %s filter: %w", p.Hook, err)
		}
		if p.Accelerator() {
			// The dispatcher goes with the last family's accelerator.
			if err := ReleaseIdleAccelerator(p.Root, p.NetNS); err != nil {
				return detach, fmt.Errorf("unload %s: %w", p.Name(), err)
			}
		}
		// The namespace's directory goes when its last filter does.
		removeIfOnlyMarked(filepath.Dir(dir))
		if a.Meta.HoldsConntrack() {
			if err := releaseConntrackAt(p); err != nil {
				return detach, fmt.Errorf("unload %s filter: %w", p.Hook, err)
			}
		}
		return detach, nil
	}
	meta := a.Meta
	meta.Ifaces = slices.DeleteFunc(slices.Clone(meta.Ifaces), func(ifc Iface) bool { return a.Links[ifc.Index] == nil })
	if m := a.maps[pinNFIfaces]; m != nil && len(meta.UpperDevices()) > 0 {
		// Nor from the upper devices of the interfaces detached, unless
		// they are upper devices of one still attached.
		var left []int
		for i := range a.Links {
			left = append(left, i)
		}
		links, err := listLinks()
		if err != nil {
			return detach, fmt.Errorf("unload %s filter: netfilter stage: %w", p.Hook, err)
		}
		still, _ := uppersOf(links, left, false)
		var keep []Iface
		for _, u := range meta.UpperDevices() {
			if slices.ContainsFunc(still, func(v Iface) bool { return v.Index == u.Index }) {
				keep = append(keep, u)
				continue
			}
			if err := m.Delete(uint32(u.Index)); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
				return detach, fmt.Errorf("unload %s filter: netfilter stage: %s: %w", p.Hook, u.Name, err)
			}
		}
		if err := meta.setFeature(metaUppers, recorded(keep)); err != nil {
			return detach, fmt.Errorf("unload %s filter: %w", p.Hook, err)
		}
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

// UnloadNetNS removes every filter pinned for the network namespace id
// (as its pin directory under root names it) from outside it. A pinned
// netfilter link holds a reference on its namespace: a namespace deleted
// (ip netns del) with a filter that tests the conntrack state loaded
// stays, with its devices and the filter, until its pins go. If the
// namespace is still alive (a process or /run/netns holds it), the
// filters are unloaded in it as by Unload; otherwise their links are
// detached and the pins removed. It returns the hooks unloaded. also, if
// not nil, runs in the namespace after its filters are unloaded there,
// when it is alive.
func UnloadNetNS(root string, id uint64, also func() error) ([]codegen.Hook, error) {
	if root == "" {
		root = DefaultRoot
	}
	if err := checkRoot(root); err != nil {
		return nil, err
	}
	here, err := NetNS()
	if err != nil {
		return nil, err
	}
	if id == here {
		return nil, fmt.Errorf("network namespace %d is this one: use unload without --netns", id)
	}
	dir := filepath.Join(root, strconv.FormatUint(id, 10))
	if _, err := os.Stat(dir); err != nil {
		return nil, fmt.Errorf("nothing is pinned for network namespace %d: %w", id, err)
	}
	places, err := Places(root, id)
	if err != nil {
		return nil, err
	}
	var hooks []codegen.Hook
	for _, p := range places {
		hooks = append(hooks, p.Hook)
	}
	if path := findNetNS(id); path != "" {
		err := inNetNS(path, id, func() error {
			for _, p := range places {
				if _, err := Unload(p, nil); err != nil {
					return err
				}
			}
			if also != nil {
				return also()
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
		removeIfOnlyMarked(dir)
		return hooks, nil
	}
	// The namespace is gone but for what the links hold: detach them
	// (the netfilter link releases the namespace), then drop the pins.
	err = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		if l, err := link.LoadPinnedLink(path, nil); err == nil {
			if dl, ok := l.(interface{ Detach() error }); ok {
				dl.Detach()
			}
			l.Close()
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("unload network namespace %d: %w", id, err)
	}
	if err := os.RemoveAll(dir); err != nil {
		return nil, fmt.Errorf("unload network namespace %d: %w", id, err)
	}
	return hooks, nil
}

// findNetNS returns a path to the network namespace id if a process or a
// bind mount under /run/netns still holds it; "" if none does.
func findNetNS(id uint64) string {
	var paths []string
	if ents, err := os.ReadDir("/run/netns"); err == nil {
		for _, e := range ents {
			paths = append(paths, filepath.Join("/run/netns", e.Name()))
		}
	}
	if ents, err := os.ReadDir("/proc"); err == nil {
		for _, e := range ents {
			if _, err := strconv.Atoi(e.Name()); err == nil {
				paths = append(paths, filepath.Join("/proc", e.Name(), "ns", "net"))
				// A thread can hold a namespace its process is not in.
				tasks, _ := filepath.Glob(filepath.Join("/proc", e.Name(), "task", "*", "ns", "net"))
				paths = append(paths, tasks...)
			}
		}
	}
	for _, p := range paths {
		var st unix.Stat_t
		if unix.Stat(p, &st) == nil && st.Ino == id {
			return p
		}
	}
	return ""
}

// inNetNS runs f on a thread in the network namespace id, found at path.
// The thread stays locked and dies with its goroutine.
func inNetNS(path string, id uint64, f func() error) error {
	done := make(chan error)
	go func() {
		runtime.LockOSThread()
		fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			done <- err
			return
		}
		defer unix.Close(fd)
		// The process found at path may have gone, and its pid been
		// reused, since: enter only the namespace the descriptor is.
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil || st.Ino != id {
			done <- fmt.Errorf("network namespace %d is no longer at %s", id, path)
			return
		}
		if err := unix.Setns(fd, unix.CLONE_NEWNET); err != nil {
			done <- fmt.Errorf("enter network namespace %s: %w", path, err)
			return
		}
		done <- f()
	}()
	return <-done
}

// OtherNetNS lists the network namespaces other than the calling
// thread's that have filters pinned under root, and whether each is
// still held by a process or /run/netns (a deleted one is kept alive by
// its netfilter links until bpfwall unload --netns).
func OtherNetNS(root string) (ids []uint64, alive []bool, err error) {
	if root == "" {
		root = DefaultRoot
	}
	if err := checkRoot(root); err != nil {
		return nil, nil, err
	}
	here, err := NetNS()
	if err != nil {
		return nil, nil, err
	}
	ents, err := os.ReadDir(root)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil, nil
	}
	if err != nil {
		return nil, nil, err
	}
	for _, e := range ents {
		id, err := strconv.ParseUint(e.Name(), 10, 64)
		if err != nil || id == here || !e.IsDir() {
			continue
		}
		if removeIfOnlyMarked(filepath.Join(root, e.Name())) {
			continue // no filter, only its cookie mark
		}
		ids = append(ids, id)
		alive = append(alive, findNetNS(id) != "")
	}
	return ids, alive, nil
}
