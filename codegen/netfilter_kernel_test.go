package codegen_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/ringbuf"
	"golang.org/x/sys/unix"
	"golang.org/x/tools/txtar"

	"bpfwall/codegen"
	"bpfwall/codegen/abi"
	"bpfwall/internal/packets"
	"bpfwall/internal/testenv"
	"bpfwall/ir"
	"bpfwall/model"
	"bpfwall/rules"
)

// TestNetfilterStageMatchesEval runs the netfilter stage of every golden
// rule set that tests the conntrack state, at xdp and tc-ingress, -O0 and
// -O1, through BPF_PROG_TEST_RUN (bpf_prog_test_run_nf): for random
// frames, the stage must accept what is not of class U without a
// decision, and decide the rest as ir.Eval does with the state the test
// run's skb has (no conntrack: INVALID). The ingress program must defer
// exactly those frames: checkProgram compares it with ir.Eval, which
// defers class U (ir.SkipDeferred).
func TestNetfilterStageMatchesEval(t *testing.T) {
	testenv.RequireRoot(t)
	testenv.RequireTool(t, "ip")
	files, err := filepath.Glob("testdata/*.txtar")
	if err != nil || len(files) == 0 {
		t.Fatalf("no golden files: %v", err)
	}
	ns := newNetns(t)
	n := 0
	for _, file := range files {
		ar, err := txtar.ParseFile(file)
		if err != nil {
			t.Fatal(err)
		}
		g := loadGolden(t, ar)
		if !g.prog.TestsConntrack() {
			continue
		}
		name := strings.TrimSuffix(filepath.Base(file), ".txtar")
		for _, level := range codegen.Levels {
			for _, h := range []codegen.Hook{codegen.HookXDP, codegen.HookTCIngress} {
				p, err := codegen.Compile(g.prog, codegen.Options{Trace: true, Hook: h, Level: level})
				if err != nil {
					continue
				}
				if p.Netfilter == nil {
					t.Fatalf("%s: %s program tests the state and has no netfilter stage", name, h)
				}
				n++
				t.Run(fmt.Sprintf("%s/%v/%s", name, level, h), func(t *testing.T) {
					checkStage(t, p, ns, uint64(n), 3000)
				})
			}
		}
	}
	if n < 4 {
		t.Fatalf("only %d programs with a netfilter stage", n)
	}
}

// stage is a netfilter stage in the kernel beside its ingress program.
type stage struct {
	in   *loaded
	coll *ebpf.Collection
	prog *ebpf.Program
}

func loadStage(t *testing.T, p *codegen.Program, ns *netns) *stage {
	t.Helper()
	in := load(t, p, ns)
	spec, err := p.Netfilter.KernelSpec(kernelBTF(t))
	if err != nil {
		t.Fatal(err)
	}
	repl := make(map[string]*ebpf.Map)
	for name := range spec.Maps {
		if m := in.coll.Maps[name]; m != nil {
			repl[name] = m
		}
	}
	coll, err := ebpf.NewCollectionWithOptions(spec, ebpf.CollectionOptions{MapReplacements: repl})
	if err != nil {
		var ve *ebpf.VerifierError
		if errors.As(err, &ve) {
			t.Fatalf("load the netfilter stage: %+v", ve)
		}
		t.Fatalf("load the netfilter stage: %v", err)
	}
	t.Cleanup(func() { coll.Close() })
	// The test run's hook state has no input device (it sets the
	// output device for hook NF_INET_PRE_ROUTING): its ifindex reads 0.
	if err := coll.Maps[abi.NetfilterIfacesMap].Put(uint32(0), uint32(1)); err != nil {
		t.Fatal(err)
	}
	return &stage{in: in, coll: coll, prog: coll.Programs[abi.ProgramName]}
}

// NFPROTO_IPV4, NFPROTO_IPV6 and NF_INET_PRE_ROUTING.
const (
	nfprotoIPv4      = 2
	nfprotoIPv6      = 10
	nfInetPreRouting = 0
)

