package loader

import (
	"errors"
	"fmt"
	"net"
	"os"
	"time"

	"github.com/cilium/ebpf/link"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"bpfwall/codegen"
	"bpfwall/codegen/abi"
	"bpfwall/ir"
	"bpfwall/model"
	"bpfwall/rules"
)

// A Replay runs a loaded program where it runs for real, so that packets
// of a flow get the conntrack state the kernel gives them: a scratch
// network namespace, where conntrack tracks every packet the program lets
// through, the program is attached to an interface, and its netfilter
// stage, if it has one, at PRE_ROUTING after conntrack. A test run
// (Loaded.Run) has no conntrack: there a reply or an ICMP echo of an
// established flow is NEW or INVALID.
//
// Each packet is sent into the interface as if it arrived on it. What the
// program passes goes on through conntrack and is forwarded to a sink
// device, which drops it: conntrack confirms its entry at POST_ROUTING, as
// it does for a packet delivered locally at INPUT. What the program or
// its stage drops never reaches confirmation, as on the host.
type Replay struct {
	l     *Loaded
	orig  int // the thread's network namespace before the replay
	links []link.Link
	sock  int // AF_PACKET socket that sends into the interface
	peer  int // ifindex of the interface the socket sends on
	in    int // ifindex of the interface the program is attached to
	mac   net.HardwareAddr
}

// replayTimeout is how long a replayed packet may take to be decided.
const replayTimeout = 2 * time.Second

// Replay moves the calling thread, which must be locked to it
// (runtime.LockOSThread), into a scratch network namespace and attaches
// the program there, as seen on an interface called iface. Close moves it
// back. Only xdp and tc-ingress programs replay: a tc-egress program sees
// the state conntrack gave a packet on its way out, which a packet sent
// into an interface does not take.
func (l *Loaded) Replay(iface string) (*Replay, error) {
	if l.Program.Hook != codegen.HookXDP && l.Program.Hook != codegen.HookTCIngress {
		return nil, fmt.Errorf("replay: a %s program does not replay", l.Program.Hook)
	}
	orig, err := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("replay: %w", err)
	}
	if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
		unix.Close(orig)
		return nil, fmt.Errorf("replay: new network namespace: %w", err)
	}
	r := &Replay{l: l, orig: orig, sock: -1}
	if err := r.start(iface); err != nil {
		r.Close()
		return nil, err
	}
	return r, nil
}

// start sets the scratch namespace up and attaches the program there.
func (r *Replay) start(iface string) error {
	l := r.l
	in, err := r.setupNetwork()
	if err != nil {
		return fmt.Errorf("replay: %w", err)
	}
	if _, err := HoldConntrack(); err != nil {
		return fmt.Errorf("replay: %w", err)
	}
	if err := l.SetIface(uint32(in.Index), iface); err != nil {
		return err
	}
	lk, _, err := attach(l.prog, l.Program.Hook, Iface{Name: in.Name, Index: in.Index}, XDPAuto)
	if err != nil {
		return fmt.Errorf("replay: %w", err)
	}
	r.links = append(r.links, lk)
	if l.nfProg != nil {
		if err := l.setNetfilterIface(uint32(in.Index)); err != nil {
			return err
		}
		nl, err := l.attachNetfilter()
		if err != nil {
			return fmt.Errorf("replay: %w", err)
		}
		r.links = append(r.links, nl)
	}
	return nil
}

// setupNetwork makes the scratch namespace's devices: a veth pair, whose
// far end receives the packets, and a sink device that the default routes
// forward everything to; forwarding on, reverse-path filtering off. It
// returns the receiving device.
func (r *Replay) setupNetwork() (*net.Interface, error) {
	lo, err := netlink.LinkByName("lo")
	if err != nil {
		return nil, err
	}
	// The sink is a veth whose peer stays down, without ARP: what it
	// transmits is dropped, with no neighbour to resolve first.
	veth := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "replay1"}, PeerName: "replay0"}
	sink := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "sink"}, PeerName: "sinkpeer"}
	for _, l := range []netlink.Link{veth, sink} {
		if err := netlink.LinkAdd(l); err != nil {
			return nil, fmt.Errorf("add %s: %w", l.Attrs().Name, err)
		}
	}
	if s, err := netlink.LinkByName("sink"); err != nil {
		return nil, err
	} else if err := netlink.LinkSetARPOff(s); err != nil {
		return nil, fmt.Errorf("sink: arp off: %w", err)
	}
	for _, name := range []string{"replay0", "replay1", "sink"} {
		l, err := netlink.LinkByName(name)
		if err == nil {
			err = netlink.LinkSetUp(l)
		}
		if err != nil {
			return nil, fmt.Errorf("set %s up: %w", name, err)
		}
	}
	if err := netlink.LinkSetUp(lo); err != nil {
		return nil, err
	}
	for _, kv := range [][2]string{
		{"ipv4/ip_forward", "1"}, {"ipv4/conf/all/rp_filter", "0"}, {"ipv4/conf/replay1/rp_filter", "0"},
		{"ipv6/conf/all/forwarding", "1"}, {"ipv6/conf/replay0/disable_ipv6", "1"},
	} {
		if err := os.WriteFile("/proc/sys/net/"+kv[0], []byte(kv[1]), 0); err != nil {
			return nil, fmt.Errorf("sysctl %s: %w", kv[0], err)
		}
	}
	s, err := netlink.LinkByName("sink")
	if err != nil {
		return nil, err
	}
	for _, dst := range []*net.IPNet{{IP: net.IPv4zero, Mask: net.CIDRMask(0, 32)}, {IP: net.IPv6zero, Mask: net.CIDRMask(0, 128)}} {
		if err := netlink.RouteAdd(&netlink.Route{LinkIndex: s.Attrs().Index, Dst: dst, Scope: netlink.SCOPE_LINK}); err != nil {
			return nil, fmt.Errorf("default route %s: %w", dst, err)
		}
	}
	// Until linkwatch sees the carrier, the sending end's queue is
	// noop, which drops what it is given.
	for deadline := time.Now().Add(replayTimeout); ; time.Sleep(time.Millisecond) {
		l, err := netlink.LinkByName("replay0")
		if err != nil {
			return nil, err
		}
		if l.Attrs().OperState == netlink.OperUp {
			break
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("replay0 is %s, not up", l.Attrs().OperState)
		}
	}
	in, err := net.InterfaceByName("replay1")
	if err != nil {
		return nil, err
	}
	peer, err := net.InterfaceByName("replay0")
	if err != nil {
		return nil, err
	}
	r.mac, r.peer, r.in = in.HardwareAddr, peer.Index, in.Index
	if r.sock, err = unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 0); err != nil {
		return nil, fmt.Errorf("packet socket: %w", err)
	}
	return in, nil
}

