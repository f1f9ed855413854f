package iptables

import (
	"strconv"
	"strings"

	"bpfwall/rules"
)

// Match hashlimit (libxt_hashlimit.c revision 3, kernel xt_hashlimit.c):
// a token bucket per key. Options that ask for what bpfwall does not
// interpret (rate-match mode) parse, and leave the match Unsupported for
// lowering to refuse.

const (
	hashlimitScale           = 1000000 // XT_HASHLIMIT_SCALE_v2: Avg is in µs
	hashlimitBurst           = 5       // XT_HASHLIMIT_BURST
	hashlimitGCInterval      = 1000    // XT_HASHLIMIT_GCINTERVAL, ms
	hashlimitBurstMax        = 1000000 // XT_HASHLIMIT_BURST_MAX
	hashlimitByteShift       = 4       // XT_HASHLIMIT_BYTE_SHIFT
	hashlimitByteExpire      = 15      // XT_HASHLIMIT_BYTE_EXPIRE, s
	hashlimitByteBurstExpire = 60      // XT_HASHLIMIT_BYTE_EXPIRE_BURST, s
)

func init() {
	registerMatch("hashlimit", &matchExt{
		options: []optSpec{
			{name: "hashlimit", arg: argOne},
			{name: "hashlimit-upto", arg: argOne, invert: true},
			{name: "hashlimit-above", arg: argOne, invert: true},
			{name: "hashlimit-burst", arg: argOne},
			{name: "hashlimit-mode", arg: argOne},
			{name: "hashlimit-srcmask", arg: argOne},
			{name: "hashlimit-dstmask", arg: argOne},
			{name: "hashlimit-name", arg: argOne},
			{name: "hashlimit-htable-size", arg: argOne},
			{name: "hashlimit-htable-max", arg: argOne},
			{name: "hashlimit-htable-expire", arg: argOne},
			{name: "hashlimit-htable-gcinterval", arg: argOne},
			{name: "hashlimit-rate-match", arg: argNone},
			{name: "hashlimit-rate-interval", arg: argOne},
		},
		new: func() matchParser { return &hashlimitParser{} },
	})
}

type hashlimitParser struct {
	m          rules.HashLimit
	burstSet   bool
	rate       bool   // --hashlimit-upto or -above given
	unitSecs   uint32 // the rate's unit, for the default expiry
	expireSet  bool
	srcMaskSet bool
	dstMaskSet bool
}

func (p *hashlimitParser) parse(o *opt) error {
	args := []string{}
	if o.HasArg {
		args = []string{o.Arg}
	}
	p.m.Options = append(p.m.Options, rules.Option{Name: o.Name, Neg: o.Neg, Args: args})
	num := func(max uint64) (uint64, error) {
		v, err := strconv.ParseUint(o.Arg, 0, 64)
		if err != nil || v > max {
			return 0, o.errorf("--%s: bad value %q", o.Name, o.Arg)
		}
		return v, nil
	}
	switch o.Name {
	case "hashlimit", "hashlimit-upto", "hashlimit-above":
		p.rate = true
		p.m.Above = (o.Name == "hashlimit-above") != o.Neg
		return p.parseRate(o)
	case "hashlimit-burst":
		// parse_burst: a number, times 1024 or 1024*1024 after a k or
		// an m; without either, at most XT_HASHLIMIT_BURST_MAX.
		digits := strings.TrimLeft(o.Arg, "0123456789")
		v, err := strconv.ParseUint(o.Arg[:len(o.Arg)-len(digits)], 10, 64)
		if err != nil || v == 0 || (digits == "" && v > hashlimitBurstMax) {
			return o.errorf("--hashlimit-burst: bad value %q", o.Arg)
		}
		f := byteFactor(digits)
		if v > ^uint64(0)/f {
			return o.errorf("--hashlimit-burst: bad value %q", o.Arg)
		}
		p.m.Burst, p.burstSet = v*f, true
	case "hashlimit-mode":
		for _, tok := range strings.FieldsFunc(o.Arg, func(r rune) bool { return r == ',' || r == '|' }) {
			switch tok {
			case "srcip":
				p.m.Mode |= rules.HashSrcIP
			case "dstip":
				p.m.Mode |= rules.HashDstIP
			case "srcport":
				p.m.Mode |= rules.HashSrcPort
			case "dstport":
				p.m.Mode |= rules.HashDstPort
			default:
				return o.errorf("--hashlimit-mode: bad value %q", o.Arg)
			}
		}
	case "hashlimit-srcmask", "hashlimit-dstmask":
		v, err := num(128)
		if err != nil {
			return err
		}
		if o.Name == "hashlimit-srcmask" {
			p.m.SrcMask, p.srcMaskSet = uint8(v), true
		} else {
			p.m.DstMask, p.dstMaskSet = uint8(v), true
		}
	case "hashlimit-name":
		p.m.Table = o.Arg
	case "hashlimit-htable-size", "hashlimit-htable-max", "hashlimit-htable-expire", "hashlimit-htable-gcinterval":
		v, err := num(0xFFFFFFFF)
		if err != nil {
			return err
		}
		switch o.Name {
		case "hashlimit-htable-size":
			p.m.Size = uint32(v)
		case "hashlimit-htable-max":
			p.m.Max = uint32(v)
		case "hashlimit-htable-expire":
			p.m.Expire, p.expireSet = uint32(v), true
		default:
			p.m.GCInterval = uint32(v)
		}
	case "hashlimit-rate-match", "hashlimit-rate-interval":
		p.m.Unsupported = "--" + o.Name
	}
	return nil
}

