package ir

import (
	"math/rand/v2"
	"net/netip"
	"testing"
)

// TestAggregateEntries checks that aggregated sets decide every address as
// the original does, on random sets of nested prefixes with nomatch
// entries, at every entry's first and last address and random ones.
func TestAggregateEntries(t *testing.T) {
	decide := func(es []SetEntry, a netip.Addr) bool {
		best, in := -1, false
		for _, e := range es {
			if e.Prefix.Bits() > best && e.Prefix.Contains(a) {
				best, in = e.Prefix.Bits(), !e.NoMatch
			}
		}
		return in
	}
	shrunk := 0
	for seed := range uint64(500) {
		rng := rand.New(rand.NewPCG(seed, 7))
		seen := make(map[netip.Prefix]bool)
		var es []SetEntry
		for range 1 + rng.IntN(30) {
			a := netip.AddrFrom4([4]byte{10, byte(rng.IntN(4)), byte(rng.IntN(4)), byte(rng.IntN(256))})
			p := netip.PrefixFrom(a, 14+rng.IntN(19)).Masked()
			if !seen[p] {
				seen[p] = true
				es = append(es, SetEntry{Prefix: p, NoMatch: rng.IntN(3) == 0})
			}
		}
		got := aggregateEntries(es)
		if len(got) < len(es) {
			shrunk++
		}
		var probes []netip.Addr
		for _, e := range es {
			last := e.Prefix.Addr().As4()
			host := uint32(1)<<(32-e.Prefix.Bits()) - 1
			for i := range 4 {
				last[i] |= byte(host >> (24 - 8*i))
			}
			probes = append(probes, e.Prefix.Addr(), e.Prefix.Addr().Prev(), netip.AddrFrom4(last), netip.AddrFrom4(last).Next())
		}
		for range 200 {
			probes = append(probes, netip.AddrFrom4([4]byte{10, byte(rng.IntN(4)), byte(rng.IntN(4)), byte(rng.IntN(256))}))
		}
		for _, a := range probes {
			if decide(es, a) != decide(got, a) {
				t.Fatalf("seed %d: %s is %v in %v, %v in the aggregated %v", seed, a, decide(es, a), es, decide(got, a), got)
			}
		}
	}
	if shrunk < 100 {
		t.Errorf("only %d of 500 sets shrank", shrunk)
	}
}
