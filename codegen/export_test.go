package codegen

// SetMaxSegmentBranches makes chains split into segments after n
// conditional jumps, until the returned function restores the limit.
func SetMaxSegmentBranches(n int) (restore func()) {
	old := maxSegmentBranches
	maxSegmentBranches = n
	return func() { maxSegmentBranches = old }
}

// SetClassifyAlways makes -O1 classify every run of eligible rules, however
// short, with every table looked up in a map, until the returned function
// restores the cost estimate.
func SetClassifyAlways() (restore func()) {
	old := classifyAlways
	classifyAlways = true
	return func() { classifyAlways = old }
}
