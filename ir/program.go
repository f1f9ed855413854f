package ir

import (
	"fmt"
	"net/netip"

	"bpfwall/rules"
)

// Program is one builtin chain of one table (the hook's entry point) and
// every user chain reachable from it.
type Program struct {
	Family rules.Family
	Table  string
	// Chains[0] is the entry chain; the user chains follow in the order in
	// which lowering first reached them.
	Chains []*Chain
	// Rules holds every rule of every chain, indexed by Rule.ID, and the
	// rules passes removed.
	Rules []*Rule
	// Removed are the rules an optimization pass took out of their chains
	// because no packet can match them; they keep their IDs, and their
	// counters stay zero.
	Removed []Removal
	// Reassembled is set when netfilter runs the entry chain on
	// reassembled datagrams, not on fragments (see reassembles): the
	// first fragment then stands for the datagram and later fragments
	// pass (Eval, fragment.go).
	Reassembled bool
	// Forward is set when the entry chain is a FORWARD chain. ip_forward
	// and ip6_forward drop a packet whose TTL (hop limit) is 1 or less
	// before the FORWARD hook, and decrement the others' before it: such a
	// packet passes unfiltered (SkipTTLExpired), and TTL matches are
	// rewritten to test the TTL as the packet arrives (Decode's).
	Forward bool
	// TableBuckets, when not 0, is how many token buckets the table
	// has (LowerOptions.SharedState): the program's Limit and RateLimit
	// buckets are indexes into the table's array of that size, which the
	// table's other chains share.
	TableBuckets int
	// Texts, when not nil, gives the texts of rules lowered without them
	// (LowerOptions.NoText), by rule ID: TextOf.
	Texts func(id int) string

	// shared is set on a Clone, whose rules are its original's until a
	// pass changes one (own); owned are those it copied.
	shared bool
	owned  map[int]bool
	// forms caches Form by rule ID, nil where it is not computed, or was
	// forgotten (ForgetForms: a slice of forms, not of pointers, kept 14
	// MB of empty forms of 100k rules to the end of the compile). It is
	// the program's, not the rules': a Clone shares its rules, whose
	// matches its passes may change.
	forms []*cachedForm
	// ifaces numbers the exact interface names of FieldIn and FieldOut
	// (ifaceNumbers), made the first time a form or codegen asks.
	ifaces *ifaceNumbering
}

// TextOf returns r's Text, or when r has none, the text Texts gives for
// it.
func (p *Program) TextOf(r *Rule) string {
	if r.Text != "" || p.Texts == nil {
		return r.Text
	}
	return p.Texts(r.ID)
}

// Removal is a rule that never matches: every packet that reaches it is
// decided earlier, by CoveredBy.
type Removal struct {
	Rule, CoveredBy *Rule
}

// Chain is a list of rules evaluated in order.
type Chain struct {
	Name string
	// Policy decides packets that leave the entry chain undecided (at its
	// end, or by RETURN with an empty call stack). It is PolicyAccept or
	// PolicyDrop for Chains[0] and PolicyNone for user chains.
	Policy rules.Policy
	Rules  []*Rule
}

// Rule is a conjunction of matches and the action taken when they all hold.
type Rule struct {
	// ID numbers the rules of a program densely from 0 in chain order; it
	// indexes per-rule counters.
	ID    int
	Chain int // index of the rule's chain in Program.Chains
	Pos   rules.Pos
	// Text is the rule as iptables-save prints it, comments included;
	// empty in a program lowered with LowerOptions.NoText, whose readers
	// ask Program.TextOf.
	Text    string
	Matches []Match
	Action  Action
}

// cachedForm is a rule's Program.Form, once computed, in 64 bytes: a
// Form is 144, and most rules' have tuples, and the tuples before their
// L4Header, and nothing else.
type cachedForm struct {
	tuples, preL4 []Tuple
	more          *formMore // nil when the form has none of it
	l4Len         int32
	ok            bool
	proto, tiny   bool
}

// formMore is what the forms of few rules have: the tuples before an
// IPv6 Proto match, and residual matches.
type formMore struct {
	preProto                        []Tuple
	residual                        []Match
	residualPreProto, residualPreL4 int
}

// Action is what a rule does when it matches. The set of kinds is closed:
// Accept, Drop, Reject, Return, Jump, Goto, Log and None.
//
//sumtype:decl
type Action interface {
	isAction()
}

// Accept ends evaluation with NF_ACCEPT.
type Accept struct{}

// Drop ends evaluation with NF_DROP.
type Drop struct{}

