package codegen

import (
	"encoding/binary"
	"net/netip"

	"bpfwall/ir"
	"bpfwall/rules"
)

// SetMaxSegmentBranches makes chains split into segments after n
// conditional jumps, until the returned function restores the limit.
func SetMaxSegmentBranches(n int) (restore func()) {
	old := maxSegmentBranches
	maxSegmentBranches = n
	return func() { maxSegmentBranches = old }
}

// BucketKinds says, for each token bucket of p, whether it is an nft
// limit's (nanoseconds) rather than an xt_limit one (jiffies).
func BucketKinds(p *Program) []bool {
	c := &compiler{p: p.IR}
	kinds := make([]bool, c.buckets())
	for _, r := range p.IR.Rules {
		for _, m := range r.Matches {
			if m, ok := m.(ir.RateLimit); ok {
				kinds[m.Bucket] = true
			}
		}
	}
	return kinds
}

// HashKeyFor is the HashLimitMap key of m for pkt.
func HashKeyFor(m ir.HashLimit, pkt *ir.Packet) HashKey {
	var k HashKey
	words := func(a netip.Addr) [4]uint32 {
		var w [4]uint32
		b := a.AsSlice()
		for i := 0; i*4 < len(b); i++ {
			w[i] = binary.BigEndian.Uint32(b[4*i:])
		}
		return w
	}
	if m.Mode&rules.HashSrcIP != 0 {
		k.Src = words(ir.HashKeyAddr(pkt.Src, m.SrcMask))
	}
	if m.Mode&rules.HashDstIP != 0 {
		k.Dst = words(ir.HashKeyAddr(pkt.Dst, m.DstMask))
	}
	if m.Mode&rules.HashSrcPort != 0 {
		k.Sport = pkt.SrcPort
	}
	if m.Mode&rules.HashDstPort != 0 {
		k.Dport = pkt.DstPort
	}
	return k
}