// run passes a frame through the stage as PRE_ROUTING would, on lo, and
// returns the verdict and the decision; ok is false when the stage
// recorded none.
func (s *stage) run(data []byte, family rules.Family) (v ir.Verdict, d abi.Decision, ok bool, err error) {
	// struct nf_hook_state: hook, pf.
	pf := uint8(nfprotoIPv4)
	if family == rules.IPv6 {
		pf = nfprotoIPv6
	}
	opts := &ebpf.RunOptions{Data: data, Context: []byte{nfInetPreRouting, pf}}
	dm := s.coll.Maps[abi.DecisionMap]
	var perCPU []abi.Decision
	if err := dm.Lookup(uint32(0), &perCPU); err != nil {
		return 0, d, false, err
	}
	clear(perCPU)
	if err := dm.Put(uint32(0), perCPU); err != nil {
		return 0, d, false, err
	}
	var ret uint32
	s.in.ns.do(func() { ret, err = s.prog.Run(opts) })
	if err != nil {
		return 0, d, false, fmt.Errorf("test run: %w", err)
	}
	if err := dm.Lookup(uint32(0), &perCPU); err != nil {
		return 0, d, false, err
	}
	n := 0
	for _, c := range perCPU {
		if c.Kind != 0 {
			d, n = c, n+1
		}
	}
	if n > 1 {
		return 0, d, false, fmt.Errorf("%d CPUs recorded a decision", n)
	}
	switch ret {
	case 1:
		v = ir.VerdictAccept
	case 0:
		v = ir.VerdictDrop
		if d.Kind == abi.DecidedByRule && int(d.Rule) < len(s.in.p.IR.Rules) {
			if _, ok := s.in.p.IR.Rules[d.Rule].Action.(ir.Reject); ok {
				v = ir.VerdictReject
			}
		}
	default:
		return 0, d, false, fmt.Errorf("return code %d", ret)
	}
	return v, d, n == 1, nil
}

// stageCounters sums abi.StageMap over CPUs.
func (s *stage) stageCounters(t *testing.T) []uint64 {
	t.Helper()
	m := s.coll.Maps[abi.StageMap]
	out := make([]uint64, m.MaxEntries())
	var perCPU []uint64
	for i := range out {
		if err := m.Lookup(uint32(i), &perCPU); err != nil {
			t.Fatal(err)
		}
		for _, c := range perCPU {
			out[i] += c
		}
	}
	return out
}

