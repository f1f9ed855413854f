package topology

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
)

// Addresses of the topology. The firewall owns FirewallAddr on its
// ingress veth, so that an ARP request for it can mark the end of a batch
// of frames; the next hops are static neighbours, so that no other ARP or
// NDP runs.
var (
	FirewallAddr   = netip.MustParseAddr("192.0.2.1")
	SenderAddr     = netip.MustParseAddr("192.0.2.2")
	NextHop4       = netip.MustParseAddr("192.0.2.6")
	NextHop6       = netip.MustParseAddr("fe80::2")
	SenderMAC      = net.HardwareAddr{0x02, 0, 0, 0, 0, 0x01}
	FirewallInMAC  = net.HardwareAddr{0x02, 0, 0, 0, 0, 0x02}
	FirewallOutMAC = net.HardwareAddr{0x02, 0, 0, 0, 0, 0x03}
	ReceiverMAC    = net.HardwareAddr{0x02, 0, 0, 0, 0, 0x04}
	// NextHopMAC is nobody's address: the receiver's kernel sees the
	// forwarded frames as PACKET_OTHERHOST and ignores them, so it never
	// answers them, while a packet socket there still sees them.
	NextHopMAC = net.HardwareAddr{0x02, 0, 0, 0, 0, 0x66}
)

// The veths of the sender and the receiver, each alone in its namespace.
const (
	SenderIface   = "snd0"
	ReceiverIface = "rcv0"
)

// Options name the namespaces and the firewall's interfaces.
type Options struct {
	// Prefix starts the namespace names, followed by the process ID and a
	// sequence number; "bwtopo" when empty.
	Prefix string
	// InIface faces the sender, OutIface the receiver; "fwin" and "fwout"
	// when empty.
	InIface, OutIface string
}

// Topology is three network namespaces, sender → firewall → receiver,
// joined by veth pairs. The firewall forwards everything to the receiver
// by a default route, for IPv4 and IPv6.
type Topology struct {
	Sender, Firewall, Receiver string // namespace names
	InIface, OutIface          string // the firewall's veths
}

var seq atomic.Uint64

// New builds a topology; Close removes it. On error nothing is left
// behind.
func New(opts Options) (*Topology, error) {
	if opts.Prefix == "" {
		opts.Prefix = "bwtopo"
	}
	if opts.InIface == "" {
		opts.InIface = "fwin"
	}
	if opts.OutIface == "" {
		opts.OutIface = "fwout"
	}
	reapOnce.Do(func() { reapStale(opts.Prefix) })
	prefix := fmt.Sprintf("%s-%d-%d-", opts.Prefix, os.Getpid(), seq.Add(1))
	topo := &Topology{
		Sender:   prefix + "snd",
		Firewall: prefix + "fw",
		Receiver: prefix + "rcv",
		InIface:  opts.InIface,
		OutIface: opts.OutIface,
	}
	var made []string
	for _, ns := range topo.namespaces() {
		if err := Run("ip", "netns", "add", ns); err != nil {
			return nil, errors.Join(err, deleteNetns(made))
		}
		made = append(made, ns)
	}
	if err := topo.setup(); err != nil {
		return nil, errors.Join(fmt.Errorf("build topology: %w", err), deleteNetns(made))
	}
	return topo, nil
}

var reapOnce sync.Once

// reapStale deletes the namespaces of topologies that a process, now
// gone, left behind: a test binary killed by its timeout runs no
// cleanup. Names are PREFIX-PID-SEQ-ROLE; a namespace whose process
// lives, or whose ID a new process took, is left alone.
func reapStale(prefix string) {
	entries, err := os.ReadDir("/run/netns")
	if err != nil {
		return
	}
	for _, e := range entries {
		rest, ok := strings.CutPrefix(e.Name(), prefix+"-")
		if !ok {
			continue
		}
		pid, _, ok := strings.Cut(rest, "-")
		if n, err := strconv.Atoi(pid); !ok || err != nil || n <= 0 {
			continue
		}
		if _, err := os.Stat("/proc/" + pid); errors.Is(err, os.ErrNotExist) {
			Run("ip", "netns", "del", e.Name())
		}
	}
}

