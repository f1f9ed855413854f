package ir

import (
	"fmt"

	"bpfwall/model"
	"bpfwall/rules"
)

// Result is the outcome of evaluating a packet.
type Result struct {
	Verdict Verdict
	// Rule is the rule that decided: its action ended the evaluation, or
	// one of its matches dropped the packet (Hotdrop). It is nil when the
	// entry chain's policy decided, and when no chain was evaluated.
	Rule *Rule
	// Chain is Rule's chain, or the entry chain when its policy decided;
	// empty when no chain was evaluated.
	Chain string
	// Hotdrop is set when a match of Rule found the headers it reads cut
	// short and dropped the packet (xt_action_param.hotdrop).
	Hotdrop bool
	// Steer is the last rule with an nft tproxy statement (TProxyTo) that
	// matched: an ACCEPT delivers the packet to its socket, which makes
	// the verdict TPROXY.
	Steer *Rule
	// Skipped, when not empty, says why no chain was evaluated. Packets the
	// IP layer discards first (Packet.Invalid) are DROP; packets netfilter's
	// tables for this family never see (not IP, or the other IP family)
	// are ACCEPT, since the program must let them through to whatever
	// handles them.
	Skipped string
}

func (r Result) String() string {
	switch {
	case r.Skipped != "":
		return fmt.Sprintf("%s (%s)", r.Verdict, r.Skipped)
	case r.Rule == nil:
		return fmt.Sprintf("%s by policy of %s", r.Verdict, r.Chain)
	case r.Hotdrop:
		return fmt.Sprintf("%s (hotdrop) at %s r%d %s:%d", r.Verdict, r.Chain, r.Rule.ID, posFile(r.Rule.Pos), r.Rule.Pos.Line)
	}
	return fmt.Sprintf("%s at %s r%d %s:%d", r.Verdict, r.Chain, r.Rule.ID, posFile(r.Rule.Pos), r.Rule.Pos.Line)
}

// Eval returns the verdict ip_tables (ip6_tables) gives pkt with p loaded
// in the hook of p's entry chain. p must satisfy Verify.
func (p *Program) Eval(pkt *model.Packet) Result { return p.Trace(pkt, nil) }

// Trace is Eval that also calls counted, when not nil, for every rule whose
// matches all hold, in the order evaluated: the rules whose counters the
// kernel increments.
//
// The walk is ipt_do_table's: first match wins; a jump pushes a return
// address, a goto does not; RETURN, and falling off the end of a user
// chain, pop it, or with an empty stack go to the entry chain's policy;
// LOG and rules without a target continue with the next rule; a match that
// sets hotdrop ends the walk with DROP.
func (p *Program) Trace(pkt *model.Packet, counted func(*Rule)) Result {
	return p.TraceState(nil, pkt, counted)
}

// EvalState is Eval with the program's stateful matches (limit, nft limit)
// remembering what earlier packets did in st, at st's clock. Eval and
// Trace give each packet a fresh State: every bucket is full.
func (p *Program) EvalState(st *State, pkt *model.Packet) Result { return p.TraceState(st, pkt, nil) }

