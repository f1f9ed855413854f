package loader

import (
	"encoding/json"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"

	"bpfwall/codegen"
	"bpfwall/codegen/abi"
	"bpfwall/internal/packets"
	"bpfwall/ir"
	"bpfwall/parser/iptables"
	"bpfwall/rules"
)

var allHooks = []codegen.Hook{codegen.HookXDP, codegen.HookTCIngress, codegen.HookTCEgress}

// Two rule sets that agree on udp/53 and disagree on tcp/22 and tcp/80.
var (
	rulesA = []string{"-p udp -m udp --dport 53 -j ACCEPT", "-p tcp -m tcp --dport 22 -j DROP"}
	rulesB = []string{"-p tcp -m tcp --dport 80 -j DROP", "-p udp -m udp --dport 53 -j ACCEPT", "-p tcp -m tcp --dport 22 -j ACCEPT"}
)

func frame(t testing.TB, proto string, dport uint16) []byte {
	t.Helper()
	f, err := packets.Desc{Proto: proto, DPort: dport}.Frame()
	if err != nil {
		t.Fatal(err)
	}
	// Test runs of tc programs take the frame as received by lo: sent to
	// another MAC address it would be PACKET_OTHERHOST, which IP drops.
	clear(f[:6])
	return f
}

// pinnedVerdict runs a frame through the program pinned at place, as a
// later command finds it.
func pinnedVerdict(t testing.TB, place Place, frame []byte) ir.Verdict {
	t.Helper()
	prog, err := ebpf.LoadPinnedProgram(filepath.Join(place.Dir(), pinProgram), nil)
	if err != nil {
		t.Fatalf("load pinned program: %v", err)
	}
	defer prog.Close()
	ret, err := prog.Run(&ebpf.RunOptions{Data: frame})
	if err != nil {
		t.Fatalf("test run: %v", err)
	}
	v, err := verdict(place.Hook, ret)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// state is what a failed swap must leave unchanged.
type state struct {
	program  ebpf.ProgramID
	links    map[int]ebpf.ProgramID // program each link runs
	counters []abi.Counter
	loadedAt string
}

func readState(t testing.TB, place Place) state {
	t.Helper()
	a, err := Open(place)
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	defer a.Close()
	s := state{program: programID(a.Program), links: map[int]ebpf.ProgramID{}, loadedAt: a.Meta.LoadedAt.String()}
	for i, l := range a.Links {
		info, err := l.Info()
		if err != nil {
			t.Fatal(err)
		}
		s.links[i] = info.Program
	}
	if s.counters, err = a.Counters(); err != nil {
		t.Fatal(err)
	}
	return s
}

func TestAttachPinSwapUnload(t *testing.T) {
	for _, hook := range allHooks {
		t.Run(hook.String(), func(t *testing.T) {
			ns := inFreshNetns(t)
			place := testPlace(t, ns, hook)
			res := mustSwap(t, newSwap(t, place, ruleset(hook, rulesA...), "veth0", "veth1"))
			if res.Replaced != 0 || len(res.Attached) != 2 {
				t.Fatalf("first load: replaced %d, attached %v", res.Replaced, res.Attached)
			}

			// Pins exist, with mode 0600, and a later Open finds them.
			for _, name := range append([]string{pinProgram}, mapPins...) {
				fi, err := os.Stat(filepath.Join(place.Dir(), name))
				if err != nil {
					t.Fatalf("pin %s: %v", name, err)
				}
				if fi.Mode().Perm() != 0o600 {
					t.Errorf("pin %s has mode %v, want 0600", name, fi.Mode().Perm())
				}
			}
			before := readState(t, place)
			if before.program != res.Program || len(before.links) != 2 {
				t.Fatalf("after load: %+v, want program %d on 2 links", before, res.Program)
			}
			for i, id := range before.links {
				if id != res.Program {
					t.Errorf("link on ifindex %d runs program %d, want %d", i, id, res.Program)
				}
			}
			tcp22, tcp80, udp53 := frame(t, "tcp", 22), frame(t, "tcp", 80), frame(t, "udp", 53)
			if v := pinnedVerdict(t, place, tcp22); v != ir.VerdictDrop {
				t.Errorf("rule set A: tcp/22 %v, want DROP", v)
			}

			res2 := mustSwap(t, newSwap(t, place, ruleset(hook, rulesB...)))
			if res2.Replaced != res.Program || res2.Program == res.Program {
				t.Fatalf("swap: %+v after %+v", res2, res)
			}
			after := readState(t, place)
			for i, id := range after.links {
				if id != res2.Program {
					t.Errorf("after swap, link on ifindex %d runs program %d, want %d", i, id, res2.Program)
				}
			}
			for name, v := range map[string]ir.Verdict{"tcp/22": ir.VerdictAccept, "tcp/80": ir.VerdictDrop, "udp/53": ir.VerdictAccept} {
				f := map[string][]byte{"tcp/22": tcp22, "tcp/80": tcp80, "udp/53": udp53}[name]
				if got := pinnedVerdict(t, place, f); got != v {
					t.Errorf("rule set B: %s %v, want %v", name, got, v)
				}
			}
			// The swap leaves no pin of its own behind.
			ents, _ := os.ReadDir(place.Dir())
			for _, e := range ents {
				if strings.HasSuffix(e.Name(), newSuffix) {
					t.Errorf("pin %s left behind", e.Name())
				}
			}

			if n := attachedPrograms(t, hook); n != 2 {
				t.Errorf("before unload, %d programs attached to the veth pair, want 2", n)
			}
			if _, err := Unload(place, []string{"veth1"}); err != nil {
				t.Fatalf("unload veth1: %v", err)
			}
			if s := readState(t, place); len(s.links) != 1 {
				t.Fatalf("after unloading veth1: links %v", s.links)
			}
			if _, err := Unload(place, nil); err != nil {
				t.Fatalf("unload: %v", err)
			}
			if _, err := os.Stat(place.Dir()); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("after unload, %s: %v", place.Dir(), err)
			}
			if _, err := Open(place); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("open after unload: %v", err)
			}
			if n := attachedPrograms(t, hook); n != 0 {
				t.Errorf("after unload, %d links remain in the namespace", n)
			}
		})
	}
}

