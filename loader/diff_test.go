package loader

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"bpfwall/codegen"
	"bpfwall/codegen/abi"
	"bpfwall/internal/packets"
	"bpfwall/internal/testenv"
	"bpfwall/ir"
	"bpfwall/model"
	"bpfwall/parser/iptables"
	"bpfwall/rules"
)

// packetsPerRuleset is how many generated packets each rule set gets.
const packetsPerRuleset = 10_000

// checkAgainstEval loads prog and runs n generated packets through it,
// comparing the kernel's verdict and decision with ir.Eval's. It returns
// the number of mismatches after reporting the first few.
func checkAgainstEval(t *testing.T, prog *codegen.Program, seed uint64, n int) {
	t.Helper()
	l, err := Load(prog, Options{})
	if err != nil {
		t.Fatalf("load: %v", err)
	}
	defer l.Close()
	gen := packets.NewGenerator(prog.IR, seed)
	meta := func(iface string) model.Meta {
		if prog.Hook == codegen.HookTCEgress {
			return model.Meta{OutIface: iface}
		}
		return model.Meta{InIface: iface}
	}
	mismatches, untestable, loopbackOnly := 0, 0, 0
	st := &ir.State{}
	for i := range n {
		f := gen.Random()
		frame, iface := f.Data, f.Iface
		if prog.Hook != codegen.HookTCEgress && LoopbackOnly(frame) {
			// codegen's kernel tests run such frames on devices of
			// their own.
			loopbackOnly++
			continue
		}
		got, err := l.Run(frame, iface)
		if errors.Is(err, unix.EINVAL) && prog.Hook != codegen.HookXDP {
			// BPF_PROG_TEST_RUN builds no skb from a frame whose IP
			// header is cut short; the XDP runs cover those frames.
			untestable++
			continue
		}
		if err != nil {
			t.Fatalf("packet %d (% x): %v", i, frame, err)
		}
		pkt, err := model.Decode(frame, meta(iface))
		if err != nil {
			t.Fatalf("packet %d: %v", i, err)
		}
		// No conntrack entry matches a generated packet; at tc-egress
		// the test run's skb has no conntrack (INVALID, the zero state).
		if prog.Hook != codegen.HookTCEgress {
			pkt.CTState = pkt.ConntrackWithoutEntry(true)
		}
		clock(t, l, st, pkt)
		want := prog.IR.EvalState(st, pkt)
		if want.Skipped == ir.SkipDeferred {
			// Run goes on with the netfilter stage, which sees the state
			// conntrack gives the packet: none in a test run (INVALID).
			if !got.Stage {
				t.Errorf("packet %d (% x): deferred, but the netfilter stage did not decide it", i, frame)
			}
			pkt.CTState = 0
			clock(t, l, st, pkt)
			want = prog.IR.EvalState(st, pkt)
		}
		if got.Verdict != want.Verdict || got.Decision != abi.DecisionFor(want) {
			mismatches++
			if mismatches <= 3 {
				t.Errorf("packet %d on %s (% x):\nkernel: %v %+v\nir.Eval: %v", i, iface, frame, got.Verdict, got.Decision, want)
			}
		}
	}
	if mismatches > 0 {
		t.Errorf("%d of %d packets differ", mismatches, n)
	}
	if untestable > n/10 || loopbackOnly > n/4 {
		t.Errorf("of %d packets, %d could not be test-run and %d depend on a loopback device", n, untestable, loopbackOnly)
	}
}

// clock sets st's clocks to the times the program read them for pkt: each
// rate-limit match reads its own, which its token bucket or hashlimit
// entry keeps (see codegen's kernel test); Jiffies and Nanos are the
// latest.
func clock(t *testing.T, l *Loaded, st *ir.State, pkt *model.Packet) {
	t.Helper()
	bucket := func(i int) (uint64, bool) {
		var b abi.Bucket
		if err := l.coll.Maps[abi.LimitsMap].Lookup(uint32(i), &b); err != nil {
			t.Fatal(err)
		}
		return b.Prev, b.Started != 0
	}
	recentNow := make(map[int]uint64) // by table, read once per packet
	st.Clock = func(m ir.Match) (uint64, bool) {
		switch m := m.(type) {
		case ir.HashLimit:
			var e abi.HashEntry
			if pkt.Family != l.Program.IR.Family {
				return 0, false
			}
			err := l.coll.Maps[abi.HashLimitMap(m.Table)].Lookup(abi.HashKeyOf(m, pkt), &e)
			return e.Prev, err == nil
		case ir.Limit:
			return bucket(m.Bucket)
		case ir.RateLimit:
			return bucket(m.Bucket)
		case ir.Recent:
			// The time the table keeps: the tick the packet's recent
			// matches read, or the table's later one.
			now, ok := recentNow[m.Table]
			if !ok {
				rm := l.coll.Maps[abi.RecentMap(m.Table)]
				value := make([]byte, rm.ValueSize())
				if err := rm.Lookup(uint32(0), &value); err != nil {
					t.Fatal(err)
				}
				now = abi.RecentNow(value)
				recentNow[m.Table] = now
			}
			return now, now != 0
		}
		return 0, false
	}
	// Matches the packet did not reach (or a full hashlimit table's new
	// key) read the latest time.
	for _, r := range l.Program.IR.Rules {
		for _, m := range r.Matches {
			now, ok := st.Clock(m)
			if _, nft := m.(ir.RateLimit); ok && nft {
				st.Nanos = max(st.Nanos, now)
			} else if ok {
				st.Jiffies = max(st.Jiffies, now)
			}
		}
	}
}

