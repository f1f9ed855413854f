package packets

import (
	"testing"

	"bpfwall/ir"
	"bpfwall/model"
	"bpfwall/parser/iptables"
)

func TestGeneratorCoversRulesAndMalformedPackets(t *testing.T) {
	for _, src := range []string{
		"*filter\n:INPUT DROP [0:0]\n-A INPUT -s 10.1.0.0/16 -p tcp -m tcp --dport 1000:2000 -j ACCEPT\n-A INPUT -p icmp -m icmp --icmp-type 8 -j ACCEPT\nCOMMIT\n",
		"*filter\n:INPUT DROP [0:0]\n-A INPUT -s 2001:db8::/32 -p udp -m udp --sport 53 -j ACCEPT\nCOMMIT\n",
	} {
		rs, err := iptables.Parse("t", []byte(src), iptables.Options{})
		if err != nil {
			t.Fatal(err)
		}
		prog, err := ir.Lower(rs, ir.LowerOptions{})
		if err != nil {
			t.Fatal(err)
		}
		g := NewGenerator(prog, 1)
		const n = 4000
		accepted, invalid := 0, 0
		for range n {
			f := g.Random()
			frame := f.Data
			pkt, err := model.Decode(frame, model.Meta{InIface: f.Iface})
			if err != nil {
				t.Fatalf("generated an undecodable frame % x: %v", frame, err)
			}
			if pkt.Invalid != "" {
				invalid++
			}
			if res := prog.Eval(pkt); res.Rule != nil {
				accepted++
			}
		}
		// Packets aimed at the rules must hit them often, and a fair share
		// must be malformed, or the differential tests test little.
		if accepted < n/20 || invalid < n/50 || invalid > n/2 {
			t.Errorf("%d of %d packets matched a rule, %d were invalid", accepted, n, invalid)
		}
	}
}

// TestAimReachesHiddenRule: the base frame aimed at a rule behind a jump
// and after rules that would catch it reaches the rule, and the edges
// move one field at a time to the ends of its conditions and past them.
func TestAimReachesHiddenRule(t *testing.T) {
	src := "*filter\n:INPUT DROP [0:0]\n:web - [0:0]\n" +
		"-A INPUT -p udp -j DROP\n" +
		"-A INPUT -s 10.0.0.0/8 -p tcp -m tcp --dport 80:88 -j web\n" +
		"-A web -s 10.1.0.0/16 -j DROP\n" +
		"-A web -p tcp -m tcp --sport 1100:1999 -j DROP\n" +
		"-A web -m ttl --ttl-lt 250 -j DROP\n" +
		"-A web -i eth1 -p tcp -m tcp --sport 1000:2000 -m ttl --ttl-gt 100 -j ACCEPT\n" +
		"COMMIT\n"
	rs, err := iptables.Parse("t", []byte(src), iptables.Options{})
	if err != nil {
		t.Fatal(err)
	}
	prog, err := ir.Lower(rs, ir.LowerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	target := prog.Rules[len(prog.Rules)-1]
	for seed := range uint64(20) {
		g := NewGenerator(prog, seed)
		aimed := g.Aim(target, AimOptions{})
		eval := func(a Aimed) (*model.Packet, ir.Result) {
			pkt, err := model.Decode(a.Frame, a.Meta)
			if err != nil {
				t.Fatalf("seed %d: aimed frame % x: %v", seed, a.Frame, err)
			}
			return pkt, prog.Eval(pkt)
		}
		base, res := eval(aimed[0])
		if res.Rule != target {
			t.Fatalf("seed %d: the base frame is decided by %s, want the web ACCEPT rule", seed, res)
		}
		// The edges of --sport 1000:2000 and of --ttl-gt 100, each frame
		// otherwise the base frame.
		sports := map[uint16]ir.Verdict{}
		ttls := map[uint8]bool{}
		for _, a := range aimed[1:] {
			pkt, res := eval(a)
			if pkt.TTL == base.TTL {
				sports[pkt.SrcPort] = res.Verdict
			}
			if pkt.SrcPort == base.SrcPort {
				ttls[pkt.TTL] = true
			}
		}
		want := map[uint16]ir.Verdict{999: ir.VerdictDrop, 1000: ir.VerdictAccept, 2000: ir.VerdictAccept, 2001: ir.VerdictDrop}
		for p, v := range want {
			if sports[p] != v {
				t.Errorf("seed %d: the edge frame with source port %d gets %s, want %s", seed, p, sports[p], v)
			}
		}
		if !ttls[100] || !ttls[101] {
			t.Errorf("seed %d: edge frames have ttls %v, want 100 and 101 among them", seed, ttls)
		}
	}
}

// TestAimRespectsFixedMeta: with the interfaces fixed, aimed frames keep
// them; with them free, Aim picks the one the rule wants.
func TestAimRespectsFixedMeta(t *testing.T) {
	src := "*filter\n:FORWARD DROP [0:0]\n-A FORWARD -i in+ -o out1 -j ACCEPT\nCOMMIT\n"
	rs, err := iptables.Parse("t", []byte(src), iptables.Options{})
	if err != nil {
		t.Fatal(err)
	}
	prog, err := ir.Lower(rs, ir.LowerOptions{Chain: "FORWARD"})
	if err != nil {
		t.Fatal(err)
	}
	g := NewGenerator(prog, 1)
	fixed := model.Meta{InIface: "eth0", OutIface: "eth1"}
	for _, a := range g.Aim(prog.Rules[0], AimOptions{Meta: fixed}) {
		if a.Meta != fixed {
			t.Errorf("meta %+v, want the fixed %+v", a.Meta, fixed)
		}
	}
	a := g.Aim(prog.Rules[0], AimOptions{})[0]
	if a.Meta.InIface != "in0" || a.Meta.OutIface != "out1" {
		t.Errorf("free interfaces: got in %q out %q, want in0 and out1", a.Meta.InIface, a.Meta.OutIface)
	}
}

// TestFramesFitTheMTU: a length match open to 65535 gives no frame longer
// than an Ethernet frame, which a packet socket could not send.
func TestFramesFitTheMTU(t *testing.T) {
	// FORWARD: INPUT sees reassembled datagrams, where Lower refuses
	// length matches.
	src := "*filter\n:FORWARD DROP [0:0]\n-A FORWARD -m length --length 89:65535 -j ACCEPT\nCOMMIT\n"
	rs, err := iptables.Parse("t", []byte(src), iptables.Options{})
	if err != nil {
		t.Fatal(err)
	}
	prog, err := ir.Lower(rs, ir.LowerOptions{Chain: "FORWARD"})
	if err != nil {
		t.Fatal(err)
	}
	g := NewGenerator(prog, 1)
	for range 2000 {
		if f := g.Random(); len(f.Data) > 14+8+maxLength+64 {
			t.Fatalf("a %d-byte frame", len(f.Data))
		}
	}
}
