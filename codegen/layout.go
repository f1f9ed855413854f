package codegen

import "bpfwall/codegen/pkt"

// At -O1 the parsed packet has room for the classifier's lookup keys after
// its fields: global functions may only touch the memory of their pointer
// arguments, and the stack of a call chain is too small for a key per
// frame.
const (
	pktLookupKey  = pkt.Size
	lookupKeySize = 48
)

// pktSize is the size of the parsed packet at the compiler's level, with
// pktRecentNow's field in a program with recent matches and an
// accelerator's path (pktPath).
func (c *compiler) pktSize() int16 {
	n := c.pktPath()
	if c.accel {
		n += accelPathSize
	}
	return n
}

// pktPath is where an accelerator keeps the packet's path (accelPush): a
// u32 count, then the IDs of the first accelPathLen rules noted.
func (c *compiler) pktPath() int16 {
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
		return pkt.Size + lookupKeySize
	}
	return pkt.Size
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
		off := -c.parseFrame() - pkt.Size
		if c.accel {
			// The path is read after the entry chain held in main has
			// used its slots (entryFrame).
			off = min(off, -entryFrame-c.pktSize())
		}
		return off
	}
	return -c.pktSize()
}

// parseFrame is how much of main's frame the parser's slots take when
// main holds it: at a chain's netfilter hook, down to its dynptr over the
// skb.
func (c *compiler) parseFrame() int16 {
	if c.hook.nf() {
		return -parseDynptr
	}
	return parseFrameSize
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
	parseLoop    = -104 // the bpf_loop callbacks' context: insn.LoopCtx, insn.LoopState
	parseSave    = -112 // u64 kept across loopState

	// parseFrameSize is how much of the frame parse's slots take.
	parseFrameSize = -parseSave
)

// A loop's state lives in abi.ScratchMap's value, whose contents the verifier
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

// Return codes of parse.
const (
	parseOK      = 0
	parseNotIP   = 1 // not IP, or the other family: netfilter's tables never see it
	parseInvalid = 2 // the IP layer drops it before netfilter
)
