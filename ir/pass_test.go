package ir_test

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"bpfwall/internal/packets"
	"bpfwall/ir"
	"bpfwall/model"
	"bpfwall/rules"
)

// shadowRules are an INPUT chain with rules covered in every way the
// shadow pass knows, and some that look covered but are not.
const shadowRules = `*filter
:INPUT DROP [0:0]
:FORWARD ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
-A INPUT -s 10.0.0.0/8 -p udp -m udp --dport 53 -j ACCEPT
-A INPUT -s 10.1.0.0/16 -p udp -m udp --dport 53 -j DROP
-A INPUT -s 10.0.0.0/8 -p tcp -m multiport --dports 1:1000 -j ACCEPT
-A INPUT -s 10.1.0.0/16 -p tcp -m tcp --dport 22 -j DROP
-A INPUT -s 192.168.0.0/16 -j DROP
-A INPUT -s 192.168.1.0/24 -p tcp -m tcp --dport 80 -j ACCEPT
-A INPUT -p tcp -m tcp --dport 1000:2000 -j ACCEPT
-A INPUT -p tcp -m tcp --dport 1024:1535 -j DROP
-A INPUT -p tcp -m multiport --dports 1024:1535 -j DROP
-A INPUT -m iprange --src-range 172.16.0.0-172.16.255.255 -j DROP
-A INPUT -s 172.16.3.0/24 -p udp -m udp --sport 7 -j LOG
-A INPUT -s 172.16.3.0/24 ! -p udp -j ACCEPT
COMMIT
`

func TestShadowed(t *testing.T) {
	p := lowerText(t, rules.IPv4, "INPUT", shadowRules)
	var got []string
	for _, w := range ir.Shadowed(p) {
		got = append(got, w.String())
	}
	want := []string{
		// Same class, covered.
		"rules:6: never matches: covered by rules:5",
		// No L4 header in the cover: it decides every packet.
		"rules:10: never matches: covered by rules:9",
		// Ranges split into prefixes.
		"rules:12: never matches: covered by rules:11",
		// tcp reads 20 bytes, multiport 4: a packet too short for line 13
		// is too short for line 11, which drops it first.
		"rules:13: never matches: covered by rules:11",
		// Any action, even LOG, is covered.
		"rules:15: never matches: covered by rules:14",
	}
	// Not covered: line 8 (multiport reads 4 bytes, tcp 20: a short
	// packet line 8 drops matches line 7) and line 16 (a negation).
	if !slices.Equal(got, want) {
		t.Errorf("Shadowed:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestPassesKeepEval runs every pass on random rule sets, verifying after
// each, and checks that Trace of the optimized program gives every packet
// the verdict, deciding rule and counted rules of the original, and that
// the original is unchanged although the optimized program shares the
// rules no pass changed.
func TestPassesKeepEval(t *testing.T) {
	removed, changed := 0, 0
	for seed := range uint64(300) {
		fam := rules.IPv4
		if seed%3 == 2 {
			fam = rules.IPv6
		}
		src := randomShadowRules(seed, fam)
		p := lowerText(t, fam, "INPUT", src)
		text := p.String()
		q, err := ir.Optimize(p, ir.OptimizeOptions{Check: func(pass string, q *ir.Program) error { return ir.Verify(q) }})
		if err != nil {
			t.Fatalf("seed %d: %v\n%s", seed, err, src)
		}
		if after := p.String(); after != text {
			t.Fatalf("seed %d: Optimize changed the original:\n%s\nnow:\n%s", seed, text, after)
		}
		for i, r := range q.Rules {
			if r != p.Rules[i] {
				changed++
			}
		}
		removed += len(q.Removed)
		g := packets.NewGenerator(p, seed)
		var frames [][]byte
		for range 300 {
			frames = append(frames, g.Random().Data)
		}
		for _, r := range p.Rules {
			for _, a := range g.Aim(r, packets.AimOptions{Meta: model.Meta{InIface: "eth0"}}) {
				frames = append(frames, a.Frame)
			}
		}
		for _, f := range frames {
			pkt, err := model.Decode(f, model.Meta{InIface: "eth0"})
			if err != nil {
				continue
			}
			var before, after []int
			r1 := p.Trace(pkt, func(r *ir.Rule) { before = append(before, r.ID) })
			r2 := q.Trace(pkt, func(r *ir.Rule) { after = append(after, r.ID) })
			if outcome(r1) != outcome(r2) || !slices.Equal(before, after) {
				t.Fatalf("seed %d: original %s counted %v, optimized %s counted %v\n%s\noptimized:\n%s", seed, r1, before, r2, after, src, q)
			}
		}
	}
	if removed < 50 || changed < 50 {
		t.Errorf("only %d rules removed and %d changed in 300 rule sets", removed, changed)
	}
}

// randomShadowRules returns an INPUT chain of rules drawn from few
// prefixes, protocols and ports, so that many rules cover others.
func randomShadowRules(seed uint64, fam rules.Family) string {
	rng := rand.New(rand.NewPCG(seed, 99))
	pick := func(xs ...string) string { return xs[rng.IntN(len(xs))] }
	nets := []string{"10.0.0.0/8", "10.1.0.0/16", "10.1.2.0/24", "10.1.2.3/32", "192.168.0.0/16"}
	rangeSpec := "10.1.0.0-10.1.255.255"
	if fam == rules.IPv6 {
		nets = []string{"2001:db8::/32", "2001:db8:1::/48", "2001:db8:1:2::/64", "2001:db8:1:2::3/128", "fe80::/10"}
		rangeSpec = "2001:db8:1::-2001:db8:1:ffff:ffff:ffff:ffff:ffff"
	}
	var b strings.Builder
	b.WriteString("*filter\n:INPUT DROP [0:0]\n:FORWARD ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n:SUB - [0:0]\n")
	for range 4 + rng.IntN(20) {
		var r []string
		if rng.IntN(2) == 0 {
			r = append(r, "-s "+pick(nets...))
		}
		if rng.IntN(5) == 0 {
			r = append(r, "-d "+pick(nets...))
		}
		switch rng.IntN(7) {
		case 0:
			r = append(r, "-p tcp -m tcp --dport "+pick("22", "20:30", "1:1000", "0:65535"))
		case 1:
			r = append(r, "-p udp -m udp --sport "+pick("53", "50:60"))
		case 2:
			r = append(r, "-p "+pick("tcp", "udp")+" -m multiport --dports "+pick("22,80", "1:1000", "22:23,24"))
		case 3:
			r = append(r, "-p "+pick("tcp", "udp", "47"))
		case 4:
			r = append(r, "-p tcp -m tcp --syn")
		}
		if rng.IntN(6) == 0 {
			r = append(r, "-m iprange --src-range "+rangeSpec)
		}
		r = append(r, pick("-j ACCEPT", "-j DROP", "-j RETURN", "-j SUB", "-j LOG", ""))
		fmt.Fprintf(&b, "-A INPUT %s\n", strings.Join(r, " "))
	}
	b.WriteString("-A SUB -p udp -j DROP\nCOMMIT\n")
	return b.String()
}
