package ir

import (
	"bpfwall/model"
	"bpfwall/rules"
)

// Where netfilter sees reassembled datagrams (Program.Reassembled), a
// compiled program, which runs before the kernel reassembles, sees
// fragments. The first fragment (offset 0) stands for the datagram: it
// carries the IP header that ip_frag_reasm keeps (the head's) and the
// transport header, and the kernel delivers nothing of the datagram
// without it. Later fragments pass unfiltered; when the first fragment is
// dropped, their queue expires silently (ip_expire sends no ICMP unless
// the first fragment arrived). Overlapping fragments kill the queue
// (inet_frag_queue_insert), so later fragments cannot rewrite the
// transport header the first one carried.
//
// What the first fragment cannot tell is refused or handled here:
//   - the datagram's length (-m length, nft meta/ip length, byte rates):
//     a compile error (Lower);
//   - -f never matches a reassembled datagram: the first fragment has
//     offset 0, so the Fragment match is false for it as for the datagram;
//   - transport bytes beyond the first fragment's data (a "tiny" first
//     fragment, see FirstFragmentNeed): the fragment, and so the datagram,
//     is dropped (SkipTinyFragment).

// Reasons a fragment is decided without the chain (Result.Skipped).
const (
	// SkipLaterFragment: a non-first fragment of a datagram the hook sees
	// reassembled passes; the first fragment decides for the datagram.
	SkipLaterFragment = "non-first fragment: the first fragment decides"
	// SkipTinyFragment: a first fragment that does not hold the
	// transport bytes the program reads is dropped.
	SkipTinyFragment = "first fragment too short for the transport header"
	// SkipDeferred: a packet of class U (Packet.DeferredClass) whose
	// conntrack state the hook cannot know, in a program that tests it,
	// passes to the program's netfilter stage.
	SkipDeferred = "conntrack state unknown before conntrack: the netfilter stage decides"
	// SkipTTLExpired: in FORWARD (Program.Forward), a packet whose TTL
	// or hop limit is 1 or less passes: ip_forward drops it, and sends the
	// time exceeded error, before the FORWARD hook runs.
	SkipTTLExpired = "ttl expires in forwarding, before FORWARD"
)

// TestsConntrack reports whether a rule of p tests the conntrack state.
func (p *Program) TestsConntrack() bool {
	for _, r := range p.Rules {
		for _, m := range r.Matches {
			if _, ok := m.(CTState); ok {
				return true
			}
		}
	}
	return false
}

// TestsNAT reports whether a rule of p tests the conntrack states SNAT or
// DNAT, which conntrack_mt reads from the entry's status.
func (p *Program) TestsNAT() bool {
	for _, r := range p.Rules {
		for _, m := range r.Matches {
			if m, ok := m.(CTState); ok && m.States&(model.ConnSNAT|model.ConnDNAT) != 0 {
				return true
			}
		}
	}
	return false
}

// reassembles reports whether the filter chain hook of family fam sees
// reassembled datagrams. nf_defrag_ipv4 and nf_defrag_ipv6, which
// conntrack turns on, reassemble at PRE_ROUTING and LOCAL_OUT (priority
// -400), before every table. Without them IPv4 reassembles in
// ip_local_deliver before LOCAL_IN, IPv6 only after LOCAL_IN (its
// fragment header is an upper-layer protocol), forwarded fragments are
// never reassembled, and local datagrams are fragmented after
// POST_ROUTING (ip_finish_output), so OUTPUT sees them whole.
func reassembles(fam rules.Family, hook string, conntrack bool) bool {
	switch {
	case conntrack:
		return true
	case hook == "INPUT":
		return fam == rules.IPv4
	case hook == "OUTPUT":
		return true
	}
	return false
}

// FirstFragmentNeed is how many bytes of transport header a first fragment
// of protocol proto must hold for p to decide it as the reassembled
// datagram: 0 when p reads no transport header; otherwise the protocol's
// header (TCP 20, UDP, UDP-Lite, ICMP and ICMPv6 8, SCTP and DCCP 4: the
// ports) or, if more, the furthest byte an nft transport load reads.
// TCPOptions reports whether a TCP first fragment must also hold its
// options (p tests them): one with TCPOptionsTruncated is tiny.
func (p *Program) FirstFragmentNeed(proto uint8) (need int, tcpOptions bool) {
	reads, load := false, 0
	for _, r := range p.Rules {
		for _, m := range r.Matches {
			if t, ok := m.(transportReader); ok {
				l, opts := t.transportNeed()
				reads, load, tcpOptions = true, max(load, l), tcpOptions || opts
			}
		}
	}
	if !reads {
		return 0, false
	}
	switch proto {
	case model.ProtoTCP:
		need = 20
	case model.ProtoUDP, model.ProtoUDPLite:
		need = 8
	case model.ProtoICMP, model.ProtoICMPv6:
		need = 8
	case model.ProtoSCTP, model.ProtoDCCP:
		need = 4
	}
	return max(need, load), tcpOptions && proto == model.ProtoTCP
}

// tinyFirstFragment reports whether the first fragment pkt lacks transport
// bytes p reads.
func (p *Program) tinyFirstFragment(pkt *model.Packet) bool {
	need, opts := p.FirstFragmentNeed(pkt.Proto)
	return pkt.L4Len < need || (opts && pkt.TCPOptionsTruncated)
}

// A transportReader is a match that reads the transport header without an
// L4Header of its rule before it, or is one. Every other match reads
// nothing past the IP header.
type transportReader interface {
	// transportNeed returns the furthest byte of the transport header
	// the match loads (0: only the protocol's header) and whether it
	// reads TCP's options.
	transportNeed() (load int, tcpOptions bool)
}
