package abi

import (
	"fmt"

	"bpfwall/ir"
)

// Decision is how the program decided a packet.
type Decision struct {
	Rule uint32 // rule ID for DecidedByRule and Hotdrop; 0 otherwise
	Kind DecisionKind
}

// DecisionKind is what decided a packet. The program stores it as a u32.
type DecisionKind uint32

// Kinds of Decision.
const (
	DecidedByRule   DecisionKind = 1 // a rule's ACCEPT or DROP
	DecidedByPolicy DecisionKind = 2 // the entry chain's policy
	Hotdrop         DecisionKind = 3 // a match of Rule found its header cut short and dropped the packet
	SkippedInvalid  DecisionKind = 4 // dropped: the IP layer drops it before netfilter would see it
	SkippedNotIP    DecisionKind = 5 // passed: not IP, or the other family
	NoSocket        DecisionKind = 6 // sk-lookup: dropped, Rule's TPROXY socket does not exist
	AssignFailed    DecisionKind = 7 // sk-lookup: dropped, Rule's socket does not fit the lookup
	// LaterFragment: passed, a non-first fragment of a datagram netfilter
	// sees reassembled at this chain (ir.SkipLaterFragment).
	LaterFragment DecisionKind = 8
	// TinyFragment: dropped, a first fragment without the transport bytes
	// the program reads (ir.SkipTinyFragment).
	TinyFragment DecisionKind = 9
	// Deferred: passed by the ingress program to the netfilter stage
	// (ir.SkipDeferred).
	Deferred DecisionKind = 10
	// TTLExpired: passed, in FORWARD, a packet with TTL (hop limit) 1 or
	// less, which ip_forward drops before the FORWARD hook
	// (ir.SkipTTLExpired).
	TTLExpired DecisionKind = 11
	// Unaccelerated: passed by an accelerator, which cannot judge the
	// packet as the chains would; they decide it.
	Unaccelerated DecisionKind = 12
)

var decisionKindNames = [...]string{
	DecidedByRule:   "rule",
	DecidedByPolicy: "policy",
	Hotdrop:         "hotdrop",
	SkippedInvalid:  "invalid",
	SkippedNotIP:    "not-ip",
	NoSocket:        "no-socket",
	AssignFailed:    "assign-failed",
	LaterFragment:   "later-fragment",
	TinyFragment:    "tiny-fragment",
	Deferred:        "deferred",
	TTLExpired:      "ttl-expired",
	Unaccelerated:   "unaccelerated",
}

func (k DecisionKind) String() string {
	if int(k) < len(decisionKindNames) && decisionKindNames[k] != "" {
		return decisionKindNames[k]
	}
	return fmt.Sprintf("DecisionKind(%d)", uint32(k))
}

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