// attachedPrograms counts the programs of hook's kind attached to this
// namespace's veth pair. It asks each interface (netlink for XDP,
// BPF_PROG_QUERY for tcx) rather than walking the system's links, whose
// ifindexes may belong to other namespaces' interfaces: kernel tests of
// other packages run at the same time.
func attachedPrograms(t *testing.T, hook codegen.Hook) int {
	t.Helper()
	n := 0
	for _, name := range []string{"veth0", "veth1"} {
		ifi, err := net.InterfaceByName(name)
		if err != nil {
			t.Fatal(err)
		}
		if hook == codegen.HookXDP {
			out, err := exec.Command("ip", "-j", "-d", "link", "show", "dev", name).Output()
			if err != nil {
				t.Fatalf("ip link show %s: %v", name, err)
			}
			var links []struct {
				XDP *struct{} `json:"xdp"`
			}
			if err := json.Unmarshal(out, &links); err != nil {
				t.Fatalf("ip link show %s: %v", name, err)
			}
			for _, l := range links {
				if l.XDP != nil {
					n++
				}
			}
			continue
		}
		attach := ebpf.AttachTCXIngress
		if hook == codegen.HookTCEgress {
			attach = ebpf.AttachTCXEgress
		}
		res, err := link.QueryPrograms(link.QueryOptions{Target: ifi.Index, Attach: attach})
		if err != nil {
			t.Fatalf("query %s programs on %s: %v", hook, name, err)
		}
		n += len(res.Programs)
	}
	return n
}

