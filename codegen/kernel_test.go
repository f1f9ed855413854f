package codegen_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/btf"
	"golang.org/x/sys/unix"
	"golang.org/x/tools/txtar"

	"bpfwall/codegen"
	"bpfwall/codegen/abi"
	"bpfwall/internal/packets"
	"bpfwall/internal/testenv"
	"bpfwall/internal/topology"
	"bpfwall/ir"
	"bpfwall/model"
	"bpfwall/rules"
)

// packetsPerProgram is how many random frames each compiled program gets,
// besides every truncation of a dozen complete ones.
const packetsPerProgram = 10_000

// device is an interface of the test's network namespace.
type device struct {
	name    string
	index   uint32
	mac     net.HardwareAddr
	pktType func(dst []byte) model.PacketType // what eth_type_trans makes of a destination
}

// TestKernelMatchesEval loads every golden file's program, for every
// hook, and runs generated frames through it with BPF_PROG_TEST_RUN: the
// verdict and the decision the program records must be ir.Eval's for
// model.Decode of the frame, and the counters must add up as ir.Trace counts.
func TestKernelMatchesEval(t *testing.T) {
	testenv.RequireRoot(t)
	testenv.RequireTool(t, "ip")
	files, err := filepath.Glob("testdata/*.txtar")
	if err != nil || len(files) == 0 {
		t.Fatalf("no golden files: %v", err)
	}
	type program struct {
		name string
		p    *codegen.Program
	}
	var progs []program
	for _, file := range files {
		ar, err := txtar.ParseFile(file)
		if err != nil {
			t.Fatal(err)
		}
		name := strings.TrimSuffix(filepath.Base(file), ".txtar")
		if strings.HasPrefix(name, "parse_") {
			// Dumps of the parser for each hook; their one rule is in
			// others; netfilter programs are checked through restore in
			// cmd/bpfwall TestRoutedRandom.
			continue
		}
		g := loadGolden(t, ar)
		if g.hook == codegen.HookSkLookup {
			continue // lookups, not packets: loader's TestSkLookupMatchesEval
		}
		for _, level := range codegen.Levels {
			for _, h := range []codegen.Hook{codegen.HookXDP, codegen.HookTCIngress, codegen.HookTCEgress} {
				p, err := codegen.Compile(g.prog, codegen.Options{Trace: true, Hook: h, Level: level})
				if err != nil {
					continue // the golden test checks the errors
				}
				progs = append(progs, program{fmt.Sprintf("%s/%v/%s", name, level, h), p})
			}
			// Every chain split into segments of about one rule each.
			restore := codegen.SetMaxSegmentBranches(1)
			p, err := codegen.Compile(g.prog, codegen.Options{Trace: true, Hook: g.hook, Level: level})
			restore()
			if err == nil {
				progs = append(progs, program{fmt.Sprintf("%s/%v/%s-segments", name, level, g.hook), p})
			}
		}
		// Every run of terminal rules classified, every table a map.
		p, err := codegen.Compile(g.prog, codegen.Options{Trace: true, Hook: g.hook, Level: codegen.O1, ForceLookups: true})
		if err == nil {
			progs = append(progs, program{fmt.Sprintf("%s/O1/%s-classified", name, g.hook), p})
		}
		if len(g.prog.Chains) > 1 {
			// Every chain that can be inlined inlined, at both levels.
			restore := codegen.SetMaxChainFunctions(1)
			for _, level := range codegen.Levels {
				if p, err := codegen.Compile(g.prog, codegen.Options{Trace: true, Hook: g.hook, Level: level}); err == nil {
					progs = append(progs, program{fmt.Sprintf("%s/%v/%s-inlined", name, level, g.hook), p})
				}
			}
			restore()
		}
	}
	if len(progs) < 20 {
		t.Fatalf("only %d programs compiled from the golden files", len(progs))
	}
	ns := newNetns(t)
	for i, pr := range progs {
		t.Run(pr.name, func(t *testing.T) {
			checkProgram(t, pr.p, ns, uint64(i+1), packetsPerProgram)
		})
	}
}

