package loader

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"

	"bpfwall/codegen"
	"bpfwall/codegen/uapi"
	"bpfwall/rules"
)

// An accelerator (codegen.Accelerator) runs at xdp in front of the chains
// that a restore without -i runs at their netfilter hooks. Each family has
// its own, a filter pinned under accelerator-FAMILY like any other but
// attached to nothing itself. One dispatcher per network namespace,
// pinned under accelerator/ with its XDP links (link_IFINDEX), runs on the
// accelerated interfaces: it tail-calls the accelerator of the frame's
// family through that family's slot (slot_ipv4, slot_ipv6, PROG_ARRAYs of
// one), and passes what the slot does not hold (an empty slot, another
// ether type). The family's filter pins the dispatcher and its slot as
// dispatcher and dispatch, as a chain at its netfilter hook does: a swap
// writes the new accelerator into the slot in one step (dispatchUpdate),
// and unload empties the slot, after which the family's packets pass.
// The dispatcher goes with the last family's accelerator.

// AcceleratorChain is Place.Chain of an accelerator's place, and the name
// of its program's entry chain.
const AcceleratorChain = "ACCELERATE"

// acceleratorShared is the directory of the dispatcher, under a network
// namespace's.
const acceleratorShared = "accelerator"

// AcceleratorPlace is the place of the accelerator of family in network
// namespace ns.
func AcceleratorPlace(root string, ns uint64, family rules.Family) Place {
	return Place{Root: root, NetNS: ns, Hook: codegen.HookXDP, Family: family, Chain: AcceleratorChain}
}

// Accelerator reports whether p is an accelerator's place.
func (p Place) Accelerator() bool { return p.Hook == codegen.HookXDP && p.Chain == AcceleratorChain }

// acceleratorDir is the dispatcher's directory in network namespace ns.
func acceleratorDir(root string, ns uint64) string {
	if root == "" {
		root = DefaultRoot
	}
	return filepath.Join(root, strconv.FormatUint(ns, 10), acceleratorShared)
}

// slotPin is the pin of family's slot in the dispatcher's directory.
func slotPin(family rules.Family) string { return "slot_" + family.String() }

// newAcceleratorDispatch makes the dispatcher and the slots of both
// families, empty.
func newAcceleratorDispatch() (*ebpf.Program, map[rules.Family]*ebpf.Map, error) {
	slots := make(map[rules.Family]*ebpf.Map)
	closeAll := func() {
		for _, m := range slots {
			m.Close()
		}
	}
	for _, fam := range []rules.Family{rules.IPv4, rules.IPv6} {
		m, err := ebpf.NewMap(&ebpf.MapSpec{Name: "bpfwall_" + fam.String(), Type: ebpf.ProgramArray, KeySize: 4, ValueSize: 4, MaxEntries: 1})
		if err != nil {
			closeAll()
			return nil, nil, fmt.Errorf("accelerator slot: %w", err)
		}
		slots[fam] = m
	}
	tail := func(label string, slot *ebpf.Map) asm.Instructions {
		return asm.Instructions{
			asm.Mov.Reg(asm.R1, asm.R6).WithSymbol(label),
			asm.LoadMapPtr(asm.R2, slot.FD()),
			asm.Mov.Imm(asm.R3, 0),
			asm.FnTailCall.Call(),
			asm.Mov.Imm(asm.R0, uapi.XDPPass),
			asm.Return(),
		}
	}
	insns := asm.Instructions{
		asm.Mov.Reg(asm.R6, asm.R1),
		asm.LoadMem(asm.R2, asm.R1, 0, asm.Word), // data
		asm.LoadMem(asm.R3, asm.R1, 4, asm.Word), // data_end
		asm.Mov.Reg(asm.R4, asm.R2),
		asm.Add.Imm(asm.R4, 14),
		asm.JGT.Reg(asm.R4, asm.R3, "pass"),
		asm.LoadMem(asm.R4, asm.R2, 12, asm.Half),
		asm.HostTo(asm.BE, asm.R4, asm.Half),
		asm.JEq.Imm(asm.R4, uapi.EtherTypeIPv4, "ipv4"),
		asm.JEq.Imm(asm.R4, uapi.EtherTypeIPv6, "ipv6"),
		asm.Mov.Imm(asm.R0, uapi.XDPPass).WithSymbol("pass"),
		asm.Return(),
	}
	insns = append(insns, tail("ipv4", slots[rules.IPv4])...)
	insns = append(insns, tail("ipv6", slots[rules.IPv6])...)
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Name:       "bpfwall_accel",
		Type:       ebpf.XDP,
		AttachType: ebpf.AttachXDP,
		// As the accelerators it calls (codegen's xdp programs).
		Flags:        1 << 5, // BPF_F_XDP_HAS_FRAGS
		License:      "GPL",
		Instructions: insns,
	})
	if err != nil {
		closeAll()
		return nil, nil, fmt.Errorf("accelerator dispatcher: %w", err)
	}
	return prog, slots, nil
}

