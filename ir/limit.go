package ir

import (
	"fmt"
	"math/bits"
)

// Limit is -m limit (xt_limit's limit_mt): a token bucket of credits that
// gains CreditsPerJiffy credits per jiffy, holds at most Cap and spends
// Cost per matching packet, all in the kernel's u32 arithmetic. One bucket
// serves every CPU. Bucket numbers the program's token buckets (Limit and
// RateLimit alike) from 0; each match has its own, as each rule's match has
// its own xt_limit_priv.
type Limit struct {
	Bucket int
	// Avg is the average interval between packets in 1/10000 s
	// (XT_LIMIT_SCALE), Burst the number of packets the bucket holds.
	Avg, Burst uint32
}

// RateLimit is nft's limit statement (nft_limit_eval): a token bucket of
// nanoseconds that gains one token per nanosecond, holds at most TokensMax
// and spends Cost per packet (per byte of the packet with Bytes). Over
// inverts it: the match holds when the bucket cannot pay.
type RateLimit struct {
	Bucket int
	// Nsecs is the unit in nanoseconds, Rate the packets (or bytes) per
	// unit, Burst the packets (or bytes) beyond the rate the bucket holds.
	Nsecs, Rate uint64
	Burst       uint32
	Bytes, Over bool
}

func (Limit) isMatch()     {}
func (RateLimit) isMatch() {}

// Bucket returns the token bucket of a Limit or RateLimit match.
func Bucket(m Match) (int, bool) {
	switch m := m.(type) {
	case Limit:
		return m.Bucket, true
	case RateLimit:
		return m.Bucket, true
	case Addr, AddrRange, AddrSet, CTState, Fragment, HashLimit, ICMP, Iface, L4Header, L4Proto, Length, Mark,
		PktType, Ports, Proto, Recent, SrcMAC, TCPFlags, TCPOption, TProxyTo, TTL, Transport:
	}
	return 0, false
}

// DefaultHZ is the tick rate of the kernel bpfwall targets: xt_limit counts
// time in jiffies, so its arithmetic depends on it.
const DefaultHZ = 250

// xtLimitScale is XT_LIMIT_SCALE.
const xtLimitScale = 10000

// CreditsPerJiffy is xt_limit's CREDITS_PER_JIFFY for a kernel ticking at
// hz: the largest power of two not above 0xFFFFFFFF / (hz*60*60*24).
func CreditsPerJiffy(hz int) uint32 {
	maxCPJ := uint32(0xFFFFFFFF / (uint64(hz) * 60 * 60 * 24))
	return 1 << (bits.Len32(maxCPJ) - 1)
}

// user2credits is xt_limit's "precision saver", in its u32 arithmetic.
func user2credits(user uint32, hz int) uint32 {
	hzCPJ := uint32(hz) * CreditsPerJiffy(hz)
	if user > 0xFFFFFFFF/hzCPJ {
		return (user / xtLimitScale) * hzCPJ
	}
	return user * hzCPJ / xtLimitScale
}

// Credits returns the bucket's size and the cost of a packet as
// limit_mt_check computes them (r->avg * r->burst wraps in u32 as in C).
func (m Limit) Credits(hz int) (capacity, cost uint32) {
	return user2credits(m.Avg*m.Burst, hz), user2credits(m.Avg, hz)
}

// ValidLimit reports whether xt_limit's limit_mt_check accepts avg and
// burst.
func ValidLimit(avg, burst uint32, hz int) bool {
	return burst != 0 && user2credits(avg*burst, hz) >= user2credits(avg, hz)
}

// TokensMax is the bucket's size in nanoseconds, as nft_limit_init
// computes it; ok is false where the kernel refuses the limit (-EOVERFLOW).
func (m RateLimit) TokensMax() (tokens uint64, ok bool) {
	if m.Rate == 0 {
		return 0, false
	}
	withBurst, carry := bits.Add64(m.Rate, uint64(m.Burst), 0)
	if carry != 0 {
		return 0, false
	}
	if !m.Bytes {
		hi, lo := bits.Mul64(m.Nsecs/m.Rate, uint64(m.Burst))
		return lo, hi == 0
	}
	hi, lo := bits.Mul64(m.Nsecs, withBurst)
	return lo / m.Rate, hi == 0
}

