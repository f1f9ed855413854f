// Package sklookup emits the parts of a program at the sk-lookup hook
// that differ from a packet's: reading the socket lookup (struct
// bpf_sk_lookup) into the parsed packet, and steering the lookups a TPROXY
// rule takes to that rule's socket, which the loader keeps in
// abi.SocketsMap. A rule whose socket is missing drops the lookup, as
// xt_TPROXY drops the packet; lookups the rules accept (or no rule takes)
// go on to the kernel's own lookup.
package sklookup
