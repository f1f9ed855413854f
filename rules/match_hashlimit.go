package rules

// Modes of "-m hashlimit --hashlimit-mode": what its table is keyed by.
const (
	HashSrcIP   uint8 = 1 << 0 // XT_HASHLIMIT_HASH_SIP
	HashDstIP   uint8 = 1 << 1 // XT_HASHLIMIT_HASH_DIP
	HashSrcPort uint8 = 1 << 2 // XT_HASHLIMIT_HASH_SPT
	HashDstPort uint8 = 1 << 3 // XT_HASHLIMIT_HASH_DPT
)

// HashLimit is "-m hashlimit" (xt_hashlimit, revision 3): a token bucket
// per key of the table called Table. Fields are as libxt_hashlimit fills
// struct hashlimit_cfg3; Options keep the text for printing.
type HashLimit struct {
	Located
	// Avg is the interval between packets in microseconds
	// (XT_HASHLIMIT_SCALE_v2) for packet rates; with Bytes, the cost of
	// 16 bytes (libxt_hashlimit's bytes_to_cost). Burst is in packets;
	// with Bytes, the bursts of the rate's size a key may take once.
	Avg   uint64
	Burst uint64
	Bytes bool // a byte rate (XT_HASHLIMIT_BYTES)
	// Above is --hashlimit-above (XT_HASHLIMIT_INVERT).
	Above            bool
	Mode             uint8 // HashSrcIP, ...
	SrcMask, DstMask uint8
	Table            string // --hashlimit-name
	// Size, Max, GCInterval and Expire (ms) are the table's options; 0
	// for Size and Max lets the kernel choose.
	Size, Max, GCInterval, Expire uint32
	// Unsupported, when not empty, names what the option values ask for
	// that bpfwall does not interpret (rate-match mode).
	Unsupported string
	Options     []Option
}

func (m *HashLimit) Name() string { return "hashlimit" }

func (m *HashLimit) appendSave(b []byte) []byte { return appendOptions(b, m.Options) }
