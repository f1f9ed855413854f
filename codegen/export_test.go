package codegen

// SetMaxSegmentBranches makes chains split into segments after n
// conditional jumps, until the returned function restores the limit.
func SetMaxSegmentBranches(n int) (restore func()) {
	old := maxSegmentBranches
	maxSegmentBranches = n
	return func() { maxSegmentBranches = old }
}
