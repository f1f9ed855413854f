package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"bpfwall/internal/testenv"
	"bpfwall/internal/topology"
)

// A routed topology of named network namespaces, client ─ router ─
// server, for both families: what bpfwall restore without -i filters is
// the router's traffic to it, through it and from it, at every chain.
type routed struct {
	t                      *testing.T
	client, router, server string
}

// Addresses of the routed topology: the client's side of the router is
// net 1, the server's net 2.
var routedAddrs = map[string][2]string{
	"client": {"10.71.1.2", "fd71:1::2"},
	"rc":     {"10.71.1.1", "fd71:1::1"},
	"rs":     {"10.71.2.1", "fd71:2::1"},
	"server": {"10.71.2.2", "fd71:2::2"},
}

// routedMACs are the MAC addresses of the client's and the server's
// interfaces, which the router's mac matches test.
var routedMACs = map[string]string{"client": "02:71:01:00:00:02", "server": "02:71:02:00:00:02"}

func newRouted(t *testing.T) *routed {
	t.Helper()
	testenv.RequireRoot(t)
	testenv.RequireTool(t, "ip")
	id := fmt.Sprintf("bwr%d", os.Getpid())
	r := &routed{t: t, client: id + "c", router: id + "r", server: id + "s"}
	t.Cleanup(func() {
		for _, ns := range []string{r.client, r.router, r.server} {
			exec.Command("ip", "netns", "del", ns).Run()
		}
	})
	a := routedAddrs
	for _, c := range []string{
		"netns add " + r.client, "netns add " + r.router, "netns add " + r.server,
		"-n " + r.client + " link set lo up", "-n " + r.router + " link set lo up", "-n " + r.server + " link set lo up",
		"link add cli0 netns " + r.client + " type veth peer name rc0 netns " + r.router,
		"link add rs0 netns " + r.router + " type veth peer name srv0 netns " + r.server,
		"-n " + r.client + " link set cli0 address " + routedMACs["client"],
		"-n " + r.server + " link set srv0 address " + routedMACs["server"],
		"-n " + r.client + " addr add " + a["client"][0] + "/24 dev cli0",
		"-n " + r.client + " addr add " + a["client"][1] + "/64 dev cli0 nodad",
		"-n " + r.router + " addr add " + a["rc"][0] + "/24 dev rc0",
		"-n " + r.router + " addr add " + a["rc"][1] + "/64 dev rc0 nodad",
		"-n " + r.router + " addr add " + a["rs"][0] + "/24 dev rs0",
		"-n " + r.router + " addr add " + a["rs"][1] + "/64 dev rs0 nodad",
		"-n " + r.server + " addr add " + a["server"][0] + "/24 dev srv0",
		"-n " + r.server + " addr add " + a["server"][1] + "/64 dev srv0 nodad",
		"-n " + r.client + " link set cli0 up", "-n " + r.router + " link set rc0 up",
		"-n " + r.router + " link set rs0 up", "-n " + r.server + " link set srv0 up",
		"-n " + r.client + " route add default via " + a["rc"][0],
		"-n " + r.client + " -6 route add default via " + a["rc"][1],
		"-n " + r.server + " route add default via " + a["rs"][0],
		"-n " + r.server + " -6 route add default via " + a["rs"][1],
	} {
		if out, err := exec.Command("ip", strings.Fields(c)...).CombinedOutput(); err != nil {
			t.Fatalf("ip %s: %v\n%s", c, err, out)
		}
	}
	for _, k := range []string{"net.ipv4.ip_forward=1", "net.ipv6.conf.all.forwarding=1"} {
		if out, err := exec.Command("ip", "netns", "exec", r.router, "sysctl", "-qw", k).CombinedOutput(); err != nil {
			t.Fatalf("sysctl %s: %v\n%s", k, err, out)
		}
	}
	return r
}

// acceleratorDrops is how many packets the router's accelerators dropped,
// as bpfwall status says, and how many accelerators run.
func (r *routed) acceleratorDrops(bin string) (drops uint64, accelerators int) {
	r.t.Helper()
	var filters []struct {
		Hook     string `json:"hook"`
		Counters struct {
			Dropped uint64 `json:"dropped_packets"`
		} `json:"counters"`
	}
	if err := json.Unmarshal([]byte(r.run("", bin, "status", "--json")), &filters); err != nil {
		r.t.Fatalf("status --json: %v", err)
	}
	for _, f := range filters {
		if f.Hook == "accelerator" {
			drops += f.Counters.Dropped
			accelerators++
		}
	}
	return drops, accelerators
}

