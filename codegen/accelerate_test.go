package codegen_test

import (
	"fmt"
	"strings"
	"testing"

	"bpfwall/codegen"
	"bpfwall/ir"
	"bpfwall/parser/iptables"
	"bpfwall/rules"
)

// acceleratorOf returns the accelerator of the filter INPUT and FORWARD
// chains of the rule set src.
func acceleratorOf(t *testing.T, src string) *ir.Program {
	t.Helper()
	rs, err := iptables.Parse("t", []byte(src), iptables.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var chains [2]*ir.Program
	for i, name := range []string{"INPUT", "FORWARD"} {
		if chains[i], err = ir.Lower(rs, ir.LowerOptions{Table: "filter", Chain: name}); err != nil {
			t.Fatal(err)
		}
	}
	p, err := codegen.Accelerator(chains[0], chains[1])
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestAccelerator checks what an accelerator keeps of the chains: the
// matches xdp tests as the chain would (-o too, from the route lookup),
// every other match removed from
// a rule that then accepts (passes), DROP kept, REJECT, LOG and rules
// without a target accepting, a RETURN of the chain itself its policy,
// and the entry chain that routes packets to them.
func TestAccelerator(t *testing.T) {
	p := acceleratorOf(t, `*filter
:INPUT DROP [0:0]
:FORWARD DROP [0:0]
:OUTPUT ACCEPT [0:0]
:svc - [0:0]
-A INPUT -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT
-A INPUT -p tcp --dport 22 -m limit --limit 1/s -j ACCEPT
-A INPUT -p tcp --dport 23 -j REJECT
-A INPUT -s 10.0.0.0/8 -j DROP
-A INPUT -i eth0 -j svc
-A INPUT -p udp
-A INPUT -s 10.1.0.0/16 -j RETURN
-A INPUT -j LOG
-A FORWARD -i eth0 -o eth1 -j ACCEPT
-A FORWARD -m mark --mark 1 -j DROP
-A FORWARD -p udp -j DROP
-A svc -p tcp --dport 80 -j ACCEPT
-A svc -p tcp --dport 81 -j RETURN
-A svc -j DROP
COMMIT
`)
	want := `ipv4 table filter
chain ACCELERATE policy ACCEPT
  r0 -:0  dst 224.0.0.0/4  -> ACCEPT
  r1 -:0  route forward  -> goto FORWARD
  r2 -:0  route local  -> goto INPUT
chain FORWARD
  r3 -:0  ttl < 2  -> ACCEPT
  r4 t:14  in eth0  out eth1  -> ACCEPT
  r5 t:15  -> ACCEPT
  r6 t:16  proto udp  -> DROP
  r7 -:0  -> DROP
chain INPUT
  r8 t:6  ctstate ESTABLISHED,RELATED  -> ACCEPT
  r9 t:7  proto tcp  l4hdr 20 frag8-drop  dport 22  -> ACCEPT
  r10 t:8  proto tcp  l4hdr 20 frag8-drop  dport 23  -> ACCEPT
  r11 t:9  src 10.0.0.0/8  -> DROP
  r12 t:10  in eth0  -> jump svc
  r13 t:11  proto udp  -> ACCEPT
  r14 t:12  src 10.1.0.0/16  -> DROP
  r15 t:13  -> ACCEPT
  r16 -:0  -> DROP
chain svc
  r17 t:17  proto tcp  l4hdr 20 frag8-drop  dport 80  -> ACCEPT
  r18 t:18  proto tcp  l4hdr 20 frag8-drop  dport 81  -> RETURN
  r19 t:19  -> DROP
`
	if got := p.String(); got != want {
		t.Errorf("accelerator:\n%s\nwant:\n%s", got, want)
	}
	for _, level := range codegen.Levels {
		prog, err := codegen.Compile(p, codegen.Options{Hook: codegen.HookXDP, Accelerate: true, Level: level})
		if err != nil {
			t.Fatalf("%s: %v", level, err)
		}
		if !prog.Accelerator || prog.Netfilter != nil || len(prog.Warnings) > 0 {
			t.Errorf("%s: accelerator %v, stage %v, warnings %v", level, prog.Accelerator, prog.Netfilter != nil, prog.Warnings)
		}
	}
	if _, err := codegen.Compile(p, codegen.Options{Hook: codegen.HookTCIngress, Accelerate: true}); err == nil {
		t.Error("an accelerator compiles for tc-ingress")
	}
	if _, err := codegen.Compile(p, codegen.Options{Hook: codegen.HookXDP}); err == nil || !strings.Contains(err.Error(), "route match") {
		t.Errorf("the route match compiles outside an accelerator: %v", err)
	}
}

// TestAcceleratorIPv6 checks the destinations an IPv6 accelerator leaves
// to the stack, and that nothing to drop makes no accelerator.
func TestAcceleratorIPv6(t *testing.T) {
	rs, err := iptables.Parse("t", []byte("*filter\n:INPUT ACCEPT [0:0]\n-A INPUT -p tcp --dport 23 -j DROP\nCOMMIT\n"), iptables.Options{Family: rules.IPv6, ForceFamily: true})
	if err != nil {
		t.Fatal(err)
	}
	in, err := ir.Lower(rs, ir.LowerOptions{Table: "filter", Chain: "INPUT"})
	if err != nil {
		t.Fatal(err)
	}
	p, err := codegen.Accelerator(in, nil)
	if err != nil {
		t.Fatal(err)
	}
	got := p.String()
	for _, want := range []string{"dst ff00::/8  -> ACCEPT", "dst fe80::/10  -> ACCEPT", "src fe80::/10  -> ACCEPT", "route local  -> goto INPUT"} {
		if !strings.Contains(got, want) {
			t.Errorf("accelerator lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "FORWARD") {
		t.Errorf("an accelerator without FORWARD routes to it:\n%s", got)
	}
	if p, err := codegen.Accelerator(nil, nil); p != nil || err != nil {
		t.Errorf("Accelerator(nil, nil) = %v, %v", p, err)
	}
}

// TestAcceleratorSharedChain: a user chain both INPUT and FORWARD jump
// to is copied for each.
func TestAcceleratorSharedChain(t *testing.T) {
	p := acceleratorOf(t, "*filter\n:INPUT DROP [0:0]\n:FORWARD DROP [0:0]\n:OUTPUT ACCEPT [0:0]\n:x - [0:0]\n"+
		"-A INPUT -j x\n-A FORWARD -j x\n-A x -p tcp --dport 22 -j ACCEPT\n-A x -p udp -j DROP\nCOMMIT\n")
	got := p.String()
	for _, want := range []string{"chain x\n", "chain x@INPUT\n", "-> jump x\n", "-> jump x@INPUT\n"} {
		if !strings.Contains(got, want) {
			t.Errorf("accelerator lacks %q:\n%s", want, got)
		}
	}
	for _, level := range codegen.Levels {
		if _, err := codegen.Compile(p, codegen.Options{Hook: codegen.HookXDP, Accelerate: true, Level: level}); err != nil {
			t.Fatalf("%s: %v", level, err)
		}
	}
}

// TestAcceleratorOutIfaceUnclassified: an accelerator finds the output
// device by a route lookup after the tables, so rules that test an exact
// -o name stay plain, while the same rules on -i are classified.
func TestAcceleratorOutIfaceUnclassified(t *testing.T) {
	for _, dir := range []string{"-i", "-o"} {
		var b strings.Builder
		b.WriteString("*filter\n:INPUT ACCEPT [0:0]\n:FORWARD ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n")
		for i := range 64 {
			fmt.Fprintf(&b, "-A FORWARD %s eth%d -s 10.0.%d.%d/32 -j DROP\n", dir, i%4, i/8, i)
		}
		b.WriteString("COMMIT\n")
		prog, err := codegen.Compile(acceleratorOf(t, b.String()), codegen.Options{Hook: codegen.HookXDP, Accelerate: true, Level: codegen.O1})
		if err != nil {
			t.Fatalf("%s: %v", dir, err)
		}
		if classified := prog.Classified >= 64; classified != (dir == "-i") {
			t.Errorf("%s: %d rules decided by lookups", dir, prog.Classified)
		}
	}
}

// TestAcceleratorTexts: an accelerator made from chains lowered without
// their texts (ir.LowerOptions.NoText) gives each rule made from a rule
// that rule's text (ir.Program.TextOf), as one made from chains lowered
// with them does, and its own rules theirs.
func TestAcceleratorTexts(t *testing.T) {
	src := `*filter
:INPUT DROP [0:0]
:FORWARD DROP [0:0]
:OUTPUT ACCEPT [0:0]
:svc - [0:0]
-A INPUT -s 10.0.0.0/8 -j DROP
-A INPUT -i eth0 -j svc
-A FORWARD -p udp -m comment --comment "no udp" -j DROP
-A FORWARD -j svc
-A svc -p tcp --dport 80 -j ACCEPT
COMMIT
`
	want := acceleratorOf(t, src)
	rs, err := iptables.Parse("t", []byte(src), iptables.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var chains [2]*ir.Program
	for i, name := range []string{"INPUT", "FORWARD"} {
		if chains[i], err = ir.Lower(rs, ir.LowerOptions{Table: "filter", Chain: name, NoText: true}); err != nil {
			t.Fatal(err)
		}
		// What a restore's loader.MetaSource gives: the texts a lowering
		// with them has.
		withText, err := ir.Lower(rs, ir.LowerOptions{Table: "filter", Chain: name})
		if err != nil {
			t.Fatal(err)
		}
		chains[i].Texts = func(id int) string { return withText.Rules[id].Text }
	}
	got, err := codegen.Accelerator(chains[0], chains[1])
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Rules) != len(want.Rules) {
		t.Fatalf("%d rules, want %d", len(got.Rules), len(want.Rules))
	}
	made := 0
	for i, r := range got.Rules {
		if r.Pos != (rules.Pos{}) {
			made++
			if r.Text != "" {
				t.Errorf("rule %d made from %s has the text %q of its own", r.ID, r.Pos, r.Text)
			}
		}
		if text := got.TextOf(r); text != want.Rules[i].Text || text == "" {
			t.Errorf("rule %d: text %q, want %q", r.ID, text, want.Rules[i].Text)
		}
	}
	if made < 5 {
		t.Errorf("only %d rules made from the chains' rules", made)
	}
}