// checkStage compares the stage with ir for n random frames, as
// checkProgram does for programs.
func checkStage(t *testing.T, p *codegen.Program, ns *netns, seed uint64, n int) {
	s := loadStage(t, p, ns)
	lo := ns.devs[0]
	g := packets.NewGenerator(p.IR, seed, packets.Device{Name: lo.name, MAC: lo.mac})
	want := make([]abi.Counter, len(p.IR.Rules)+1)
	st := &ir.State{}
	var logged [][]byte // the frames LOG rules logged, in order
	mismatches, refused, evaluated, rejected := 0, 0, uint64(0), uint64(0)
	kinds := make(map[abi.DecisionKind]int)
	for i := range n {
		f := g.Random()
		data := f.Data
		if len(data) < 14 || binary.BigEndian.Uint16(data[12:]) != etherType(p.IR.Family) || shortIPHeader(data) {
			continue // the test run takes IP packets of the family only
		}
		var m model.Meta
		if p.Hook == codegen.HookTCIngress {
			m.PktType = lo.pktType(data[:6])
		}
		pkt, err := model.Decode(data, m)
		if err != nil {
			t.Fatalf("decode frame %d: %v", i, err)
		}
		if pkt.Invalid != "" {
			continue // the IP layer drops it before PRE_ROUTING
		}
		v, d, decided, err := s.run(data, p.IR.Family)
		if err != nil && errors.Is(err, unix.EINVAL) {
			refused++
			continue
		}
		if err != nil {
			t.Fatalf("frame %d (%s, % x): %v", i, f.Desc, data[:min(len(data), 128)], err)
		}
		// What the stage evaluates: class U, which the ingress program
		// deferred; the IP layer drops what it finds invalid before
		// PRE_ROUTING.
		if pkt.NotIP || !pkt.DeferredClass() {
			if v != ir.VerdictAccept || decided {
				mismatches++
				if mismatches <= 5 {
					t.Errorf("frame %d (%s) is not deferred: the stage said %s %+v\n% x", i, f.Desc, v, d, data[:min(len(data), 128)])
				}
			}
			continue
		}
		evaluated++
		// The test run's skb has no conntrack: INVALID.
		pkt.CTState = 0
		s.in.clock(t, st, pkt)
		res := p.IR.TraceState(st, pkt, func(r *ir.Rule) {
			want[r.ID].Packets++
			want[r.ID].Bytes += ipBytes(data)
			if _, ok := r.Action.(ir.Log); ok {
				logged = append(logged, data[:min(len(data), abi.LogCapture)])
			}
		})
		if res.Skipped == "" && res.Rule == nil {
			want[len(p.IR.Rules)].Packets++
			want[len(p.IR.Rules)].Bytes += ipBytes(data)
		}
		if res.Verdict == ir.VerdictReject {
			rejected++
		}
		kinds[d.Kind]++
		if !decided || v != res.Verdict || d != abi.DecisionFor(res) {
			mismatches++
			if mismatches <= 5 {
				t.Errorf("frame %d (%s):\n% x\nstage: %s %+v (decided %v)\nir:    %s %+v", i, f.Desc, data[:min(len(data), 128)], v, d, decided, res, abi.DecisionFor(res))
			}
		}
	}
	if mismatches > 0 {
		t.Fatalf("%d frames differ", mismatches)
	}
	if refused > n/10 {
		t.Errorf("the kernel refused %d of %d frames", refused, n)
	}
	if evaluated < 50 {
		t.Errorf("the stage evaluated only %d frames", evaluated)
	}
	t.Logf("%d frames evaluated, %d rejected, %d logged; decisions by kind %v", evaluated, rejected, len(logged), kinds)
	counts := s.stageCounters(t)
	if counts[abi.StageEvaluated] != evaluated || counts[abi.StageRejectDropped] != rejected {
		t.Errorf("StageMap counts %d evaluated and %d rejected packets, want %d and %d",
			counts[abi.StageEvaluated], counts[abi.StageRejectDropped], evaluated, rejected)
	}
	if p.Spec.Maps[abi.LogMap] != nil {
		// Every LOG record holds the frame as the ingress program would
		// have logged it: the MAC header, then the packet.
		rd, err := ringbuf.NewReader(s.in.coll.Maps[abi.LogMap])
		if err != nil {
			t.Fatal(err)
		}
		defer rd.Close()
		rd.SetDeadline(time.Now())
		for i := 0; ; i++ {
			rec, err := rd.Read()
			if err != nil {
				if i != len(logged) {
					t.Errorf("%d LOG records, want %d (%v)", i, len(logged), err)
				}
				break
			}
			r, err := abi.ParseLogRecord(rec.RawSample)
			if err != nil {
				t.Fatal(err)
			}
			if i >= len(logged) || !bytes.Equal(r.Frame, logged[i]) || int(r.Len) != len(logged[i]) && len(logged[i]) < abi.LogCapture {
				t.Errorf("LOG record %d: %d of %d bytes\n% x\nwant\n% x", i, len(r.Frame), r.Len, r.Frame, logged[min(i, len(logged)-1)])
				break
			}
		}
	}
	got := s.in.counters(t)
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("counter %d: kernel %+v, ir %+v", i, got[i], want[i])
		}
	}
}

func etherType(f rules.Family) uint16 {
	if f == rules.IPv6 {
		return 0x86dd
	}
	return 0x0800
}
