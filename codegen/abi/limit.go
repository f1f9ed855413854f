package abi

// LimitsMap is an ARRAY of token buckets, one per ir.Limit and
// ir.RateLimit match (indexed by its Bucket), shared by every CPU as the
// kernel's xt_limit_priv and nft_limit are. Each value is a Bucket behind
// a bpf_spin_lock: the refill, the test and the payment of one packet
// happen as one step, which is one of the orders the kernel's own
// xchg/cmpxchg loop (xt_limit) or spinlock (nft_limit) allows. A new
// program has new, empty buckets, as iptables-restore and nft -f give
// every rule fresh state.
const LimitsMap = "limits"

// Offsets in a bucket. A bucket starts at the first packet that reaches
// it: the kernel starts it at load time, full, and a full bucket stays
// full until a packet spends from it, so the two only differ when the
// first packet comes so late that the kernel's u32 refill wraps (2^32
// credits: 2^25 jiffies, 37 hours at HZ 250, for xt_limit; never for
// nft's u64 nanoseconds).
const (
	BucketLock    = 0  // struct bpf_spin_lock
	BucketStarted = 4  // u32: 1 once the first packet has filled it
	BucketPrev    = 8  // u64: jiffies (xt_limit) or nanoseconds (nft) of the last update
	BucketCredit  = 16 // u32 credits (xt_limit) or u64 tokens (nft)
	BucketSize    = 24
)

// Bucket is a LimitsMap value as the program leaves it.
type Bucket struct {
	Lock, Started uint32
	Prev, Credit  uint64
}
