package codegen_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/cilium/ebpf"

	"bpfwall/codegen"
	"bpfwall/codegen/abi"
	"bpfwall/internal/testenv"
	"bpfwall/ir"
	"bpfwall/parser/iptables"
	"bpfwall/rules"
)

// linearRules returns an INPUT chain of n rules of a common shape, none of
// which matches the worst-case packet: the cost of -O0 grows with n.
func linearRules(n int, fam rules.Family) string {
	var b strings.Builder
	b.WriteString("*filter\n:INPUT DROP [0:0]\n:FORWARD ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n")
	for i := range n {
		if fam == rules.IPv6 {
			fmt.Fprintf(&b, "-A INPUT -s 2001:db8:%x::/48 -p tcp -m tcp --dport %d -j ACCEPT\n", i, 1+i%60000)
		} else {
			fmt.Fprintf(&b, "-A INPUT -s 10.%d.%d.0/24 -p tcp -m tcp --dport %d -j ACCEPT\n", i>>8&0xff, i&0xff, 1+i%60000)
		}
	}
	b.WriteString("COMMIT\n")
	return b.String()
}

// jumpyRules returns n rules spread over 32 user chains that the entry
// chain jumps to, each from n/64 places: chain functions are verified once
// however often they are called.
func jumpyRules(n int) string {
	const chains = 32
	var b strings.Builder
	b.WriteString("*filter\n:INPUT ACCEPT [0:0]\n:FORWARD ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n")
	for c := range chains {
		fmt.Fprintf(&b, ":C%d - [0:0]\n", c)
	}
	for i := range n / 2 {
		fmt.Fprintf(&b, "-A INPUT -s 10.%d.%d.0/24 -j C%d\n", i>>8&0xff, i&0xff, i%chains)
	}
	for i := range n / 2 {
		fmt.Fprintf(&b, "-A C%d -p udp -m udp --dport %d -j DROP\n", i%chains, 1+i)
	}
	b.WriteString("COMMIT\n")
	return b.String()
}

// compileText parses, lowers and compiles an INPUT chain.
func compileText(t testing.TB, src string, fam rules.Family, hook codegen.Hook) *codegen.Program {
	t.Helper()
	prog, err := compileTextErr(t, src, fam, hook)
	if err != nil {
		t.Fatal(err)
	}
	return prog
}

// compileTextErr is compileText that returns the compile error.
func compileTextErr(t testing.TB, src string, fam rules.Family, hook codegen.Hook) (*codegen.Program, error) {
	t.Helper()
	return compileChain(t, src, fam, "INPUT", hook, codegen.O0)
}

// compileChain parses, lowers and compiles a chain.
func compileChain(t testing.TB, src string, fam rules.Family, chain string, hook codegen.Hook, level codegen.Level) (*codegen.Program, error) {
	t.Helper()
	rs, err := iptables.Parse("rules", []byte(src), iptables.Options{Family: fam, ForceFamily: true})
	if err != nil {
		t.Fatal(err)
	}
	p, err := ir.Lower(rs, ir.LowerOptions{Chain: chain})
	if err != nil {
		t.Fatal(err)
	}
	return codegen.Compile(p, codegen.Options{Trace: true, Hook: hook, Level: level})
}

