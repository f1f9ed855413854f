package ir

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"reflect"
	"runtime"
	"slices"
	"strings"
	"testing"
	"unsafe"

	"bpfwall/parser/iptables"
)

// TestAggregateEntries checks that aggregated sets decide every address as
// the original does, on random sets of nested prefixes with nomatch
// entries, at every entry's first and last address and random ones.
func TestAggregateEntries(t *testing.T) {
	decide := func(es []SetEntry, a netip.Addr) bool {
		best, in := -1, false
		for _, e := range es {
			if e.Prefix.Bits() > best && e.Prefix.Contains(a) {
				best, in = e.Prefix.Bits(), !e.NoMatch
			}
		}
		return in
	}
	shrunk := 0
	for seed := range uint64(500) {
		rng := rand.New(rand.NewPCG(seed, 7))
		seen := make(map[netip.Prefix]bool)
		var es []SetEntry
		for range 1 + rng.IntN(30) {
			a := netip.AddrFrom4([4]byte{10, byte(rng.IntN(4)), byte(rng.IntN(4)), byte(rng.IntN(256))})
			p := netip.PrefixFrom(a, 14+rng.IntN(19)).Masked()
			if !seen[p] {
				seen[p] = true
				es = append(es, SetEntry{Prefix: p, NoMatch: rng.IntN(3) == 0})
			}
		}
		got := aggregateEntries(es)
		if len(got) < len(es) {
			shrunk++
		}
		var probes []netip.Addr
		for _, e := range es {
			last := e.Prefix.Addr().As4()
			host := uint32(1)<<(32-e.Prefix.Bits()) - 1
			for i := range 4 {
				last[i] |= byte(host >> (24 - 8*i))
			}
			probes = append(probes, e.Prefix.Addr(), e.Prefix.Addr().Prev(), netip.AddrFrom4(last), netip.AddrFrom4(last).Next())
		}
		for range 200 {
			probes = append(probes, netip.AddrFrom4([4]byte{10, byte(rng.IntN(4)), byte(rng.IntN(4)), byte(rng.IntN(256))}))
		}
		for _, a := range probes {
			if decide(es, a) != decide(got, a) {
				t.Fatalf("seed %d: %s is %v in %v, %v in the aggregated %v", seed, a, decide(es, a), es, decide(got, a), got)
			}
		}
	}
	if shrunk < 100 {
		t.Errorf("only %d of 500 sets shrank", shrunk)
	}
}

// TestFormsParallel: Forms, on a chain large enough to be split between
// CPUs, leaves every rule with its form computed, and the form is the
// one the rule's NormalizeResidual gives alone.
func TestFormsParallel(t *testing.T) {
	var b strings.Builder
	b.WriteString("*filter\n:INPUT DROP [0:0]\n:FORWARD ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n")
	const n = 5 * parallelForms
	for i := range n {
		a := netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)})
		switch i % 3 {
		case 0:
			fmt.Fprintf(&b, "-A INPUT -s %s/%d -p tcp -m tcp --dport %d:%d -j DROP\n", a, 24+i%9, i%1000, 1000+i%5000)
		case 1:
			fmt.Fprintf(&b, "-A INPUT -d %s -p udp -m multiport --dports 53,1000:2000 -j ACCEPT\n", a)
		default:
			fmt.Fprintf(&b, "-A INPUT ! -s %s -p icmp -m icmp --icmp-type 8 -j DROP\n", a)
		}
	}
	b.WriteString("COMMIT\n")
	p := lowerChain(t, "forms", b.String(), "INPUT")
	if runtime.GOMAXPROCS(0) < 2 {
		t.Logf("one CPU: Forms computes the forms in turn")
	}
	chain := p.Chains[0].Rules
	p.Forms(chain)
	for _, r := range chain {
		if p.forms[r.ID] == nil {
			t.Fatalf("rule %d: no form after Forms", r.ID)
		}
		// Every form is read after all are made: a form whose tuples
		// another overwrote in the arena differs.
		f, ok := p.Form(r)
		want, wantOK := p.NormalizeResidual(r, formLimit)
		if ok != wantOK || !sameForm(f, want) {
			t.Fatalf("rule %d: Forms gave %+v (%v), NormalizeResidual %+v (%v)", r.ID, f, ok, want, wantOK)
		}
	}
	// Forgotten forms keep nothing, and come back the same.
	p.ForgetForms(chain)
	for _, r := range chain {
		if p.forms[r.ID] != nil {
			t.Fatalf("rule %d: its form stays after ForgetForms", r.ID)
		}
		f, ok := p.Form(r)
		want, wantOK := p.NormalizeResidual(r, formLimit)
		if ok != wantOK || !sameForm(f, want) {
			t.Fatalf("rule %d: Form after ForgetForms gave %+v (%v), NormalizeResidual %+v (%v)", r.ID, f, ok, want, wantOK)
		}
	}
}

