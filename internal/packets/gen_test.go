package packets

import (
	"testing"

	"bpfwall/ir"
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
			frame, iface := g.Frame()
			pkt, err := ir.Decode(frame, ir.Meta{InIface: iface})
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
