package codegen

import "bpfwall/codegen/abi"

// SetMaxSegmentBranches makes chains split into segments after n
// conditional jumps, until the returned function restores the limit.
func SetMaxSegmentBranches(n int) (restore func()) {
	old := maxSegmentBranches
	maxSegmentBranches = n
	return func() { maxSegmentBranches = old }
}

// RecentStampOffset is where stamp i of slot is in an abi.RecentMap value.
func RecentStampOffset(stamps, slot, i int) int {
	return abi.RecentSlotsOff + slot*abi.RecentSlotSize(stamps) + abi.RecentSlotStamps + 8*i
}

// SetMaxChainFunctions makes programs with more than n chains inline the
// chains they can, until the returned function restores the limit.
func SetMaxChainFunctions(n int) (restore func()) {
	old := maxChainFunctions
	maxChainFunctions = n
	return func() { maxChainFunctions = old }
}
