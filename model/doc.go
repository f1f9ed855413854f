// Package model is the kernel around netfilter's tables, as the reference
// that compiled programs are tested against: what the IP layer makes of a
// frame before PREROUTING (Decode: ip_rcv_core, ip6_rcv_core,
// ipv6_parse_hopopts), the packet ip_tables and ip6_tables see (Packet,
// with Meta for what its bytes do not say), and what conntrack makes of it
// (ConntrackWithoutEntry, the TCP window tracking of ConntrackTCP, the
// classes the netfilter stage defers).
//
// The rules are the ir package's: ir.Program.Eval evaluates a Packet with
// the tables' semantics. This package knows nothing of rules.
package model