// sameForm reports whether two forms are equal, a nil slice equal to an
// empty one.
func sameForm(a, b Form) bool {
	return slices.Equal(a.Tuples, b.Tuples) && slices.Equal(a.PreProto, b.PreProto) && slices.Equal(a.PreL4, b.PreL4) &&
		len(a.Residual) == len(b.Residual) && (len(a.Residual) == 0 || reflect.DeepEqual(a.Residual, b.Residual)) &&
		a.Proto == b.Proto && a.L4Len == b.L4Len && a.Tiny == b.Tiny &&
		a.ResidualPreProto == b.ResidualPreProto && a.ResidualPreL4 == b.ResidualPreL4
}

// TestCutHasher checks the shadow pass's probe: a tuple hashes, by the
// hasher of a shape it fits, as its cut to that shape does by the
// shape's; and tuples whose cuts differ hash apart.
func TestCutHasher(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	random := func() Tuple {
		var u Tuple
		for i := range u.value {
			u.value[i] = byte(rng.Uint32())
		}
		u.Len = [NumFields]uint8{128, 128, 8, 16, 16}
		return u.Cut([NumFields]uint8{uint8(rng.IntN(129)), uint8(rng.IntN(129)), uint8(8 * rng.IntN(2)), uint8(rng.IntN(17)), uint8(rng.IntN(17))})
	}
	const seed = 42
	hashes := make(map[uint64]Tuple)
	for range 20000 {
		u := random()
		var lens [NumFields]uint8
		for f := range NumFields {
			lens[f] = uint8(rng.IntN(int(u.Len[f]) + 1))
		}
		cut := u.Cut(lens)
		by, own := newCutHasher(lens), newCutHasher(cut.Len)
		h := by.hash(&u, seed)
		if own := own.hash(&cut, seed); h != own {
			t.Fatalf("%v cut to %v hashes %#x; the cut, %v, hashes %#x", u, lens, h, cut, own)
		}
		if prev, ok := hashes[h]; ok && prev != cut {
			t.Fatalf("%v and %v both hash %#x", prev, cut, h)
		}
		hashes[h] = cut
	}
}

// TestLoweredMatchesShareBlocks: the rules' match slices and the rules
// come from blocks the lowerer shares; each slice ends at its own
// length, so that appending to one rule's matches leaves the next rule's
// alone.
func TestLoweredMatchesShareBlocks(t *testing.T) {
	src := "*filter\n:INPUT DROP [0:0]\n:FORWARD ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n" +
		"-A INPUT -s 10.0.0.1 -p tcp -m tcp --dport 22 -j ACCEPT\n-A INPUT -s 10.0.0.2 -p udp -m udp --dport 53 -j ACCEPT\n-A INPUT -j DROP\nCOMMIT\n"
	p := lowerChain(t, "blocks", src, "INPUT")
	first, second := p.Rules[0], p.Rules[1]
	if len(first.Matches) != cap(first.Matches) {
		t.Fatalf("rule 0's matches: length %d, capacity %d", len(first.Matches), cap(first.Matches))
	}
	want := slices.Clone(second.Matches)
	_ = append(first.Matches, Fragment{})
	if !reflect.DeepEqual(second.Matches, want) {
		t.Errorf("appending to rule 0's matches changed rule 1's: %v, want %v", second.Matches, want)
	}
	if p.Rules[2].Matches == nil || len(p.Rules[2].Matches) != 0 {
		t.Errorf("a rule without matches has %#v, want an empty slice", p.Rules[2].Matches)
	}
	for i, r := range p.Rules {
		if r.ID != i {
			t.Errorf("rule %d has ID %d", i, r.ID)
		}
	}
}

