package difftest

import (
	"fmt"
	"net"
	"net/netip"
	"os"
	"strings"
	"sync/atomic"
	"testing"
)

// Addresses of the topology. The firewall owns fwAddr on its ingress veth,
// so that an ARP request for it can mark the end of a batch (see
// sendBatch); the next hops are static neighbours, so that no other ARP or
// NDP runs.
var (
	fwAddr      = netip.MustParseAddr("192.0.2.1")
	senderAddr  = netip.MustParseAddr("192.0.2.2")
	nextHop4    = netip.MustParseAddr("192.0.2.6")
	nextHop6    = netip.MustParseAddr("fe80::2")
	senderMAC   = net.HardwareAddr{0x02, 0, 0, 0, 0, 0x01}
	fwInMAC     = net.HardwareAddr{0x02, 0, 0, 0, 0, 0x02}
	fwOutMAC    = net.HardwareAddr{0x02, 0, 0, 0, 0, 0x03}
	receiverMAC = net.HardwareAddr{0x02, 0, 0, 0, 0, 0x04}
	// nextHopMAC is nobody's address: the receiver's kernel sees the
	// forwarded frames as PACKET_OTHERHOST and ignores them, so it never
	// answers them, while its packet socket still sees them.
	nextHopMAC = net.HardwareAddr{0x02, 0, 0, 0, 0, 0x66}
)

// The veths of the sender and the receiver, each alone in its namespace.
const (
	senderIface   = "snd0"
	receiverIface = "rcv0"
)

// TopologyOptions name the firewall's interfaces.
type TopologyOptions struct {
	// InIface faces the sender, OutIface the receiver; "fwin" and "fwout"
	// when empty. Rule sets that name interfaces get veths of those names.
	InIface, OutIface string
}

// Topology is three network namespaces, sender → firewall → receiver,
// joined by veth pairs. The firewall forwards everything to the receiver
// by a default route, for IPv4 and IPv6.
type Topology struct {
	Sender, Firewall, Receiver string // namespace names
	InIface, OutIface          string // the firewall's veths

	send, recv *packetSocket
}

var topoSeq atomic.Uint64

// NewTopology builds a topology whose namespaces and links t.Cleanup
// removes, even when the test fails.
func NewTopology(t testing.TB, opts TopologyOptions) *Topology {
	t.Helper()
	if opts.InIface == "" {
		opts.InIface = "fwin"
	}
	if opts.OutIface == "" {
		opts.OutIface = "fwout"
	}
	prefix := fmt.Sprintf("bwdt-%d-%d-", os.Getpid(), topoSeq.Add(1))
	topo := &Topology{
		Sender:   prefix + "snd",
		Firewall: prefix + "fw",
		Receiver: prefix + "rcv",
		InIface:  opts.InIface,
		OutIface: opts.OutIface,
	}
	for _, ns := range []string{topo.Sender, topo.Firewall, topo.Receiver} {
		if err := run("ip", "netns", "add", ns); err != nil {
			t.Fatal(err)
		}
		// Deleting a namespace deletes the veths inside it.
		t.Cleanup(func() {
			if err := run("ip", "netns", "del", ns); err != nil {
				t.Error(err)
			}
		})
	}
	if err := topo.setup(); err != nil {
		t.Fatalf("build topology: %v", err)
	}
	var err error
	if topo.send, err = openPacketSocket(topo.Sender, senderIface); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { topo.send.Close() })
	if topo.recv, err = openPacketSocket(topo.Receiver, receiverIface); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { topo.recv.Close() })
	return topo
}

func (topo *Topology) setup() error {
	// The ends stay quiet: no IPv6 on them means no router solicitations
	// or MLD reports mixed with the probes.
	for _, ns := range []string{topo.Sender, topo.Receiver} {
		if err := sysctl(ns, "net/ipv6/conf/all/disable_ipv6", "1", "net/ipv6/conf/default/disable_ipv6", "1"); err != nil {
			return err
		}
	}
	// Set on "default" first so that the veths are born with them.
	if err := sysctl(topo.Firewall,
		"net/ipv4/conf/all/rp_filter", "0",
		"net/ipv4/conf/default/rp_filter", "0",
		"net/ipv6/conf/all/accept_dad", "0",
		"net/ipv6/conf/default/accept_dad", "0",
	); err != nil {
		return err
	}
	fw := topo.Firewall
	batch := []string{
		fmt.Sprintf("link add %s address %s type veth peer name %s address %s netns %s", topo.InIface, fwInMAC, senderIface, senderMAC, topo.Sender),
		fmt.Sprintf("link add %s address %s type veth peer name %s address %s netns %s", topo.OutIface, fwOutMAC, receiverIface, receiverMAC, topo.Receiver),
		fmt.Sprintf("link set %s up", topo.InIface),
		fmt.Sprintf("link set %s up", topo.OutIface),
		fmt.Sprintf("addr add %s/32 dev %s", fwAddr, topo.InIface),
		fmt.Sprintf("route add %s/32 dev %s", senderAddr, topo.InIface),
		fmt.Sprintf("neigh replace %s lladdr %s dev %s nud permanent", senderAddr, senderMAC, topo.InIface),
		fmt.Sprintf("route add default via %s dev %s onlink", nextHop4, topo.OutIface),
		fmt.Sprintf("neigh replace %s lladdr %s dev %s nud permanent", nextHop4, nextHopMAC, topo.OutIface),
		fmt.Sprintf("neigh replace %s lladdr %s dev %s nud permanent", nextHop6, nextHopMAC, topo.OutIface),
		fmt.Sprintf("route add ::/0 via %s dev %s", nextHop6, topo.OutIface),
	}
	if err := runInput([]byte(strings.Join(batch, "\n")+"\n"), "ip", "-n", fw, "-batch", "-"); err != nil {
		return err
	}
	for _, ns := range []struct{ name, iface string }{{topo.Sender, senderIface}, {topo.Receiver, receiverIface}} {
		if err := run("ip", "-n", ns.name, "link", "set", ns.iface, "up"); err != nil {
			return err
		}
	}
	// Forwarding is switched on last: setting "all" copies it to every
	// interface that exists.
	return sysctl(fw,
		"net/ipv4/ip_forward", "1",
		"net/ipv6/conf/all/forwarding", "1",
		"net/ipv4/conf/"+topo.InIface+"/rp_filter", "0",
		"net/ipv4/conf/"+topo.OutIface+"/rp_filter", "0",
		"net/ipv6/conf/"+topo.InIface+"/accept_dad", "0",
		"net/ipv6/conf/"+topo.OutIface+"/accept_dad", "0",
	)
}
