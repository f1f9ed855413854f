package main

import (
	"cmp"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"bpfwall/internal/testenv"
	"bpfwall/internal/topology"
)

// An owner probe is a TCP connection of the routed topology whose
// sockets belong to a user and group: the router's connecting socket, or
// the router's listener (whose SYN-ACK goes out from the request sock,
// which owner_mt reads as its listener). A probe to a port nothing
// listens on is answered by the kernel's own socket (a RST), and one
// through the router has no socket.
type ownerProbe struct {
	probe
	uid, gid int
}

// The router's listeners: 22 and 443 root's, 8080 and 23 user 1500's,
// group 2500's.
var ownerProbes = []ownerProbe{
	{probe{"router", "server", 80}, 0, 0},
	{probe{"router", "server", 80}, 1000, 1000},
	{probe{"router", "server", 443}, 1500, 2500},
	{probe{"router", "server", 22}, 65534, 65534},
	{probe{"router", "client", 8080}, 1999, 0},
	{probe{"client", "rc", 22}, 0, 0},
	{probe{"client", "rc", 8080}, 0, 0},
	{probe{"client", "rc", 81}, 0, 0}, // the kernel's RST
	{probe{"client", "server", 80}, 0, 0},
}

// randomOwner returns a rule set whose OUTPUT and POSTROUTING chains of
// mangle and filter test the owner of the router's packets.
func randomOwner(rng *rand.Rand) string {
	pick := func(xs ...string) string { return xs[rng.IntN(len(xs))] }
	not := func() string { return pick("", "", "! ") }
	rule := func(chain string) string {
		var b strings.Builder
		b.WriteString("-A " + chain)
		if rng.IntN(3) == 0 {
			b.WriteString(" -p tcp " + pick("--dport 80", "--sport 8080", "! --dport 443", "--sport 22"))
		}
		b.WriteString(" -m owner")
		tested := false
		if rng.IntN(3) == 0 {
			b.WriteString(" " + not() + "--socket-exists")
			tested = true
		}
		if rng.IntN(2) == 0 || !tested {
			b.WriteString(" " + not() + "--uid-owner " + pick("0", "1000", "1500", "1000-1999", "65534", "0-999", "root", "nobody"))
		}
		if rng.IntN(3) == 0 {
			b.WriteString(" " + not() + "--gid-owner " + pick("0", "2500", "1000-3000", "65534"))
		}
		b.WriteString(" -j " + pick("DROP", "ACCEPT", "DROP"))
		return b.String()
	}
	var b strings.Builder
	b.WriteString("*mangle\n:PREROUTING ACCEPT [0:0]\n:INPUT ACCEPT [0:0]\n:FORWARD ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n:POSTROUTING ACCEPT [0:0]\n")
	for _, c := range []string{"OUTPUT", "POSTROUTING"} {
		for range rng.IntN(3) {
			b.WriteString(rule(c) + "\n")
		}
	}
	b.WriteString("COMMIT\n*filter\n:INPUT ACCEPT [0:0]\n:FORWARD ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n")
	b.WriteString("-A OUTPUT -p icmp -j ACCEPT\n-A OUTPUT -p ipv6-icmp -j ACCEPT\n")
	for range 1 + rng.IntN(4) {
		b.WriteString(rule("OUTPUT") + "\n")
	}
	b.WriteString("COMMIT\n")
	return b.String()
}

// asUser runs f on a thread of its own in namespace ns whose file system
// user and group are uid and gid (setfsuid and setfsgid change the
// calling thread only): the sockets f opens are theirs. The thread ends
// with f.
func asUser(t *testing.T, ns string, uid, gid int, f func()) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		runtime.LockOSThread() // never unlocked: the thread goes with the goroutine
		target, err := topology.OpenNetns("/run/netns/" + ns)
		if err != nil {
			t.Error(err)
			return
		}
		defer target.Close()
		if err := target.Enter(); err != nil {
			t.Error(err)
			return
		}
		unix.Setfsgid(gid)
		unix.Setfsuid(uid)
		if got, _ := unix.SetfsuidRetUid(-1); got != uid {
			t.Errorf("setfsuid %d: the thread has %d", uid, got)
			return
		}
		f()
	}()
	<-done
}

