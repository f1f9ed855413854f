package difftest

import (
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"bpfwall/ir"
	"bpfwall/model"
	"bpfwall/rules"
)

// Mismatch is a probe on which a source disagrees with the reference.
type Mismatch struct {
	Case     *Case
	Probe    int
	Source   string
	Ref, Got Outcome
	RefName  string
}

// Totals count one source's rule sets and probes. A probe passes when the
// source agrees with the reference; it is skipped when the source does
// not judge it (an unmodeled forwarding path, or one that the source's
// hook does not see).
type Totals struct {
	Source                                 string
	Cases, Probes, Passed, Failed, Skipped int
	// Chain counts the passed probes that reached the FORWARD chain, as
	// opposed to those the routing stopped before it.
	Chain int
	// Unsupported counts the rule sets the source could not run, by
	// reason (see Unsupported); they are not in Cases.
	Unsupported map[string]int
}

func (t *Totals) Add(u Totals) {
	if t.Source == "" {
		t.Source = u.Source
	}
	t.Cases += u.Cases
	t.Probes += u.Probes
	t.Passed += u.Passed
	t.Failed += u.Failed
	t.Skipped += u.Skipped
	t.Chain += u.Chain
	for r, n := range u.Unsupported {
		if t.Unsupported == nil {
			t.Unsupported = map[string]int{}
		}
		t.Unsupported[r] += n
	}
}

func (t Totals) String() string {
	s := fmt.Sprintf("%s: %d rule sets, %d probes: %d passed (%d through FORWARD), %d failed, %d skipped",
		t.Source, t.Cases, t.Probes, t.Passed, t.Chain, t.Failed, t.Skipped)
	if len(t.Unsupported) > 0 {
		n := 0
		reasons := slices.Sorted(maps.Keys(t.Unsupported))
		for i, r := range reasons {
			n += t.Unsupported[r]
			reasons[i] = fmt.Sprintf("%d %s", t.Unsupported[r], r)
		}
		s += fmt.Sprintf("; %d rule sets unsupported (%s)", n, strings.Join(reasons, ", "))
	}
	return s
}

// Unsupported is the error of a source that cannot run a case because
// bpfwall refuses the rules for its hook.
type Unsupported struct{ Reason string }

func (u *Unsupported) Error() string { return "unsupported: " + u.Reason }

// Compare runs c through ref and the other sources and returns the
// probes on which a source disagrees with ref, and each other source's
// totals. A source that fails on c (other than Unsupported) is reported
// in the error, and the others are still compared.
func Compare(c *Case, ref Source, others ...Source) ([]Mismatch, []Totals, error) {
	want, err := ref.Outcomes(c)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", ref.Name(), err)
	}
	tots := make([]Totals, len(others))
	var bad []Mismatch
	var errs []error
	for i, s := range others {
		tot := &tots[i]
		tot.Source = s.Name()
		got, err := s.Outcomes(c)
		var unsup *Unsupported
		switch {
		case errors.As(err, &unsup):
			tot.Unsupported = map[string]int{unsup.Reason: 1}
			continue
		case err != nil:
			errs = append(errs, fmt.Errorf("%s on %s: %w", s.Name(), c.Name, err))
			continue
		}
		tot.Cases, tot.Probes = 1, len(c.Probes)
		for p := range c.Probes {
			switch {
			case got[p].Skip:
				tot.Skipped++
			case got[p].Delivered != want[p].Delivered:
				tot.Failed++
				bad = append(bad, Mismatch{Case: c, Probe: p, Source: s.Name(), RefName: ref.Name(), Ref: want[p], Got: got[p]})
			default:
				tot.Passed++
				if pkt, err := decode(c, c.Probes[p]); err == nil && Forwarded(pkt, c.Probes[p]) == "" {
					tot.Chain++
				}
			}
		}
	}
	return bad, tots, errors.Join(errs...)
}

// Minimize removes the rules of m's case, one at a time, as long as the
// source still disagrees with the reference on m's probe, and returns the
// smallest mismatch found.
func Minimize(m Mismatch, ref, src Source) Mismatch {
	opts := m.Case.options()
	opts.Probes = [][]byte{m.Case.Probes[m.Probe]}
	cur := m
	for {
		lines, rls := opts.ruleLines()
		shrunk := false
		for j := len(rls) - 1; j >= 0; j-- {
			try := opts
			try.Rules = without(lines, rls[j])
			c, err := NewCase(try)
			if err != nil {
				continue // the rule was needed to lower (or load) the rest
			}
			bad, _, err := Compare(c, ref, src)
			if err != nil || len(bad) == 0 {
				continue
			}
			opts, cur, shrunk = try, bad[0], true
			break
		}
		if !shrunk {
			return cur
		}
	}
}