// TestSwapFailureLeavesFilter: a swap that fails at any step before the
// links switch, or while they switch, leaves the running program, its
// links, pins and counters as they were.
func TestSwapFailureLeavesFilter(t *testing.T) {
	cases := []struct {
		name  string
		setup func(t *testing.T, s *Swap)
		want  error // matched with errors.Is when set
		msg   string
	}{
		{
			name: "verifier rejection",
			setup: func(t *testing.T, s *Swap) {
				spec := s.Program.Spec.Copy()
				// R0 is never set: the verifier refuses to return it.
				spec.Programs[abi.ProgramName].Instructions = asm.Instructions{asm.Return()}
				p := *s.Program
				p.Spec = spec
				s.Program = &p
			},
			msg: "R0 !read_ok",
		},
		{
			name: "map creation failure",
			setup: func(t *testing.T, s *Swap) {
				spec := s.Program.Spec.Copy()
				spec.Maps[abi.IfacesMap].MaxEntries = 0
				p := *s.Program
				p.Spec = spec
				s.Program = &p
			},
			msg: "map ifaces",
		},
		{
			name:  "missing interface",
			setup: func(t *testing.T, s *Swap) { s.Ifaces = []string{"nosuch0"} },
			msg:   "interface nosuch0",
		},
		{
			name: "replaced by someone else",
			setup: func(t *testing.T, s *Swap) {
				other := newPassProgram(t, s.Place.Hook)
				s.Update = func(l link.Link, new, old *ebpf.Program) error {
					if err := l.Update(other); err != nil {
						t.Fatalf("someone else's update: %v", err)
					}
					return ReplaceProgram(l, new, old)
				}
			},
			want: ErrReplaced,
		},
		{
			name: "other IP family",
			setup: func(t *testing.T, s *Swap) {
				rs, err := iptables.Parse("test.rules", []byte(ruleset(s.Place.Hook, "-p tcp -m tcp --dport 22 -j DROP")), iptables.Options{Family: rules.IPv6, ForceFamily: true})
				if err != nil {
					t.Fatal(err)
				}
				p, err := ir.Lower(rs, ir.LowerOptions{Chain: entryChain(s.Place.Hook)})
				if err != nil {
					t.Fatal(err)
				}
				if s.Program, err = codegen.Compile(p, codegen.Options{Trace: true, Hook: s.Place.Hook}); err != nil {
					t.Fatal(err)
				}
				if s.Meta, s.Counters, err = NewMeta(rs, s.Program, "test.rules.v6"); err != nil {
					t.Fatal(err)
				}
			},
			want: ErrFamily,
		},
		{
			name: "second link fails",
			setup: func(t *testing.T, s *Swap) {
				calls := 0
				s.Update = func(l link.Link, new, old *ebpf.Program) error {
					if calls++; calls == 2 {
						return errors.New("injected failure")
					}
					return ReplaceProgram(l, new, old)
				}
			},
			msg: "injected failure",
		},
	}
	for _, hook := range allHooks {
		for _, c := range cases {
			t.Run(hook.String()+"/"+c.name, func(t *testing.T) {
				ns := inFreshNetns(t)
				place := testPlace(t, ns, hook)
				mustSwap(t, newSwap(t, place, ruleset(hook, rulesA...), "veth0", "veth1"))
				for range 3 {
					pinnedVerdict(t, place, frame(t, "tcp", 22))
				}
				before := readState(t, place)
				if before.counters[1].Packets != 3 {
					t.Fatalf("counters before: %v", before.counters)
				}

				s := newSwap(t, place, ruleset(hook, rulesB...))
				c.setup(t, s)
				_, err := s.Run()
				switch {
				case err == nil:
					t.Fatal("swap succeeded")
				case c.want != nil && !errors.Is(err, c.want):
					t.Fatalf("error %v, want %v", err, c.want)
				case c.msg != "" && !strings.Contains(err.Error(), c.msg):
					t.Fatalf("error %q does not mention %q", err, c.msg)
				}
				t.Logf("error: %.200s", err)

				after := readState(t, place)
				if after.program != before.program || after.loadedAt != before.loadedAt {
					t.Errorf("pinned program %d loaded %s, want %d loaded %s", after.program, after.loadedAt, before.program, before.loadedAt)
				}
				for i, id := range after.links {
					want := before.links[i]
					if c.want == ErrReplaced && id != want {
						continue // someone else's program stays where they put it
					}
					if id != want {
						t.Errorf("link on ifindex %d runs program %d, want %d", i, id, want)
					}
				}
				if len(after.links) != len(before.links) {
					t.Errorf("links %v, want %v", after.links, before.links)
				}
				for i := range before.counters {
					if after.counters[i] != before.counters[i] {
						t.Errorf("counter %d: %v, want %v", i, after.counters[i], before.counters[i])
					}
				}
				ents, _ := os.ReadDir(place.Dir())
				for _, e := range ents {
					if strings.HasSuffix(e.Name(), newSuffix) {
						t.Errorf("pin %s left behind", e.Name())
					}
				}
				if v := pinnedVerdict(t, place, frame(t, "tcp", 22)); v != ir.VerdictDrop {
					t.Errorf("tcp/22 %v, want DROP from the old rule set", v)
				}
			})
		}
	}
}

