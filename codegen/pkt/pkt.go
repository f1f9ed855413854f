package pkt

// The fields' offsets. The packet parser fills them in once, in the main
// function's stack frame, and every chain function reads them through a
// pointer. Multi-byte fields hold host-order numbers, so that the
// instructions comparing them carry the same constants on every machine.
const (
	Src      = 0  // [4]u32: the IPv4 address in word 0, IPv6 in words 0-3
	Dst      = 16 // [4]u32
	Ifaces   = 32 // u64: bit i set when the interface matches codegen.Program.Ifaces[i]
	MACHi    = 40 // u32: source MAC bytes 0-1
	MACLo    = 44 // u32: source MAC bytes 2-5
	Length   = 48 // u32: model.Packet.Length
	Bytes    = 52 // u32: what iptables counts: the IP datagram's length
	L4Len    = 56 // u32: model.Packet.L4Len
	Mark     = 60 // u32: skb->mark (tc)
	FragOff  = 64 // u32: fragment offset in bytes
	Sport    = 68 // u32
	Dport    = 72 // u32
	L4Off    = 76 // u16: offset of the transport header in the frame (conntrack)
	DSCP     = 78 // u8: the DSCP (only when a rule tests it)
	Owner    = 79 // u8: the owner match's socket class (only when a rule tests the owner)
	TCPOpts  = 80 // u64: bit i set when the TCP options hold the program's i-th tested kind
	TTL      = 88 // u8
	Proto    = 89 // u8
	TCPFlags = 90 // u8
	ICMPType = 91 // u8
	ICMPCode = 92 // u8
	PktType  = 93 // u8: the packet type pkttype_mt compares (tc)
	Flags    = 94 // u8: FlagBadExtHeaders, FlagTCPOptsTruncated, FlagAuthHeader, FlagFragment
	CTState  = 95 // u8: the model.ConnState ct_state found (conntrack)
	Size     = 96
)

// The owner match's fields share the MAC's: xt_mac is valid in PREROUTING,
// INPUT and FORWARD only, xt_owner in OUTPUT and POSTROUTING only, so no
// chain's program has both.
const (
	OwnerUID = MACHi // u32: the socket file's fsuid
	OwnerGID = MACLo // u32: its fsgid

	// OutIfindex is, in an accelerator, the output device the route
	// lookup found for a forwarded packet: xdp has no mark.
	OutIfindex = Mark // u32
)

// Bits of Flags.
const (
	// FlagBadExtHeaders: the IPv6 extension header walk failed, as
	// ipv6_find_hdr does; a rule testing the protocol drops the packet.
	FlagBadExtHeaders = 1 << 0
	// FlagTCPOptsTruncated: the TCP options could not be read in full.
	FlagTCPOptsTruncated = 1 << 1
	// FlagAuthHeader: the extension header walk meets an authentication
	// header, where nft's (IP6_FH_F_AUTH) stops; model.Packet.AuthHeader.
	FlagAuthHeader = 1 << 2
	// FlagFragment: an IPv4 fragment (MF or offset) or an IPv6 fragment
	// header; set only in programs that test the conntrack state.
	FlagFragment = 1 << 3
	// FlagVLAN: the frame carried a VLAN tag; set only in programs that
	// defer packets to the netfilter stage.
	FlagVLAN = 1 << 4
	// FlagForward: routing will forward the packet (an accelerator's
	// route lookup, codegen.Accelerator); clear for local delivery.
	FlagForward = 1 << 5
	// FlagUnnamedIface: abi.IfacesMap has no entry for the input
	// interface (set only in an accelerator, which passes the packet).
	FlagUnnamedIface = 1 << 6
)