// compileFile parses, lowers and compiles one chain of a rule set file.
func compileFile(path string, src []byte, hook codegen.Hook, chain string) (*codegen.Program, error) {
	opts := iptables.Options{}
	if strings.HasSuffix(path, ".rules") {
		opts.Noflush, opts.Fragment = true, true
	}
	rs, err := iptables.Parse(filepath.Base(path), src, opts)
	if err != nil {
		return nil, err
	}
	p, err := ir.Lower(rs, ir.LowerOptions{Chain: chain})
	if err != nil {
		return nil, err
	}
	return codegen.Compile(p, codegen.Options{Trace: true, Hook: hook})
}

var hooks = []struct {
	hook  codegen.Hook
	chain string
}{
	{codegen.HookXDP, "INPUT"},
	{codegen.HookTCIngress, "INPUT"},
	{codegen.HookTCEgress, "OUTPUT"},
}

// TestKernelMatchesEvalOnTestdata: every rule set under testdata/ that
// compiles gives, for generated and malformed packets, the kernel verdict
// and deciding rule that ir.Eval gives.
func TestKernelMatchesEvalOnTestdata(t *testing.T) {
	testenv.RequireRoot(t)
	files, _ := filepath.Glob("../testdata/examples/*.rules.v[46]")
	more, _ := filepath.Glob("../testdata/rulesets/*.rules.v[46]")
	files = append(files, more...)
	if len(files) == 0 {
		t.Fatal("no rule sets under testdata/")
	}
	for _, f := range files {
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, h := range hooks {
			t.Run(fmt.Sprintf("%s/%s", filepath.Base(f), h.hook), func(t *testing.T) {
				prog, err := compileFile(f, src, h.hook, h.chain)
				if err != nil {
					t.Fatalf("compile: %v", err)
				}
				checkAgainstEval(t, prog, 1, packetsPerRuleset)
			})
		}
	}
}

// TestKernelMatchesEvalOnRealDumps does the same for every real-world dump
// whose INPUT chain compiles, and reports what stops the others.
func TestKernelMatchesEvalOnRealDumps(t *testing.T) {
	testenv.RequireRoot(t)
	blockers := map[string]int{}
	compiled := 0
	done := map[string]bool{}
	for _, d := range testenv.RealDumps(t) {
		base := d.Name
		prog, err := compileFile(d.Path, d.Src, codegen.HookXDP, "INPUT")
		if err != nil {
			for _, reason := range blockingFeatures(err) {
				blockers[reason]++
			}
			continue
		}
		compiled++
		done[base] = true
		t.Run(base, func(t *testing.T) { checkAgainstEval(t, prog, 2, packetsPerRuleset) })
	}
	reasons := make([]string, 0, len(blockers))
	for r := range blockers {
		reasons = append(reasons, r)
	}
	sort.Strings(reasons)
	for _, r := range reasons {
		t.Logf("%3d dumps stopped by: %s", blockers[r], r)
	}
	t.Logf("%d real dumps compiled and matched", compiled)
	// Dumps whose INPUT chain -m recent stopped before it compiled.
	for _, base := range []string{"medium-sized-company-mainfw-2016-01-31.iptables-save", "shorewall-sqrl-2015-08.iptables-save"} {
		if !done[base] {
			t.Errorf("%s no longer compiles", base)
		}
	}
}

// blockingFeatures names, once each, the reasons in a compile error.
func blockingFeatures(err error) []string {
	list, ok := rules.AsErrorList(err)
	if !ok {
		return []string{err.Error()}
	}
	seen := map[string]bool{}
	var out []string
	for _, e := range list {
		if !seen[e.Msg] {
			seen[e.Msg] = true
			out = append(out, e.Msg)
		}
	}
	return out
}