// newPassProgram loads a program for hook that passes every packet.
func newPassProgram(t *testing.T, hook codegen.Hook) *ebpf.Program {
	typ, at, ret := ebpf.XDP, ebpf.AttachXDP, int32(xdpPass)
	switch hook {
	case codegen.HookTCIngress:
		typ, at, ret = ebpf.SchedCLS, ebpf.AttachTCXIngress, tcActOK
	case codegen.HookTCEgress:
		typ, at, ret = ebpf.SchedCLS, ebpf.AttachTCXEgress, tcActOK
	}
	p, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Type: typ, AttachType: at, License: "GPL",
		Instructions: asm.Instructions{asm.Mov.Imm(asm.R0, ret), asm.Return()},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

// TestCountersCarryOver: a rule that is in both rule sets keeps its
// counters, including what the old program counted between the snapshot
// and the swap; a new rule starts at zero; without Since nothing carries.
func TestCountersCarryOver(t *testing.T) {
	for _, hook := range allHooks {
		t.Run(hook.String(), func(t *testing.T) {
			ns := inFreshNetns(t)
			place := testPlace(t, ns, hook)
			mustSwap(t, newSwap(t, place, ruleset(hook, rulesA...), "veth0"))
			for range 3 {
				pinnedVerdict(t, place, frame(t, "tcp", 22)) // rule A1
			}
			pinnedVerdict(t, place, frame(t, "udp", 53)) // rule A0
			pinnedVerdict(t, place, frame(t, "tcp", 80)) // policy

			a, err := Open(place)
			if err != nil {
				t.Fatal(err)
			}
			snap, err := a.Snapshot()
			a.Close()
			if err != nil {
				t.Fatal(err)
			}
			// B moves udp/53 to second place, adds tcp/80 first, and changes
			// tcp/22's target: only udp/53 and the policy continue.
			s := newSwap(t, place, ruleset(hook, rulesB...))
			s.Counters, s.Since = snap.Carry(s.Program), snap
			inner := s.Update
			if inner == nil {
				inner = ReplaceProgram
			}
			s.Update = func(l link.Link, new, old *ebpf.Program) error {
				// Counted by the old program after the snapshot: carried too.
				pinnedVerdict(t, place, frame(t, "udp", 53))
				return inner(l, new, old)
			}
			mustSwap(t, s)
			got := readState(t, place).counters
			want := []uint64{0, 2, 0, 1} // tcp/80, udp/53, tcp/22, policy
			for i, w := range want {
				if got[i].Packets != w {
					t.Errorf("counter %d: %d packets, want %d (all %v)", i, got[i].Packets, w, got)
				}
			}
			for i, c := range got {
				if c.Bytes != c.Packets*64 { // the frames carry 64-byte IP packets
					t.Errorf("counter %d: %d bytes for %d packets", i, c.Bytes, c.Packets)
				}
			}

			// A swap without Since (restore without -c) starts at zero.
			mustSwap(t, newSwap(t, place, ruleset(hook, rulesB...)))
			for i, c := range readState(t, place).counters {
				if c != (abi.Counter{}) {
					t.Errorf("after a fresh restore, counter %d is %v", i, c)
				}
			}
		})
	}
}

// TestSwapChecksSnapshot: counters computed from a snapshot of another
// program are refused.
func TestSwapChecksSnapshot(t *testing.T) {
	ns := inFreshNetns(t)
	place := testPlace(t, ns, codegen.HookXDP)
	mustSwap(t, newSwap(t, place, ruleset(codegen.HookXDP, rulesA...), "veth0"))
	a, err := Open(place)
	if err != nil {
		t.Fatal(err)
	}
	snap, err := a.Snapshot()
	a.Close()
	if err != nil {
		t.Fatal(err)
	}
	mustSwap(t, newSwap(t, place, ruleset(codegen.HookXDP, rulesB...)))
	s := newSwap(t, place, ruleset(codegen.HookXDP, rulesA...))
	s.Counters, s.Since = snap.Carry(s.Program), snap
	if _, err := s.Run(); !errors.Is(err, ErrChanged) {
		t.Fatalf("swap with a stale snapshot: %v, want ErrChanged", err)
	}
}

// TestStalePinsReaped: pins under this namespace's id that carry another
// namespace's cookie were left by a deleted namespace whose id the kernel
// gave to this one; they are removed instead of being taken for this
// namespace's filter (whose links would be severed), and a load starts
// afresh. The other namespace is simulated by renaming the cookie mark.
func TestStalePinsReaped(t *testing.T) {
	ns := inFreshNetns(t)
	place := testPlace(t, ns, codegen.HookTCIngress)
	mustSwap(t, newSwap(t, place, ruleset(place.Hook, rulesA...), "veth0"))
	nsDir := filepath.Dir(place.Dir())
	marks, err := filepath.Glob(filepath.Join(nsDir, cookiePrefix+"*"))
	if err != nil || len(marks) != 1 {
		t.Fatalf("cookie marks %v (%v), want one", marks, err)
	}
	if err := os.Rename(marks[0], filepath.Join(nsDir, cookiePrefix+"1")); err != nil {
		t.Fatal(err)
	}
	places, err := Places(place.Root, ns)
	if err != nil || len(places) != 0 {
		t.Errorf("places with another namespace's pins: %v (%v), want none", places, err)
	}
	if _, err := os.Stat(nsDir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("stale pins stayed: %v", err)
	}
	res := mustSwap(t, newSwap(t, place, ruleset(place.Hook, rulesB...), "veth0"))
	if res.Replaced != 0 {
		t.Errorf("a load over stale pins replaced program %d", res.Replaced)
	}
	if marks, _ := filepath.Glob(filepath.Join(nsDir, cookiePrefix+"*")); len(marks) != 1 || marks[0] == filepath.Join(nsDir, cookiePrefix+"1") {
		t.Errorf("cookie marks after the load: %v", marks)
	}
	// The namespace's directory, mark and all, goes with its last filter.
	if _, err := Unload(place, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(nsDir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the namespace's pin directory stayed after unload: %v", err)
	}
}

// TestRootOwnership: a pin root another user owns, or that others may
// write (a squatter's, on a bpffs of mode 1777), or that is a symbolic
// link, is refused by every way in, with the reason; a root of the
// user's own with mode 0700 is used.
func TestRootOwnership(t *testing.T) {
	ns := inFreshNetns(t)
	place := testPlace(t, ns, codegen.HookTCIngress)
	root := place.Root
	if err := os.Mkdir(root, 0o700); err != nil {
		t.Fatal(err)
	}
	other := filepath.Join(filepath.Dir(root), "elsewhere")
	if err := os.Mkdir(other, 0o700); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name  string
		setup func() error
	}{
		{"world-writable", func() error { return os.Chmod(root, 0o1777) }},
		{"group-readable", func() error { return os.Chmod(root, 0o750) }},
		{"another owner", func() error { return os.Chown(root, 65534, 65534) }},
		{"symbolic link", func() error {
			if err := os.Remove(root); err != nil {
				return err
			}
			return os.Symlink(other, root)
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			if err := c.setup(); err != nil {
				t.Fatal(err)
			}
			if _, err := newSwap(t, place, ruleset(place.Hook, rulesA...), "veth0").Run(); !errors.Is(err, ErrRootNotOwned) {
				t.Errorf("swap: %v, want %v", err, ErrRootNotOwned)
			}
			if _, err := Places(root, ns); !errors.Is(err, ErrRootNotOwned) || !strings.Contains(err.Error(), root) {
				t.Errorf("places: %v, want %v naming %s", err, ErrRootNotOwned, root)
			}
			if _, err := Here(root, place.Hook); !errors.Is(err, ErrRootNotOwned) {
				t.Errorf("here: %v", err)
			}
			if _, _, err := OtherNetNS(root); !errors.Is(err, ErrRootNotOwned) {
				t.Errorf("other namespaces: %v", err)
			}
			// Put it right again.
			os.Remove(root)
			if err := os.Mkdir(root, 0o700); err != nil {
				t.Fatal(err)
			}
		})
	}
	mustSwap(t, newSwap(t, place, ruleset(place.Hook, rulesA...), "veth0"))
	if places, err := Places(root, ns); err != nil || len(places) != 1 {
		t.Errorf("places of a root of mode 0700: %v (%v)", places, err)
	}
}