// netns is a network namespace with a veth device "eth0" besides lo.
// BPF_PROG_TEST_RUN finds the devices a context names in the namespace
// of the calling thread: do runs code there.
type netns struct {
	*topology.Netns
	devs []device
}

func newNetns(t testing.TB) *netns {
	t.Helper()
	testenv.RequireRoot(t)
	ns, err := startNetns()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ns.Close)
	return ns
}

// startNetns creates the namespace and its devices; Close releases it.
func startNetns() (*netns, error) {
	tns, err := topology.NewNetns()
	if err != nil {
		return nil, err
	}
	ns := &netns{Netns: tns}
	err = tns.Do(func() error {
		mac := net.HardwareAddr{0x02, 0, 0, 0, 0, 1}
		// eth0's ifindex shares lo's slot in abi.IfaceSlotsMap: lo has
		// it, and eth0's interface bits come from abi.IfacesMap.
		if out, err := exec.Command("ip", "link", "add", "eth0", "index", strconv.Itoa(1+abi.IfaceSlots), "address", mac.String(), "type", "veth", "peer", "name", "peer0").CombinedOutput(); err != nil {
			return fmt.Errorf("ip link add: %w: %s", err, out)
		}
		lo, err1 := net.InterfaceByName("lo")
		eth0, err2 := net.InterfaceByName("eth0")
		if err := errors.Join(err1, err2); err != nil {
			return err
		}
		ns.devs = []device{
			// eth_type_trans against lo's all-zero address, whose broadcast
			// address is zero too: every group address is multicast.
			{name: "lo", index: uint32(lo.Index), mac: make(net.HardwareAddr, 6), pktType: func(dst []byte) model.PacketType {
				switch {
				case bytes.Equal(dst, make([]byte, 6)):
					return model.PacketHost
				case dst[0]&1 != 0:
					return model.PacketMulticast
				}
				return model.PacketOtherHost
			}},
			{name: "eth0", index: uint32(eth0.Index), mac: mac, pktType: func(dst []byte) model.PacketType {
				switch {
				case bytes.Equal(dst, mac):
					return model.PacketHost
				case bytes.Equal(dst, []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}):
					return model.PacketBroadcast
				case dst[0]&1 != 0:
					return model.PacketMulticast
				}
				return model.PacketOtherHost
			}},
		}
		return nil
	})
	if err != nil {
		tns.Close()
		return nil, err
	}
	return ns, nil
}

// do runs fn on a thread in the namespace.
func (ns *netns) do(fn func()) { ns.Run(fn) }

// kernelBTF is the running kernel's BTF, for programs that call kfuncs.
func kernelBTF(t testing.TB) *btf.Spec {
	t.Helper()
	spec, err := btf.LoadKernelSpec()
	if err != nil {
		t.Fatalf("kernel BTF: %v", err)
	}
	return spec
}

// loadCollection loads p's program and maps into the kernel, for the
// test's time, failing the test with the verifier's log if it refuses.
func loadCollection(t *testing.T, p *codegen.Program) *ebpf.Collection {
	t.Helper()
	spec, err := p.KernelSpec(kernelBTF(t))
	if err != nil {
		t.Fatal(err)
	}
	coll, err := ebpf.NewCollection(spec)
	if err != nil {
		var ve *ebpf.VerifierError
		if errors.As(err, &ve) {
			t.Fatalf("load: %+v", ve)
		}
		t.Fatalf("load: %v", err)
	}
	t.Cleanup(func() { coll.Close() })
	return coll
}

// loaded is a program in the kernel.
type loaded struct {
	p    *codegen.Program
	ns   *netns
	coll *ebpf.Collection
	prog *ebpf.Program
}

func load(t *testing.T, p *codegen.Program, ns *netns) *loaded {
	t.Helper()
	coll := loadCollection(t, p)
	for _, d := range ns.devs {
		if err := p.PutIface(coll.Maps, d.index, d.name); err != nil {
			t.Fatal(err)
		}
	}
	return &loaded{p: p, ns: ns, coll: coll, prog: coll.Programs[abi.ProgramName]}
}

// run passes a frame through the program as if it came in on (or, for
// tc-egress, went out through) dev, and returns the verdict and decision.
func (l *loaded) run(data []byte, dev device, mark uint32) (_ ir.Verdict, _ abi.Decision, err error) {
	return l.runSplit(data, len(data), dev, mark)
}