// Cost is what a packet of length bytes (skb->len) spends: nsecs / rate,
// or nsecs * length / rate for a byte limit, the product wrapping in u64 as
// in nft_limit_bytes_eval.
func (m RateLimit) Cost(length uint64) uint64 {
	if m.Bytes {
		return m.Nsecs * length / m.Rate
	}
	return m.Nsecs / m.Rate
}

// State is what a program's stateful matches remember between packets (its
// token buckets) and the clock they read. The zero State is a program just
// loaded; set the clock before each packet. Buckets start full at the first
// packet that reaches them (see codegen's limit map).
type State struct {
	// Jiffies is what bpf_jiffies64 returns (xt_limit's clock), Nanos what
	// bpf_ktime_get_ns returns (nft_limit's).
	Jiffies, Nanos uint64
	// HZ is the kernel's tick rate; DefaultHZ when zero.
	HZ int
	// Clock, when set, gives the time a rate-limit or recent match
	// (Limit, RateLimit, HashLimit, Recent) reads, in its unit, when ok;
	// Jiffies or Nanos otherwise. The kernel reads its clock anew at each
	// match, so two matches one packet reaches may see different ticks;
	// tests that read the times back from a program's maps (buckets,
	// hashlimit entries, recent tables) set it.
	Clock func(m Match) (now uint64, ok bool)

	buckets map[int]*bucket
	tables  map[int]map[hlKey]*hlEntry // HashLimit tables
	sweeps  map[int]uint64             // by HashLimit table: the earliest time of its next sweep
	// recentTables are the Recent tables.
	recentTables map[int]*recentTable
}

// bucket is one token bucket: prev is the time of the last update (jiffies
// or nanoseconds), credit the credits (u32 for Limit) or tokens.
type bucket struct {
	prev, credit uint64
}

// now is the time m reads: Clock's answer, or fallback.
func (s *State) now(m Match, fallback uint64) uint64 {
	if s.Clock != nil {
		if t, ok := s.Clock(m); ok {
			return t
		}
	}
	return fallback
}

func (s *State) hz() int {
	if s.HZ == 0 {
		return DefaultHZ
	}
	return s.HZ
}

func (s *State) bucket(id int, full uint64, now uint64) *bucket {
	if s.buckets == nil {
		s.buckets = make(map[int]*bucket)
	}
	b := s.buckets[id]
	if b == nil {
		b = &bucket{prev: now, credit: full}
		s.buckets[id] = b
	}
	return b
}

// limit is limit_mt: the refill since prev (u32, wrapping as the kernel's
// credit_increase does), capped, then the cost paid if there is enough.
func (s *State) limit(m Limit) bool {
	hz := s.hz()
	capacity, cost := m.Credits(hz)
	now := s.now(m, s.Jiffies)
	b := s.bucket(m.Bucket, uint64(capacity), now)
	increase := uint32((now - b.prev) * uint64(CreditsPerJiffy(hz)))
	b.prev = now
	credit := uint32(b.credit) + increase
	credit = min(credit, capacity)
	ok := credit >= cost
	if ok {
		credit -= cost
	}
	b.credit = uint64(credit)
	return ok
}

// rateLimit is nft_limit_eval; it reports whether the rule goes on (the
// statement does not break it).
func (s *State) rateLimit(m RateLimit, length uint64) bool {
	tokensMax, _ := m.TokensMax()
	now := s.now(m, s.Nanos)
	b := s.bucket(m.Bucket, tokensMax, now)
	tokens := b.credit + now - b.prev
	tokens = min(tokens, tokensMax)
	b.prev = now
	if delta := int64(tokens - m.Cost(length)); delta >= 0 {
		b.credit = uint64(delta)
		return !m.Over
	}
	b.credit = tokens
	return m.Over
}

func (m Limit) String() string {
	return fmt.Sprintf("limit bucket %d avg %d burst %d", m.Bucket, m.Avg, m.Burst)
}

func (m RateLimit) String() string {
	s := fmt.Sprintf("rate-limit bucket %d ", m.Bucket)
	if m.Over {
		s += "over "
	}
	unit := "packets"
	if m.Bytes {
		unit = "bytes"
	}
	return s + fmt.Sprintf("%d %s/%ds burst %d", m.Rate, unit, m.Nsecs/1e9, m.Burst)
}