// Reject ends evaluation like Drop, after sending the error With names
// (icmp-port-unreachable, tcp-reset, ...).
type Reject struct{ With string }

// Return continues after the rule that jumped to the current chain; with an
// empty call stack the entry chain's policy decides.
type Return struct{}

// Jump evaluates Chain, then continues after this rule when Chain returns
// or falls off its end.
type Jump struct{ Chain int }

// Goto evaluates Chain without pushing a return address: its RETURN
// returns to whoever called the current chain.
type Goto struct{ Chain int }

// Log logs the packet (xt_LOG) and continues with the next rule.
type Log struct {
	Level  uint8
	Prefix string
	Flags  uint8 // rules.LogTCPSeq, ...
}

// TProxy steers the packet to the socket on Addr:Port of protocol Proto
// (xt_TPROXY; Addr invalid: --on-ip not given). The socket is found when
// the program runs; with none, the packet is dropped. (nft's tproxy
// statement is the match TProxyTo.)
type TProxy struct {
	Proto uint8 // 6 or 17
	Addr  netip.Addr
	Port  uint16
}

// None is a rule without a target: a matching packet is counted and goes
// on to the next rule.
type None struct{}

func (Accept) isAction() {}
func (Drop) isAction()   {}
func (Reject) isAction() {}
func (Return) isAction() {}
func (Jump) isAction()   {}
func (Goto) isAction()   {}
func (Log) isAction()    {}
func (None) isAction()   {}
func (TProxy) isAction() {}

// Terminal reports whether a matching rule with action a ends the
// evaluation of its chain (ACCEPT, DROP, REJECT, RETURN).
func Terminal(a Action) bool {
	switch a.(type) {
	case Accept, Drop, Reject, Return, TProxy:
		return true
	case Jump, Goto, Log, None:
	}
	return false
}

// JumpTarget returns the chain a jump or goto action enters.
func JumpTarget(a Action) (int, bool) {
	switch a := a.(type) {
	case Jump:
		return a.Chain, true
	case Goto:
		return a.Chain, true
	case Accept, Drop, Reject, Return, TProxy, Log, None:
	}
	return 0, false
}

// Verdict is the fate of a packet.
type Verdict uint8

const (
	VerdictAccept Verdict = iota + 1
	VerdictDrop
	VerdictReject
	// VerdictTProxy: the packet goes to the socket of the deciding
	// TProxy rule (which the reference evaluator assumes exists).
	VerdictTProxy
)

func (v Verdict) String() string {
	switch v {
	case VerdictAccept:
		return "ACCEPT"
	case VerdictDrop:
		return "DROP"
	case VerdictReject:
		return "REJECT"
	case VerdictTProxy:
		return "TPROXY"
	}
	return fmt.Sprintf("Verdict(%d)", uint8(v))
}

func policyVerdict(p rules.Policy) Verdict {
	if p == rules.PolicyDrop {
		return VerdictDrop
	}
	return VerdictAccept
}

// Terminating reports, for each chain of p, whether a packet that enters
// it never comes back to the rule after the jump: no rule returns (RETURN,
// or a goto to a chain that may return, whose RETURN returns from this
// one), and the last rule, with no matches, decides (ACCEPT, DROP,
// REJECT, TPROXY) or jumps or goes to a terminating chain. A jump to such
// a chain is a verdict, as terminal as an ACCEPT. Chains are acyclic.
func (p *Program) Terminating() []bool {
	out := make([]bool, len(p.Chains))
	done := make([]bool, len(p.Chains))
	var visit func(ci int) bool
	visit = func(ci int) bool {
		if done[ci] {
			return out[ci]
		}
		done[ci] = true
		rs := p.Chains[ci].Rules
		if len(rs) == 0 {
			return false
		}
		for _, r := range rs {
			switch a := r.Action.(type) {
			case Return:
				return false
			case Goto:
				if !visit(a.Chain) {
					return false
				}
			case Accept, Drop, Jump, Log, None, Reject, TProxy:
				// A jump's chain comes back here, or decides.
			}
		}
		last := rs[len(rs)-1]
		if len(last.Matches) > 0 {
			return false
		}
		switch a := last.Action.(type) {
		case Accept, Drop, Reject, TProxy:
			out[ci] = true
		case Jump:
			out[ci] = visit(a.Chain)
		case Goto:
			out[ci] = true // visited above
		case Log, None, Return:
			// The packet goes on past the chain's end, or returns.
		}
		return out[ci]
	}
	for ci := range p.Chains {
		visit(ci)
	}
	return out
}
