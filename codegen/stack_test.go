package codegen_test

import (
	"fmt"
	"strings"
	"testing"

	"bpfwall/codegen"
	"bpfwall/internal/testenv"
	"bpfwall/rules"
)

// nestedRules is a FORWARD chain that jumps through n user chains, the
// last of which LOGs: each chain's function is a frame on the stack.
func nestedRules(n int) string {
	var b strings.Builder
	b.WriteString("*filter\n:INPUT ACCEPT [0:0]\n:FORWARD ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n")
	for i := 1; i <= n; i++ {
		fmt.Fprintf(&b, ":C%d - [0:0]\n", i)
	}
	b.WriteString("-A FORWARD -m conntrack --ctstate ESTABLISHED -j ACCEPT\n-A FORWARD -p tcp -j C1\n")
	for i := 1; i <= n; i++ {
		fmt.Fprintf(&b, "-A C%d -s 10.0.%d.0/24 -j ACCEPT\n", i, i)
		if i < n {
			fmt.Fprintf(&b, "-A C%d -p tcp -m tcp --dport %d -j C%d\n", i, 1000+i, i+1)
		} else {
			fmt.Fprintf(&b, "-A C%d -m limit --limit 1/s -j LOG --log-prefix deep\n-A C%d -j DROP\n", i, i)
		}
	}
	b.WriteString("COMMIT\n")
	return b.String()
}

// TestParseInMainFitsTheStack: main holds the parser at a chain's
// netfilter hook, which makes its frame larger; where the chains then
// nest too deep for the 512 bytes of stack a call chain has, main calls
// parse instead, and the program loads.
func TestParseInMainFitsTheStack(t *testing.T) {
	testenv.RequireRoot(t)
	for _, tc := range []struct {
		nested    int
		callParse bool
	}{{1, false}, {4, true}} {
		p, err := compileChain(t, nestedRules(tc.nested), rules.IPv4, "FORWARD", codegen.HookNetfilter, codegen.O1)
		if err != nil {
			t.Fatal(err)
		}
		var dump strings.Builder
		if err := p.Dump(&dump); err != nil {
			t.Fatal(err)
		}
		if calls := strings.Contains(dump.String(), "call parse"); calls != tc.callParse {
			t.Errorf("%d nested chains: main calls parse: %v, want %v", tc.nested, calls, tc.callParse)
		}
		loadCollection(t, p)
	}
}

// TestChainsTooDeepForTheStack: five nested chains with a LOG at the
// bottom need 560 bytes of stack at the netfilter hook even with main
// calling parse, as the verifier counts it for a JITed program ("combined
// stack size of 7 calls is 560"). Compile refuses them at the jump that
// nests the deepest chain, where restore can leave the chain to the
// kernel, and not four, which load (TestParseInMainFitsTheStack).
func TestChainsTooDeepForTheStack(t *testing.T) {
	_, err := compileChain(t, nestedRules(5), rules.IPv4, "FORWARD", codegen.HookNetfilter, codegen.O1)
	list, ok := rules.AsErrorList(err)
	if !ok || len(list) != 1 {
		t.Fatalf("5 nested chains: %v, want one error at a rule", err)
	}
	// The jump to C5 is line 19: "-A C4 -p tcp -m tcp --dport 1004 -j C5".
	if e := list[0]; e.Pos.Line != 19 || !strings.Contains(e.Error(), "jump to C5 nests chains too deep for BPF's stack (FORWARD → C1 → C2 → C3 → C4 → C5)") ||
		!strings.Contains(e.Error(), "560 bytes") {
		t.Errorf("5 nested chains: %v", e)
	}
	if _, err := compileChain(t, nestedRules(4), rules.IPv4, "FORWARD", codegen.HookNetfilter, codegen.O1); err != nil {
		t.Errorf("4 nested chains: %v", err)
	}
}