// ownerOutcomes runs the owner probes of family fam at once.
func (r *routed) ownerOutcomes(t *testing.T, fam int, probes []ownerProbe) []string {
	ns := map[string]string{"client": r.client, "router": r.router, "server": r.server}
	out := make([]string, len(probes))
	var wg sync.WaitGroup
	for i, p := range probes {
		wg.Go(func() {
			addr := net.JoinHostPort(routedAddrs[p.to][fam], fmt.Sprint(p.port))
			asUser(t, ns[p.from], p.uid, p.gid, func() {
				d := net.Dialer{Timeout: 500 * time.Millisecond}
				d.SetMultipathTCP(false) // the subflows of MPTCP are the kernel's sockets
				c, err := d.Dial("tcp", addr)
				outcome := "open"
				switch {
				case err == nil:
					c.Close()
				case strings.Contains(err.Error(), "refused"):
					outcome = "refused"
				case strings.Contains(err.Error(), "timeout"):
					outcome = "timeout"
				default:
					outcome = err.Error()
				}
				out[i] = fmt.Sprintf("%s (uid %d gid %d) -> %s %s", p.from, p.uid, p.gid, addr, outcome)
			})
		})
	}
	wg.Wait()
	return out
}

// listenAs accepts and closes TCP connections on port in namespace ns,
// on a listener of user uid and group gid, until the test ends.
func (r *routed) listenAs(ns string, port, uid, gid int) {
	asUser(r.t, ns, uid, gid, func() {
		var lc net.ListenConfig
		lc.SetMultipathTCP(false)
		l, err := lc.Listen(r.t.Context(), "tcp", fmt.Sprintf("[::]:%d", port))
		if err != nil {
			r.t.Error(err)
			return
		}
		r.t.Cleanup(func() { l.Close() })
		go acceptAndClose(l)
	})
}

// TestOwnerRandom compares -m owner with xt_owner, compiled at the chains'
// own netfilter hooks by restore without -i (random rule sets in mangle
// OUTPUT and POSTROUTING and filter OUTPUT) and at tc-egress by restore
// -i (their filter OUTPUT), for each family: connections from the router's sockets of several users and groups,
// to its listeners of two users, to a closed port (answered by the
// kernel's socket) and through it (no socket). BPFWALL_OWNER_SEEDS sets
// the number of rule sets.
func TestOwnerRandom(t *testing.T) {
	testenv.RequireTool(t, "iptables-legacy-restore", "ip6tables-legacy-restore")
	n := 12
	if s := os.Getenv("BPFWALL_OWNER_SEEDS"); s != "" {
		if _, err := fmt.Sscan(s, &n); err != nil {
			t.Fatal(err)
		}
	}
	bin := buildBpfwall(t)
	r := newRouted(t)
	r.listen(r.server, 22, 80, 443)
	r.listen(r.client, 8080)
	r.listenAs(r.router, 22, 0, 0)
	r.listenAs(r.router, 8080, 1500, 2500)
	must := func(stdin string, args ...string) { r.run(stdin, args...) }
	// Without rules, once: the first run must not wait for neighbour
	// discovery where the second finds the neighbours known.
	for fam := range 2 {
		r.ownerOutcomes(t, fam, ownerProbes)
	}
	dir := t.TempDir()
	mismatches, probed := 0, 0
	kinds := map[string]int{}
	// compare runs the probes of fam under bpfwall, loaded by load, and
	// under iptables-legacy with text, and counts what differs.
	compare := func(seed int, mode, text string, fam int, probes []ownerProbe, load func()) {
		load()
		r.flushConntrack()
		got := r.ownerOutcomes(t, fam, probes)
		must("", bin, "unload")
		must(text, [2]string{"iptables-legacy-restore", "ip6tables-legacy-restore"}[fam])
		r.flushConntrack()
		want := r.ownerOutcomes(t, fam, probes)
		for i := range want {
			probed++
			kinds[want[i][strings.LastIndexByte(want[i], ' ')+1:]]++
			if got[i] != want[i] {
				mismatches++
				if mismatches <= 10 {
					t.Errorf("seed %d, %s: bpfwall: %s; iptables: %s; rules:\n%s", seed, mode, got[i], want[i], text)
				}
			}
		}
		must(emptyRules, [2]string{"iptables-legacy-restore", "ip6tables-legacy-restore"}[fam])
	}
	// At tc-egress, filter OUTPUT alone, and the probes netfilter's OUTPUT
	// sees: the program on an interface judges forwarded packets too.
	local := slices.DeleteFunc(slices.Clone(ownerProbes), func(p ownerProbe) bool { return p.from == "client" && p.to == "server" })
	for seed := range n {
		rng := rand.New(rand.NewPCG(uint64(seed), 0x6f776e6572))
		text := randomOwner(rng)
		filter := text[strings.Index(text, "*filter"):]
		file, filterFile := fmt.Sprintf("%s/%d.rules", dir, seed), fmt.Sprintf("%s/%d.filter", dir, seed)
		if err := os.WriteFile(file, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filterFile, []byte(filter), 0o600); err != nil {
			t.Fatal(err)
		}
		for fam, flag := range []string{"-4", "-6"} {
			compare(seed, "netfilter", text, fam, ownerProbes, func() { must("", bin, "restore", "--no-delegate", flag, file) })
			compare(seed, "tc-egress", filter, fam, local, func() {
				must("", bin, "restore", flag, "--hook", "tc-egress", "-i", "rc0", "-i", "rs0", filterFile)
			})
		}
	}
	if kinds["open"] == 0 || kinds["timeout"] == 0 || kinds["refused"] == 0 {
		t.Errorf("the kernel's outcomes %v do not test the filter", kinds)
	}
	t.Logf("%d rule sets per family, %d probes, %d mismatches; the kernel's outcomes %v", n, probed, mismatches, kinds)
}

