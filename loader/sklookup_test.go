package loader

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"

	"bpfwall/codegen"
	"bpfwall/codegen/abi"
	"bpfwall/internal/testenv"
	"bpfwall/internal/topology"
	"bpfwall/ir"
	"bpfwall/model"
	"bpfwall/parser/iptables"
	"bpfwall/parser/nft"
	"bpfwall/rules"
)

// mangle is a mangle table whose PREROUTING chain holds the rules given.
func mangle(lines ...string) string {
	var b strings.Builder
	b.WriteString("*mangle\n:PREROUTING ACCEPT [0:0]\n:INPUT ACCEPT [0:0]\n:FORWARD ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n:POSTROUTING ACCEPT [0:0]\n")
	for _, l := range lines {
		b.WriteString("-A PREROUTING " + l + "\n")
	}
	b.WriteString("COMMIT\n")
	return b.String()
}

// lookupSwap returns a swap of an sk-lookup rule set of family fam into
// place.
func lookupSwap(t testing.TB, place Place, fam rules.Family, text string) *Swap {
	t.Helper()
	rs, err := iptables.Parse("test.rules", []byte(text), iptables.Options{Family: fam, ForceFamily: true})
	if err != nil {
		t.Fatalf("parse: %v", err)
	}
	p, err := ir.Lower(rs, ir.LowerOptions{Table: "mangle", Chain: "PREROUTING"})
	if err != nil {
		t.Fatalf("lower: %v", err)
	}
	prog, err := codegen.Compile(p, codegen.Options{Trace: true, Hook: codegen.HookSkLookup})
	if err != nil {
		t.Fatalf("compile: %v", err)
	}
	meta, counters, err := NewMeta(rs, prog, "test.rules")
	if err != nil {
		t.Fatal(err)
	}
	return &Swap{Place: place, Program: prog, Meta: meta, Counters: counters}
}

// listenTCP listens on addr without multipath TCP, which SOCKHASH refuses,
// and accepts connections in the background, sending each accepted
// connection's local address on the channel.
func listenTCP(t *testing.T, addr string) (net.Listener, <-chan string) {
	t.Helper()
	var lc net.ListenConfig
	lc.SetMultipathTCP(false)
	ln, err := lc.Listen(context.Background(), "tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	got := make(chan string, 1024)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			select {
			case got <- c.LocalAddr().String():
			default:
			}
			c.Close()
		}
	}()
	return ln, got
}

func port(a net.Addr) int { return int(netip.MustParseAddrPort(a.String()).Port()) }

// dial connects to addr over TCP and returns the error.
func dial(addr string) error {
	c, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		return err
	}
	return c.Close()
}

// expectLocal dials addr and expects the listener to accept a connection
// whose local address is addr.
func expectLocal(t *testing.T, addr string, got <-chan string) {
	t.Helper()
	if err := dial(addr); err != nil {
		t.Fatalf("connect to %s: %v", addr, err)
	}
	select {
	case local := <-got:
		if local != addr {
			t.Errorf("connection to %s: listener's local address is %s", addr, local)
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("connection to %s: the listener accepted nothing", addr)
	}
}

func expectRefused(t *testing.T, addr string) {
	t.Helper()
	if err := dial(addr); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("connect to %s: %v, want connection refused", addr, err)
	}
}

