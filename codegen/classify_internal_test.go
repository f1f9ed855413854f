package codegen

import (
	"math/rand/v2"
	"testing"

	"bpfwall/ir"
)

// TestPortRuns checks the runs of ports of random port prefixes against
// the earliest entry that holds each port, and that a key with more runs
// than a value holds is refused.
func TestPortRuns(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	f := ir.FieldDport
	for trial := range 500 {
		es := make([]entry, 1+rng.IntN(6))
		for i := range es {
			bits := uint8(16 - rng.IntN(8))
			if rng.IntN(10) == 0 {
				bits = uint8(rng.IntN(16))
			}
			p := uint16(rng.IntN(1<<16)) &^ (1<<(16-bits) - 1)
			es[i].t.Len[f] = bits
			es[i].t.Value[f][0], es[i].t.Value[f][1] = byte(p>>8), byte(p)
			es[i].id = uint32(i) // earliest first
			es[i].kind = uint32(1 + rng.IntN(4))
		}
		// The earliest entry at every port, as runs.
		var want []portRun
		for port := range 1 << 16 {
			r := portRun{hi: uint16(port)}
			for _, e := range es {
				if lo, hi := portSpan(e.t, f); lo <= port && port <= hi {
					r.id, r.kind = e.id, uint16(e.kind)
					break
				}
			}
			if n := len(want); n > 0 && want[n-1].id == r.id && want[n-1].kind == r.kind {
				want[n-1].hi = r.hi
				continue
			}
			want = append(want, r)
		}
		got, ok := portRuns(es, f)
		if ok != (len(want) <= maxRuns) {
			t.Fatalf("trial %d: %d runs, ok = %v", trial, len(want), ok)
		}
		if !ok {
			continue
		}
		if len(got) != len(want) {
			t.Fatalf("trial %d: got runs %v, want %v", trial, got, want)
		}
		for i := range got {
			if got[i] != want[i] {
				t.Fatalf("trial %d: got runs %v, want %v", trial, got, want)
			}
		}
	}
}