// runSplit is run with the frame's first linear bytes in the linear data
// at xdp, and the rest in fragments: a multi-buffer frame.
func (l *loaded) runSplit(data []byte, linear int, dev device, mark uint32) (_ ir.Verdict, _ abi.Decision, err error) {
	opts := &ebpf.RunOptions{Data: data, DataOut: make([]byte, len(data)+256)}
	if l.p.Hook == codegen.HookXDP {
		// struct xdp_md: data, data_end, data_meta, ingress_ifindex. A
		// data_end short of the frame is the linear data's end.
		opts.Context = [4]uint32{0, uint32(linear), 0, dev.index}
	} else {
		// struct __sk_buff up to ifindex: mark and ifindex may be set.
		var skb [11]uint32
		skb[2], skb[10] = mark, dev.index
		opts.Context = skb
	}
	dm := l.coll.Maps[abi.DecisionMap]
	var perCPU []abi.Decision
	if err := dm.Lookup(uint32(0), &perCPU); err != nil {
		return 0, abi.Decision{}, err
	}
	clear(perCPU)
	if err := dm.Put(uint32(0), perCPU); err != nil {
		return 0, abi.Decision{}, err
	}
	var ret uint32
	l.ns.do(func() { ret, err = l.prog.Run(opts) })
	if err != nil {
		return 0, abi.Decision{}, fmt.Errorf("test run: %w", err)
	}
	if err := dm.Lookup(uint32(0), &perCPU); err != nil {
		return 0, abi.Decision{}, err
	}
	var d abi.Decision
	n := 0
	for _, c := range perCPU {
		if c.Kind != 0 {
			d, n = c, n+1
		}
	}
	if n != 1 {
		return 0, d, fmt.Errorf("%d CPUs recorded a decision", n)
	}
	var v ir.Verdict
	switch {
	case l.p.Hook == codegen.HookXDP && ret == 2, l.p.Hook != codegen.HookXDP && ret == 0:
		v = ir.VerdictAccept
	case ret == 1 && l.p.Hook == codegen.HookXDP, ret == 2 && l.p.Hook != codegen.HookXDP:
		v = ir.VerdictDrop
		// A REJECT rule that sends no reply drops the packet.
		if d.Kind == abi.DecidedByRule && int(d.Rule) < len(l.p.IR.Rules) {
			if _, ok := l.p.IR.Rules[d.Rule].Action.(ir.Reject); ok {
				v = ir.VerdictReject
			}
		}
	case ret == 3 && l.p.Hook == codegen.HookXDP, ret == 7 && l.p.Hook != codegen.HookXDP:
		v = ir.VerdictReject // XDP_TX, TC_ACT_REDIRECT: the reply
	default:
		return 0, d, fmt.Errorf("return code %d", ret)
	}
	return v, d, nil
}

// clock sets st's clocks to the times the program read them for pkt: each
// rate-limit match reads its own (a tick may fall between two matches of
// one packet), which its token bucket or hashlimit entry keeps. Jiffies
// and Nanos, for matches the packet did not reach, are the latest.
func (l *loaded) clock(t *testing.T, st *ir.State, pkt *model.Packet) {
	t.Helper()
	recentNow := make(map[int]uint64) // by table, read once per packet
	prev := func(m ir.Match) (uint64, bool) {
		switch m := m.(type) {
		case ir.HashLimit:
			if pkt == nil || pkt.Family != l.p.IR.Family {
				return 0, false
			}
			var e abi.HashEntry
			err := l.coll.Maps[abi.HashLimitMap(m.Table)].Lookup(abi.HashKeyOf(m, pkt), &e)
			if err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
				t.Fatalf("look the hashlimit entry up: %v", err)
			}
			return e.Prev, err == nil
		case ir.Recent:
			// Every recent match of the packet used the tick it read, or
			// its table's later time: the time the table keeps.
			now, ok := recentNow[m.Table]
			if !ok {
				value := make([]byte, l.coll.Maps[abi.RecentMap(m.Table)].ValueSize())
				if err := l.coll.Maps[abi.RecentMap(m.Table)].Lookup(uint32(0), &value); err != nil {
					t.Fatal(err)
				}
				now = abi.RecentNow(value)
				recentNow[m.Table] = now
			}
			return now, now != 0
		case ir.Limit:
			return l.bucketPrev(t, m.Bucket)
		case ir.RateLimit:
			return l.bucketPrev(t, m.Bucket)
		}
		return 0, false
	}
	st.Clock = prev
	for _, r := range l.p.IR.Rules {
		for _, m := range r.Matches {
			now, ok := prev(m)
			switch m.(type) {
			case ir.RateLimit:
				if ok {
					st.Nanos = max(st.Nanos, now)
				}
			case ir.Limit, ir.HashLimit, ir.Recent:
				if ok {
					st.Jiffies = max(st.Jiffies, now)
				}
			}
		}
	}
}

