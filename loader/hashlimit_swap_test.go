package loader

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cilium/ebpf"

	"bpfwall/codegen"
	"bpfwall/internal/packets"
	"bpfwall/ir"
)

// TestHashLimitSurvivesSwap: as xt_hashlimit's table survives
// iptables-restore while a new rule names it (checked against the
// kernel by difftest's TestHashLimitAcrossRestore), a swap hands the
// running filter's table, with its spent buckets and its sweep time, to
// the new program, where upto/above comes from the new rule; a
// configuration the kernel would keep from the running table is refused
// at the new rule, as is a name another hook's filter of the family
// uses; another name starts empty, and a table no rule names goes.
func TestHashLimitSurvivesSwap(t *testing.T) {
	ns := inFreshNetns(t)
	place := testPlace(t, ns, codegen.HookXDP)
	// One key per source; a full table of 2 keys.
	const opts = "--hashlimit-burst 3 --hashlimit-mode srcip --hashlimit-htable-size 2 --hashlimit-htable-max 2"
	upto := func(name string) string {
		return "-p udp -m udp --dport 53 -m hashlimit --hashlimit-upto 1/hour " + opts + " --hashlimit-name " + name + " -j ACCEPT"
	}
	drop := "-p udp -j DROP"
	src := func(a string) []byte {
		f, err := packets.Desc{Proto: "udp", Src: a, DPort: 53}.Frame()
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	a, b, c := src("10.0.0.1"), src("10.0.0.2"), src("10.0.0.3")
	verdict := func(f []byte) ir.Verdict { return pinnedVerdict(t, place, f) }
	burst := func(f []byte) (n int) {
		for range 5 {
			if verdict(f) == ir.VerdictAccept {
				n++
			}
		}
		return n
	}
	sweep := func() uint64 {
		m, err := ebpf.LoadPinnedMap(filepath.Join(place.Dir(), pinHashGC), nil)
		if err != nil {
			t.Fatal(err)
		}
		defer m.Close()
		var v uint64
		if err := m.Lookup(uint32(0), &v); err != nil {
			t.Fatal(err)
		}
		return v
	}

	mustSwap(t, newSwap(t, place, ruleset(codegen.HookXDP, upto("H"), drop), "veth0"))
	if n := burst(a); n != 3 {
		t.Fatalf("source a: %d of 5 accepted, want its burst of 3", n)
	}
	burst(b)
	// A third key finds the table full: a sweep (nothing has expired),
	// whose time the table keeps, and a hotdrop.
	if v := verdict(c); v != ir.VerdictDrop {
		t.Fatalf("a third key in a full table: %v", v)
	}
	next := sweep()
	if next == 0 {
		t.Fatal("no sweep time after a full table's sweep")
	}

	// The same table in another rule set: a's bucket is still empty.
	mustSwap(t, newSwap(t, place, ruleset(codegen.HookXDP, "-p tcp -m tcp --dport 80 -j DROP", upto("H"), drop)))
	if n := burst(a); n != 0 {
		t.Errorf("after a swap that keeps the table: source a %d of 5 accepted, want 0", n)
	}
	if got := sweep(); got != next {
		t.Errorf("sweep time after the swap: %d, want the running table's %d", got, next)
	}

	// --hashlimit-above is the rule's own: it matches a's empty bucket.
	above := strings.Replace(strings.Replace(upto("H"), "-upto", "-above", 1), "ACCEPT", "DROP", 1)
	mustSwap(t, newSwap(t, place, ruleset(codegen.HookXDP, above)))
	if v := verdict(a); v != ir.VerdictDrop {
		t.Errorf("above on the kept table: source a %v, want DROP", v)
	}

	// A burst the kernel would not take from the new rule: refused at it,
	// the filter unchanged.
	other := strings.Replace(upto("H"), "--hashlimit-burst 3", "--hashlimit-burst 4", 1)
	_, err := newSwap(t, place, ruleset(codegen.HookXDP, other, drop)).Run()
	if err == nil || !strings.Contains(err.Error(), `test.rules:5:`) || !strings.Contains(err.Error(), "--hashlimit-burst 3 where these rules say 4") {
		t.Errorf("swap to another burst: %v", err)
	}
	if v := verdict(a); v != ir.VerdictDrop {
		t.Errorf("after a refused swap: source a %v, want DROP", v)
	}

	// The same name on another hook's filter of the family: refused.
	tc := testPlace(t, ns, codegen.HookTCIngress)
	if _, err := newSwap(t, tc, ruleset(codegen.HookTCIngress, upto("H")), "veth1").Run(); err == nil || !strings.Contains(err.Error(), `hashlimit table "H" is also used by the xdp filter`) {
		t.Errorf("a second filter naming H: %v", err)
	}

	// Another name: a new, empty table.
	mustSwap(t, newSwap(t, place, ruleset(codegen.HookXDP, upto("G"), drop)))
	if n := burst(a); n != 3 {
		t.Errorf("a table of another name: source a %d of 5 accepted, want 3", n)
	}
	if got := sweep(); got != 0 {
		t.Errorf("a new table's sweep time: %d", got)
	}

	// No rule names a table: the pins go.
	mustSwap(t, newSwap(t, place, ruleset(codegen.HookXDP, drop)))
	for _, pin := range []string{hashlimitPin(0), pinHashGC} {
		if _, err := os.Stat(filepath.Join(place.Dir(), pin)); !os.IsNotExist(err) {
			t.Errorf("pin %s after a swap without hashlimit: %v", pin, err)
		}
	}
	mustSwap(t, newSwap(t, place, ruleset(codegen.HookXDP, upto("G"), drop)))
	if n := burst(a); n != 3 {
		t.Errorf("a table named again starts empty: source a %d of 5 accepted, want 3", n)
	}
	if _, err := Unload(place, nil); err != nil {
		t.Fatal(err)
	}
}