// String is the reproduction of a mismatch: the rule set, the packet and
// both outcomes.
func (m Mismatch) String() string {
	var b strings.Builder
	frame := m.Case.Probes[m.Probe]
	fmt.Fprintf(&b, "mismatch in %s, probe %d (in %s, out %s):\n", m.Case.Name, m.Probe, m.Case.InIface, m.Case.OutIface)
	fmt.Fprintf(&b, "  packet: %s\n", Summary(m.Case, frame))
	fmt.Fprintf(&b, "  frame:  %s\n", hex.EncodeToString(frame))
	fmt.Fprintf(&b, "  %-10s %s\n", m.RefName+":", m.Ref)
	fmt.Fprintf(&b, "  %-10s %s\n", m.Source+":", m.Got)
	fmt.Fprintf(&b, "  rules:\n")
	for _, l := range strings.SplitAfter(string(m.Case.Rules), "\n") {
		if l != "" {
			b.WriteString("    " + l)
		}
	}
	return b.String()
}

// Summary describes a probe in one line, as the firewall decodes it.
func Summary(c *Case, frame []byte) string {
	pkt, err := decode(c, frame)
	if err != nil {
		return err.Error()
	}
	if pkt.NotIP {
		return fmt.Sprintf("not IP, %d bytes", len(frame))
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s > %s proto %d len %d ttl %d", pkt.Family, pkt.Src, pkt.Dst, pkt.Proto, pkt.Length, pkt.TTL)
	if pkt.FragOffset != 0 || pkt.MoreFragments {
		fmt.Fprintf(&b, " frag %d", pkt.FragOffset)
		if pkt.MoreFragments {
			b.WriteString("+")
		}
	}
	switch {
	case pkt.FragOffset != 0:
	case pkt.Proto == 6 || pkt.Proto == 17 || pkt.Proto == 132 || pkt.Proto == 33 || pkt.Proto == 136:
		fmt.Fprintf(&b, " ports %d > %d", pkt.SrcPort, pkt.DstPort)
		if pkt.Proto == 6 {
			fmt.Fprintf(&b, " flags %#02x", pkt.TCPFlags)
		}
	case pkt.Proto == 1 && pkt.Family == rules.IPv4, pkt.Proto == 58 && pkt.Family == rules.IPv6:
		fmt.Fprintf(&b, " type %d code %d", pkt.ICMPType, pkt.ICMPCode)
	}
	fmt.Fprintf(&b, " l4len %d", pkt.L4Len)
	if pkt.BadExtHeaders {
		b.WriteString(" bad-ext-headers")
	}
	if pkt.Invalid != "" {
		fmt.Fprintf(&b, " invalid (%s)", pkt.Invalid)
	}
	if pkt.PktType != model.PacketHost {
		fmt.Fprintf(&b, " %s", pkt.PktType)
	}
	return b.String()
}

// Coverage says how many of a program's rules the probes exercise.
type Coverage struct {
	Rules int
	// Decided counts the rules that decide (ir.Eval's Result.Rule) some
	// probe that reaches the chain; Matched those whose matches all hold
	// for one (the rules whose counters the kernel increments), jumps and
	// rules without a target included.
	Decided, Matched int
}

func (c *Coverage) Add(d Coverage) {
	c.Rules += d.Rules
	c.Decided += d.Decided
	c.Matched += d.Matched
}

func (c Coverage) String() string {
	pct := func(n int) float64 { return 100 * float64(n) / float64(max(c.Rules, 1)) }
	return fmt.Sprintf("%d of %d rules (%.1f%%) decide a probe, %d (%.1f%%) match one",
		c.Decided, c.Rules, pct(c.Decided), c.Matched, pct(c.Matched))
}

// MeasureCoverage returns the coverage of c's program by probes.
func MeasureCoverage(c *Case, probes [][]byte) Coverage {
	decided := make(map[*ir.Rule]bool)
	matched := make(map[*ir.Rule]bool)
	for _, f := range probes {
		pkt, err := decode(c, f)
		if err != nil || Forwarded(pkt, f) != "" {
			continue
		}
		res := c.Program.Trace(pkt, func(r *ir.Rule) { matched[r] = true })
		if res.Rule != nil {
			decided[res.Rule] = true
		}
	}
	return Coverage{Rules: len(c.Program.Rules), Decided: len(decided), Matched: len(matched)}
}