// AttachAccelerator makes the dispatcher of network namespace ns, the
// calling thread's, run on the interfaces called names, making it if
// there is none, and returns the interfaces it attached it to. It
// changes no verdict: a family whose accelerator is not in its slot
// passes. An interface with an upper device or a master is refused:
// netfilter sees its packets on another device.
func AttachAccelerator(root string, ns uint64, names []string, mode XDPMode) (added []Iface, err error) {
	dir := acceleratorDir(root, ns)
	if err := makeNetNSDir(root, ns, dir); err != nil {
		return nil, err
	}
	attached, err := linkPins(dir)
	if err != nil {
		return nil, fmt.Errorf("accelerator: %w", err)
	}
	var add []*net.Interface
	if len(names) > 0 {
		links, err := listLinks()
		if err != nil {
			return nil, err
		}
		for _, name := range names {
			ifi, err := net.InterfaceByName(name)
			if err != nil {
				return nil, fmt.Errorf("accelerator: interface %s: %w", name, err)
			}
			if err := acceleratable(links, ifi.Index); err != nil {
				return nil, err
			}
			if !slices.Contains(attached, ifi.Index) && !slices.ContainsFunc(add, func(a *net.Interface) bool { return a.Index == ifi.Index }) {
				add = append(add, ifi)
			}
		}
	}
	if len(add) > 0 {
		disp, err := ebpf.LoadPinnedProgram(filepath.Join(dir, pinDispatcher), nil)
		if errors.Is(err, os.ErrNotExist) {
			var slots map[rules.Family]*ebpf.Map
			if disp, slots, err = newAcceleratorDispatch(); err != nil {
				return nil, err
			}
			for fam, m := range slots {
				// A slot a killed command pinned before its dispatcher
				// serves nothing.
				os.Remove(filepath.Join(dir, slotPin(fam)))
				err = m.Pin(filepath.Join(dir, slotPin(fam)))
				m.Close()
				if err != nil {
					disp.Close()
					return nil, fmt.Errorf("accelerator: pin slot: %w", err)
				}
			}
			// Pinned last: with it the dispatcher is complete.
			if err := disp.Pin(filepath.Join(dir, pinDispatcher)); err != nil {
				disp.Close()
				return nil, fmt.Errorf("accelerator: pin dispatcher: %w", err)
			}
		} else if err != nil {
			return nil, fmt.Errorf("accelerator: %w", err)
		}
		defer disp.Close()
		defer func() {
			if err != nil {
				DetachAcceleratorFrom(root, ns, added)
			}
		}()
		for _, ifi := range add {
			l, _, err := attach(disp, codegen.HookXDP, Iface{Index: ifi.Index, Name: ifi.Name}, mode)
			if err != nil {
				return added, fmt.Errorf("accelerator: %w", err)
			}
			err = l.Pin(linkPin(dir, ifi.Index))
			if err != nil {
				l.Close()
				return added, fmt.Errorf("accelerator: pin link: %w", err)
			}
			l.Close()
			added = append(added, Iface{Index: ifi.Index, Name: ifi.Name})
		}
	}
	return added, nil
}

// DetachAcceleratorFrom detaches the dispatcher of network namespace ns
// from the interfaces ifaces (those AttachAccelerator attached for a
// restore that failed), and removes it when it runs nowhere else and no
// family's accelerator uses it.
func DetachAcceleratorFrom(root string, ns uint64, ifaces []Iface) error {
	dir := acceleratorDir(root, ns)
	for _, ifc := range ifaces {
		l, err := link.LoadPinnedLink(linkPin(dir, ifc.Index), nil)
		if err != nil {
			continue
		}
		if err := detachLink(l, linkPin(dir, ifc.Index)); err != nil {
			return fmt.Errorf("accelerator: detach from %s: %w", ifc.Name, err)
		}
	}
	if left, err := linkPins(dir); err == nil && len(left) == 0 {
		return ReleaseIdleAccelerator(root, ns)
	}
	return nil
}