// parseRate is libxt_hashlimit's parse_rate for revision 3: "n[/unit]",
// the unit any prefix of second, minute, hour or day; a rate in bytes
// ("n[kmb]b/s") is a byte rate.
func (p *hashlimitParser) parseRate(o *opt) error {
	if i := strings.Index(o.Arg, "b/s"); i > 0 {
		// parse_bytes: the character before "b/s" may be k or m.
		r := atoll(o.Arg)
		if r == 0 {
			return o.errorf("--%s: bad rate %q", o.Name, o.Arg)
		}
		f := byteFactor(o.Arg[i-1:])
		if r > ^uint64(0)/f {
			return o.errorf("--%s: rate %q too large", o.Name, o.Arg)
		}
		avg := bytesToCost(r * f)
		if avg == 0 {
			return o.errorf("--%s: rate %q too high", o.Name, o.Arg)
		}
		p.m.Avg, p.m.Bytes, p.unitSecs = avg, true, hashlimitByteExpire
		return nil
	}
	num, unit, hasUnit := strings.Cut(o.Arg, "/")
	mult := uint64(1)
	if hasUnit {
		found := false
		for _, u := range []struct {
			name string
			secs uint64
		}{{"second", 1}, {"minute", 60}, {"hour", 3600}, {"day", 86400}} {
			if unit != "" && len(unit) <= len(u.name) && strings.EqualFold(unit, u.name[:len(unit)]) {
				mult, found = u.secs, true
				break
			}
		}
		if !found {
			return o.errorf("--%s: bad rate %q", o.Name, o.Arg)
		}
	}
	r := atoll(num)
	if r == 0 {
		return o.errorf("--%s: bad rate %q", o.Name, o.Arg)
	}
	avg := hashlimitScale * mult / r
	if avg == 0 {
		return o.errorf("--%s: rate %q too fast", o.Name, o.Arg)
	}
	p.m.Avg, p.unitSecs = avg, uint32(mult)
	return nil
}

// atoll is C's atoll as libxt_hashlimit uses it, as an unsigned value:
// leading blanks and a sign, then digits.
func atoll(s string) uint64 {
	s = strings.TrimLeft(s, " \t\n\v\f\r")
	neg := false
	if s != "" && (s[0] == '+' || s[0] == '-') {
		neg, s = s[0] == '-', s[1:]
	}
	var v uint64
	for i := 0; i < len(s) && '0' <= s[i] && s[i] <= '9'; i++ {
		v = v*10 + uint64(s[i]-'0')
	}
	if neg {
		v = -v
	}
	return v
}

// byteFactor is libxt_hashlimit's get_factor of the first character of s.
func byteFactor(s string) uint64 {
	switch {
	case strings.HasPrefix(s, "m"):
		return 1024 * 1024
	case strings.HasPrefix(s, "k"):
		return 1024
	}
	return 1
}

// bytesToCost and costToBytes are libxt_hashlimit's conversions between
// bytes per second and the cost the kernel keeps, in their u32 arithmetic.
func bytesToCost(bytes uint64) uint64 {
	r := uint32(bytes >> hashlimitByteShift)
	if r == 0xFFFFFFFF {
		return 0
	}
	return uint64(0xFFFFFFFF / (r + 1))
}

func costToBytes(cost uint64) uint64 {
	r := uint64(0xFFFFFFFF)
	if cost != 0 {
		r = 0xFFFFFFFF / cost
	}
	return (r - 1) << hashlimitByteShift
}

func (p *hashlimitParser) finish(ctx *ruleCtx) (rules.Match, error) {
	m := p.m
	m.Pos = ctx.Pos
	if !p.rate {
		return nil, rules.Errorf(ctx.Pos, "hashlimit: you have to specify --hashlimit")
	}
	if m.Table == "" {
		return nil, rules.Errorf(ctx.Pos, "hashlimit: --hashlimit-name is required")
	}
	if !p.expireSet {
		m.Expire = p.unitSecs * 1000
	}
	if m.GCInterval == 0 && !hasOption(m.Options, "hashlimit-htable-gcinterval") {
		m.GCInterval = hashlimitGCInterval
	}
	switch {
	case m.Bytes && p.burstSet:
		// The burst in bytes becomes a number of packets of the rate's
		// size, rounded up.
		unit := costToBytes(m.Avg)
		if m.Burst < unit {
			return nil, rules.Errorf(ctx.Pos, "hashlimit: burst cannot be smaller than %db", unit)
		}
		m.Burst = (m.Burst + unit - 1) / unit
		if !p.expireSet {
			m.Expire = hashlimitByteBurstExpire * 1000
		}
	case m.Bytes:
		m.Burst = 0
	case !p.burstSet:
		m.Burst = hashlimitBurst
	}
	full := uint8(32)
	if ctx.Family == rules.IPv6 {
		full = 128
	}
	if !p.srcMaskSet {
		m.SrcMask = full
	}
	if !p.dstMaskSet {
		m.DstMask = full
	}
	if m.SrcMask > full || m.DstMask > full {
		return nil, rules.Errorf(ctx.Pos, "hashlimit: a mask is longer than an %s address", ctx.Family)
	}
	if !m.Bytes && m.Burst > hashlimitBurstMax {
		return nil, rules.Errorf(ctx.Pos, "hashlimit: burst %d is larger than %d", m.Burst, hashlimitBurstMax)
	}
	return &m, nil
}

func hasOption(opts []rules.Option, name string) bool {
	for _, o := range opts {
		if o.Name == name {
			return true
		}
	}
	return false
}
