package difftest

import (
	"testing"

	"bpfwall/internal/packets"
	"bpfwall/rules"
)

// TestConntrackFlush: a probe that answers an accepted one is
// ESTABLISHED, and NEW again once the firewall's conntrack is flushed.
func TestConntrackFlush(t *testing.T) {
	requireKernel(t)
	topo := NewTopology(t, TopologyOptions{})
	text := "*filter\n:INPUT ACCEPT [0:0]\n:FORWARD DROP [0:0]\n:OUTPUT ACCEPT [0:0]\n" +
		"-A FORWARD -m conntrack --ctstate ESTABLISHED -j ACCEPT\n-A FORWARD -s 10.1.0.1/32 -j ACCEPT\nCOMMIT\n"
	if err := topo.Load(rules.IPv4, []byte(text)); err != nil {
		t.Fatal(err)
	}
	frame := func(d packets.Desc) []byte {
		f, err := d.Frame()
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	ask := frame(packets.Desc{Proto: "udp", Src: "10.1.0.1", Dst: "10.2.0.1", SPort: 1000, DPort: 2000})
	answer := frame(packets.Desc{Proto: "udp", Src: "10.2.0.1", Dst: "10.1.0.1", SPort: 2000, DPort: 1000})
	if flowKey(ask) != flowKey(answer) {
		t.Error("a probe and its answer have different flow keys")
	}
	got, err := topo.sendBatch([][]byte{answer, ask, answer})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 {
		t.Fatalf("%d of answer, ask, answer arrived; want the ask and the second answer", len(got))
	}
	if err := topo.flushConntrack(); err != nil {
		t.Fatal(err)
	}
	if got, err := topo.sendBatch([][]byte{answer}); err != nil || len(got) != 0 {
		t.Fatalf("after the flush the answer is NEW and dropped; %d arrived (%v)", len(got), err)
	}
}