// bucketPrev is when token bucket i was last updated, if ever.
func (l *loaded) bucketPrev(t *testing.T, i int) (uint64, bool) {
	t.Helper()
	var b abi.Bucket
	if err := l.coll.Maps[abi.LimitsMap].Lookup(uint32(i), &b); err != nil {
		t.Fatal(err)
	}
	return b.Prev, b.Started != 0
}

// counters returns the counters summed over CPUs.
func (l *loaded) counters(t *testing.T) []abi.Counter {
	t.Helper()
	return readCounters(t, l.coll.Maps[abi.CountersMap], len(l.p.IR.Rules)+1)
}

// readCounters returns the first n counters of a counters map, each
// summed over CPUs: counter i is at index abi.CounterIndex(i) of the
// block at key abi.CounterKey(i).
func readCounters(t *testing.T, m *ebpf.Map, n int) []abi.Counter {
	t.Helper()
	if got, want := int(m.MaxEntries()), abi.CounterBlocks(n); got != want {
		t.Fatalf("counters: %d blocks for %d counters, want %d", got, n, want)
	}
	out := make([]abi.Counter, n)
	var perCPU []abi.CounterBlock
	for i := range out {
		if abi.CounterIndex(i) == 0 {
			if err := m.Lookup(abi.CounterKey(i), &perCPU); err != nil {
				t.Fatal(err)
			}
		}
		for _, b := range perCPU {
			c := b[abi.CounterIndex(i)]
			out[i].Packets += c.Packets
			out[i].Bytes += c.Bytes
		}
	}
	return out
}

// meta is what model.Decode needs to know about a frame on dev.
func meta(p *codegen.Program, dev device, data []byte, mark uint32) model.Meta {
	m := model.Meta{InIface: dev.name, Mark: mark}
	if p.Hook == codegen.HookTCEgress {
		m = model.Meta{OutIface: dev.name, Mark: mark, Forwarded: p.IR.Forward}
	}
	if p.Hook != codegen.HookXDP {
		m.PktType = dev.pktType(data[:6])
	}
	return m
}

// shortIPHeader reports whether the ethertype of a frame says IPv4 or IPv6
// and the frame ends before the IP header does.
func shortIPHeader(data []byte) bool {
	switch binary.BigEndian.Uint16(data[12:]) {
	case 0x0800:
		return len(data) < 14+20
	case 0x86dd:
		return len(data) < 14+40
	}
	return false
}

// ipBytes is what iptables counts for a frame: the IP datagram after the
// IP layer trimmed it to its own length.
func ipBytes(data []byte) uint64 {
	off := 14
	for off+4 <= len(data) && (binary.BigEndian.Uint16(data[off-2:]) == 0x8100 || binary.BigEndian.Uint16(data[off-2:]) == 0x88a8) {
		off += 4
	}
	b := data[off:]
	if b[0]>>4 == 4 {
		return uint64(binary.BigEndian.Uint16(b[2:]))
	}
	if payload := binary.BigEndian.Uint16(b[4:]); payload != 0 || b[6] != 0 {
		return uint64(payload) + 40
	}
	return uint64(len(b)) // no jumbo option in frames this small is valid
}