func TestSkLookupSteersTCPAndUDP(t *testing.T) {
	ns := inFreshNetns(t)
	ip(t, "route", "add", "local", "192.0.2.0/24", "dev", "lo")
	place := testPlace(t, ns, codegen.HookSkLookup)

	ln1, got1 := listenTCP(t, "127.0.0.1:0")
	ln2, got2 := listenTCP(t, "127.0.0.1:0")
	ln3, _ := listenTCP(t, "127.0.0.1:0")
	var lc net.ListenConfig
	udp, err := lc.ListenPacket(context.Background(), "udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer udp.Close()
	free, _ := listenTCP(t, "127.0.0.1:0") // a port nothing listens on once closed
	freePort := port(free.Addr())
	free.Close()

	swap := lookupSwap(t, place, rules.IPv4, mangle(
		"-d 192.0.2.8/32 -p tcp -m tcp --dport 80 -j ACCEPT",
		fmt.Sprintf("-d 192.0.2.0/24 -p tcp -m tcp --dport 80 -j TPROXY --on-port %d --on-ip 127.0.0.1", port(ln1.Addr())),
		fmt.Sprintf("-d 192.0.2.0/24 -p tcp -m multiport --dports 80,443 -j TPROXY --on-port %d --on-ip 127.0.0.1", port(ln2.Addr())),
		fmt.Sprintf("-d 192.0.2.0/24 -p udp -m udp --dport 53 -j TPROXY --on-port %d --on-ip 127.0.0.1 --tproxy-mark 0x1/0x1", port(udp.LocalAddr())),
		fmt.Sprintf("-d 192.0.2.0/24 -p tcp -m tcp --dport 81 -j TPROXY --on-port %d --on-ip 127.0.0.1", freePort),
		fmt.Sprintf("-d 192.0.2.0/24 -p tcp -m tcp --dport 83 -j TPROXY --on-port %d --on-ip 127.0.0.1", port(ln3.Addr())),
		"-d 192.0.2.9/32 -p tcp -j DROP",
	))
	res := mustSwap(t, swap)
	found := 0
	for _, s := range res.Sockets {
		if s.Cookie != 0 {
			found++
		}
	}
	if found != 4 || len(res.Sockets) != 5 {
		t.Fatalf("sockets found: %+v, want 4 of 5", res.Sockets)
	}

	// The first TPROXY rule for port 80 wins over the second, and the
	// ACCEPT before it over both: 192.0.2.8:80 is the kernel's own
	// lookup, where nothing listens.
	expectLocal(t, "192.0.2.7:80", got1)
	expectLocal(t, "192.0.2.200:80", got1)
	expectLocal(t, "192.0.2.7:443", got2)
	expectRefused(t, "192.0.2.8:80")
	// No rule: the kernel's lookup finds nothing.
	expectRefused(t, "192.0.2.7:82")
	// A rule whose socket never existed, one whose socket went away, and
	// a DROP refuse.
	expectRefused(t, "192.0.2.7:81")
	ln3.Close()
	expectRefused(t, "192.0.2.7:83")
	if err := dial("127.0.0.1:" + fmt.Sprint(port(ln1.Addr()))); err != nil {
		t.Errorf("lookups no rule takes go on: %v", err)
	}
	l, err := net.Listen("tcp4", "192.0.2.9:22")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	expectRefused(t, "192.0.2.9:22")

	// UDP: the datagram reaches the socket bound to 127.0.0.1.
	c, err := net.Dial("udp", "192.0.2.7:53")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write([]byte("ping")); err != nil {
		t.Fatal(err)
	}
	udp.SetReadDeadline(time.Now().Add(5 * time.Second))
	buf := make([]byte, 16)
	n, from, err := udp.ReadFrom(buf)
	if err != nil || string(buf[:n]) != "ping" || from.String() != c.LocalAddr().String() {
		t.Errorf("udp datagram to 192.0.2.7:53: %q from %v (%v), want ping from %v", buf[:n], from, err, c.LocalAddr())
	}

	// The counters count the lookups each rule took.
	a, err := Open(place)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	cs, err := a.Counters()
	if err != nil {
		t.Fatal(err)
	}
	want := []uint64{1, 2, 1, 1, 1, 1, 1}
	for id, w := range want {
		if cs[id].Packets != w {
			t.Errorf("rule %d counted %d lookups, want %d (all: %v)", id, cs[id].Packets, w, cs)
		}
	}
}

func TestSkLookupIPv6(t *testing.T) {
	ns := inFreshNetns(t)
	ip(t, "-6", "route", "add", "local", "2001:db8::/64", "dev", "lo")
	place := testPlace(t, ns, codegen.HookSkLookup)
	ln, got := listenTCP(t, "[::1]:0")
	var lc net.ListenConfig
	udp, err := lc.ListenPacket(context.Background(), "udp6", "[::1]:0")
	if err != nil {
		t.Fatal(err)
	}
	defer udp.Close()
	swap := lookupSwap(t, place, rules.IPv6, mangle(
		fmt.Sprintf("-d 2001:db8::/64 -p tcp -m tcp --dport 80 -j TPROXY --on-port %d --on-ip ::1", port(ln.Addr())),
		fmt.Sprintf("-d 2001:db8::/64 -p udp -m udp --dport 53 -j TPROXY --on-port %d --on-ip ::1", port(udp.LocalAddr())),
	))
	if res := mustSwap(t, swap); len(res.Sockets) != 2 || res.Sockets[0].Cookie == 0 || res.Sockets[1].Cookie == 0 {
		t.Fatalf("sockets: %+v", res.Sockets)
	}
	expectLocal(t, "[2001:db8::7]:80", got)
	expectRefused(t, "[2001:db8::7]:81")
	c, err := net.Dial("udp", "[2001:db8::7]:53")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write([]byte("ping6")); err != nil {
		t.Fatal(err)
	}
	udp.SetReadDeadline(time.Now().Add(5 * time.Second))
	buf := make([]byte, 16)
	n, from, err := udp.ReadFrom(buf)
	if err != nil || string(buf[:n]) != "ping6" || from.String() != c.LocalAddr().String() {
		t.Errorf("udp datagram to [2001:db8::7]:53: %q from %v (%v), want ping6 from %v", buf[:n], from, err, c.LocalAddr())
	}
}

func TestSkLookupSwapUnderLoad(t *testing.T) {
	ns := inFreshNetns(t)
	ip(t, "route", "add", "local", "192.0.2.0/24", "dev", "lo")
	place := testPlace(t, ns, codegen.HookSkLookup)
	ln, _ := listenTCP(t, "127.0.0.1:0")
	sets := [2]string{
		mangle(fmt.Sprintf("-d 192.0.2.0/24 -p tcp -m tcp --dport 80 -j TPROXY --on-port %d --on-ip 127.0.0.1", port(ln.Addr()))),
		mangle(
			"-d 198.51.100.0/24 -p tcp -j ACCEPT",
			fmt.Sprintf("-d 192.0.2.7/32 -p tcp -m multiport --dports 79:81 -j TPROXY --on-port %d --on-ip 127.0.0.1", port(ln.Addr())),
		),
	}
	mustSwap(t, lookupSwap(t, place, rules.IPv4, sets[0]))

	var stop atomic.Bool
	var ok, failed atomic.Int64
	var firstErr atomic.Value
	var wg sync.WaitGroup
	here, err := topology.CurrentNetns()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(here.Close)
	run := here.Run
	wg.Add(1)
	go func() {
		defer wg.Done()
		run(func() {
			for !stop.Load() {
				if err := dial("192.0.2.7:80"); err != nil {
					failed.Add(1)
					firstErr.CompareAndSwap(nil, err)
				} else {
					ok.Add(1)
				}
			}
		})
	}()
	for i := range 100 {
		mustSwap(t, lookupSwap(t, place, rules.IPv4, sets[(i+1)%2]))
	}
	stop.Store(true)
	wg.Wait()
	if failed.Load() != 0 || ok.Load() == 0 {
		t.Errorf("%d connections failed across 100 swaps (first: %v), %d succeeded", failed.Load(), firstErr.Load(), ok.Load())
	}
	t.Logf("%d connections across 100 swaps", ok.Load())
}

// TestSkLookupMatchesEval runs random lookups through random sk-lookup rule
// sets, compiled at -O0 and at -O1 with every table looked up, and compares
// the kernel's verdict and deciding rule with ir.Eval's. Eval assumes a
// TPROXY rule's socket exists: the kernel assigns it when it does and
// drops the lookup when it does not.
func TestSkLookupMatchesEval(t *testing.T) {
	inFreshNetns(t)
	tcp, _ := listenTCP(t, "127.0.0.1:0")
	var lc net.ListenConfig
	udp, err := lc.ListenPacket(context.Background(), "udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer udp.Close()
	present := map[string]int{"tcp": port(tcp.Addr()), "udp": port(udp.LocalAddr())}
	const absentPort = 9

	rng := rand.New(rand.NewPCG(8, 8))
	pick := func(xs ...string) string { return xs[rng.IntN(len(xs))] }
	addrs := []string{"192.0.2.0/24", "192.0.2.7", "198.51.100.0/25", "10.0.0.0/8", "0.0.0.0/0"}
	randRule := func(user bool) string {
		proto := pick("tcp", "udp")
		var parts []string
		if rng.IntN(2) == 0 {
			parts = append(parts, pick("", "! ")+"-s "+pick(addrs...))
		}
		if rng.IntN(2) == 0 {
			parts = append(parts, pick("", "! ")+"-d "+pick(addrs...))
		}
		if rng.IntN(3) == 0 {
			parts = append(parts, "-i "+pick("lo", "eth0", "veth+"))
		}
		parts = append(parts, "-p "+proto)
		switch rng.IntN(4) {
		case 0:
			parts = append(parts, "-m "+proto+" --dport "+pick("80", "53", "1000:2000", "443"))
		case 1:
			parts = append(parts, "-m "+proto+" --sport "+pick("1234", "1024:65535"))
		case 2:
			parts = append(parts, "-m multiport --dports "+pick("80,443", "53,1000:1100", "22"))
		}
		switch k := rng.IntN(8); {
		case k < 4:
			p := present[proto]
			if proto == "tcp" && rng.IntN(3) == 0 {
				p = absentPort
			}
			parts = append(parts, fmt.Sprintf("-j TPROXY --on-port %d --on-ip 127.0.0.1", p))
		case k == 4:
			parts = append(parts, "-j ACCEPT")
		case k == 5:
			parts = append(parts, "-j DROP")
		case k == 6 && user:
			parts = append(parts, "-j RETURN")
		case k == 6:
			parts = append(parts, "-j USER")
		}
		return strings.Join(parts, " ")
	}
	lookups := func() []struct {
		lk    Lookup
		iface string
	} {
		var out []struct {
			lk    Lookup
			iface string
		}
		for range 150 {
			lk := Lookup{
				Proto: []uint8{6, 17}[rng.IntN(2)],
				Src:   netip.MustParseAddr(pick("10.1.2.3", "198.51.100.9", "203.0.113.1", "192.0.2.7")),
				Dst:   netip.MustParseAddr(pick("192.0.2.7", "192.0.2.200", "198.51.100.9", "10.9.9.9")),
				Sport: []uint16{1234, 40000, 53, 80}[rng.IntN(4)],
				Dport: []uint16{80, 443, 53, 1050, 22, 8080}[rng.IntN(6)],
			}
			out = append(out, struct {
				lk    Lookup
				iface string
			}{lk, pick("lo", "eth0", "veth1", "wlan0")})
		}
		return out
	}

	verdicts := make(map[ir.Verdict]int)
	for seed := range 12 {
		var b strings.Builder
		b.WriteString("*mangle\n:PREROUTING " + pick("ACCEPT", "DROP") + " [0:0]\n:USER - [0:0]\n")
		for range 1 + rng.IntN(12) {
			b.WriteString("-A PREROUTING " + randRule(false) + "\n")
		}
		for range rng.IntN(4) {
			b.WriteString("-A USER " + randRule(true) + "\n")
		}
		b.WriteString("COMMIT\n")
		text := b.String()
		rs, err := iptables.Parse("rand.rules", []byte(text), iptables.Options{})
		if err != nil {
			t.Fatalf("seed %d: parse: %v\n%s", seed, err, text)
		}
		p, err := ir.Lower(rs, ir.LowerOptions{Table: "mangle", Chain: "PREROUTING"})
		if err != nil {
			t.Fatalf("seed %d: lower: %v\n%s", seed, err, text)
		}
		for _, opts := range []codegen.Options{{Hook: codegen.HookSkLookup, Level: codegen.O0, Trace: true}, {Hook: codegen.HookSkLookup, ForceLookups: true, Trace: true}} {
			prog, err := codegen.Compile(p, opts)
			if err != nil {
				t.Fatalf("seed %d %v: compile: %v\n%s", seed, opts.Level, err, text)
			}
			l, err := Load(prog, Options{})
			if err != nil {
				t.Fatalf("seed %d %v: load: %v\n%s", seed, opts.Level, err, text)
			}
			if _, err := l.FillSockets(); err != nil {
				t.Fatal(err)
			}
			for _, in := range lookups() {
				if err := l.LookupIface(in.iface); err != nil {
					t.Fatal(err)
				}
				got, err := l.RunLookup(in.lk)
				if err != nil {
					t.Fatal(err)
				}
				pkt := &model.Packet{
					Meta: model.Meta{InIface: in.iface}, Family: rules.IPv4, Src: in.lk.Src, Dst: in.lk.Dst,
					Proto: in.lk.Proto, L4Len: 0xffff, SrcPort: in.lk.Sport, DstPort: in.lk.Dport, TTL: 64, Length: 100,
				}
				want := p.Eval(pkt)
				wantV, wantRule := want.Verdict, -1
				if want.Rule != nil {
					wantRule = want.Rule.ID
				}
				if wantV == ir.VerdictTProxy {
					if tp := want.Rule.Action.(ir.TProxy); tp.Port == absentPort {
						wantV = ir.VerdictDrop
					}
				}
				gotRule := -1
				if got.Decision.Kind != abi.DecidedByPolicy {
					gotRule = int(got.Decision.Rule)
				}
				verdicts[got.Verdict]++
				if got.Verdict != wantV || gotRule != wantRule || (got.Verdict == ir.VerdictTProxy) != (got.Cookie != 0) {
					t.Errorf("seed %d %v: lookup %+v from %s: kernel %v rule %d (decision %+v, socket %d), Eval %v\n%s",
						seed, opts.Level, in.lk, in.iface, got.Verdict, gotRule, got.Decision, got.Cookie, want, text)
				}
			}
			l.Close()
		}
	}
	if verdicts[ir.VerdictTProxy] < 50 || verdicts[ir.VerdictAccept] < 50 || verdicts[ir.VerdictDrop] < 50 {
		t.Errorf("verdicts %v: too few of a kind", verdicts)
	}
	t.Logf("verdicts: %v", verdicts)
}

// BenchmarkSkLookup measures the kernel's time per lookup
// (BPF_PROG_TEST_RUN) of sk-lookup programs of growing rule sets, next to
// an empty sk_lookup program that only returns SK_PASS, in the same run:
// a lookup no rule matches (the worst case) and one the last TPROXY rule
// steers to a socket.
//
//	go test ./loader -run '^$' -bench SkLookup -benchtime 2000000x
func BenchmarkSkLookup(b *testing.B) {
	testenv.EnterFreshNetns(b)
	var lc net.ListenConfig
	lc.SetMultipathTCP(false)
	ln, err := lc.Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	lport := port(ln.Addr())

	miss := Lookup{Proto: 6, Src: netip.MustParseAddr("203.0.113.1"), Dst: netip.MustParseAddr("192.0.2.7"), Sport: 40000, Dport: 22}
	empty, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Type: ebpf.SkLookup, AttachType: ebpf.AttachSkLookup, License: "GPL",
		Instructions: asm.Instructions{asm.Mov.Imm(asm.R0, 1), asm.Return()},
	})
	if err != nil {
		b.Fatal(err)
	}
	defer empty.Close()
	run := func(b *testing.B, prog *ebpf.Program, lk Lookup) {
		d, err := BenchmarkLookup(prog, lk, b.N)
		if err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(float64(d.Nanoseconds()), "ns/lookup")
	}
	b.Run("empty", func(b *testing.B) { run(b, empty, miss) })
	for _, n := range []int{1, 1000, 10000} {
		var rs strings.Builder
		rs.WriteString("*mangle\n:PREROUTING ACCEPT [0:0]\n")
		for i := range n {
			fmt.Fprintf(&rs, "-A PREROUTING -d 10.%d.%d.0/24 -p tcp -m tcp --dport %d -j TPROXY --on-port %d --on-ip 127.0.0.1\n", i/256%256, i%256, 1000+i%50000, lport)
		}
		rs.WriteString("COMMIT\n")
		parsed, err := iptables.Parse("bench.rules", []byte(rs.String()), iptables.Options{})
		if err != nil {
			b.Fatal(err)
		}
		p, err := ir.Lower(parsed, ir.LowerOptions{Table: "mangle", Chain: "PREROUTING"})
		if err != nil {
			b.Fatal(err)
		}
		last := n - 1
		hit := Lookup{Proto: 6, Src: miss.Src, Dst: netip.AddrFrom4([4]byte{10, byte(last / 256 % 256), byte(last % 256), 9}), Sport: 40000, Dport: uint16(1000 + last%50000)}
		for _, level := range codegen.Levels {
			if level == codegen.O0 && n > 1000 {
				continue
			}
			prog, err := codegen.Compile(p, codegen.Options{Trace: true, Hook: codegen.HookSkLookup, Level: level})
			if err != nil {
				b.Fatal(err)
			}
			l, err := Load(prog, Options{})
			if err != nil {
				b.Fatal(err)
			}
			if _, err := l.FillSockets(); err != nil {
				b.Fatal(err)
			}
			if out, err := l.RunLookup(hit); err != nil || out.Verdict != ir.VerdictTProxy {
				b.Fatalf("%d rules: the last rule's lookup: %+v %v", n, out, err)
			}
			b.Run(fmt.Sprintf("%v/rules=%d/miss", level, n), func(b *testing.B) { run(b, l.prog, miss) })
			b.Run(fmt.Sprintf("%v/rules=%d/steer", level, n), func(b *testing.B) { run(b, l.prog, hit) })
			l.Close()
		}
	}
}

