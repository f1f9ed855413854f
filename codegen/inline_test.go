package codegen_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"bpfwall/codegen"
	"bpfwall/internal/testenv"
	"bpfwall/rules"
)

// manyChains returns a rule set with n user chains, one per address as
// generators write them, each jumped to from callers rules (RETURN and
// nesting inside).
func manyChains(n, callers int) string {
	var b strings.Builder
	b.WriteString("*filter\n:INPUT ACCEPT [0:0]\n:FORWARD ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n")
	for i := range n {
		fmt.Fprintf(&b, ":host%d - [0:0]\n:host%d_tcp - [0:0]\n", i, i)
	}
	for i := range n {
		for k := range callers {
			fmt.Fprintf(&b, "-A INPUT -s 10.%d.%d.%d -j host%d\n", k, i>>8, i&0xff, i)
		}
		fmt.Fprintf(&b, "-A host%d -p udp -j RETURN\n-A host%d -p tcp -j host%d_tcp\n-A host%d -j DROP\n", i, i, i, i)
		fmt.Fprintf(&b, "-A host%d_tcp -p tcp -m tcp --dport %d -j ACCEPT\n-A host%d_tcp -p tcp -m tcp --dport 22 -j RETURN\n-A host%d_tcp -j REJECT\n", i, 1000+i, i, i)
	}
	b.WriteString("COMMIT\n")
	return b.String()
}

// TestManyChains: 600 user chains, past the 256 functions a BPF program
// may have, load when each is jumped to from one rule (inlined), and are
// refused at the rule that jumps to the first chain over the limit when
// several rules jump to each.
func TestManyChains(t *testing.T) {
	testenv.RequireRoot(t)
	ns := newNetns(t)
	for _, level := range codegen.Levels {
		p, err := compileChain(t, manyChains(300, 1), rules.IPv4, "INPUT", codegen.HookXDP, level)
		if err != nil {
			t.Fatalf("%v: %v", level, err)
		}
		var d strings.Builder
		if err := p.Dump(&d); err != nil || !strings.Contains(d.String(), "chain host299_tcp, inlined") {
			t.Fatalf("%v: no chain inlined", level)
		}
		checkProgram(t, p, ns, 7, packetsPerProgram)
	}
	_, err := compileChain(t, manyChains(300, 2), rules.IPv4, "INPUT", codegen.HookXDP, codegen.O1)
	if err == nil || !strings.Contains(err.Error(), "more than the 200 a BPF program may have") {
		t.Fatalf("chains each jumped to twice: %v, want a refusal", err)
	}
	if e := (*rules.Error)(nil); !errors.As(err, &e) || e.Pos.Line == 0 {
		t.Errorf("the refusal %v has no position", err)
	}
	t.Log(err)
}
