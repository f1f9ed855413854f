package ir

import (
	"fmt"
	"math/bits"

	"bpfwall/model"
	"bpfwall/rules"
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

// Credits returns the bucket's size and the cost of a packet as
// limit_mt_check computes them (r->avg * r->burst wraps in u32 as in C).
func (m Limit) Credits(hz int) (capacity, cost uint32) {
	return user2credits(m.Avg*m.Burst, hz), user2credits(m.Avg, hz)
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

func (m Limit) eval(p *Program, st *State, pkt *model.Packet) outcome {
	return is(st.limit(m))
}

func (m RateLimit) eval(p *Program, st *State, pkt *model.Packet) outcome {
	return is(st.rateLimit(m, uint64(pkt.Length))) // skb->len: the IP datagram
}

func (m Limit) appendTo(b []byte, fam rules.Family) []byte {
	return append(b, m.String()...)
}

func (m RateLimit) appendTo(b []byte, fam rules.Family) []byte {
	return append(b, m.String()...)
}

func (Limit) clocked() {}

func (m Limit) verify(v *verifier, st *ruleState) error {
	if !ValidLimit(m.Avg, m.Burst, DefaultHZ) {
		return fmt.Errorf("limit avg %d burst %d overflows", m.Avg, m.Burst)
	}
	return nil
}

func (RateLimit) clocked() {}

func (m RateLimit) verify(v *verifier, st *ruleState) error {
	if _, ok := m.TokensMax(); !ok {
		return fmt.Errorf("nft limit rate %d burst %d overflows", m.Rate, m.Burst)
	}
	return nil
}

func init() {
	lowers(func(l *lowerer, ms []Match, r *rules.Rule, m *rules.Limit, nft bool) []Match {
		return l.lowerLimit(ms, r, m)
	})
	lowers(func(l *lowerer, ms []Match, r *rules.Rule, m *rules.RateLimit, nft bool) []Match {
		return l.lowerRateLimit(ms, r, m)
	})
}

// lowerLimit lowers -m limit, a token bucket of its own.
func (l *lowerer) lowerLimit(ms []Match, r *rules.Rule, m *rules.Limit) []Match {
	if !l.sharedBucket(r, m) {
		return ms
	}
	if !ValidLimit(m.Avg, m.Burst, DefaultHZ) {
		l.errorf(m.Pos, "limit: burst %d too large for the rate (the kernel refuses it)", m.Burst)
		return ms
	}
	ms = append(ms, Limit{Bucket: l.bucket(m), Avg: m.Avg, Burst: m.Burst})
	return ms
}

// lowerRateLimit lowers nft's limit statement.
func (l *lowerer) lowerRateLimit(ms []Match, r *rules.Rule, m *rules.RateLimit) []Match {
	if !l.sharedBucket(r, m) {
		return ms
	}
	if m.BothFamilies {
		if l.reported[m] {
			return ms // one report for the rules an nft rule splits into
		}
		if l.reported == nil {
			l.reported = make(map[rules.Match]bool)
		}
		l.reported[m] = true
		l.errorf(m.Pos, "limit in an %s table that IPv4 and IPv6 packets both reach: nftables has one bucket for both families, and bpfwall compiles each family on its own", m.TableFamily)
		return ms
	}
	if m.Bytes && l.prog.Reassembled {
		l.errorf(m.Pos, "limit in bytes in %s: netfilter counts the reassembled datagram there, bpfwall sees its fragments, whose datagram length is unknown", l.hook)
		return ms
	}
	rl := RateLimit{Bucket: l.bucket(m), Nsecs: m.Unit * 1e9, Rate: m.Rate, Burst: m.Burst, Bytes: m.Bytes, Over: m.Over}
	if _, ok := rl.TokensMax(); !ok || m.Unit > ^uint64(0)/1e9 {
		l.errorf(m.Pos, "limit: rate %d per %d s with burst %d overflows the kernel's token bucket (it refuses it)", m.Rate, m.Unit, m.Burst)
		return ms
	}
	ms = append(ms, rl)
	return ms
}