// Run sends frame into the interface, as arriving there on an interface
// called iface, and returns how the program, or after conntrack its
// stage, decided it.
func (r *Replay) Run(frame []byte, iface string) (Outcome, error) {
	if len(frame) < 14 {
		return Outcome{}, fmt.Errorf("replay: a frame of %d bytes", len(frame))
	}
	if err := r.l.SetIface(uint32(r.in), iface); err != nil {
		return Outcome{}, err
	}
	if _, err := r.l.takeDecision(); err != nil {
		return Outcome{}, err
	}
	f := append([]byte(nil), frame...)
	if f[0]&1 == 0 {
		copy(f, r.mac) // addressed to the interface, not another host
	}
	if err := unix.Sendto(r.sock, f, 0, &unix.SockaddrLinklayer{Ifindex: r.peer, Halen: 6}); err != nil {
		return Outcome{}, fmt.Errorf("replay: send: %w", err)
	}
	d, err := r.await()
	if err != nil {
		return Outcome{}, err
	}
	// The program defers what its netfilter stage decides: the packets
	// of class U, whose decision the stage's replaces before a reader
	// can see the program's.
	stage := false
	if r.l.nfProg != nil {
		if pkt, err := model.Decode(frame, model.Meta{}); err == nil && pkt.Invalid == "" && !pkt.NotIP {
			stage = pkt.DeferredClass()
		}
	}
	return Outcome{Verdict: r.verdict(d), Decision: d, Stage: stage}, nil
}

// await waits for the decision of the packet just sent: the program's, or
// its stage's when the program deferred the packet.
func (r *Replay) await() (abi.Decision, error) {
	deadline := time.Now().Add(replayTimeout)
	deferred := false
	for time.Now().Before(deadline) {
		d, err := r.l.takeDecision()
		if err != nil {
			return abi.Decision{}, err
		}
		switch {
		case d.Kind == abi.Deferred && r.l.nfProg != nil:
			deferred = true
		case d.Kind != 0:
			return d, nil
		}
		time.Sleep(200 * time.Microsecond)
	}
	if deferred {
		// Deferred, and the stage never saw it: the IP layer dropped
		// it before PRE_ROUTING.
		return abi.Decision{Kind: abi.SkippedInvalid}, nil
	}
	return abi.Decision{}, errors.New("replay: the program did not decide the packet")
}

// verdict is what the decision d does to the packet.
func (r *Replay) verdict(d abi.Decision) ir.Verdict {
	p := r.l.Program.IR
	switch d.Kind {
	case abi.DecidedByRule:
		if int(d.Rule) < len(p.Rules) {
			switch p.Rules[d.Rule].Action.(type) {
			case ir.Drop:
				return ir.VerdictDrop
			case ir.Reject:
				return ir.VerdictReject
			case ir.Accept, ir.TProxy, ir.Return, ir.Jump, ir.Goto, ir.Log, ir.None:
			}
		}
		return ir.VerdictAccept
	case abi.DecidedByPolicy:
		if p.Chains[0].Policy == rules.PolicyDrop {
			return ir.VerdictDrop
		}
		return ir.VerdictAccept
	case abi.Hotdrop, abi.SkippedInvalid, abi.TinyFragment:
		return ir.VerdictDrop
	}
	return ir.VerdictAccept
}

// Close detaches the program and returns the thread to its network
// namespace; the scratch namespace goes with its last reference.
func (r *Replay) Close() error {
	for _, l := range r.links {
		l.Close()
	}
	if r.sock >= 0 {
		unix.Close(r.sock)
	}
	err := unix.Setns(r.orig, unix.CLONE_NEWNET)
	unix.Close(r.orig)
	if err != nil {
		return fmt.Errorf("replay: back to the network namespace: %w", err)
	}
	return nil
}
