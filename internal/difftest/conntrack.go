package difftest

import "bpfwall/internal/topology"

// flushConntrack deletes every conntrack entry in the firewall.
func (topo *Topology) flushConntrack() error { return topology.FlushConntrack(topo.Firewall) }

// flowKey names the connection a ConntrackNew probe starts, the same for
// both directions: two probes of one connection in a batch would make
// the second a reply (ESTABLISHED).
func flowKey(frame []byte) string {
	ip := ipPacket(frame)
	var src, dst []byte
	var proto uint8
	var l4 []byte
	if ip[0]>>4 == 4 {
		src, dst, proto, l4 = ip[12:16], ip[16:20], ip[9], ip[int(ip[0]&0x0f)*4:]
	} else {
		src, dst, proto, l4 = ip[8:24], ip[24:40], ip[6], ip[40:]
	}
	a, b := string(src)+string(l4[0:2]), string(dst)+string(l4[2:4])
	if proto == 1 || proto == 58 { // echo requests: the id is the "port"
		a, b = string(src)+string(l4[4:6]), string(dst)+string(l4[4:6])
	}
	if b < a {
		a, b = b, a
	}
	return string(proto) + a + b
}