// TestShadowedFormsForgotten: the rules the shadow pass takes out keep no
// cached form (scattered over the heap, they pinned the memory the other
// forms freed when planned), and the rules it leaves keep theirs.
func TestShadowedFormsForgotten(t *testing.T) {
	src := "*filter\n:INPUT ACCEPT [0:0]\n:FORWARD ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n" +
		"-A INPUT -s 10.0.0.0/8 -j DROP\n" +
		"-A INPUT -s 10.1.0.0/16 -p tcp -m tcp --dport 22 -j DROP\n" +
		"-A INPUT -s 192.0.2.1/32 -j ACCEPT\n" +
		"-A INPUT -s 10.2.3.4/32 -j ACCEPT\n" +
		"COMMIT\n"
	p := lowerChain(t, "shadow", src, "INPUT")
	q, err := Optimize(p, OptimizeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(q.Removed) != 2 {
		t.Fatalf("removed %d rules, want the 2 that 10.0.0.0/8 covers: %v", len(q.Removed), q.Removed)
	}
	for _, rm := range q.Removed {
		if rm.Rule.ID < len(q.forms) && q.forms[rm.Rule.ID] != nil {
			t.Errorf("rule %d, taken out, keeps its form", rm.Rule.ID)
		}
	}
	for _, r := range q.Chains[0].Rules {
		if q.forms[r.ID] == nil {
			t.Errorf("rule %d, kept, has no form", r.ID)
		}
	}
}

// TestIfaceNumbers: each direction's exact names, not negated, are
// numbered from 1 in rule order and are a field of the rule's tuples;
// then its prefixes that no device can match as well as a numbered
// pattern. A negation stays residual, and so do a prefix that overlaps a
// numbered pattern and a name past the 63rd.
func TestIfaceNumbers(t *testing.T) {
	var b strings.Builder
	b.WriteString("*filter\n:INPUT ACCEPT [0:0]\n:FORWARD ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n")
	b.WriteString("-A FORWARD -i eth1 -o eth2 -j DROP\n-A FORWARD ! -i eth3 -j DROP\n-A FORWARD -i eth+ -j DROP\n-A FORWARD -i eth1 -s 10.0.0.1 -j ACCEPT\n-A FORWARD -i eth4 -j DROP\n")
	for i := range 70 {
		fmt.Fprintf(&b, "-A FORWARD -o v%d -j DROP\n", i)
	}
	// Rules 75 on: prefixes, and an exact name after them.
	for _, in := range []string{"vl1x+", "vl2x+", "vl+", "ppp0", "ppp+", "vl1x", "+"} {
		fmt.Fprintf(&b, "-A FORWARD -i %s -j DROP\n", in)
	}
	b.WriteString("COMMIT\n")
	p := lowerChain(t, "ifaces", b.String(), "FORWARD")
	wantIn := []IfacePattern{{"eth1", false}, {"eth4", false}, {"ppp0", false}, {"vl1x", false}, {"vl2x", true}}
	if got := p.IfacePatterns(IfaceIn); !slices.Equal(got, wantIn) {
		t.Errorf("input patterns %v, want %v", got, wantIn)
	}
	if got := p.IfacePatterns(IfaceOut); len(got) != maxIfaceNumbers || got[0] != (IfacePattern{"eth2", false}) || got[62] != (IfacePattern{"v61", false}) {
		t.Errorf("output patterns %v: want eth2, then v0 to v61", got)
	}
	rules := p.Chains[0].Rules
	field := func(r *Rule, f Field) (uint8, uint8, int) {
		form, ok := p.Form(r)
		if !ok || len(form.Tuples) != 1 {
			t.Fatalf("rule %d: form %+v, %v", r.ID, form, ok)
		}
		return form.Tuples[0].Field(f)[0], form.Tuples[0].Len[f], len(form.Residual)
	}
	for _, tc := range []struct {
		rule      int
		f         Field
		value     uint8
		bits      uint8
		residuals int
	}{
		{0, FieldIn, 1, 8, 0}, {0, FieldOut, 1, 8, 0},
		{1, FieldIn, 0, 0, 1}, // ! -i eth3
		{2, FieldIn, 0, 0, 1}, // -i eth+
		{3, FieldIn, 1, 8, 0}, {4, FieldIn, 2, 8, 0},
		{5, FieldOut, 2, 8, 0},   // v0
		{66, FieldOut, 63, 8, 0}, // v61
		{67, FieldOut, 0, 0, 1},  // v62: past the 63rd name
		{75, FieldIn, 0, 0, 1},   // vl1x+: vl1x, numbered before it, matches it too
		{76, FieldIn, 5, 8, 0},   // vl2x+
		{77, FieldIn, 0, 0, 1},   // vl+: overlaps vl2x+
		{78, FieldIn, 3, 8, 0},   // ppp0
		{79, FieldIn, 0, 0, 1},   // ppp+: overlaps ppp0
		{80, FieldIn, 4, 8, 0},   // vl1x
		{81, FieldIn, 0, 0, 0},   // +: every device, no test at all
	} {
		v, l, res := field(rules[tc.rule], tc.f)
		if v != tc.value || l != tc.bits || res != tc.residuals {
			t.Errorf("rule %d: %s %d/%d with %d residual matches, want %d/%d with %d", tc.rule, tc.f, v, l, res, tc.value, tc.bits, tc.residuals)
		}
	}
}

// TestMergePorts checks that merge-ports merges ranges that overlap or
// touch, on a copy of the rule, and leaves a rule whose ranges are apart
// as it is, unsorted and not copied.
func TestMergePorts(t *testing.T) {
	src := `*filter
:INPUT ACCEPT [0:0]
-A INPUT -p tcp -m multiport --dports 443,80,22 -j DROP
-A INPUT -p tcp -m multiport --dports 81,80,1000:2000,1500,7 -j DROP
-A INPUT -p udp -m multiport --sports 53:60,61 -j DROP
COMMIT
`
	p := lowerChain(t, "ports", src, "INPUT")
	ranges := func(r *Rule) string {
		for _, m := range r.Matches {
			if m, ok := m.(Ports); ok {
				return fmt.Sprint(m.Ranges)
			}
		}
		return "none"
	}
	before := make([]string, len(p.Rules))
	for i, r := range p.Rules {
		before[i] = ranges(r)
	}
	q := p.Clone()
	mergePorts(q)
	for i, want := range []struct {
		ranges string
		copied bool
	}{
		{"[{443 443} {80 80} {22 22}]", false},
		{"[{7 7} {80 81} {1000 2000}]", true},
		{"[{53 61}]", true},
	} {
		if got := ranges(q.Rules[i]); got != want.ranges {
			t.Errorf("rule %d: ranges %s, want %s", i, got, want.ranges)
		}
		if copied := q.Rules[i] != p.Rules[i]; copied != want.copied {
			t.Errorf("rule %d: copied %v, want %v", i, copied, want.copied)
		}
		if got := ranges(p.Rules[i]); got != before[i] {
			t.Errorf("rule %d: the original's ranges changed: %s -> %s", i, before[i], got)
		}
	}
}

// TestLowerSharesBoxes: the interface and one-range ports matches of
// different rules that are equal are one boxed value, and those that
// differ are not.
func TestLowerSharesBoxes(t *testing.T) {
	src := `*filter
:INPUT ACCEPT [0:0]
-A INPUT -i eth0 -p tcp -m tcp --dport 22 -j ACCEPT
-A INPUT -i eth0 -p tcp -m tcp --dport 22 -s 10.0.0.1 -j DROP
-A INPUT ! -i eth0 -p udp -m udp --dport 22 -j DROP
-A INPUT -i eth0 -p tcp -m tcp ! --dport 22 -j DROP
COMMIT
`
	p := lowerChain(t, "boxes", src, "INPUT")
	// box is where an interface value's dynamic value is.
	box := func(m Match) unsafe.Pointer { return (*[2]unsafe.Pointer)(unsafe.Pointer(&m))[1] }
	find := func(r *Rule, kind reflect.Type) unsafe.Pointer {
		for _, m := range r.Matches {
			if reflect.TypeOf(m) == kind {
				return box(m)
			}
		}
		t.Fatalf("rule %d has no %s match", r.ID, kind)
		return nil
	}
	ports, iface := reflect.TypeFor[Ports](), reflect.TypeFor[Iface]()
	for _, c := range []struct {
		kind  reflect.Type
		a, b  int
		share bool
	}{
		{ports, 0, 1, true}, {iface, 0, 1, true}, {iface, 0, 3, true},
		{ports, 0, 2, true}, // udp and tcp alike: dport 22
		{iface, 0, 2, false}, {ports, 0, 3, false},
	} {
		if share := find(p.Rules[c.a], c.kind) == find(p.Rules[c.b], c.kind); share != c.share {
			t.Errorf("rules %d and %d share their %s match: %v, want %v", c.a, c.b, c.kind, share, c.share)
		}
	}
}

// lowerChain lowers chain of the filter table of the rule set src, read
// from file.
func lowerChain(t *testing.T, file, src, chain string) *Program {
	t.Helper()
	rs, err := iptables.Parse(file, []byte(src), iptables.Options{})
	if err != nil {
		t.Fatal(err)
	}
	p, err := Lower(rs, LowerOptions{Table: "filter", Chain: chain})
	if err != nil {
		t.Fatal(err)
	}
	return p
}
