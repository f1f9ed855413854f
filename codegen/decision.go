package codegen

import "bpfwall/ir"

// DecisionFor is the Decision a compiled program records for a packet to
// which ir's evaluator gives r: what trace reports and what the tests
// compare.
func DecisionFor(r ir.Result) Decision {
	switch {
	case r.Skipped == ir.SkipLaterFragment:
		return Decision{Kind: LaterFragment}
	case r.Skipped == ir.SkipTinyFragment:
		return Decision{Kind: TinyFragment}
	case r.Skipped == ir.SkipDeferred:
		return Decision{Kind: Deferred}
	case r.Skipped == ir.SkipTTLExpired:
		return Decision{Kind: TTLExpired}
	case r.Skipped != "" && r.Verdict == ir.VerdictDrop:
		return Decision{Kind: SkippedInvalid}
	case r.Skipped != "":
		return Decision{Kind: SkippedNotIP}
	case r.Rule == nil:
		return Decision{Kind: DecidedByPolicy}
	case r.Hotdrop:
		return Decision{Kind: Hotdrop, Rule: uint32(r.Rule.ID)}
	}
	return Decision{Kind: DecidedByRule, Rule: uint32(r.Rule.ID)}
}