// probe is a generated frame and how an XDP test run takes it.
type probe struct {
	packets.Frame
	// linear, when not 0, is how many bytes the test run puts in the
	// frame's linear data; the rest goes to fragments.
	linear int
}

// checkProgram compares the kernel with ir for n random frames and the
// truncations of a few complete ones.
func checkProgram(t *testing.T, p *codegen.Program, ns *netns, seed uint64, n int) []abi.Counter {
	l := load(t, p, ns)
	devs := ns.devs
	var pdevs []packets.Device
	for _, d := range ns.devs {
		pdevs = append(pdevs, packets.Device{Name: d.name, MAC: d.mac})
	}
	g := packets.NewGenerator(p.IR, seed, pdevs...)
	want := make([]abi.Counter, len(p.IR.Rules)+1)
	st := &ir.State{}
	mismatches, refused := 0, 0
	kinds := make(map[abi.DecisionKind]int)
	decided := make(map[uint32]bool)
	check := func(f probe) {
		dev := devs[f.Dev]
		if p.Hook == codegen.HookXDP {
			f.Mark = 0
		}
		pkt, err := model.Decode(f.Data, meta(p, dev, f.Data, f.Mark))
		if err != nil {
			t.Fatalf("decode %s: %v", f.Desc, err)
		}
		// The namespace's conntrack table is empty; at tc-egress the
		// test run's skb has no conntrack (INVALID, the zero state).
		if p.Hook != codegen.HookTCEgress {
			pkt.CTState = pkt.ConntrackWithoutEntry(true)
		}
		linear := len(f.Data)
		if f.linear > 0 {
			linear = f.linear
		}
		v, d, err := l.runSplit(f.Data, linear, dev, f.Mark)
		if err != nil && p.Hook != codegen.HookXDP && errors.Is(err, unix.EINVAL) && shortIPHeader(f.Data) {
			// BPF_PROG_TEST_RUN refuses skbs whose ethertype promises an
			// IP header the frame does not have; XDP runs cover them.
			refused++
			return
		}
		if err != nil {
			t.Fatalf("%s (%d bytes: % x): %v", f.Desc, len(f.Data), f.Data[:min(len(f.Data), 256)], err)
		}
		// The token buckets the program touched say when it ran.
		l.clock(t, st, pkt)
		bytes := uint64(0)
		res := p.IR.TraceState(st, pkt, func(r *ir.Rule) {
			bytes = ipBytes(f.Data)
			want[r.ID].Packets++
			want[r.ID].Bytes += bytes
		})
		if res.Skipped == "" && res.Rule == nil {
			want[len(p.IR.Rules)].Packets++
			want[len(p.IR.Rules)].Bytes += ipBytes(f.Data)
		}
		kinds[d.Kind]++
		if d.Kind == abi.DecidedByRule || d.Kind == abi.Hotdrop {
			decided[d.Rule] = true
		}
		if v != res.Verdict || d != abi.DecisionFor(res) {
			mismatches++
			if mismatches <= 5 {
				t.Errorf("%s on %s, mark %#x:\n% x\nkernel: %s %+v\nir:     %s %+v",
					f.Desc, dev.name, f.Mark, f.Data[:min(len(f.Data), 256)], v, d, res, abi.DecisionFor(res))
			}
		}
	}
	for i := range n {
		f := probe{Frame: g.Random()}
		f.Desc = fmt.Sprintf("frame %d (%s)", i, f.Desc)
		check(f)
	}
	// Of the random frames, few are cut short before the IP header.
	if refused > n/10 {
		t.Errorf("the kernel refused %d of %d frames", refused, n)
	}
	for i, data := range g.CutFrames() {
		check(probe{Frame: packets.Frame{Data: data, Mark: g.Mark(), Desc: fmt.Sprintf("cut frame %d", i)}})
	}
	if p.Hook == codegen.HookXDP {
		// Only XDP test runs take frames larger than a page.
		for i, data := range g.LargeFrames() {
			check(probe{Frame: packets.Frame{Data: data, Desc: fmt.Sprintf("large frame %d", i)}})
		}
		// Frames of several buffers whose linear data ends at every
		// byte of the headers: the parser reads past it.
		for i, data := range g.FullFrames(4) {
			for n := 14; n < len(data); n++ {
				check(probe{Frame: packets.Frame{Data: data, Desc: fmt.Sprintf("frame %d with %d linear bytes", i, n)}, linear: n})
			}
		}
	}
	if mismatches > 0 {
		t.Fatalf("%d frames differ", mismatches)
	}
	t.Logf("decisions by kind %v; %d of %d rules decided a packet: %v", kinds, len(decided), len(p.IR.Rules), decided)
	// Every program sees packets of each kind the generator always makes.
	always := []abi.DecisionKind{abi.SkippedInvalid, abi.SkippedNotIP}
	if p.IR.Reassembled && p.IR.Family == rules.IPv4 {
		// The generator makes IPv4 fragments at offset 8.
		always = append(always, abi.LaterFragment)
	}
	for _, k := range always {
		if kinds[k] == 0 {
			t.Errorf("no frame was decided as kind %s", k)
		}
	}
	l.compareRecent(t, st)
	got := l.counters(t)
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("counter %d: kernel %+v, ir %+v", i, got[i], want[i])
		}
	}
	return got
}