// TestVerifierScales loads -O0 programs of growing size and checks that
// the verifier's work stays proportional to the program's size.
func TestVerifierScales(t *testing.T) {
	testenv.RequireRoot(t)
	cases := []struct {
		name string
		src  string
		fam  rules.Family
	}{
		{"linear-1", linearRules(1, rules.IPv4), rules.IPv4},
		{"linear-32", linearRules(32, rules.IPv4), rules.IPv4},
		{"linear-1000", linearRules(1000, rules.IPv4), rules.IPv4},
		{"linear-8000", linearRules(8000, rules.IPv4), rules.IPv4},
		{"linear6-1000", linearRules(1000, rules.IPv6), rules.IPv6},
		{"jumps-1000", jumpyRules(1000), rules.IPv4},
		{"jumps-4000", jumpyRules(4000), rules.IPv4},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if testing.Short() && len(c.src) > 100_000 {
				t.Skip("a large program takes seconds to verify")
			}
			p := compileText(t, c.src, c.fam, codegen.HookXDP)
			insns := 0
			for _, ins := range p.Spec.Programs[abi.ProgramName].Instructions {
				insns += int(ins.Size() / 8)
			}
			coll, err := ebpf.NewCollection(p.Spec)
			if err != nil {
				t.Fatalf("load %d instructions: %v", insns, err)
			}
			defer coll.Close()
			info, err := coll.Programs[abi.ProgramName].Info()
			if err != nil {
				t.Fatal(err)
			}
			verified, ok := info.VerifiedInstructions()
			if !ok {
				t.Skip("the kernel does not report verified instructions")
			}
			t.Logf("%d rules: %d instructions, %d processed by the verifier (%.2f per instruction)",
				len(p.IR.Rules), insns, verified, float64(verified)/float64(insns))
			if float64(verified) > 3*float64(insns)+5000 {
				t.Errorf("the verifier processed %d instructions for a program of %d", verified, insns)
			}
		})
	}
}

// TestManyTablesSplitRun: a run whose tables would be more than a program
// may have is classified in parts rather than falling back to plain code
// whole.
func TestManyTablesSplitRun(t *testing.T) {
	var b strings.Builder
	b.WriteString("*filter\n:INPUT ACCEPT [0:0]\n:FORWARD ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n")
	// 64 residuals (a TTL each), 16 rules each: a table per residual.
	for k := range 64 {
		for i := range 16 {
			fmt.Fprintf(&b, "-A INPUT -s 10.%d.%d.1/32 -m ttl --ttl-eq %d -j DROP\n", k, i, k+1)
		}
	}
	b.WriteString("COMMIT\n")
	p := lowerInput(t, b.String())
	prog, err := codegen.Compile(p, codegen.Options{Trace: true, Hook: codegen.HookXDP})
	if err != nil {
		t.Fatal(err)
	}
	if prog.Classified < len(p.Rules)/2 {
		t.Errorf("%d of %d rules classified, want most", prog.Classified, len(p.Rules))
	}
}

// TestCandidatesResidualBits: a table of candidates tells at most 16
// residuals apart, the bits of its u16; a group of more tables of one
// shape stays apart rather than giving a residual no bit, which would
// make its rules unconditional.
func TestCandidatesResidualBits(t *testing.T) {
	for _, tc := range []struct {
		residuals int
		merged    bool
	}{{16, true}, {17, false}} {
		var b strings.Builder
		b.WriteString("*filter\n:INPUT ACCEPT [0:0]\n:FORWARD ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n")
		for k := range tc.residuals {
			for i := range 8 {
				fmt.Fprintf(&b, "-A INPUT -d 10.%d.%d.1/32 -p tcp -m tcp --dport 80 -m ttl --ttl-eq %d -j DROP\n", k, i, k+1)
			}
		}
		b.WriteString("COMMIT\n")
		// Every run classified: apart, the tables are looked up too.
		prog, err := codegen.Compile(lowerInput(t, b.String()), codegen.Options{Hook: codegen.HookXDP, ForceLookups: true})
		if err != nil {
			t.Fatal(err)
		}
		var dump strings.Builder
		if err := prog.Dump(&dump); err != nil {
			t.Fatal(err)
		}
		want := fmt.Sprintf("%d tuples, candidates cls0", 8*tc.residuals)
		if got := strings.Contains(dump.String(), want); got != tc.merged {
			t.Errorf("%d residuals: merged into one table of candidates = %v, want %v", tc.residuals, got, tc.merged)
		}
		if !tc.merged && strings.Contains(dump.String(), "candidates cls") {
			t.Errorf("%d residuals: a table of candidates holds some of them", tc.residuals)
		}
		if got := strings.Count(dump.String(), "(transport header of 20 bytes if ttl =="); !tc.merged && got != tc.residuals {
			t.Errorf("%d residuals: %d tables apart, want one each", tc.residuals, got)
		}
	}
}