// TestSkLookupNFTStatement runs nft's tproxy statement, which is not a
// verdict: a rule whose socket is missing does not match and the next rule
// goes on; a found socket is the packet's if the verdict accepts it, and
// the last statement that found one wins.
func TestSkLookupNFTStatement(t *testing.T) {
	ns := inFreshNetns(t)
	ip(t, "route", "add", "local", "192.0.2.0/24", "dev", "lo")
	place := testPlace(t, ns, codegen.HookSkLookup)
	ln1, got1 := listenTCP(t, "127.0.0.1:0")
	ln2, got2 := listenTCP(t, "127.0.0.1:0")
	free, _ := listenTCP(t, "127.0.0.1:0")
	freePort := port(free.Addr())
	free.Close()
	p1, p2 := port(ln1.Addr()), port(ln2.Addr())
	text := fmt.Sprintf(`table inet t {
	chain pre {
		type filter hook prerouting priority mangle; policy accept;
		ip daddr 192.0.2.0/24 tcp dport { 80, 83 } tproxy ip to 127.0.0.1:%d accept
		ip daddr 192.0.2.0/24 tcp dport 80 tproxy ip to 127.0.0.1:%d
		tcp dport 81 tproxy ip to 127.0.0.1:%d
		tcp dport 81 drop
		tcp dport 82 tproxy ip to 127.0.0.1:%d accept
		tcp dport 83 tproxy ip to 127.0.0.1:%d
		tcp dport 83 tproxy ip to 127.0.0.1:%d
	}
}
`, freePort, p1, p1, p2, p1, p2)
	rs, err := nft.Parse("test.nft", []byte(text), nft.Options{Family: rules.IPv4})
	if err != nil {
		t.Fatalf("parse: %v", err)
	}
	p, err := ir.Lower(rs, ir.LowerOptions{Table: "mangle", Chain: "PREROUTING"})
	if err != nil {
		t.Fatalf("lower: %v", err)
	}
	for _, level := range codegen.Levels {
		prog, err := codegen.Compile(p, codegen.Options{Trace: true, Hook: codegen.HookSkLookup, Level: level})
		if err != nil {
			t.Fatalf("compile: %v", err)
		}
		meta, counters, err := NewMeta(rs, prog, "test.nft")
		if err != nil {
			t.Fatal(err)
		}
		mustSwap(t, &Swap{Place: place, Program: prog, Meta: meta, Counters: counters})
		// The first rule's socket is missing: the second rule steers.
		expectLocal(t, "192.0.2.7:80", got1)
		// A socket found, then a drop.
		expectRefused(t, "192.0.2.7:81")
		expectLocal(t, "192.0.2.7:82", got2)
		// Two statements found sockets: the later one's.
		expectLocal(t, "192.0.2.7:83", got2)
		expectRefused(t, "192.0.2.7:84")
	}
}