// try runs a command in the router's namespace, with stdin.
func (r *routed) try(stdin string, args ...string) (string, error) {
	cmd := exec.Command("ip", append([]string{"netns", "exec", r.router}, args...)...)
	cmd.Stdin = strings.NewReader(stdin)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// run runs a command in the router's namespace, with stdin, and fails the
// test unless it succeeds.
func (r *routed) run(stdin string, args ...string) string {
	r.t.Helper()
	out, err := r.try(stdin, args...)
	if err != nil {
		r.t.Fatalf("%s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

// in runs f with the calling goroutine in namespace ns.
func (r *routed) in(ns string, f func()) {
	r.t.Helper()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	orig, err := topology.CurrentNetns()
	if err != nil {
		r.t.Fatal(err)
	}
	defer orig.Close()
	target, err := topology.OpenNetns("/run/netns/" + ns)
	if err != nil {
		r.t.Fatal(err)
	}
	defer target.Close()
	if err := target.Enter(); err != nil {
		r.t.Fatal(err)
	}
	defer func() {
		if err := orig.Enter(); err != nil {
			panic(err) // the thread must not go back to the pool in ns
		}
	}()
	f()
}

// listen accepts and closes TCP connections on ports in namespace ns,
// on every address of both families, until the test ends.
func (r *routed) listen(ns string, ports ...int) {
	for _, p := range ports {
		r.in(ns, func() {
			l, err := net.Listen("tcp", fmt.Sprintf("[::]:%d", p))
			if err != nil {
				r.t.Fatal(err)
			}
			r.t.Cleanup(func() { l.Close() })
			go acceptAndClose(l)
		})
	}
}

// acceptAndClose accepts and closes connections on l until it is closed.
func acceptAndClose(l net.Listener) {
	for {
		c, err := l.Accept()
		if err != nil {
			return
		}
		c.Close()
	}
}

// connect reports what a TCP connection from namespace ns to addr:port
// meets: "open", "refused" or "timeout".
func (r *routed) connect(ns, addr string, port int) string {
	var out string
	r.in(ns, func() {
		c, err := net.DialTimeout("tcp", net.JoinHostPort(addr, fmt.Sprint(port)), 500*time.Millisecond)
		switch {
		case err == nil:
			c.Close()
			out = "open"
		case strings.Contains(err.Error(), "refused"):
			out = "refused"
		case strings.Contains(err.Error(), "timeout"):
			out = "timeout"
		default:
			out = err.Error()
		}
	})
	return out
}

// probe is one connection of the routed topology.
type probe struct {
	from, to string // namespace; key of routedAddrs
	port     int
}

// routedProbes go to the router, through it both ways, and from it.
var routedProbes = []probe{
	{"client", "rc", 22}, {"client", "rc", 80}, {"client", "rc", 443}, {"client", "rc", 8080}, {"client", "rc", 23},
	{"client", "server", 22}, {"client", "server", 80}, {"client", "server", 443}, {"client", "server", 8080}, {"client", "server", 23},
	{"server", "client", 80}, {"server", "client", 8080},
	{"router", "server", 80}, {"router", "server", 443}, {"router", "client", 8080}, {"router", "client", 22},
}

// compareOutcomes reports each probe whose outcome under bpfwall (got)
// differs from the one under the kernel's oracle (want), and returns how
// many probes met each outcome under the kernel.
func compareOutcomes(t *testing.T, oracle string, got, want []string) map[string]int {
	t.Helper()
	kinds := map[string]int{}
	for i := range want {
		kinds[want[i][strings.LastIndexByte(want[i], ' ')+1:]]++
		if got[i] != want[i] {
			t.Errorf("bpfwall: %s; %s: %s", got[i], oracle, want[i])
		}
	}
	return kinds
}

// flushConntrack deletes the router's conntrack entries: a run compared
// with another begins without the entries the other left, whose states
// would carry over to a later connection from the same port.
func (r *routed) flushConntrack() {
	r.t.Helper()
	if err := topology.FlushConntrack(r.router); err != nil {
		r.t.Fatal(err)
	}
}

// outcomes runs every probe of probes (routedProbes when nil) for family
// fam (0 IPv4, 1 IPv6).
func (r *routed) outcomes(fam int, probes ...probe) []string {
	if probes == nil {
		probes = routedProbes
	}
	ns := map[string]string{"client": r.client, "router": r.router, "server": r.server}
	var out []string
	for _, p := range probes {
		out = append(out, fmt.Sprintf("%s -> %s:%d %s", p.from, routedAddrs[p.to][fam], p.port, r.connect(ns[p.from], routedAddrs[p.to][fam], p.port)))
	}
	return out
}

// The rule set of the routed test: every chain of filter, raw and mangle
// that bpfwall runs, interfaces in both directions, conntrack states,
// user chains, DROP policies and REJECTs, which the kernel answers.
// ICMPPROTO is icmp or ipv6-icmp (neighbour
// discovery goes through INPUT).
const routedRules = `*raw
:PREROUTING ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
-A PREROUTING -i rc0 -p tcp --dport 23 -j DROP
-A OUTPUT -p tcp --dport 22 -j DROP
COMMIT
*mangle
:PREROUTING ACCEPT [0:0]
:INPUT ACCEPT [0:0]
:FORWARD ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
:POSTROUTING ACCEPT [0:0]
-A PREROUTING -i rs0 -p tcp --dport 8080 -j DROP
-A INPUT -p tcp --dport 443 -j DROP
-A FORWARD -i rc0 -o rs0 -p tcp --dport 443 -j DROP
-A POSTROUTING -o rc0 -p tcp --dport 8080 -j DROP
COMMIT
*filter
:INPUT DROP [0:0]
:FORWARD DROP [0:0]
:OUTPUT ACCEPT [0:0]
:services - [0:0]
-A INPUT -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT
-A INPUT -i lo -j ACCEPT
-A INPUT -p ICMPPROTO -j ACCEPT
-A INPUT -p tcp --dport 22 -j REJECT --reject-with tcp-reset
-A INPUT -p tcp -j services
-A services -p tcp --dport 80 -j ACCEPT
-A services -p tcp --dport 8080 -j ACCEPT
-A FORWARD -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT
-A FORWARD -i rc0 -o rs0 -p tcp --dport 80 -j ACCEPT
-A FORWARD -i rc0 -o rs+ -p tcp --dport 8080 -j ACCEPT
-A FORWARD -i rs0 -o rc0 -p tcp -j ACCEPT
-A FORWARD -i rc0 -p tcp --dport 22 -j REJECT
-A OUTPUT -o rc0 -p tcp --dport 22 -j DROP
COMMIT
`

// TestRestoreWholeRuleSet restores a rule set across every chain, both
// families side by side, into a router without -i, and compares what
// connections to, through and from the router meet with what they meet
// under iptables-legacy and ip6tables-legacy with the same rules.
func TestRestoreWholeRuleSet(t *testing.T) {
	testenv.RequireTool(t, "iptables-legacy-restore", "ip6tables-legacy-restore")
	bin := buildBpfwall(t)
	r := newRouted(t)
	r.listen(r.server, 22, 80, 443, 8080, 23)
	r.listen(r.router, 22, 80, 443, 8080, 23)
	r.listen(r.client, 22, 80, 8080)
	text := [2]string{strings.ReplaceAll(routedRules, "ICMPPROTO", "icmp"), strings.ReplaceAll(routedRules, "ICMPPROTO", "ipv6-icmp")}
	rules4, rules6 := writeFile(t, "rules.v4", text[0]), writeFile(t, "rules.v6", text[1])
	run := r.run
	run("", bin, "restore", rules4)
	run("", bin, "restore", "-6", rules6)
	var got [2][]string
	for fam := range 2 {
		got[fam] = r.outcomes(fam)
	}
	status := run("", bin, "status")
	for _, want := range []string{"netfilter: program", "of raw PREROUTING", "of mangle POSTROUTING", "of filter FORWARD"} {
		if !strings.Contains(status, want) {
			t.Errorf("status does not say %q:\n%s", want, status)
		}
	}
	// One series per chain: the hook label names table and chain.
	metrics := run("", bin, "metrics")
	for _, want := range []string{`bpfwall_program_rules{family="ipv6",hook="netfilter-filter-FORWARD"`, `hook="netfilter-raw-OUTPUT"`, `chain="services"`} {
		if !strings.Contains(metrics, want) {
			t.Errorf("metrics do not hold %s:\n%s", want, metrics)
		}
	}
	for fam, flag := range []string{"-4", "-6"} {
		if saved := run("", bin, "save", flag); !strings.Contains(saved, "-A FORWARD -i rc0 -o rs+ -p tcp -m tcp --dport 8080 -j ACCEPT") || !strings.Contains(saved, "*raw") {
			t.Errorf("save %s (family %d) does not print the rule set:\n%s", flag, fam, saved)
		}
	}
	// As bpfwall6.service stops: the IPv6 chains go, the IPv4 ones stay.
	run("", bin, "unload", "--hook", "netfilter", "-6")
	if out := run("", bin, "status"); strings.Contains(out, "netfilter ipv6") || !strings.Contains(out, "netfilter ipv4 forward") {
		t.Errorf("after unload --hook netfilter -6:\n%s", out)
	}
	run("", bin, "unload", "--hook", "netfilter", "-4")
	if out := run("", bin, "status"); !strings.Contains(out, "no filter loaded") {
		t.Fatalf("after unload:\n%s", out)
	}
	run("", bin, "unload", "--hook", "netfilter", "-4") // nothing loaded: succeeds

	r.flushConntrack()
	run(text[0], "iptables-legacy-restore")
	run(text[1], "ip6tables-legacy-restore")
	for fam := range 2 {
		want := r.outcomes(fam)
		kinds := compareOutcomes(t, "iptables", got[fam], want)
		// The probes must tell filters apart: some connections open,
		// some dropped.
		if kinds["open"] == 0 || kinds["timeout"] == 0 || kinds["refused"] == 0 {
			t.Errorf("family %d: the kernel's outcomes %v do not test the filter", fam, kinds)
		}
		t.Logf("family %d: %d probes agree with the kernel: %v", fam, len(want), kinds)
	}
}

// delegatedRules need the kernel: a DNAT and a MARK, which no BPF
// program here does, and a REJECT in INPUT, whose reply a BPF netfilter
// program cannot send: bpfwall runs filter INPUT and the kernel's REJECT
// answers. FORWARD and OUTPUT run in bpfwall, after the DNAT, which
// FORWARD tests: port 8082 is open only through it.
const delegatedRules = `*mangle
:PREROUTING ACCEPT [0:0]
:INPUT ACCEPT [0:0]
:FORWARD ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
:POSTROUTING ACCEPT [0:0]
-A PREROUTING -p tcp --dport 8082 -j MARK --set-mark 0x1
COMMIT
*nat
:PREROUTING ACCEPT [0:0]
:INPUT ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
:POSTROUTING ACCEPT [0:0]
-A PREROUTING -d 10.71.1.1/32 -p tcp --dport 8081 -j DNAT --to-destination 10.71.2.2:80
-A PREROUTING -d 10.71.1.1/32 -p tcp --dport 8082 -j DNAT --to-destination 10.71.2.2:443
COMMIT
*filter
:INPUT ACCEPT [0:0]
:FORWARD DROP [0:0]
:OUTPUT ACCEPT [0:0]
-A INPUT -p tcp --dport 22 -j REJECT --reject-with tcp-reset
-A FORWARD -m conntrack --ctstate ESTABLISHED,RELATED -j ACCEPT
-A FORWARD -i rc0 -o rs0 -p tcp --dport 80 -j ACCEPT
-A FORWARD -i rc0 -o rs0 -p tcp --dport 443 -m conntrack --ctstate DNAT -j ACCEPT
-A OUTPUT -p tcp --dport 8080 -j DROP
COMMIT
`

// TestRestoreDelegates restores a rule set with a nat table and a REJECT:
// bpfwall leaves those to the kernel's netfilter, says so, and the
// connections meet what they meet under iptables-legacy; unload removes
// what it delegated.
func TestRestoreDelegates(t *testing.T) {
	testenv.RequireTool(t, "iptables-legacy-restore", "iptables-restore", "iptables-save")
	bin := buildBpfwall(t)
	r := newRouted(t)
	r.listen(r.server, 22, 80, 443)
	r.listen(r.router, 22, 80)
	r.listen(r.client, 8080)
	rules := writeFile(t, "rules.v4", delegatedRules)
	probes := []probe{
		{"client", "rc", 8081}, {"client", "rc", 8082}, {"client", "rc", 22}, {"client", "rc", 80},
		{"client", "server", 80}, {"client", "server", 443}, {"router", "client", 8080},
	}
	run := r.run
	// First without the REJECT, as a rule set that gains one later: the
	// kernel's filter table, which answers it, is then created after
	// filter INPUT's link, and must still run after it, or it has
	// nothing to answer and the packet passes.
	noReject := strings.Replace(delegatedRules, "-A INPUT -p tcp --dport 22 -j REJECT --reject-with tcp-reset\n", "-A INPUT -p tcp --dport 22 -j DROP\n", 1)
	run(noReject, bin, "restore")
	if kernel := run("", "iptables-save", "-t", "filter"); strings.Contains(kernel, delegatedMark) {
		t.Fatalf("a restore without REJECT wrote the kernel's filter table:\n%s", kernel)
	}
	out := run("", bin, "restore", rules)
	for _, want := range []string{"nat runs in the kernel's netfilter", "mangle PREROUTING runs in the kernel's netfilter", "rules.v4:7:38: MARK target is not supported"} {
		if !strings.Contains(out, want) {
			t.Errorf("restore does not say %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "filter FORWARD runs in the kernel") {
		t.Errorf("restore leaves filter FORWARD, which tests DNAT, to the kernel:\n%s", out)
	}
	got := r.outcomes(0, probes...)
	// save -c counts what the kernel runs too: the MARK, the DNATs, and
	// filter INPUT's REJECT, decided in BPF.
	saved := run("", bin, "save", "-c")
	for _, re := range []string{`\[[1-9][0-9]*:[0-9]+\] -A PREROUTING -p tcp -m tcp --dport 8082 -j MARK`, `\[[1-9][0-9]*:[0-9]+\] -A PREROUTING -d 10.71.1.1/32 -p tcp -m tcp --dport 8081 -j DNAT`,
		`\[[1-9][0-9]*:[0-9]+\] -A INPUT -p tcp -m tcp --dport 22 -j REJECT`} {
		if !regexp.MustCompile(re).MatchString(saved) {
			t.Errorf("save -c does not match %s:\n%s", re, saved)
		}
	}
	kernel := run("", "iptables-save")
	if strings.Count(kernel, ":"+delegatedMark+" ") != 3 || !strings.Contains(kernel, "-m bpf --object-pinned ") || !strings.Contains(kernel, "-j REJECT --reject-with tcp-reset") ||
		!strings.Contains(kernel, "--set-xmark 0x1") || strings.Contains(kernel, "--dport 22") || strings.Contains(kernel, "--dport 8080 -j DROP") {
		t.Errorf("the kernel's tables are not mangle, nat and filter INPUT's REJECT answer, marked:\n%s", kernel)
	}
	// Without the REJECT, the kernel answers nothing: its filter table
	// goes.
	run(noReject, bin, "restore")
	if kernel := run("", "iptables-save", "-t", "filter"); strings.Contains(kernel, "REJECT") || strings.Contains(kernel, delegatedMark) {
		t.Errorf("filter INPUT is still in the kernel:\n%s", kernel)
	}
	if got := r.connect(r.client, "10.71.1.1", 22); got != "timeout" {
		t.Errorf("after the REJECT became a DROP, a connection to port 22 meets %s", got)
	}
	run("", bin, "unload")
	if kernel := run("", "iptables-save"); strings.Contains(kernel, delegatedMark) || strings.Contains(kernel, "DNAT") {
		t.Errorf("unload left delegated tables:\n%s", kernel)
	}
	// A rule set the kernel runs all of (kube-proxy's, only nat): save
	// prints it from the kernel, without bpfwall's mark.
	natOnly := "*nat\n:PREROUTING ACCEPT [0:0]\n:INPUT ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n:POSTROUTING ACCEPT [0:0]\n-A POSTROUTING -o rs0 -j MASQUERADE\nCOMMIT\n"
	run(natOnly, bin, "restore")
	if saved := run("", bin, "save"); !strings.Contains(saved, "-A POSTROUTING -o rs0 -j MASQUERADE\n") || strings.Contains(saved, delegatedMark) {
		t.Errorf("save of a rule set the kernel runs:\n%s", saved)
	}
	// A restore that does not name nat leaves it, as iptables-restore.
	run("*filter\n:INPUT ACCEPT [0:0]\n:FORWARD ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n-A INPUT -p tcp --dport 22 -j REJECT\nCOMMIT\n", bin, "restore")
	if saved := run("", bin, "save"); !strings.Contains(saved, "-j MASQUERADE\n") || !strings.Contains(saved, "--dport 22 -j REJECT --reject-with icmp-port-unreachable\n") || strings.Contains(saved, "object-pinned") {
		t.Errorf("save after a restore of filter only:\n%s", saved)
	}
	// unload --netns, from outside the namespace, flushes them too.
	id := regexp.MustCompile(`netns (\d+) `).FindStringSubmatch(run("", bin, "status"))
	if id == nil {
		t.Fatal("status names no network namespace")
	}
	if out, err := exec.Command(bin, "unload", "--netns", id[1]).CombinedOutput(); err != nil {
		t.Fatalf("unload --netns %s: %v\n%s", id[1], err, out)
	}
	if kernel := run("", "iptables-save"); strings.Contains(kernel, delegatedMark) || strings.Contains(kernel, "MASQUERADE") {
		t.Errorf("unload --netns left delegated tables:\n%s", kernel)
	}

	r.flushConntrack()
	run(delegatedRules, "iptables-legacy-restore")
	want := r.outcomes(0, probes...)
	kinds := compareOutcomes(t, "iptables", got, want)
	if kinds["open"] == 0 || kinds["timeout"] == 0 || kinds["refused"] == 0 {
		t.Errorf("the kernel's outcomes %v do not test the rules", kinds)
	}
	t.Logf("%d probes agree with the kernel: %v", len(want), kinds)
}

// TestRealDumpsRestore: every real-world dump that iptables-restore
// --test (ip6tables-restore) accepts, bpfwall restore -t takes whole:
// each chain compiled and verified by the kernel, or left to the
// kernel's netfilter, which checks it. It logs, per dump, how many
// chains run in BPF and which go to the kernel.
func TestRealDumpsRestore(t *testing.T) {
	testenv.RequireTool(t, "iptables-legacy-restore", "ip6tables-legacy-restore", "iptables-restore", "unshare", "ipset")
	dumps := testenv.RealDumps(t)
	bin := buildBpfwall(t)
	dir := t.TempDir()
	whole, tried := 0, 0
	for _, d := range dumps {
		if fi, err := os.Stat(d.Path); err != nil || fi.IsDir() {
			continue
		}
		fam, oracle := []string{}, "iptables-legacy-restore"
		if base := d.Name; strings.Contains(base, "ip6tables") || strings.Contains(base, "ipv6") || strings.Contains(base, ".v6") {
			fam, oracle = []string{"-6"}, "ip6tables-legacy-restore"
		}
		// The TUM dumps' anonymized MAC addresses are replaced (Src).
		f, text := filepath.Join(dir, d.Name), d.Src
		if err := os.WriteFile(f, text, 0o600); err != nil {
			t.Fatal(err)
		}
		// Each command runs in a namespace of its own that holds the
		// ipsets the rules name, as the host they came from did.
		var sets []string
		for _, m := range regexp.MustCompile(`--match-set (\S+)`).FindAllStringSubmatch(string(text), -1) {
			if !slices.Contains(sets, m[1]) {
				sets = append(sets, m[1])
			}
		}
		inNetns := func(args ...string) *exec.Cmd {
			script := ""
			for _, s := range sets {
				script += fmt.Sprintf("ipset create %s hash:net family %s && ", s, map[bool]string{true: "inet6", false: "inet"}[len(fam) > 0])
			}
			return exec.Command("unshare", append([]string{"-n", "sh", "-c", script + `exec "$@"`, "sh"}, args...)...)
		}
		check := inNetns(oracle, "--test")
		check.Stdin = strings.NewReader(string(text))
		if check.Run() != nil {
			continue // not a rule set iptables takes
		}
		tried++
		cmd := inNetns(append([]string{bin, "restore", "-t", "-v"}, append(fam, f)...)...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Errorf("%s: %v\n%s", filepath.Base(f), err, out)
			continue
		}
		whole++
		compiled := strings.Count(string(out), ": compiled ")
		var delegated []string
		for line := range strings.Lines(string(out)) {
			if name, _, ok := strings.Cut(strings.TrimPrefix(line, "bpfwall: "), " runs in the kernel's netfilter"); ok && strings.HasPrefix(line, "bpfwall: ") {
				delegated = append(delegated, name)
			}
		}
		t.Logf("%-55s %2d chains in BPF; in the kernel: %s", filepath.Base(f), compiled, strings.Join(delegated, ", "))
		if strings.HasPrefix(d.Name, "tum-netintum") {
			// INPUT and FORWARD share recent tables and limit buckets,
			// and FORWARD tests MAC addresses: all run in BPF.
			for _, c := range []string{"INPUT", "FORWARD", "OUTPUT"} {
				if !strings.Contains(string(out), "filter "+c+": compiled ") {
					t.Errorf("%s: filter %s does not run in BPF:\n%s", d.Name, c, out)
				}
			}
		}
	}
	if tried < 20 {
		t.Errorf("only %d dumps that iptables takes", tried)
	}
	t.Logf("%d of %d dumps restore whole", whole, tried)
}

// routedLogRules log a connection's SYN at INPUT, FORWARD and OUTPUT.
const routedLogRules = `*filter
:INPUT ACCEPT [0:0]
:FORWARD ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
-A INPUT -p tcp --syn --dport 22 -j LOG --log-prefix "rtI " --log-uid
-A FORWARD -p tcp --syn --dport 80 -j LOG --log-prefix "rtF " --log-tcp-options
-A OUTPUT -p tcp --syn --dport 443 -j LOG --log-prefix "rtO " --log-level 6 --log-uid
-A OUTPUT -p tcp --sport 22 --tcp-flags SYN,ACK SYN,ACK -j LOG --log-prefix "rtS " --log-uid
COMMIT
`

// logVarying are the fields of a LOG line that differ between two
// connections: the IP ID, the source port, an ephemeral destination port
// (a SYN-ACK's) and the TCP timestamp option's TSval.
var logVarying = regexp.MustCompile(`\bID=\d+ |SPT=\d+ |DPT=[1-9]\d{4} |080A[0-9A-F]{8}`)

// TestRestoreLogs: the LOG lines bpfwall log prints for chains at their
// netfilter hooks (INPUT, FORWARD with both devices, OUTPUT without a MAC
// header, --log-uid) are the kernel's for the same connections, but for
// what differs between two connections.
func TestRestoreLogs(t *testing.T) {
	testenv.RequireTool(t, "iptables-legacy-restore")
	bin := buildBpfwall(t)
	r := newRouted(t)
	r.listen(r.server, 80, 443)
	r.listen(r.router, 22)
	rulesFile := writeFile(t, "rules.v4", routedLogRules)
	netns := func(args ...string) *exec.Cmd {
		return exec.Command("ip", append([]string{"netns", "exec", r.router}, args...)...)
	}
	if out, err := netns(bin, "restore", rulesFile).CombinedOutput(); err != nil {
		t.Fatalf("restore: %v\n%s", err, out)
	}
	reader := netns(bin, "log", "--count", "4", "--timeout", "20s")
	var logged strings.Builder
	reader.Stdout = &logged
	if err := reader.Start(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond) // the reader opens the ring buffers
	connect := func() {
		r.connect(r.client, routedAddrs["rc"][0], 22)
		r.connect(r.client, routedAddrs["server"][0], 80)
		r.connect(r.router, routedAddrs["server"][0], 443)
	}
	connect()
	if err := reader.Wait(); err != nil {
		t.Fatalf("bpfwall log: %v\n%s", err, logged.String())
	}
	if out, err := netns(bin, "unload").CombinedOutput(); err != nil {
		t.Fatalf("unload: %v\n%s", err, out)
	}
	var ours []string
	for line := range strings.Lines(logged.String()) {
		_, text, _ := strings.Cut(strings.TrimSpace(line), ": ")
		ours = append(ours, logVarying.ReplaceAllString(text, ""))
	}

	allowNetnsLogging(t)
	load := netns("iptables-legacy-restore")
	load.Stdin = strings.NewReader(routedLogRules)
	if out, err := load.CombinedOutput(); err != nil {
		t.Fatalf("iptables-legacy-restore: %v\n%s", err, out)
	}
	var kernel []string
	for _, text := range kmsgLines(t, 4, func(text string) bool { return strings.HasPrefix(text, "rt") }, connect) {
		kernel = append(kernel, logVarying.ReplaceAllString(strings.TrimSpace(text), ""))
	}
	slices.Sort(ours)
	slices.Sort(kernel)
	if !slices.Equal(ours, kernel) {
		t.Errorf("bpfwall log:\n%s\nthe kernel:\n%s", strings.Join(ours, "\n"), strings.Join(kernel, "\n"))
	}
	for _, want := range []string{"rtI IN=rc0 OUT= MAC=", "rtF IN=rc0 OUT=rs0 MAC=", "rtO IN= OUT=rs0 SRC="} {
		if !slices.ContainsFunc(ours, func(l string) bool { return strings.HasPrefix(l, want) }) {
			t.Errorf("no line starts %q:\n%s", want, strings.Join(ours, "\n"))
		}
	}
	// --log-uid: the router's own socket is root's; the SYN that comes in
	// has no socket yet, and the SYN-ACK a request socket, which is not a
	// full one.
	if !slices.ContainsFunc(ours, func(l string) bool { return strings.HasPrefix(l, "rtO ") && strings.Contains(l, " UID=0 GID=0") }) ||
		slices.ContainsFunc(ours, func(l string) bool { return !strings.HasPrefix(l, "rtO ") && strings.Contains(l, " UID=") }) {
		t.Errorf("--log-uid: want UID=0 GID=0 in the rtO line only:\n%s", strings.Join(ours, "\n"))
	}
}

// kmsgLines returns the first n lines the kernel logs, as /dev/kmsg has
// them, that match, while send runs and for up to 10 seconds after.
func kmsgLines(t *testing.T, n int, match func(text string) bool, send func()) []string {
	t.Helper()
	kmsg, err := os.OpenFile("/dev/kmsg", os.O_RDONLY|unix.O_NONBLOCK, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer kmsg.Close()
	if _, err := unix.Seek(int(kmsg.Fd()), 0, unix.SEEK_END); err != nil {
		t.Fatal(err)
	}
	send()
	var out []string
	buf := make([]byte, 8192)
	for deadline := time.Now().Add(10 * time.Second); len(out) < n && time.Now().Before(deadline); {
		k, err := unix.Read(int(kmsg.Fd()), buf)
		if errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EPIPE) {
			time.Sleep(20 * time.Millisecond)
			continue
		}
		if err != nil {
			t.Fatalf("read /dev/kmsg: %v", err)
		}
		if _, text, ok := strings.Cut(string(buf[:k]), ";"); ok {
			if text, _, _ = strings.Cut(text, "\n"); match(text) {
				out = append(out, text)
			}
		}
	}
	return out
}

// TestRestoreDelegationFailure: when the kernel refuses what a restore
// hands it, nothing changes: the chains bpfwall runs keep the old
// programs, the kernel's tables their old rules. An iptables-restore
// earlier on the PATH writes the new tables and then fails, as
// iptables-nft-restore can after committing some tables.
func TestRestoreDelegationFailure(t *testing.T) {
	testenv.RequireTool(t, "iptables-restore", "iptables-save")
	bin := buildBpfwall(t)
	r := newRouted(t)
	real, err := exec.LookPath("iptables-restore")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	fake := "#!/bin/sh\n# Writes what it is given, then fails if it holds the word FAILHERE (checks pass).\n" +
		"in=$(cat)\nprintf '%s\\n' \"$in\" | " + real + " \"$@\" || exit $?\n" +
		"case \"$* $in\" in *--test*) ;; *FAILHERE*) echo 'fake iptables-restore: injected failure' >&2; exit 1;; esac\n"
	if err := os.WriteFile(dir+"/iptables-restore", []byte(fake), 0o755); err != nil {
		t.Fatal(err)
	}
	old := `*nat
:PREROUTING ACCEPT [0:0]
:INPUT ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
:POSTROUTING ACCEPT [0:0]
-A PREROUTING -d 10.71.1.1/32 -p tcp --dport 8081 -j DNAT --to-destination 10.71.2.2:80
COMMIT
*filter
:INPUT ACCEPT [0:0]
:FORWARD ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
-A FORWARD -p tcp --dport 443 -j DROP
COMMIT
`
	r.run(old, bin, "restore")
	before := r.run("", bin, "status")
	kernelBefore := r.run("", "iptables-save", "-t", "nat")
	next := strings.NewReplacer("8081", "8082", "--dport 443", "--dport 80").Replace(old)
	next = strings.Replace(next, "-A PREROUTING", "-A PREROUTING -m comment --comment FAILHERE", 1)
	cmd := exec.Command("ip", "netns", "exec", r.router, bin, "restore")
	cmd.Env = append(os.Environ(), "PATH="+dir+":"+os.Getenv("PATH"))
	cmd.Stdin = strings.NewReader(next)
	out, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "injected failure") {
		t.Fatalf("restore with a failing iptables-restore: %v\n%s", err, out)
	}
	program := regexp.MustCompile(`program \d+`)
	if after := r.run("", bin, "status"); program.FindAllString(after, -1)[0] != program.FindAllString(before, -1)[0] || !strings.Contains(after, "1 rules of filter FORWARD") {
		t.Errorf("the chains changed:\nbefore\n%s\nafter\n%s", before, after)
	}
	stripCounters := regexp.MustCompile(`\[\d+:\d+\]|#.*\n`)
	if kernel := r.run("", "iptables-save", "-t", "nat"); stripCounters.ReplaceAllString(kernel, "") != stripCounters.ReplaceAllString(kernelBefore, "") {
		t.Errorf("the kernel's nat table changed:\nbefore\n%s\nafter\n%s", kernelBefore, kernel)
	}
	if saved := r.run("", bin, "save"); !strings.Contains(saved, "--dport 8081") || !strings.Contains(saved, "--dport 443 -j DROP") {
		t.Errorf("save after the failed restore:\n%s", saved)
	}
	// A rule the kernel's iptables-restore refuses is named by its line
	// of the input, and changes nothing either.
	bad := strings.Replace(next, "--to-destination 10.71.2.2:80", "--to-destination 192.16", 1)
	if out, err := r.try(bad, bin, "restore"); err == nil || !regexp.MustCompile(`:6:\d+: iptables-restore refuses it: Bad IP address "192.16"`).MatchString(out) {
		t.Errorf("restore of a DNAT to a bad address: %v\n%s", err, out)
	}
	if after := r.run("", bin, "status"); program.FindAllString(after, -1)[0] != program.FindAllString(before, -1)[0] {
		t.Errorf("the refused restore changed the chains:\nbefore\n%s\nafter\n%s", before, after)
	}
	r.run("", bin, "unload")
}

// natStatusRules: nft's tests of the conntrack entry's NAT flags, with
// the kernel's nat (iptables-legacy) DNATing ports 8081 and 8082 and
// masquerading ssh to the server. Port 8082 is open only through
// "ct status dnat", the server's ssh closed only through "ct status snat"
// (its replies are dropped), and the server's port 80 closed directly,
// not through the DNAT, by "ct status ! dnat".
const natStatusRules = `table ip filter {
	chain forward {
		type filter hook forward priority 0; policy drop;
		ct status dnat tcp dport 443 accept
		ct status snat tcp sport 22 drop
		ct status ! dnat tcp dport 80 drop
		ct state established,related accept
		iifname "rc0" tcp dport { 22, 80 } accept
	}
}
`

// TestNFTCtStatus: natStatusRules as bpfwall reads them (fmt prints the
// model as iptables-save text, which restore runs at the chains'
// netfilter hooks), beside the kernel's nat, give connections through the
// router what nft -f of the same rule set gives them.
func TestNFTCtStatus(t *testing.T) {
	testenv.RequireTool(t, "iptables-legacy-restore", "nft")
	bin := buildBpfwall(t)
	r := newRouted(t)
	r.listen(r.server, 22, 80, 443)
	r.run("*nat\n:PREROUTING ACCEPT [0:0]\n:INPUT ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n:POSTROUTING ACCEPT [0:0]\n"+
		"-A PREROUTING -d 10.71.1.1/32 -p tcp --dport 8081 -j DNAT --to-destination 10.71.2.2:80\n"+
		"-A PREROUTING -d 10.71.1.1/32 -p tcp --dport 8082 -j DNAT --to-destination 10.71.2.2:443\n"+
		"-A POSTROUTING -o rs0 -p tcp --dport 22 -j MASQUERADE\nCOMMIT\n", "iptables-legacy-restore")
	rules := writeFile(t, "rules.nft", natStatusRules)
	probes := []probe{{"client", "rc", 8081}, {"client", "rc", 8082}, {"client", "server", 80}, {"client", "server", 443}, {"client", "server", 22}}
	translated := r.run("", bin, "fmt", rules)
	if !strings.Contains(translated, "--ctstate DNAT") || !strings.Contains(translated, "! --ctstate DNAT") {
		t.Fatalf("fmt does not read ct status as the states SNAT and DNAT:\n%s", translated)
	}
	if out := r.run(translated, bin, "restore", "-T", "filter"); strings.Contains(out, "runs in the kernel") {
		t.Errorf("restore leaves a chain to the kernel:\n%s", out)
	}
	got := r.outcomes(0, probes...)
	r.run("", bin, "unload")
	r.flushConntrack()
	r.run("", "nft", "-f", rules)
	want := r.outcomes(0, probes...)
	kinds := compareOutcomes(t, "nft", got, want)
	if kinds["open"] != 2 || kinds["timeout"] != 3 {
		t.Errorf("the kernel's outcomes %v are not what the rules were written for (8081 and 8082 open)", kinds)
	}
	t.Logf("%d probes agree with the kernel: %v", len(want), kinds)
}

// TestRestoreDelegatesUncompiled: a chain that lowers but does not compile
// at its netfilter hook (-m mac with LOG --log-uid: the source MAC address
// and the socket's owner share the parsed packet's bytes) runs in the
// kernel, as one that does not lower does. restore
// lets the parsed rule set go before it compiles, and reads it again for
// such a chain. The other chains run in BPF, and save prints the whole.
func TestRestoreDelegatesUncompiled(t *testing.T) {
	c := delegationCLI(t)
	text := "*filter\n:INPUT ACCEPT [0:0]\n:FORWARD DROP [0:0]\n:OUTPUT ACCEPT [0:0]\n" +
		"-A INPUT -m mac --mac-source 02:00:00:00:00:01 -j DROP\n-A INPUT -p tcp -m tcp --dport 23 -j LOG --log-uid\n" +
		"-A FORWARD -p tcp -m tcp --dport 80 -j ACCEPT\nCOMMIT\n"
	_, errOut, code := c.run(text, "restore")
	if code != 0 || !strings.Contains(errOut, "filter INPUT runs in the kernel's netfilter") || !strings.Contains(errOut, "source MAC address and the owner") {
		t.Fatalf("restore: exit %d, want filter INPUT delegated for its mac match and LOG --log-uid:\n%s", code, errOut)
	}
	c.checkDelegated("FORWARD", "INPUT", "-A INPUT -m mac --mac-source 02:00:00:00:00:01 -j DROP", "--dport 23 -j LOG --log-uid")
	if saved := c.ok("", "save"); !strings.Contains(saved, "-A INPUT -m mac --mac-source 02:00:00:00:00:01 -j DROP\n") || !strings.Contains(saved, "-A FORWARD -p tcp -m tcp --dport 80 -j ACCEPT\n") {
		t.Errorf("save:\n%s", saved)
	}
	c.ok("", "unload")
}

// TestRestoreDelegatesDeepChains: FORWARD jumps through five nested
// chains with a LOG at the bottom, whose calls need more stack than BPF
// allows. The compiler refuses them at the jump to the fifth, so restore
// runs FORWARD in the kernel and INPUT in BPF, where it used to fail at
// the load; with --no-delegate it names that jump and changes nothing.
// The input is a regular file, which restore reads again to delegate the
// chain rather than keep it in memory (rereader).
func TestRestoreDelegatesDeepChains(t *testing.T) {
	c := delegationCLI(t)
	var b strings.Builder
	b.WriteString("*filter\n:INPUT ACCEPT [0:0]\n:FORWARD DROP [0:0]\n:OUTPUT ACCEPT [0:0]\n")
	for i := 1; i <= 5; i++ {
		fmt.Fprintf(&b, ":C%d - [0:0]\n", i)
	}
	b.WriteString("-A INPUT -p tcp -m tcp --dport 23 -j DROP\n-A FORWARD -p tcp -j C1\n")
	for i := 1; i <= 5; i++ {
		fmt.Fprintf(&b, "-A C%d -s 10.0.%d.0/24 -j ACCEPT\n", i, i)
		if i < 5 {
			fmt.Fprintf(&b, "-A C%d -p tcp -m tcp --dport %d -j C%d\n", i, 1000+i, i+1)
		} else {
			fmt.Fprintf(&b, "-A C%d -j LOG --log-prefix deep\n", i)
		}
	}
	b.WriteString("COMMIT\n")
	text := b.String()
	// The jump to C5 is on line 19.
	_, errOut, code := c.run(text, "restore", "--no-delegate")
	if code == 0 || !strings.Contains(errOut, "<stdin>:19:") || !strings.Contains(errOut, "jump to C5 nests chains too deep for BPF's stack") {
		t.Fatalf("restore --no-delegate: exit %d, want the jump to C5 refused:\n%s", code, errOut)
	}
	if st := c.status(); len(st) != 0 {
		t.Fatalf("a refused restore loaded %d filters", len(st))
	}
	// From a regular file, as restore < rules.v4: the chain that fails to
	// compile is parsed again from the input read again.
	_, errOut, code = c.runFromFile(text, "restore")
	if code != 0 || !strings.Contains(errOut, "filter FORWARD runs in the kernel's netfilter") || !strings.Contains(errOut, "too deep for BPF's stack") {
		t.Fatalf("restore: exit %d, want filter FORWARD delegated for its nesting:\n%s", code, errOut)
	}
	c.checkDelegated("INPUT", "FORWARD", "-A C4 -p tcp -m tcp --dport 1004 -j C5", "-A C5 -j LOG --log-prefix deep")
	c.ok("", "unload")
}

// TestRestoreDelegatesLargeChains: a chain past a limit of the whole
// program, as many interface names as no program can test or as many
// rules as make more instructions than a program may have, is refused
// at a rule's position, and restore delegates it like a chain with a
// rule it cannot compile.
func TestRestoreDelegatesLargeChains(t *testing.T) {
	c := delegationCLI(t)
	head := "*filter\n:INPUT ACCEPT [0:0]\n:FORWARD DROP [0:0]\n:OUTPUT ACCEPT [0:0]\n-A INPUT -p tcp -m tcp --dport 23 -j DROP\n"
	var b strings.Builder
	b.WriteString(head)
	for i := range 65 {
		fmt.Fprintf(&b, "-A FORWARD -s 10.0.0.%d/32 -i vl%d -j DROP\n", i, i)
	}
	b.WriteString("COMMIT\n")
	// The 65th name is on line 70.
	_, errOut, code := c.run(b.String(), "restore", "--no-delegate")
	if code == 0 || !strings.Contains(errOut, "<stdin>:70:") || !strings.Contains(errOut, "65 interface names, more than the 64") {
		t.Fatalf("restore --no-delegate: exit %d, want the 65th interface name refused:\n%s", code, errOut)
	}
	_, errOut, code = c.run(b.String(), "restore")
	if code != 0 || !strings.Contains(errOut, "filter FORWARD runs in the kernel's netfilter") {
		t.Fatalf("restore: exit %d, want filter FORWARD delegated:\n%s", code, errOut)
	}
	c.checkDelegated("INPUT", "FORWARD", "-A FORWARD -s 10.0.0.64/32 -i vl64 -j DROP")

	// At -O0 every rule is code of its own: 60k rules make more than a
	// million instructions.
	b.Reset()
	b.WriteString(head)
	for i := range 60000 {
		fmt.Fprintf(&b, "-A FORWARD -s 10.%d.%d.%d/32 -j DROP\n", i>>16, i>>8&0xff, i&0xff)
	}
	b.WriteString("COMMIT\n")
	_, errOut, code = c.run(b.String(), "restore", "-O0", "--no-delegate")
	if code == 0 || !strings.Contains(errOut, "<stdin>:6:") || !strings.Contains(errOut, "more than the 1000000 a BPF program may have") {
		t.Fatalf("restore -O0 --no-delegate: exit %d, want the chain refused at its first rule:\n%s", code, errOut)
	}
	_, errOut, code = c.run(b.String(), "restore", "-O0")
	if code != 0 || !strings.Contains(errOut, "filter FORWARD runs in the kernel's netfilter") {
		t.Fatalf("restore -O0: exit %d, want filter FORWARD delegated:\n%s", code, errOut)
	}
	c.checkDelegated("INPUT", "FORWARD", "-A FORWARD -s 10.0.117.47/32 -j DROP")
	c.ok("", "unload")
}

// TestRestoreDelegatesRefusedChains: a chain that compiles but whose
// program the kernel's verifier gives up on (800 recent matches with
// rings of 20 stamps: too many steps) is delegated like one that does
// not compile, and the other chains are loaded again without it.
func TestRestoreDelegatesRefusedChains(t *testing.T) {
	c := delegationCLI(t)
	var b strings.Builder
	b.WriteString("*filter\n:INPUT ACCEPT [0:0]\n:FORWARD DROP [0:0]\n:OUTPUT ACCEPT [0:0]\n")
	// Both chains REJECT: the kernel answers FORWARD's, which bpfwall
	// runs, and runs INPUT's REJECT itself once INPUT is delegated.
	b.WriteString("-A FORWARD -p tcp -m tcp --dport 23 -j DROP\n-A FORWARD -p tcp -m tcp --dport 26 -j REJECT --reject-with tcp-reset\n")
	for i := range 800 {
		fmt.Fprintf(&b, "-A INPUT -s 10.0.%d.%d/32 -m recent --rcheck --seconds 60 --hitcount 20 --name n%d --rsource -j DROP\n", i>>8, i&0xff, i%5)
	}
	b.WriteString("-A INPUT -p tcp -m tcp --dport 25 -j REJECT --reject-with tcp-reset\nCOMMIT\n")
	_, errOut, code := c.run(b.String(), "restore")
	if code != 0 || !strings.Contains(errOut, "filter INPUT runs in the kernel's netfilter") || !strings.Contains(errOut, "<stdin>:7:") ||
		!strings.Contains(errOut, "the kernel's verifier gave up on its program") {
		t.Fatalf("restore: exit %d, want filter INPUT delegated for its verifier's refusal:\n%s", code, errOut)
	}
	if n := strings.Count(errOut, "runs in the kernel's netfilter"); n != 1 {
		t.Errorf("the delegation told of %d times:\n%s", n, errOut)
	}
	c.checkDelegated("FORWARD", "INPUT", "-A INPUT -s 10.0.3.31/32 -m recent --rcheck --seconds 60 --hitcount 20 --name n4 --mask 255.255.255.255 --rsource -j DROP",
		"-A INPUT -p tcp -m tcp --dport 25 -j REJECT --reject-with tcp-reset", "-A FORWARD -p tcp -m bpf --object-pinned")
	kernel, err := exec.Command("iptables-save", "-t", "filter").CombinedOutput()
	if err != nil || strings.Contains(string(kernel), "-A INPUT -p tcp -m bpf") {
		t.Errorf("the kernel answers REJECT rules of INPUT, which it runs itself (%v):\n%s", err, kernel)
	}
	c.ok("", "unload")
}

// checkDelegated checks that filter chain delegated runs in the kernel,
// whose filter table holds every one of rules, and that filter chain
// inBPF runs at its netfilter hook in BPF and delegated does not.
func (c cli) checkDelegated(inBPF, delegated string, rules ...string) {
	c.t.Helper()
	kernel, err := exec.Command("iptables-save", "-t", "filter").CombinedOutput()
	if err != nil {
		c.t.Errorf("iptables-save: %v\n%s", err, kernel)
	}
	for _, r := range rules {
		if !strings.Contains(string(kernel), r) {
			c.t.Errorf("the kernel's filter table lacks %q:\n%s", r, kernel)
		}
	}
	var chains []string
	for _, st := range c.status() {
		chains = append(chains, st.Hook+" "+st.Table+" "+st.Chain)
	}
	if !slices.Contains(chains, "netfilter filter "+inBPF) || slices.Contains(chains, "netfilter filter "+delegated) {
		c.t.Errorf("status shows %q, want %s in BPF and %s not", chains, inBPF, delegated)
	}
}

// TestRestoreNetfilterCounters: at the chains' netfilter hooks, restore -c
// takes the input's counters; restore -n keeps the running rules' counters
// and adds a rule at zero; a table the input does not name stays with its
// counters; a full restore without -c starts the tables it names at zero.
// (The last drops the running chains' snapshots before it compiles, the
// others need them.)
func TestRestoreNetfilterCounters(t *testing.T) {
	bin := buildBpfwall(t)
	freshNetns(t)
	c := cli{t, bin}
	full := "*raw\n:PREROUTING ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n[7:70] -A PREROUTING -s 10.0.0.2/32 -j DROP\nCOMMIT\n" +
		"*filter\n:INPUT ACCEPT [0:0]\n:FORWARD ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n[5:50] -A INPUT -s 10.0.0.1/32 -j DROP\nCOMMIT\n"
	c.ok(full, "restore", "-c")
	saved := func(want ...string) {
		t.Helper()
		out := c.ok("", "save", "-c")
		for _, w := range want {
			if !strings.Contains(out, w+"\n") {
				t.Errorf("save -c lacks %q:\n%s", w, out)
			}
		}
	}
	saved("[7:70] -A PREROUTING -s 10.0.0.2/32 -j DROP", "[5:50] -A INPUT -s 10.0.0.1/32 -j DROP")
	c.ok("*filter\n-A INPUT -s 10.0.0.3/32 -j DROP\nCOMMIT\n", "restore", "-n")
	saved("[7:70] -A PREROUTING -s 10.0.0.2/32 -j DROP", "[5:50] -A INPUT -s 10.0.0.1/32 -j DROP", "[0:0] -A INPUT -s 10.0.0.3/32 -j DROP")
	// The input names filter only: raw stays, with its counters.
	c.ok("*filter\n:INPUT ACCEPT [0:0]\n:FORWARD ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n-A INPUT -s 10.0.0.1/32 -j DROP\nCOMMIT\n", "restore")
	saved("[7:70] -A PREROUTING -s 10.0.0.2/32 -j DROP", "[0:0] -A INPUT -s 10.0.0.1/32 -j DROP")
	// Every table named, no -c: all start at zero.
	c.ok(strings.ReplaceAll(strings.ReplaceAll(full, "[7:70] ", ""), "[5:50] ", ""), "restore")
	saved("[0:0] -A PREROUTING -s 10.0.0.2/32 -j DROP", "[0:0] -A INPUT -s 10.0.0.1/32 -j DROP")
	c.ok("", "unload")
}

// delegationCLI is the built binary, to run in a namespace of the test's
// own with the system's iptables-restore and iptables-save, which
// delegated chains go to.
func delegationCLI(t *testing.T) cli {
	t.Helper()
	testenv.RequireTool(t, "iptables-restore", "iptables-save")
	bin := buildBpfwall(t)
	freshNetns(t)
	return cli{t, bin}
}