func (topo *Topology) namespaces() []string {
	return []string{topo.Sender, topo.Firewall, topo.Receiver}
}

// Close deletes the namespaces, and with them the veths.
func (topo *Topology) Close() error { return deleteNetns(topo.namespaces()) }

func deleteNetns(names []string) error {
	var errs []error
	for _, ns := range names {
		errs = append(errs, Run("ip", "netns", "del", ns))
	}
	return errors.Join(errs...)
}

func (topo *Topology) setup() error {
	// The ends stay quiet: no IPv6 on them means no router solicitations
	// or MLD reports mixed with the frames sent.
	for _, ns := range []string{topo.Sender, topo.Receiver} {
		if err := Sysctl(ns, "net/ipv6/conf/all/disable_ipv6", "1", "net/ipv6/conf/default/disable_ipv6", "1"); err != nil {
			return err
		}
	}
	// Set on "default" first so that the veths are born with them.
	if err := Sysctl(topo.Firewall,
		"net/ipv4/conf/all/rp_filter", "0",
		"net/ipv4/conf/default/rp_filter", "0",
		"net/ipv6/conf/all/accept_dad", "0",
		"net/ipv6/conf/default/accept_dad", "0",
	); err != nil {
		return err
	}
	fw := topo.Firewall
	batch := []string{
		fmt.Sprintf("link add %s address %s type veth peer name %s address %s netns %s", topo.InIface, FirewallInMAC, SenderIface, SenderMAC, topo.Sender),
		fmt.Sprintf("link add %s address %s type veth peer name %s address %s netns %s", topo.OutIface, FirewallOutMAC, ReceiverIface, ReceiverMAC, topo.Receiver),
		fmt.Sprintf("link set %s up", topo.InIface),
		fmt.Sprintf("link set %s up", topo.OutIface),
		fmt.Sprintf("addr add %s/32 dev %s", FirewallAddr, topo.InIface),
		fmt.Sprintf("route add %s/32 dev %s", SenderAddr, topo.InIface),
		fmt.Sprintf("neigh replace %s lladdr %s dev %s nud permanent", SenderAddr, SenderMAC, topo.InIface),
		fmt.Sprintf("route add default via %s dev %s onlink", NextHop4, topo.OutIface),
		fmt.Sprintf("neigh replace %s lladdr %s dev %s nud permanent", NextHop4, NextHopMAC, topo.OutIface),
		fmt.Sprintf("neigh replace %s lladdr %s dev %s nud permanent", NextHop6, NextHopMAC, topo.OutIface),
		fmt.Sprintf("route add ::/0 via %s dev %s", NextHop6, topo.OutIface),
	}
	if err := RunInput([]byte(strings.Join(batch, "\n")+"\n"), "ip", "-n", fw, "-batch", "-"); err != nil {
		return err
	}
	for _, ns := range []struct{ name, iface string }{{topo.Sender, SenderIface}, {topo.Receiver, ReceiverIface}} {
		if err := Run("ip", "-n", ns.name, "link", "set", ns.iface, "up"); err != nil {
			return err
		}
	}
	// Forwarding is switched on last: setting "all" copies it to every
	// interface that exists.
	return Sysctl(fw,
		"net/ipv4/ip_forward", "1",
		"net/ipv6/conf/all/forwarding", "1",
		"net/ipv4/conf/"+topo.InIface+"/rp_filter", "0",
		"net/ipv4/conf/"+topo.OutIface+"/rp_filter", "0",
		"net/ipv6/conf/"+topo.InIface+"/accept_dad", "0",
		"net/ipv6/conf/"+topo.OutIface+"/accept_dad", "0",
	)
}
