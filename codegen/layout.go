package codegen

// The parsed packet: parse fills it in once, in the main function's stack
// frame, and every chain function reads it through a pointer. Multi-byte
// fields hold host-order numbers, so that the instructions comparing them
// carry the same constants on every machine.
const (
	pktSrc      = 0  // [4]u32: the IPv4 address in word 0, IPv6 in words 0-3
	pktDst      = 16 // [4]u32
	pktIfaces   = 32 // u64: bit i set when the interface matches Program.Ifaces[i]
	pktMACHi    = 40 // u32: source MAC bytes 0-1
	pktMACLo    = 44 // u32: source MAC bytes 2-5
	pktLength   = 48 // u32: ir.Packet.Length
	pktBytes    = 52 // u32: what iptables counts: the IP datagram's length
	pktL4Len    = 56 // u32: ir.Packet.L4Len
	pktMark     = 60 // u32: skb->mark (tc)
	pktFragOff  = 64 // u32: fragment offset in bytes
	pktSport    = 68 // u32
	pktDport    = 72 // u32
	pktL4Off    = 76 // u16: offset of the transport header in the frame (conntrack)
	pktDSCP     = 78 // u8: the DSCP (only when a rule tests it)
	pktOwner    = 79 // u8: ownerNone, ownerSocket or ownerFile (only when a rule tests the owner)
	pktTCPOpts  = 80 // u64: bit i set when the TCP options hold kind optKinds[i]
	pktTTL      = 88 // u8
	pktProto    = 89 // u8
	pktTCPFlags = 90 // u8
	pktICMPType = 91 // u8
	pktICMPCode = 92 // u8
	pktPktType  = 93 // u8: the packet type pkttype_mt compares (tc)
	pktFlags    = 94 // u8: flagBadExtHeaders, flagTCPOptsTruncated, flagAuthHeader, flagFragment
	pktCTState  = 95 // u8: the ir.ConnState ct_state found (conntrack)
	pktSize     = 96
)

// The owner match's fields share the MAC's: xt_mac is valid in PREROUTING,
// INPUT and FORWARD only, xt_owner in OUTPUT and POSTROUTING only, so no
// chain's program has both.
const (
	pktOwnerUID = pktMACHi // u32: the socket file's fsuid
	pktOwnerGID = pktMACLo // u32: its fsgid
)

const (
	flagBadExtHeaders    = 1 << 0
	flagTCPOptsTruncated = 1 << 1
	// flagAuthHeader: the extension header walk meets an authentication
	// header, where nft's (IP6_FH_F_AUTH) stops; ir.Packet.AuthHeader.
	flagAuthHeader = 1 << 2
	// flagFragment: an IPv4 fragment (MF or offset) or an IPv6 fragment
	// header; set only in programs that test the conntrack state.
	flagFragment = 1 << 3
	// flagVLAN: the frame carried a VLAN tag; set only in programs that
	// defer packets to the netfilter stage.
	flagVLAN = 1 << 4
)

// At -O1 the parsed packet has room for the classifier's lookup keys after
// its fields: global functions may only touch the memory of their pointer
// arguments, and the stack of a call chain is too small for a key per
// frame.
const (
	pktLookupKey  = pktSize
	lookupKeySize = 48
)

// pktSize is the size of the parsed packet at the compiler's level, with
// pktRecentNow's field in a program with recent matches.
func (c *compiler) pktSize() int16 {
	n := c.pktRecentNow()
	if c.hasRecent {
		n += 8
	}
	return n
}

// pktRecentNow is where a program with recent matches keeps the jiffies
// its first recent match read for the packet (u64; 0 until then): every
// recent match of the packet uses that tick, or its table's later time.
func (c *compiler) pktRecentNow() int16 {
	if c.level != O0 {
		return pktSize + lookupKeySize
	}
	return pktSize
}

// The main function's stack frame: the parsed packet, then a u32 map key.
//
// When main holds the parser, its slots are at the top of the frame and
// the packet's fields right below them: what follows the fields (the
// lookup keys at -O1, recent's tick) shares its bytes with parse's slots,
// which are dead once the packet is parsed. Every key is written in full
// before its lookup, and main zeroes recent's tick after the parser.
func (c *compiler) mainPkt() int16 {
	if c.parseInlined() {
		return -parseFrameSize - pktSize
	}
	return -c.pktSize()
}

// mainKey is main's map key slot: one of parse's, dead once the packet is
// parsed, when main holds the parser.
func (c *compiler) mainKey() int16 {
	if c.parseInlined() {
		return parseScratch
	}
	return c.mainPkt() - 8
}

// A chain function's stack frame: the counters key, and the key of an
// address set lookup (a u32 prefix length and the address).
const (
	chainKey    = -8
	chainSetKey = -32
)

// parse's stack frame.
const (
	parseBuf     = -64  // 64 bytes of header, loaded with the load helper
	parseTmp     = -72  // u64
	parseRawType = -80  // u64: skb->pkt_type (tc)
	parseScratch = -88  // 8 bytes: map keys, small loads
	parseLoop    = -104 // the bpf_loop callbacks' context: lsCtx, lsState
	parseSave    = -112 // u64 kept across loopState

	// parseFrameSize is how much of the frame parse's slots take.
	parseFrameSize = -parseSave
)

// The context of a bpf_loop callback, in parse's frame.
const (
	lsCtx   = 0 // the program's context, for the load helper
	lsState = 8 // the loop state, in ScratchMap's value
)

// A loop's state lives in ScratchMap's value, whose contents the verifier
// does not track: it checks a callback with every state it can see at the
// callback's start, and, on the stack, offsets that grow with every step
// would make that an unrolling of the whole loop.
const (
	scratchSize = 128
	st0         = 0
	st1         = 8
	st2         = 16
	st3         = 24
	st4         = 32
	st5         = 40
	st6         = 48
	st7         = 56
	// stOptions holds the TCP options, at most 40 bytes.
	stOptions = 64
)

// A callback's stack frame.
const (
	cbBuf = -8  // 8 bytes of packet
	cbCtx = -16 // the program's context
)

// Return codes of parse.
const (
	parseOK      = 0
	parseNotIP   = 1 // not IP, or the other family: netfilter's tables never see it
	parseInvalid = 2 // the IP layer drops it before netfilter
)
