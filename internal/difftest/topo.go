package difftest

import (
	"testing"

	"bpfwall/internal/topology"
)

// Addresses of the topology, by their short names here.
var (
	fwAddr     = topology.FirewallAddr
	senderAddr = topology.SenderAddr
	senderMAC  = topology.SenderMAC
	fwInMAC    = topology.FirewallInMAC
)

// TopologyOptions name the firewall's interfaces.
type TopologyOptions struct {
	// InIface faces the sender, OutIface the receiver; "fwin" and "fwout"
	// when empty. Rule sets that name interfaces get veths of those names.
	InIface, OutIface string
}

// Topology is a topology.Topology with packet sockets on the sender's and
// the receiver's veths.
type Topology struct {
	*topology.Topology

	send, recv *packetSocket
}

// NewTopology builds a topology whose namespaces and links t.Cleanup
// removes, even when the test fails.
func NewTopology(t testing.TB, opts TopologyOptions) *Topology {
	t.Helper()
	net, err := topology.New(topology.Options{Prefix: "bwdt", InIface: opts.InIface, OutIface: opts.OutIface})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := net.Close(); err != nil {
			t.Error(err)
		}
	})
	topo := &Topology{Topology: net}
	if topo.send, err = openPacketSocket(topo.Sender, topology.SenderIface); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { topo.send.Close() })
	if topo.recv, err = openPacketSocket(topo.Receiver, topology.ReceiverIface); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { topo.recv.Close() })
	return topo
}
