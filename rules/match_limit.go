package rules

// Limit is "-m limit". Avg is the average interval between packets in
// units of 1/10000 s (XT_LIMIT_SCALE), as the kernel stores it.
type Limit struct {
	Located
	Avg   uint32
	Burst uint32
}

func (m *Limit) Name() string { return "limit" }

func (m *Limit) appendSave(b []byte) []byte {
	b = append(b, " --limit "...)
	if m.Avg == 0 {
		b = append(b, "inf"...) // printf("%f", INFINITY); the parser never makes it
	} else {
		// The largest unit that shows the rate exactly enough, as
		// libxt_limit's print_rate picks it.
		i := 1
		for ; i < len(limitRates); i++ {
			r := limitRates[i].mult
			if m.Avg > r || r/m.Avg < r%m.Avg {
				break
			}
		}
		b = appendUint(b, uint64(limitRates[i-1].mult/m.Avg))
		b = append(b, '/')
		b = append(b, limitRates[i-1].name...)
	}
	if m.Burst != limitDefaultBurst {
		b = append(b, " --limit-burst "...)
		b = appendUint(b, uint64(m.Burst))
	}
	return b
}

// limitRates are the units libxt_limit prints a rate in, largest first,
// with their length in 1/10000 s.
var limitRates = []struct {
	name string
	mult uint32
}{{"day", 864000000}, {"hour", 36000000}, {"min", 600000}, {"sec", 10000}}

// limitDefaultBurst is the burst iptables-save leaves out.
const limitDefaultBurst = 5
