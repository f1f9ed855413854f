package ir_test

import (
	"net/netip"
	"testing"

	"bpfwall/ir"
	"bpfwall/model"
	"bpfwall/rules"
)

// limitProgram is INPUT with one rule, "m -j ACCEPT", policy DROP.
func limitProgram(m ir.Match) *ir.Program {
	r := &ir.Rule{ID: 0, Matches: []ir.Match{m}, Action: ir.Accept{}}
	return &ir.Program{
		Family: rules.IPv4,
		Table:  "filter",
		Chains: []*ir.Chain{{Name: "INPUT", Policy: rules.PolicyDrop, Rules: []*ir.Rule{r}}},
		Rules:  []*ir.Rule{r},
	}
}

// passes runs n packets at the state's clock and counts the accepted.
func passes(p *ir.Program, st *ir.State, n int) int {
	pkt := &model.Packet{Family: rules.IPv4, Length: 100}
	ok := 0
	for range n {
		if p.EvalState(st, pkt).Verdict == ir.VerdictAccept {
			ok++
		}
	}
	return ok
}

// TestLimitArithmetic follows xt_limit's u32 arithmetic where no timed
// test can: 10/sec with a burst of 4 is a bucket of 12800 credits, 3200 a
// packet, 128 a jiffy at HZ 250; a refill of 2^25 jiffies is 2^32
// credits, which the kernel's u32 credit_increase wraps to nothing.
func TestLimitArithmetic(t *testing.T) {
	m := ir.Limit{Avg: 1000, Burst: 4}
	if c, cost := m.Credits(250); c != 12800 || cost != 3200 || ir.CreditsPerJiffy(250) != 128 {
		t.Fatalf("credits %d, cost %d, per jiffy %d", c, cost, ir.CreditsPerJiffy(250))
	}
	p := limitProgram(m)
	st := &ir.State{Jiffies: 1000}
	steps := []struct {
		at   uint64 // jiffies after the start
		n    int
		want int
	}{
		{0, 10, 4},         // the full bucket
		{24, 1, 0},         // 24*128 < 3200
		{25, 1, 1},         // one packet's worth since the last packet
		{25 + 1<<25, 1, 0}, // 2^25 jiffies: the u32 increase wraps to 0
		{25 + 1<<25 + 25, 1, 1},
		{25 + 1<<25 + 10000, 10, 4}, // capped at the burst
	}
	for _, s := range steps {
		st.Jiffies = 1000 + s.at
		if got := passes(p, st, s.n); got != s.want {
			t.Errorf("at +%d jiffies: %d of %d passed, want %d", s.at, got, s.n, s.want)
		}
	}
}

// TestRateLimitArithmetic follows nft_limit_eval: 10/second with a burst
// of 5 packets holds 5e8 ns and costs 1e8 per packet; "over" matches what
// the bucket cannot pay.
func TestRateLimitArithmetic(t *testing.T) {
	for _, over := range []bool{false, true} {
		m := ir.RateLimit{Nsecs: 1e9, Rate: 10, Burst: 5, Over: over}
		if tm, ok := m.TokensMax(); !ok || tm != 5e8 || m.Cost(100) != 1e8 {
			t.Fatalf("tokens max %d (%v), cost %d", tm, ok, m.Cost(100))
		}
		p := limitProgram(m)
		st := &ir.State{Nanos: 1e12}
		paid := []int{passes(p, st, 10)}
		st.Nanos += 1e8 - 1
		paid = append(paid, passes(p, st, 1))
		st.Nanos++
		paid = append(paid, passes(p, st, 1))
		want := []int{5, 0, 1}
		if over {
			want = []int{5, 1, 0} // the other packets
		}
		for i := range want {
			if paid[i] != want[i] {
				t.Errorf("over %v: step %d accepted %d, want %d", over, i, paid[i], want[i])
			}
		}
	}
}

// TestHashLimitSweep: a full table drops new keys; its expired entries
// go at the sweep, which runs at most once per gcinterval (the kernel's
// collector), not for every new key.
func TestHashLimitSweep(t *testing.T) {
	m := ir.HashLimit{Mode: rules.HashSrcIP, SrcMask: 32, Avg: 100000, Burst: 5, Expire: 10, GCInterval: 100, Max: 2}
	p := limitProgram(m)
	st := &ir.State{Jiffies: 1000}
	send := func(at uint64, src string) ir.Verdict {
		st.Jiffies = 1000 + at
		pkt := &model.Packet{Family: rules.IPv4, Length: 100, Src: netip.MustParseAddr(src)}
		return p.EvalState(st, pkt).Verdict
	}
	steps := []struct {
		at   uint64
		src  string
		want ir.Verdict
	}{
		{0, "10.0.0.1", ir.VerdictAccept},
		{0, "10.0.0.2", ir.VerdictAccept},
		{5, "10.0.0.3", ir.VerdictDrop},   // full, both live: swept, nothing expired
		{50, "10.0.0.3", ir.VerdictDrop},  // both expired, but the next sweep is at 105
		{104, "10.0.0.3", ir.VerdictDrop}, // still before it
		{105, "10.0.0.3", ir.VerdictAccept},
		{105, "10.0.0.4", ir.VerdictAccept}, // the sweep took both
		{106, "10.0.0.5", ir.VerdictDrop},
	}
	for _, s := range steps {
		if got := send(s.at, s.src); got != s.want {
			t.Errorf("at +%d, %s: %v, want %v", s.at, s.src, got, s.want)
		}
	}
}

// TestHashLimitTableSize: the kernel truncates --hashlimit-htable-size
// and -max above HASHLIMIT_MAX_SIZE (1048576) before it sizes the table
// (iptables-legacy-save prints 1048576 for both after a rule with
// 2000000 and 3000000), and takes max = 8*size when no max is given.
func TestHashLimitTableSize(t *testing.T) {
	for _, c := range []struct {
		opts string
		max  uint32
	}{
		{"--hashlimit-htable-size 2000000 --hashlimit-htable-max 3000000", 1048576},
		{"--hashlimit-htable-size 16 --hashlimit-htable-max 3000000", 1048576},
		{"--hashlimit-htable-size 100 --hashlimit-htable-max 10", 100},
		{"--hashlimit-htable-size 100", 800},
	} {
		p := lowerText(t, rules.IPv4, "INPUT", "*filter\n:INPUT ACCEPT [0:0]\n-A INPUT -m hashlimit --hashlimit-upto 1/sec --hashlimit-name x "+c.opts+" -j ACCEPT\nCOMMIT\n")
		var got uint32
		for _, r := range p.Rules {
			for _, m := range r.Matches {
				if h, ok := m.(ir.HashLimit); ok {
					got = h.Max
				}
			}
		}
		if got != c.max {
			t.Errorf("%s: a table of %d entries, want %d", c.opts, got, c.max)
		}
	}
}
