package nft

import (
	"strings"
	"testing"

	"bpfwall/ir"
)

// TestNeutralNAT: a nat base chain that cannot drop, and rewrites nothing
// a later base chain of its hook matches, is left out of the hook's model;
// any other nat chain makes lowering refuse the hook.
func TestNeutralNAT(t *testing.T) {
	const filter = "table ip f {\n\tchain in { type filter hook input priority 0; policy accept; tcp dport 22 drop; }\n\tchain out { type filter hook output priority 0; policy accept; tcp dport 22 drop; }\n}\n"
	for _, tc := range []struct {
		name, nat, hook string
		refused         bool
	}{
		{"snat after filter", "chain c { type nat hook input priority 100; tcp dport 80 snat to 10.0.0.1; }", "INPUT", false},
		{"empty before filter", "chain c { type nat hook output priority -100; }", "OUTPUT", false},
		{"accept and jumps", "chain c { type nat hook input priority 100; tcp dport 80 jump d; accept; }\n\tchain d { udp dport 53 return; counter; }", "INPUT", false},
		{"dnat before filter", "chain c { type nat hook output priority -100; tcp dport 80 dnat to 10.0.0.1; }", "OUTPUT", true},
		{"a drop", "chain c { type nat hook input priority 100; udp dport 53 drop; }", "INPUT", true},
		{"a drop in a chain it reaches", "chain c { type nat hook input priority 100; jump d; }\n\tchain d { drop; }", "INPUT", true},
		{"a verdict map", "chain c { type nat hook input priority 100; tcp dport vmap { 80 : accept }; }", "INPUT", true},
		{"a drop policy", "chain c { type nat hook input priority 100; policy drop; }", "INPUT", true},
	} {
		src := filter + "table ip n {\n\t" + tc.nat + "\n}\n"
		rs, err := Parse("t", []byte(src), Options{})
		if err != nil {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		p, err := ir.Lower(rs, ir.LowerOptions{Table: "filter", Chain: tc.hook})
		switch {
		case tc.refused && (err == nil || !strings.Contains(err.Error(), "type nat base chain c")):
			t.Errorf("%s: lowering %s: %v, want the nat chain refused", tc.name, tc.hook, err)
		case !tc.refused && err != nil:
			t.Errorf("%s: lowering %s: %v", tc.name, tc.hook, err)
		case !tc.refused && len(p.Rules) != 1:
			t.Errorf("%s: %s has %d rules, want the filter chain's one:\n%s", tc.name, tc.hook, len(p.Rules), p)
		}
	}
}
