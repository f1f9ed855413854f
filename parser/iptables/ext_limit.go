package iptables

import (
	"math"
	"strings"

	"bpfwall/rules"
)

// Match limit (libxt_limit.c, kernel xt_limit.c): a token bucket.

const (
	limitScale        = 10000                 // XT_LIMIT_SCALE: Avg is in 1/10000 s
	limitDefaultAvg   = limitScale * 3600 / 3 // 3/hour
	limitDefaultBurst = 5
	limitMaxBurst     = 10000
)

func init() {
	registerMatch("limit", &matchExt{
		options: []optSpec{
			{name: "limit", arg: argOne},
			{name: "limit-burst", arg: argOne},
		},
		new: func() matchParser {
			return &limitParser{m: rules.Limit{Avg: limitDefaultAvg, Burst: limitDefaultBurst}}
		},
	})
}

type limitParser struct{ m rules.Limit }

func (p *limitParser) parse(o *opt) error {
	if o.Name == "limit-burst" {
		v, ok := parseUint(o.Arg, limitMaxBurst)
		if !ok {
			return o.errorf("--limit-burst: invalid burst %q (0-%d)", o.Arg, limitMaxBurst)
		}
		p.m.Burst = uint32(v)
		return nil
	}
	avg, err := parseRate(o)
	if err != nil {
		return err
	}
	p.m.Avg = avg
	return nil
}

// rateUnits are the units of --limit, in seconds; a unit may be
// abbreviated to any prefix.
var rateUnits = []struct {
	name    string
	seconds uint32
}{{"second", 1}, {"minute", 60}, {"hour", 3600}, {"day", 86400}}

// parseRate parses "n[/unit]" as libxt_limit's parse_rate does, including
// its use of atoi for n, into the average interval in 1/10000 s.
func parseRate(o *opt) (uint32, error) {
	num, unit, hasUnit := strings.Cut(o.Arg, "/")
	mult := uint32(1)
	if hasUnit {
		found := false
		for _, u := range rateUnits {
			if prefixOf(unit, u.name) {
				mult, found = u.seconds, true
				break
			}
		}
		if !found {
			return 0, o.errorf("--limit: bad rate %q (n/second, n/minute, n/hour or n/day)", o.Arg)
		}
	}
	r := atoi(num)
	if r == 0 {
		return 0, o.errorf("--limit: bad rate %q (n/second, n/minute, n/hour or n/day)", o.Arg)
	}
	avg := limitScale * mult / r
	if avg == 0 {
		return 0, o.errorf("--limit: rate %q too fast", o.Arg)
	}
	return avg, nil
}

// atoi is C's atoi(3) as glibc implements it, converted to uint32 as
// libxt_limit stores it: leading blanks and a sign, then digits up to the
// first non-digit; out-of-range values saturate before the conversion.
func atoi(s string) uint32 {
	s = strings.TrimLeft(s, " \t\n\v\f\r")
	neg := false
	if s != "" && (s[0] == '+' || s[0] == '-') {
		neg, s = s[0] == '-', s[1:]
	}
	var v int64
	for i := 0; i < len(s) && '0' <= s[i] && s[i] <= '9'; i++ {
		if v > (math.MaxInt64-9)/10 {
			// strtol saturates; the low 32 bits of LONG_MIN and
			// LONG_MAX remain.
			if neg {
				return 0
			}
			return 0xFFFFFFFF
		}
		v = v*10 + int64(s[i]-'0')
	}
	if neg {
		v = -v
	}
	return uint32(int32(v))
}

func (p *limitParser) finish(ctx *ruleCtx) (rules.Match, error) {
	m := p.m
	m.Pos = ctx.Pos
	// xt_limit refuses a zero burst and an average times burst that
	// overflows its credit counter.
	if m.Burst == 0 || limitCredits(m.Avg*m.Burst) < limitCredits(m.Avg) {
		return nil, rules.Errorf(ctx.Pos, "limit: burst %d too large for the rate (the kernel says: overflow, try lower)", m.Burst)
	}
	return &m, nil
}

// limitCredits is xt_limit's user2credits in its 32-bit arithmetic, for
// HZ 250 or 1000 (HZ * CREDITS_PER_JIFFY is 32000 for both).
func limitCredits(user uint32) uint32 {
	const hzCredits = 32000
	if user > 0xFFFFFFFF/hzCredits {
		return (user / limitScale) * hzCredits
	}
	return user * hzCredits / limitScale
}
