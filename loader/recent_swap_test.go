package loader

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cilium/ebpf"

	"bpfwall/codegen"
	"bpfwall/ir"
)

// TestRecentSurvivesSwap: as xt_recent's table survives iptables-restore
// while a new rule names it, a swap hands the running filter's recent
// table to the new program; a longer ring starts it anew (the kernel
// flushes it), a table no rule names goes, and a mask the kernel would
// not take from the new rules, or a table another hook's filter names,
// is refused.
func TestRecentSurvivesSwap(t *testing.T) {
	ns := inFreshNetns(t)
	place := testPlace(t, ns, codegen.HookXDP)
	set := "-p udp -m udp --dport 53 -m recent --set --name S"
	check := "-p tcp -m tcp --dport 22 -m recent --rcheck --name S -j DROP"
	tcp22, udp53 := frame(t, "tcp", 22), frame(t, "udp", 53)
	verdict := func(f []byte) ir.Verdict { return pinnedVerdict(t, place, f) }

	mustSwap(t, newSwap(t, place, ruleset(codegen.HookXDP, set, check), "veth0"))
	if v := verdict(tcp22); v != ir.VerdictAccept {
		t.Fatalf("before the set: tcp/22 %v", v)
	}
	verdict(udp53)
	if v := verdict(tcp22); v != ir.VerdictDrop {
		t.Fatalf("after the set: tcp/22 %v", v)
	}
	a, err := Open(place)
	if err != nil {
		t.Fatal(err)
	}
	tables, err := a.RecentTables()
	a.Close()
	if err != nil || len(tables) != 1 || tables[0] != (RecentTableState{Name: "S", Entries: 1}) {
		t.Errorf("status of the recent tables: %+v, %v", tables, err)
	}

	// Another rule set naming S: the entry is still there.
	mustSwap(t, newSwap(t, place, ruleset(codegen.HookXDP, "-p tcp -m tcp --dport 80 -j DROP", check, set)))
	if v := verdict(tcp22); v != ir.VerdictDrop {
		t.Errorf("after a swap that keeps the table: tcp/22 %v, want DROP", v)
	}

	// A mask the kernel would not take: refused, the filter unchanged.
	masked := strings.ReplaceAll(check, "--name S", "--name S --mask 255.255.255.0")
	if _, err := newSwap(t, place, ruleset(codegen.HookXDP, masked, strings.ReplaceAll(set, "--name S", "--name S --mask 255.255.255.0"))).Run(); err == nil || !strings.Contains(err.Error(), "--mask 255.255.255.255, which the kernel keeps") {
		t.Errorf("swap to another mask: %v", err)
	}
	if v := verdict(tcp22); v != ir.VerdictDrop {
		t.Errorf("after a refused swap: tcp/22 %v, want DROP", v)
	}

	// The same name on another hook's filter: refused.
	other := testPlace(t, ns, codegen.HookTCIngress)
	if _, err := newSwap(t, other, ruleset(codegen.HookTCIngress, check), "veth1").Run(); err == nil || !strings.Contains(err.Error(), `recent table "S" is also used by the xdp filter`) {
		t.Errorf("a second filter naming S: %v", err)
	}
	// A damaged filter (its Meta's pin gone) may name S too: refused, not
	// passed over.
	meta := filepath.Join(place.Dir(), pinMeta)
	metaMap, err := ebpf.LoadPinnedMap(meta, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer metaMap.Close()
	if err := metaMap.Unpin(); err != nil {
		t.Fatal(err)
	}
	if _, err := newSwap(t, other, ruleset(codegen.HookTCIngress, check), "veth1").Run(); err == nil || !strings.Contains(err.Error(), "the xdp filter of the namespace cannot be read") {
		t.Errorf("a second filter naming S beside a damaged one: %v", err)
	}
	if err := metaMap.Pin(meta); err != nil {
		t.Fatal(err)
	}

	// A rule that needs 64 stamps: the kernel flushes the table.
	grow := "-p tcp -m tcp --dport 23 -m recent --rcheck --hitcount 40 --name S -j ACCEPT"
	mustSwap(t, newSwap(t, place, ruleset(codegen.HookXDP, check, grow, set)))
	if v := verdict(tcp22); v != ir.VerdictAccept {
		t.Errorf("after the ring grew: tcp/22 %v, want ACCEPT (a flushed table)", v)
	}
	verdict(udp53)
	if v := verdict(tcp22); v != ir.VerdictDrop {
		t.Errorf("after a set in the grown table: tcp/22 %v, want DROP", v)
	}

	// No rule names S: its pin goes.
	mustSwap(t, newSwap(t, place, ruleset(codegen.HookXDP, "-p tcp -m tcp --dport 80 -j DROP")))
	if _, err := os.Stat(filepath.Join(place.Dir(), recentPin(0))); !os.IsNotExist(err) {
		t.Errorf("the table's pin after a swap that drops it: %v", err)
	}
	mustSwap(t, newSwap(t, place, ruleset(codegen.HookXDP, check, set)))
	if v := verdict(tcp22); v != ir.VerdictAccept {
		t.Errorf("a table named again starts empty: tcp/22 %v, want ACCEPT", v)
	}
	if _, err := Unload(place, nil); err != nil {
		t.Fatal(err)
	}
}