// compareRecent compares the program's recent tables with the model's:
// the same addresses in the same order of their last update, with the
// same TTLs, indexes and stamps.
func (l *loaded) compareRecent(t *testing.T, st *ir.State) {
	t.Helper()
	stamps := map[int]int{}
	for _, r := range l.p.IR.Rules {
		for _, m := range r.Matches {
			if m, ok := m.(ir.Recent); ok {
				stamps[m.Table] = m.Stamps
			}
		}
	}
	for table, n := range stamps {
		value := make([]byte, abi.RecentValueSize(n))
		if err := l.coll.Maps[abi.RecentMap(table)].Lookup(uint32(0), &value); err != nil {
			t.Fatal(err)
		}
		got := abi.RecentSlots(value, n)
		want := st.RecentEntries(table)
		if len(got) != len(want) {
			t.Errorf("recent table %d: %d entries in the kernel, %d in the model", table, len(got), len(want))
			continue
		}
		for i, e := range want {
			g := got[i]
			a := abi.RecentAddrOf(e.Addr)
			if g.Addr != a || g.TTL != e.TTL || g.Index != e.Index || g.NStamps != e.NStamps || !slices.Equal(g.Stamps[:g.NStamps], e.Stamps[:e.NStamps]) {
				t.Errorf("recent table %d entry %d: kernel %+v, model %+v", table, i, g, e)
			}
		}
		t.Logf("recent table %d: %d entries agree", table, len(want))
	}
}

// TestKernelSpecLeavesSpec checks that resolving a program's kfuncs for
// the running kernel changes the copy KernelSpec returns, and not the
// program's Spec, which later loads resolve again.
func TestKernelSpecLeavesSpec(t *testing.T) {
	p := compileText(t, "*filter\n:INPUT ACCEPT\n-A INPUT -m conntrack --ctstate ESTABLISHED -j ACCEPT\n-A INPUT -p tcp --dport 22 -j DROP\nCOMMIT\n", rules.IPv4, codegen.HookXDP)
	if !p.NeedsKernelBTF() {
		t.Fatal("a conntrack state match needs the kernel's BTF")
	}
	before := slices.Clone(p.Spec.Programs[abi.ProgramName].Instructions)
	spec, err := p.KernelSpec(kernelBTF(t))
	if err != nil {
		t.Fatal(err)
	}
	after := p.Spec.Programs[abi.ProgramName].Instructions
	resolved := spec.Programs[abi.ProgramName].Instructions
	changed := 0
	for i := range before {
		if after[i].Constant != before[i].Constant || after[i].Offset != before[i].Offset {
			t.Fatalf("instruction %d of Spec changed: %v -> %v", i, before[i], after[i])
		}
		if resolved[i].Constant != before[i].Constant || resolved[i].Offset != before[i].Offset {
			changed++
		}
	}
	if changed == 0 {
		t.Fatal("KernelSpec resolved nothing")
	}
	for name, m := range p.Spec.Maps {
		if spec.Maps[name] != m {
			t.Errorf("map %s: copied, where the spec's is shared", name)
		}
	}
}