// TraceState is Trace with st, as EvalState.
func (p *Program) TraceState(st *State, pkt *model.Packet, counted func(*Rule)) (res Result) {
	if st == nil {
		st = &State{}
	}
	var steer *Rule // see Result.Steer
	defer func() {
		if steer != nil && res.Verdict == VerdictAccept {
			res.Verdict, res.Steer = VerdictTProxy, steer
		}
	}()
	switch {
	case pkt.NotIP:
		return Result{Verdict: VerdictAccept, Skipped: "not an IP packet"}
	case pkt.Family != p.Family:
		return Result{Verdict: VerdictAccept, Skipped: fmt.Sprintf("%s packet, %s rule set", pkt.Family, p.Family)}
	case pkt.Invalid != "":
		return Result{Verdict: VerdictDrop, Skipped: pkt.Invalid}
	case p.Forward && pkt.TTL <= 1:
		return Result{Verdict: VerdictAccept, Skipped: SkipTTLExpired}
	case p.Reassembled && pkt.FragOffset != 0:
		// The first fragment stands for the reassembled datagram
		// (fragment.go).
		return Result{Verdict: VerdictAccept, Skipped: SkipLaterFragment}
	case pkt.CTState&model.ConnUnknown != 0 && pkt.DeferredClass() && !pkt.VLANTagged && p.TestsConntrack():
		// Class U: the program's netfilter stage decides, with the state
		// conntrack gives the packet (Packet.DeferredClass). Not in a
		// VLAN-tagged frame: netfilter sees that on the VLAN's device,
		// where the stage does not run; its state stays unknown, and a
		// state match drops it.
		return Result{Verdict: VerdictAccept, Skipped: SkipDeferred}
	case p.Reassembled && pkt.IsFragment():
		if p.tinyFirstFragment(pkt) {
			return Result{Verdict: VerdictDrop, Skipped: SkipTinyFragment}
		}
		whole := *pkt
		whole.MoreFragments, whole.FragmentHeader = false, false
		pkt = &whole
	}
	type frame struct{ chain, next int }
	var stack []frame
	entry := p.Chains[0]
	policy := Result{Verdict: policyVerdict(entry.Policy), Chain: entry.Name}
	ci, ri := 0, 0
	for {
		c := p.Chains[ci]
		if ri == len(c.Rules) {
			// The entry chain ends in its policy, a user chain in an
			// unconditional RETURN.
			if ci == 0 || len(stack) == 0 {
				return policy
			}
			f := stack[len(stack)-1]
			stack = stack[:len(stack)-1]
			ci, ri = f.chain, f.next
			continue
		}
		r := c.Rules[ri]
		switch p.matchRule(st, r, pkt) {
		case noMatch:
			ri++
			continue
		case hotdrop:
			return Result{Verdict: VerdictDrop, Rule: r, Chain: c.Name, Hotdrop: true}
		}
		if counted != nil {
			counted(r)
		}
		if len(r.Matches) > 0 {
			if _, ok := r.Matches[len(r.Matches)-1].(TProxyTo); ok {
				steer = r
			}
		}
		switch a := r.Action.(type) {
		case Accept:
			return Result{Verdict: VerdictAccept, Rule: r, Chain: c.Name}
		case Drop:
			return Result{Verdict: VerdictDrop, Rule: r, Chain: c.Name}
		case Reject:
			return Result{Verdict: VerdictReject, Rule: r, Chain: c.Name}
		case TProxy:
			return Result{Verdict: VerdictTProxy, Rule: r, Chain: c.Name}
		case Return:
			if len(stack) == 0 {
				return policy
			}
			f := stack[len(stack)-1]
			stack = stack[:len(stack)-1]
			ci, ri = f.chain, f.next
		case Jump:
			stack = append(stack, frame{chain: ci, next: ri + 1})
			ci, ri = a.Chain, 0
		case Goto:
			ci, ri = a.Chain, 0
		case Log, None:
			ri++
		}
	}
}

type outcome uint8

const (
	matched outcome = iota
	noMatch
	hotdrop
)

func (p *Program) matchRule(st *State, r *Rule, pkt *model.Packet) outcome {
	for _, m := range r.Matches {
		if o := m.eval(p, st, pkt); o != matched {
			return o
		}
	}
	return matched
}

func is(ok bool) outcome {
	if ok {
		return matched
	}
	return noMatch
}

// hasTCPOption is tcp_find_option's walk: kinds 0 and 1 are one byte long,
// every other option is as long as its length byte says (at least 1).
func hasTCPOption(opts []byte, kind uint8) bool {
	for i := 0; i < len(opts); {
		if opts[i] == kind {
			return true
		}
		if opts[i] < 2 || i+1 >= len(opts) {
			// The kernel reads the length byte past the end here too; any
			// step ends the walk.
			i++
			continue
		}
		i += max(int(opts[i+1]), 1)
	}
	return false
}

// pktType is the packet type pkttype_mt compares: a looped-back packet
// counts as multicast (IPv4 to a multicast address, and all of IPv6) or
// broadcast.
func (p *Program) pktType(pkt *model.Packet) model.PacketType {
	if pkt.PktType != model.PacketLoopback {
		return pkt.PktType
	}
	if p.Family == rules.IPv6 || pkt.Dst.IsMulticast() {
		return model.PacketMulticast
	}
	return model.PacketBroadcast
}
