package loader

import (
	"errors"
	"fmt"
	"slices"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"

	"bpfwall/codegen"
)

// XDPMode is how an XDP program is attached.
type XDPMode uint8

const (
	// XDPAuto tries the driver's native XDP and falls back to generic.
	XDPAuto XDPMode = iota
	XDPNative
	XDPGeneric
)

var xdpModeNames = []string{"auto", "native", "generic"}

func (m XDPMode) String() string {
	if int(m) < len(xdpModeNames) {
		return xdpModeNames[m]
	}
	return fmt.Sprintf("XDPMode(%d)", uint8(m))
}

// ParseXDPMode returns the mode called name.
func ParseXDPMode(name string) (XDPMode, error) {
	for i, n := range xdpModeNames {
		if n == name {
			return XDPMode(i), nil
		}
	}
	return 0, fmt.Errorf("unknown xdp mode %q (want native, generic or auto)", name)
}

// xdpModes returns the XDP mode to attach p with on each of ifaces, by
// ifindex: mode, except that auto is generic on a veth when p transmits
// replies. A veth delivers what native XDP transmits (XDP_TX) to its
// peer only when the peer runs NAPI, which takes an XDP program or GRO
// on the peer, in the peer's namespace; without it the peer drops every
// reply (counted in its rx drops). Generic XDP transmits through the
// device's queue, which always reaches the peer.
func xdpModes(p *codegen.Program, ifaces []Iface, mode XDPMode) (map[int]XDPMode, error) {
	out := make(map[int]XDPMode, len(ifaces))
	for _, ifc := range ifaces {
		out[ifc.Index] = mode
	}
	if p.Hook != codegen.HookXDP || mode != XDPAuto || !p.Transmits() {
		return out, nil
	}
	links, err := listLinks()
	if err != nil {
		return nil, err
	}
	for _, ifc := range ifaces {
		if l := links[ifc.Index]; l != nil && l.kind == "veth" {
			out[ifc.Index] = XDPGeneric
		}
	}
	return out, nil
}

// mutedVeths returns those of ifaces that are veths p runs on in native
// XDP mode, when p transmits replies.
func mutedVeths(p *codegen.Program, ifaces []Iface) ([]Iface, error) {
	if p.Hook != codegen.HookXDP || !p.Transmits() || !slices.ContainsFunc(ifaces, func(i Iface) bool { return i.Mode == "native" }) {
		return nil, nil
	}
	links, err := listLinks()
	if err != nil {
		return nil, err
	}
	var out []Iface
	for _, ifc := range ifaces {
		if l := links[ifc.Index]; ifc.Mode == "native" && l != nil && l.kind == "veth" {
			out = append(out, ifc)
		}
	}
	return out, nil
}

// attach links prog to an interface at hook. For XDP it returns the mode
// used.
func attach(prog *ebpf.Program, hook codegen.Hook, iface Iface, mode XDPMode) (link.Link, string, error) {
	switch hook {
	case codegen.HookXDP:
		if mode != XDPGeneric {
			l, err := link.AttachXDP(link.XDPOptions{Program: prog, Interface: iface.Index, Flags: link.XDPDriverMode})
			if err == nil {
				return l, "native", nil
			}
			if mode == XDPNative {
				return nil, "", fmt.Errorf("attach native xdp program to %s: %w", iface.Name, err)
			}
		}
		l, err := link.AttachXDP(link.XDPOptions{Program: prog, Interface: iface.Index, Flags: link.XDPGenericMode})
		if err != nil {
			return nil, "", fmt.Errorf("attach xdp program to %s: %w", iface.Name, err)
		}
		return l, "generic", nil
	case codegen.HookTCIngress, codegen.HookTCEgress:
		at := ebpf.AttachTCXIngress
		if hook == codegen.HookTCEgress {
			at = ebpf.AttachTCXEgress
		}
		l, err := link.AttachTCX(link.TCXOptions{Program: prog, Interface: iface.Index, Attach: at})
		if err != nil {
			return nil, "", fmt.Errorf("attach %s program to %s: %w", hook, iface.Name, err)
		}
		return l, "", nil
	case codegen.HookSkLookup:
		l, err := attachNetNS(prog)
		return l, "", err
	}
	return nil, "", fmt.Errorf("attach program to %s: unknown hook %s", iface.Name, hook)
}

// ErrReplaced is returned, wrapped, when a link runs a program other than
// the one bpfwall pinned: someone else replaced it.
var ErrReplaced = errors.New("program replaced by someone else")

// ReplaceProgram makes l run new instead of old, in one step, and only if
// it runs old (BPF_F_REPLACE): the kernel refuses if someone else has put
// another program there.
func ReplaceProgram(l link.Link, new, old *ebpf.Program) error {
	raw, ok := l.(interface {
		UpdateArgs(link.RawLinkUpdateOptions) error
	})
	if !ok {
		return fmt.Errorf("replace program: link %T cannot be updated", l)
	}
	err := raw.UpdateArgs(link.RawLinkUpdateOptions{New: new, Old: old, Flags: unix.BPF_F_REPLACE})
	if errors.Is(err, unix.EPERM) {
		if running, want, ok := programIDs(l, old); ok && running != want {
			return fmt.Errorf("replace program: link runs program %d, not %d: %w", running, want, ErrReplaced)
		}
	}
	if err != nil {
		return fmt.Errorf("replace program: %w", err)
	}
	return nil
}

// programIDs returns the program l runs and the id of want.
func programIDs(l link.Link, want *ebpf.Program) (running, wantID ebpf.ProgramID, ok bool) {
	li, err := l.Info()
	if err != nil {
		return 0, 0, false
	}
	pi, err := want.Info()
	if err != nil {
		return 0, 0, false
	}
	id, ok := pi.ID()
	return li.Program, id, ok
}

// GoneIfaces returns the interfaces the filter was attached to that are
// gone, deleted or moved to another namespace: the kernel detached their
// links, which name no device any more.
func (a *Active) GoneIfaces() []Iface {
	var out []Iface
	for _, ifc := range a.Meta.Ifaces {
		l := a.Links[ifc.Index]
		if l == nil || ifc.Index == netnsIndex {
			continue
		}
		info, err := l.Info()
		if err != nil {
			continue
		}
		switch {
		case info.XDP() != nil && info.XDP().Ifindex == 0, info.TCX() != nil && info.TCX().Ifindex == 0:
			out = append(out, ifc)
		}
	}
	return out
}
