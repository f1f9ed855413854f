package codegen

import "bpfwall/ir"

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
