// Package conntrack emits ct_state, the function that gives a parsed
// packet the state conntrack_mt would see. At xdp and tc-ingress, which
// run before conntrack, it looks the packet's tuple up in the kernel's
// conntrack table with the conntrack kfuncs and, for TCP, replays
// nf_conntrack_tcp_packet on the entry it finds; without an entry it
// applies model.Packet.ConntrackWithoutEntry's model. After conntrack
// (tc-egress, the netfilter hooks) it reads skb->_nfct.
package conntrack
