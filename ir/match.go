package ir

import (
	"fmt"

	"bpfwall/model"
	"bpfwall/rules"
)

// Match is one normalized condition of a rule. The set of kinds is closed;
// each kind documents the kernel code whose semantics it has. Matches of a
// rule are evaluated in order, which matters only for the kinds that can
// drop a packet on their own (L4Header, and Proto in IPv6).
//
// Each kind lives in match_<name>.go with everything the IR knows of it:
// its type, evaluation in the reference model, printing and verification,
// and, where they apply, the optional interfaces tupleMatch (it tests
// fields of the classifier's tuple) and transportReader (it reads the
// transport header of a first fragment).
//
//sumtype:decl
type Match interface {
	// eval is the match in the reference model of netfilter.
	eval(p *Program, st *State, pkt *model.Packet) outcome
	// appendTo appends the match as Format prints it.
	appendTo(b []byte, fam rules.Family) []byte
	// verify checks the match's invariants; st is what the rule's
	// earlier matches ensure, and the match adds to it.
	verify(v *verifier, st *ruleState) error
}

// Dir says which address or port of a packet a match tests.
type Dir uint8

const (
	Src Dir = iota + 1
	Dst
	SrcOrDst // ports only: multiport --ports
)

func (d Dir) String() string {
	switch d {
	case Src:
		return "src"
	case Dst:
		return "dst"
	case SrcOrDst:
		return "src-or-dst"
	}
	return fmt.Sprintf("Dir(%d)", uint8(d))
}