// ownerNFT tests the router's sockets with nft's meta skuid and skgid,
// whose != needs a socket with a file: the RST the kernel's own socket
// sends for port 81 passes "meta skuid != 1", where xt_owner's "!
// --uid-owner 1" would drop it.
const ownerNFT = `table inet bw {
	chain o {
		type filter hook output priority 0; policy accept;
		meta l4proto { icmp, ipv6-icmp } accept
		meta skuid 1000-1999 tcp dport 443 drop
		meta skgid != 2500 tcp dport 22 drop
		meta skuid root tcp sport 22 drop
		meta skuid != 0 tcp sport 8080 drop
		meta skuid != 1 tcp sport 81 drop
		meta skgid { 1000, 2000 } tcp dport 80 drop
	}
}
`

// TestOwnerNFT compares nft's meta skuid and skgid, read by fmt and
// restored at the chains' netfilter hooks, with nft's own evaluation of
// the same rule set, for both families.
func TestOwnerNFT(t *testing.T) {
	testenv.RequireTool(t, "nft")
	bin := buildBpfwall(t)
	r := newRouted(t)
	r.listen(r.server, 22, 80, 443)
	r.listen(r.client, 8080)
	r.listenAs(r.router, 22, 0, 0)
	r.listenAs(r.router, 8080, 1500, 2500)
	for fam := range 2 {
		r.ownerOutcomes(t, fam, ownerProbes) // neighbour discovery first
	}
	file := writeFile(t, "owner.nft", ownerNFT)
	var got [2][]string
	for fam, flag := range []string{"-4", "-6"} {
		translated := r.run("", bin, "fmt", flag, file)
		if !strings.Contains(translated, "-m owner --uid-owner 0-4294967294 -m owner ! --uid-owner 1") {
			t.Fatalf("fmt %s does not read meta skuid != as a socket's file and the negated ID:\n%s", flag, translated)
		}
		r.run(translated, bin, "restore", "--no-delegate", flag)
		r.flushConntrack()
		got[fam] = r.ownerOutcomes(t, fam, ownerProbes)
	}
	r.run("", bin, "unload")
	r.run("", "nft", "-f", file)
	r.flushConntrack()
	for fam := range 2 {
		want := r.ownerOutcomes(t, fam, ownerProbes)
		kinds := compareOutcomes(t, "nft", got[fam], want)
		if kinds["open"] == 0 || kinds["timeout"] == 0 || kinds["refused"] == 0 {
			t.Errorf("family %d: the kernel's outcomes %v do not test the rules", fam, kinds)
		}
		t.Logf("family %d: %d probes agree with nft: %v", fam, len(want), kinds)
	}
}