// TestSkLookupNFTMatchesEval runs random lookups through random nft rule
// sets with tproxy statements, every socket present, at -O0 and -O1, and
// compares the kernel's verdict, deciding rule and assigned socket with
// ir.Eval's verdict, rule and Steer.
func TestSkLookupNFTMatchesEval(t *testing.T) {
	inFreshNetns(t)
	var lc net.ListenConfig
	lc.SetMultipathTCP(false)
	var ports [3]int // two tcp listeners and a udp socket
	for i := range 2 {
		ln, _ := listenTCP(t, "127.0.0.1:0")
		ports[i] = port(ln.Addr())
	}
	udp, err := lc.ListenPacket(context.Background(), "udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer udp.Close()
	ports[2] = port(udp.LocalAddr())

	rng := rand.New(rand.NewPCG(9, 9))
	pick := func(xs ...string) string { return xs[rng.IntN(len(xs))] }
	verdicts := make(map[ir.Verdict]int)
	for seed := range 10 {
		var b strings.Builder
		fmt.Fprintf(&b, "table ip t {\n\tchain pre {\n\t\ttype filter hook prerouting priority mangle; policy %s;\n", pick("accept", "drop"))
		for range 1 + rng.IntN(8) {
			proto := pick("tcp", "udp")
			var parts []string
			if rng.IntN(2) == 0 {
				parts = append(parts, "ip saddr "+pick("10.0.0.0/8", "192.0.2.7", "198.51.100.0/24"))
			}
			if rng.IntN(2) == 0 {
				parts = append(parts, "ip daddr "+pick("192.0.2.0/24", "10.9.9.9", "198.51.100.9"))
			}
			parts = append(parts, pick("meta l4proto "+proto, proto+" dport "+pick("80", "{ 53, 443 }", "1000-2000")))
			if rng.IntN(3) > 0 {
				p := ports[2]
				if proto == "tcp" {
					p = ports[rng.IntN(2)]
				}
				parts = append(parts, fmt.Sprintf("tproxy to 127.0.0.1:%d", p))
			}
			parts = append(parts, pick("", "accept", "drop"))
			fmt.Fprintf(&b, "\t\t%s\n", strings.Join(parts, " "))
		}
		b.WriteString("\t}\n}\n")
		text := b.String()
		rs, err := nft.Parse("rand.nft", []byte(text), nft.Options{Family: rules.IPv4})
		if err != nil {
			t.Fatalf("seed %d: parse: %v\n%s", seed, err, text)
		}
		p, err := ir.Lower(rs, ir.LowerOptions{Table: "mangle", Chain: "PREROUTING"})
		if err != nil {
			t.Fatalf("seed %d: lower: %v\n%s", seed, err, text)
		}
		for _, opts := range []codegen.Options{{Hook: codegen.HookSkLookup, Level: codegen.O0, Trace: true}, {Hook: codegen.HookSkLookup, ForceLookups: true, Trace: true}} {
			prog, err := codegen.Compile(p, opts)
			if err != nil {
				t.Fatalf("seed %d %v: compile: %v\n%s", seed, opts.Level, err, text)
			}
			l, err := Load(prog, Options{})
			if err != nil {
				t.Fatalf("seed %d %v: load: %v\n%s", seed, opts.Level, err, text)
			}
			states, err := l.FillSockets()
			if err != nil {
				t.Fatal(err)
			}
			cookies := make(map[abi.SocketKey]uint64)
			for _, s := range states {
				if s.Cookie == 0 {
					t.Fatalf("no socket for %s", s.Target)
				}
				cookies[s.Key] = s.Cookie
			}
			targets := prog.Targets()
			for range 150 {
				lk := Lookup{
					Proto: []uint8{6, 17}[rng.IntN(2)],
					Src:   netip.MustParseAddr(pick("10.1.2.3", "198.51.100.9", "192.0.2.7")),
					Dst:   netip.MustParseAddr(pick("192.0.2.7", "10.9.9.9", "198.51.100.9")),
					Sport: 40000,
					Dport: []uint16{80, 443, 53, 1050, 22}[rng.IntN(5)],
				}
				got, err := l.RunLookup(lk)
				if err != nil {
					t.Fatal(err)
				}
				want := p.Eval(&model.Packet{Family: rules.IPv4, Src: lk.Src, Dst: lk.Dst, Proto: lk.Proto, L4Len: 0xffff,
					SrcPort: lk.Sport, DstPort: lk.Dport, TTL: 64, Length: 100})
				wantRule, gotRule := -1, -1
				if want.Rule != nil {
					wantRule = want.Rule.ID
				}
				if got.Decision.Kind != abi.DecidedByPolicy {
					gotRule = int(got.Decision.Rule)
				}
				var wantCookie uint64
				if want.Steer != nil {
					wantCookie = cookies[targets[want.Steer.ID]]
				}
				verdicts[got.Verdict]++
				if got.Verdict != want.Verdict || gotRule != wantRule || got.Cookie != wantCookie {
					t.Errorf("seed %d %v: lookup %+v: kernel %v rule %d socket %d, Eval %v steer %v (socket %d)\n%s",
						seed, opts.Level, lk, got.Verdict, gotRule, got.Cookie, want, want.Steer, wantCookie, text)
				}
			}
			l.Close()
		}
	}
	// The rule sets must steer, accept and drop, or the test shows little.
	if verdicts[ir.VerdictTProxy] < 50 || verdicts[ir.VerdictAccept] < 50 || verdicts[ir.VerdictDrop] < 50 {
		t.Errorf("verdicts %v: too few of a kind", verdicts)
	}
	t.Logf("verdicts: %v", verdicts)
}
