package codegen_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/cilium/ebpf"

	"bpfwall/codegen"
	"bpfwall/codegen/abi"
	"bpfwall/rules"
)

func TestParseHook(t *testing.T) {
	for _, tc := range []struct {
		name string
		want codegen.Hook
		ok   bool
	}{
		{"xdp", codegen.HookXDP, true},
		{"tc-ingress", codegen.HookTCIngress, true},
		{"tc-egress", codegen.HookTCEgress, true},
		{"sk-lookup", codegen.HookSkLookup, true},
		{"XDP", 0, false},
		{"", 0, false},
	} {
		h, err := codegen.ParseHook(tc.name)
		if (err == nil) != tc.ok || (tc.ok && (h != tc.want || h.String() != tc.name)) {
			t.Errorf("ParseHook(%q) = %v, %v", tc.name, h, err)
		}
	}
}

const smallRules = "*filter\n:INPUT DROP [0:0]\n:FORWARD ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n" +
	"-A INPUT -i lo -j ACCEPT\n-A INPUT -i eth+ -p tcp -j ACCEPT\n-A INPUT ! -i e+ -j DROP\n-A INPUT -i lo -p udp -j DROP\n" +
	"-A OUTPUT -o lo -j ACCEPT\n-A OUTPUT -o eth+ -p tcp -j ACCEPT\n-A OUTPUT ! -o e+ -j DROP\n-A OUTPUT -o lo -p udp -j DROP\nCOMMIT\n"

func TestSpec(t *testing.T) {
	for _, tc := range []struct {
		chain      string
		hook       codegen.Hook
		typ        ebpf.ProgramType
		attach     ebpf.AttachType
		multiBuf   bool
		patterns   int
		loMask     uint64
		eth0Mask   uint64
		emptyMask  uint64
		otherMasks uint64
	}{
		// lo, eth+, e+: lo matches lo; eth0 matches eth+ and e+.
		{"INPUT", codegen.HookXDP, ebpf.XDP, ebpf.AttachXDP, true, 3, 0b001, 0b110, 0, 0},
		{"INPUT", codegen.HookTCIngress, ebpf.SchedCLS, ebpf.AttachTCXIngress, false, 3, 0b001, 0b110, 0, 0},
		{"OUTPUT", codegen.HookTCEgress, ebpf.SchedCLS, ebpf.AttachTCXEgress, false, 3, 0b001, 0b110, 0, 0},
	} {
		p, err := compileChain(t, smallRules, rules.IPv4, tc.chain, tc.hook, codegen.O0)
		if err != nil {
			t.Fatal(err)
		}
		spec := p.Spec.Programs[abi.ProgramName]
		if spec == nil || spec.Type != tc.typ || spec.AttachType != tc.attach || spec.License != "GPL" {
			t.Fatalf("%s: program spec %+v", tc.hook, spec)
		}
		if got := spec.Flags&(1<<5) != 0; got != tc.multiBuf {
			t.Errorf("%s: BPF_F_XDP_HAS_FRAGS is %v", tc.hook, got)
		}
		if m := p.Spec.Maps[abi.CountersMap]; m.MaxEntries != 1 || m.ValueSize != abi.CounterBlockSize {
			t.Errorf("%s: counters has %d entries of %d bytes, want one block for the four rules and the policy", tc.hook, m.MaxEntries, m.ValueSize)
		}
		for _, name := range []string{abi.DecisionMap, abi.IfacesMap, abi.ScratchMap} {
			if p.Spec.Maps[name] == nil {
				t.Errorf("%s: no map %s", tc.hook, name)
			}
		}
		if len(p.Ifaces) != tc.patterns {
			t.Errorf("%s: interface patterns %+v", tc.hook, p.Ifaces)
		}
		for name, want := range map[string]uint64{"lo": tc.loMask, "eth0": tc.eth0Mask, "": tc.emptyMask, "wlan0": tc.otherMasks} {
			if got := p.IfaceMask(name); got != want {
				t.Errorf("%s: IfaceMask(%q) = %#b, want %#b", tc.hook, name, got, want)
			}
		}
	}
}

func TestCompileErrors(t *testing.T) {
	p := compileText(t, smallRules, rules.IPv4, codegen.HookXDP).IR
	if _, err := compileTextErr(t, smallRules, rules.IPv4, codegen.HookTCEgress); err == nil || !strings.Contains(err.Error(),
		"rules:5:2: -i is not supported on tc-egress in chain INPUT: the hook does not know the input interface") {
		t.Errorf("INPUT's -i on tc-egress: %v", err)
	}
	for _, tc := range []struct {
		opts codegen.Options
		want string
	}{
		{codegen.Options{Trace: true, Hook: codegen.HookXDP, Level: 7}, "optimization level 7 does not exist"},
		{codegen.Options{Trace: true, Hook: codegen.Hook(9)}, "unknown hook 9"},
	} {
		if _, err := codegen.Compile(p, tc.opts); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Compile(%+v) = %v, want %q", tc.opts, err, tc.want)
		}
	}
	var b strings.Builder
	b.WriteString("*filter\n:INPUT DROP [0:0]\n:FORWARD ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n")
	for i := range 65 {
		fmt.Fprintf(&b, "-A INPUT -i veth%d -j ACCEPT\n", i)
	}
	b.WriteString("COMMIT\n")
	rs := b.String()
	if _, err := compileTextErr(t, rs, rules.IPv4, codegen.HookXDP); err == nil || !strings.Contains(err.Error(), "65 interface names, more than the 64") {
		t.Errorf("65 interface names: %v", err)
	}
}

// TestIngressStateWarnings: a program that looks the conntrack state up
// before conntrack runs says which rules that touches; tc-egress, which
// reads the state conntrack gave, has nothing to say.
func TestIngressStateWarnings(t *testing.T) {
	src := "*filter\n:INPUT DROP [0:0]\n:FORWARD DROP [0:0]\n:OUTPUT DROP [0:0]\n" +
		"-A INPUT -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT\n" +
		"-A INPUT -p tcp --dport 22 -j ACCEPT\n" +
		"-A INPUT -m state --state INVALID -j DROP\n" +
		"-A OUTPUT -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT\n" +
		"COMMIT\n"
	for _, hook := range []codegen.Hook{codegen.HookXDP, codegen.HookTCIngress} {
		p := compileText(t, src, rules.IPv4, hook)
		var lines []int
		for _, w := range p.Warnings {
			lines = append(lines, w.Pos.Line)
			// TCP segments of known connections get conntrack's window
			// checks, and the netfilter stage decides what the lookup
			// cannot (ICMP, other protocols, fragments): only NAT's
			// sequence adjustment and VLAN-tagged frames are left to warn
			// of.
			if !strings.Contains(w.Msg, "NAT helper renumbers") || !strings.Contains(w.Msg, "VLAN-tagged") || strings.Contains(w.Msg, "window") {
				t.Errorf("%s: warning %q does not name the ingress limit, or names one that is gone", hook, w.Msg)
			}
		}
		if !slices.Equal(lines, []int{5, 7}) {
			t.Errorf("%s: warnings on lines %v, want [5 7]", hook, lines)
		}
	}
	p, err := compileChain(t, src, rules.IPv4, "OUTPUT", codegen.HookTCEgress, codegen.O0)
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Warnings) != 0 {
		t.Errorf("tc-egress: warnings %v", p.Warnings)
	}
}