// acceleratable refuses the interface ifindex when netfilter sees its
// packets on another device: a stacked device's, or its master's.
func acceleratable(links map[int]*netLink, ifindex int) error {
	l := links[ifindex]
	if l == nil {
		return fmt.Errorf("accelerator: no interface %d", ifindex)
	}
	if m := links[l.master]; l.master != 0 && m != nil {
		return fmt.Errorf("accelerator: %s is a port of %s (%s): netfilter sees its packets on %[2]s; accelerate %[2]s instead", l.name, m.name, m.kind)
	}
	for _, u := range sortedLinks(links) {
		if u.lower == ifindex && !u.remote && slices.Contains(stackedKinds, u.kind) {
			return fmt.Errorf("accelerator: %s is the lower device of %s (%s): netfilter sees the packets addressed to %[2]s on it", l.name, u.name, u.kind)
		}
	}
	return nil
}

// AcceleratedIfaces returns the interfaces the dispatcher of network
// namespace ns runs on; none without a dispatcher. Links whose interface
// is gone are left out.
func AcceleratedIfaces(root string, ns uint64) ([]Iface, error) {
	dir := acceleratorDir(root, ns)
	idxs, err := linkPins(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("accelerator: %w", err)
	}
	slices.Sort(idxs)
	var out []Iface
	for _, i := range idxs {
		l, err := link.LoadPinnedLink(linkPin(dir, i), nil)
		if err != nil {
			return nil, fmt.Errorf("accelerator: %w", err)
		}
		info, err := l.Info()
		l.Close()
		if err != nil || info.XDP() == nil || info.XDP().Ifindex == 0 {
			continue // the interface is gone
		}
		ifi, err := net.InterfaceByIndex(i)
		if err != nil {
			continue
		}
		out = append(out, Iface{Index: i, Name: ifi.Name})
	}
	return out, nil
}

// setAllIfaces tells an accelerator the names of every interface of the
// calling thread's namespace: the input interface is one its dispatcher
// runs on, the output one any.
func (l *Loaded) setAllIfaces() error {
	ifs, err := net.Interfaces()
	if err != nil {
		return fmt.Errorf("accelerator: list interfaces: %w", err)
	}
	for _, ifi := range ifs {
		if err := l.SetIface(uint32(ifi.Index), ifi.Name); err != nil {
			return err
		}
	}
	return nil
}

// openAcceleratorSlot opens the dispatcher of p's network namespace and
// the slot of p's family, for the swap to pin in p's directory too. They
// are clones: pinning an object opened from a pin moves that pin.
func openAcceleratorSlot(p Place) (*ebpf.Program, *ebpf.Map, error) {
	dir := acceleratorDir(p.Root, p.NetNS)
	pinned, err := ebpf.LoadPinnedProgram(filepath.Join(dir, pinDispatcher), nil)
	if err != nil {
		return nil, nil, fmt.Errorf("accelerator dispatcher: %w (attach it first)", err)
	}
	disp, err := pinned.Clone()
	pinned.Close()
	if err != nil {
		return nil, nil, fmt.Errorf("accelerator dispatcher: %w", err)
	}
	pinnedSlot, err := ebpf.LoadPinnedMap(filepath.Join(dir, slotPin(p.Family)), nil)
	if err != nil {
		disp.Close()
		return nil, nil, fmt.Errorf("accelerator slot: %w", err)
	}
	slot, err := pinnedSlot.Clone()
	pinnedSlot.Close()
	if err != nil {
		disp.Close()
		return nil, nil, fmt.Errorf("accelerator slot: %w", err)
	}
	return disp, slot, nil
}

// emptyAccelerator empties the slot of the accelerator a, which is
// unloaded: from then on its family's packets pass the dispatcher.
func emptyAccelerator(a *Active) error {
	if slot := a.maps[pinDispatch]; slot != nil {
		if err := slot.Delete(uint32(0)); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return fmt.Errorf("accelerator slot: %w", err)
		}
	}
	return nil
}

// ReleaseIdleAccelerator removes the dispatcher of network namespace ns
// when neither family has an accelerator.
func ReleaseIdleAccelerator(root string, ns uint64) error {
	for _, fam := range []rules.Family{rules.IPv4, rules.IPv6} {
		if _, err := os.Stat(filepath.Join(AcceleratorPlace(root, ns, fam).Dir(), pinProgram)); err == nil {
			return nil
		}
	}
	return DetachAccelerator(root, ns)
}

// DetachAccelerator detaches the dispatcher of network namespace ns from
// every interface and removes it.
func DetachAccelerator(root string, ns uint64) error {
	dir := acceleratorDir(root, ns)
	idxs, err := linkPins(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("accelerator: %w", err)
	}
	for _, i := range idxs {
		l, err := link.LoadPinnedLink(linkPin(dir, i), nil)
		if err != nil {
			return fmt.Errorf("accelerator: %w", err)
		}
		if err := detachLink(l, linkPin(dir, i)); err != nil {
			return fmt.Errorf("accelerator: detach from ifindex %d: %w", i, err)
		}
	}
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("accelerator: %w", err)
	}
	return nil
}
