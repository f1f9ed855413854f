package ir

import (
	"math/bits"
)

// Bucket returns the token bucket of a Limit or RateLimit match.
func Bucket(m Match) (int, bool) {
	if l, ok := m.(Limit); ok {
		return l.Bucket, true
	}
	if l, ok := m.(RateLimit); ok {
		return l.Bucket, true
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

// ValidLimit reports whether xt_limit's limit_mt_check accepts avg and
// burst.
func ValidLimit(avg, burst uint32, hz int) bool {
	return burst != 0 && user2credits(avg*burst, hz) >= user2credits(avg, hz)
}

// clocked is implemented by the matches that read State's clock: their
// answer depends on when a packet comes and on the packets before it.
type clocked interface {
	Match
	clocked()
}

// Clocked reports whether m's answer depends on when a packet comes and
// on the packets before it: token buckets (limit, hashlimit, nft limit)
// and recent lists.
func Clocked(m Match) bool {
	_, ok := m.(clocked)
	return ok
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