// dscpRules test the DSCP in every filter chain that restore puts at its
// netfilter hook: what a connection from, to and through the router
// carries in its TOS byte (IPv6: traffic class).
const dscpRules = `*filter
:INPUT ACCEPT [0:0]
:FORWARD ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
-A INPUT -p tcp --dport 22 -m dscp --dscp 0x0a -j DROP
-A FORWARD -p tcp --dport 80 -m dscp ! --dscp-class EF -j DROP
-A OUTPUT -p tcp --dport 443 -m dscp --dscp-class CS1 -j DROP
COMMIT
`

// TestRestoreDSCP compares -m dscp at the chains' netfilter hooks, loaded
// by restore without -i, with iptables-legacy: connections whose sockets
// set the TOS byte (IPv6: the traffic class) to each code point the rules
// name, and to none.
func TestRestoreDSCP(t *testing.T) {
	testenv.RequireTool(t, "iptables-legacy-restore", "ip6tables-legacy-restore")
	bin := buildBpfwall(t)
	r := newRouted(t)
	r.listen(r.server, 80, 443)
	r.listen(r.router, 22)
	ns := map[string]string{"client": r.client, "router": r.router}
	type dscpProbe struct {
		probe
		dscp int
	}
	var probes []dscpProbe
	for _, p := range []probe{{"client", "rc", 22}, {"client", "server", 80}, {"router", "server", 443}} {
		for _, d := range []int{0, 0x0a, 0x2e, 0x08} {
			probes = append(probes, dscpProbe{p, d})
		}
	}
	outcomes := func(fam int) []string {
		out := make([]string, len(probes))
		var wg sync.WaitGroup
		for i, p := range probes {
			wg.Go(func() {
				addr := net.JoinHostPort(routedAddrs[p.to][fam], fmt.Sprint(p.port))
				r.in(ns[p.from], func() {
					d := net.Dialer{Timeout: 500 * time.Millisecond, Control: func(_, _ string, c syscall.RawConn) error {
						var serr error
						err := c.Control(func(fd uintptr) {
							if fam == 0 {
								serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_IP, unix.IP_TOS, p.dscp<<2)
							} else {
								serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_IPV6, unix.IPV6_TCLASS, p.dscp<<2)
							}
						})
						return cmp.Or(err, serr)
					}}
					d.SetMultipathTCP(false)
					c, err := d.Dial("tcp", addr)
					outcome := "open"
					switch {
					case err == nil:
						c.Close()
					case strings.Contains(err.Error(), "timeout"):
						outcome = "timeout"
					default:
						outcome = err.Error()
					}
					out[i] = fmt.Sprintf("%s (dscp %#x) -> %s %s", p.from, p.dscp, addr, outcome)
				})
			})
		}
		wg.Wait()
		return out
	}
	for fam := range 2 {
		outcomes(fam) // neighbour discovery first
	}
	file := writeFile(t, "dscp.rules", dscpRules)
	var got [2][]string
	for fam, flag := range []string{"-4", "-6"} {
		r.run("", bin, "restore", flag, file)
		got[fam] = outcomes(fam)
	}
	r.run("", bin, "unload")
	r.run(dscpRules, "iptables-legacy-restore")
	r.run(dscpRules, "ip6tables-legacy-restore")
	for fam := range 2 {
		want := outcomes(fam)
		kinds := compareOutcomes(t, "iptables", got[fam], want)
		if kinds["open"] == 0 || kinds["timeout"] == 0 {
			t.Errorf("family %d: the kernel's outcomes %v do not test the rules", fam, kinds)
		}
		t.Logf("family %d: %d probes agree with iptables: %v", fam, len(want), kinds)
	}
	r.run(emptyRules, "iptables-legacy-restore")
	r.run(emptyRules, "ip6tables-legacy-restore")
}
