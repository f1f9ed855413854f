package main

import (
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"

	"bpfwall/internal/testenv"
)

// TestRestoreAccelerate runs restore --accelerate as an operator would
// on the routed topology's router: the accelerator drops at xdp what
// INPUT drops, status shows it, a restore whose rules it cannot judge
// unloads it and says why, an interface it cannot run on changes
// nothing, and unload removes it with its dispatcher.
func TestRestoreAccelerate(t *testing.T) {
	bin := buildBpfwall(t)
	r := newRouted(t)
	dir := t.TempDir()
	write := func(name, text string) string {
		path := dir + "/" + name
		if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	xdpOn := func(dev string) bool {
		out, err := exec.Command("ip", "-n", r.router, "link", "show", dev).CombinedOutput()
		if err != nil {
			t.Fatalf("ip link show %s: %v\n%s", dev, err, out)
		}
		return strings.Contains(string(out), "prog/xdp")
	}
	drops := write("drops.v4", "*filter\n:INPUT ACCEPT [0:0]\n:FORWARD ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n"+
		"-A INPUT -p tcp --dport 23 -j DROP\nCOMMIT\n")
	r.listen(r.router, 22, 23)

	out := r.run("", bin, "restore", "-v", "--accelerate", "rc0", drops)
	if !strings.Contains(out, "accelerator ipv4: program") {
		t.Errorf("restore -v does not name the accelerator:\n%s", out)
	}
	if !xdpOn("rc0") || xdpOn("rs0") {
		t.Errorf("xdp on rc0 %v, on rs0 %v: want rc0 only", xdpOn("rc0"), xdpOn("rs0"))
	}
	if got := r.connect(r.client, routedAddrs["rc"][0], 23); got != "timeout" {
		t.Errorf("client -> rc:23 %s, want timeout", got)
	}
	if got := r.connect(r.client, routedAddrs["rc"][0], 22); got != "open" {
		t.Errorf("client -> rc:22 %s, want open", got)
	}
	if n, _ := r.acceleratorDrops(bin); n == 0 {
		t.Error("the accelerator dropped nothing")
	}
	status := r.run("", bin, "status")
	for _, want := range []string{"accelerator: program", "runs at xdp on rc0", "accelerator dispatcher at xdp on rc0"} {
		if !strings.Contains(status, want) {
			t.Errorf("status lacks %q:\n%s", want, status)
		}
	}
	// save prints the rule set, not the accelerator's copy of it.
	if save := r.run("", bin, "save"); strings.Contains(save, "ACCELERATE") || !strings.Contains(save, "--dport 23 -j DROP") {
		t.Errorf("save:\n%s", save)
	}

	// A bridge port: netfilter sees its packets on the bridge.
	for _, c := range [][]string{{"link", "add", "br9", "type", "bridge"}, {"link", "add", "p9", "type", "veth", "peer", "name", "q9"}, {"link", "set", "p9", "master", "br9"}} {
		if out, err := exec.Command("ip", append([]string{"-n", r.router}, c...)...).CombinedOutput(); err != nil {
			t.Fatalf("ip %v: %v\n%s", c, err, out)
		}
	}
	if out, err := r.try("", bin, "restore", "--accelerate", "p9", drops); err == nil || !strings.Contains(out, "port of br9") {
		t.Errorf("restore --accelerate p9 (a bridge port): %v\n%s", err, out)
	}
	if xdpOn("p9") || !xdpOn("rc0") {
		t.Errorf("after the refused restore: xdp on p9 %v, on rc0 %v", xdpOn("p9"), xdpOn("rc0"))
	}

	// A later restore with rules in raw PREROUTING: no accelerator.
	raw := write("raw.v4", "*raw\n:PREROUTING ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n-A PREROUTING -p udp -j DROP\nCOMMIT\n"+
		"*filter\n:INPUT ACCEPT [0:0]\n:FORWARD ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n-A INPUT -p tcp --dport 23 -j DROP\nCOMMIT\n")
	if out := r.run("", bin, "restore", raw); !strings.Contains(out, "accelerator ipv4: not built: raw PREROUTING has rules") {
		t.Errorf("restore of rules with raw PREROUTING says:\n%s", out)
	}
	if xdpOn("rc0") {
		t.Error("the dispatcher stays on rc0 without an accelerator")
	}
	if status := r.run("", bin, "status"); strings.Contains(status, "accelerator") {
		t.Errorf("status:\n%s", status)
	}
	if got := r.connect(r.client, routedAddrs["rc"][0], 23); got != "timeout" {
		t.Errorf("client -> rc:23 %s, want timeout (the chain drops it)", got)
	}

	// Both families (raw emptied: a table the input does not name stays,
	// as with iptables-restore; the IPv6 restore takes the interfaces
	// the dispatcher runs on), then unload.
	r.run("", bin, "restore", "--accelerate", "rc0,rs0", write("empty-raw.v4", "*raw\n:PREROUTING ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\nCOMMIT\n"+
		"*filter\n:INPUT ACCEPT [0:0]\n:FORWARD ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n-A INPUT -p tcp --dport 23 -j DROP\nCOMMIT\n"))
	r.run("", bin, "restore", "-6", write("drops.v6", "*filter\n:INPUT ACCEPT [0:0]\n-A INPUT -p tcp --dport 23 -j DROP\nCOMMIT\n"))
	if got := r.connect(r.client, routedAddrs["rc"][1], 23); got != "timeout" {
		t.Errorf("client -> [rc]:23 %s, want timeout", got)
	}
	if status := r.run("", bin, "status"); strings.Count(status, "accelerator: program") != 2 {
		t.Errorf("status shows %d accelerators, want 2:\n%s", strings.Count(status, "accelerator: program"), status)
	}
	r.run("", bin, "unload", "-4")
	if !xdpOn("rc0") {
		t.Error("unload -4 removed the dispatcher the IPv6 accelerator runs in")
	}
	r.run("", bin, "unload")
	if xdpOn("rc0") || xdpOn("rs0") {
		t.Error("unload leaves the dispatcher")
	}

	// Its only interface gone, the next restore unloads it.
	r.run("", bin, "restore", "--accelerate", "rs0", drops)
	if out, err := exec.Command("ip", "-n", r.router, "link", "del", "rs0").CombinedOutput(); err != nil {
		t.Fatalf("ip link del rs0: %v\n%s", err, out)
	}
	r.run("", bin, "restore", drops)
	if status := r.run("", bin, "status"); strings.Contains(status, "accelerator") {
		t.Errorf("status after the restore without its interface:\n%s", status)
	}
}

// acceleratorCounted is a rule set whose drops take every kind of path:
// a jump that returns and a later jump that drops, a RETURN and the
// policy, a goto, FORWARD's policy after a user chain, and a path too
// long for the accelerator to note (port 31), which the chains drop.
var acceleratorCounted = `*filter
:INPUT DROP [0:0]
:FORWARD DROP [0:0]
:OUTPUT ACCEPT [0:0]
:deny - [0:0]
:empty - [0:0]
:fwd - [0:0]
:svc - [0:0]
-A INPUT -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT
-A INPUT -p tcp -j svc
-A INPUT -p tcp --dport 24 -j deny
-A INPUT -p tcp --dport 28 -g deny
` + strings.Repeat("-A INPUT -p tcp --dport 31 -j empty\n", 16) + `-A INPUT -p tcp --dport 31 -j DROP
-A FORWARD -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT
-A FORWARD -p tcp -j fwd
-A deny -j DROP
-A fwd -p tcp --dport 26 -j DROP
-A svc -p tcp --dport 25 -j RETURN
-A svc -p tcp --dport 23 -j DROP
` + acceleratorLookups + "COMMIT\n"

// acceleratorLookups are rules of chain svc that -O1 finds by lookup:
// a DROP or a RETURN on each port from 40 to 59.
var acceleratorLookups = func() string {
	var b strings.Builder
	for port := 40; port < 60; port++ {
		fmt.Fprintf(&b, "-A svc -s 10.0.0.0/8 -p tcp --dport %d -j %s\n", port, []string{"DROP", "RETURN"}[port%2])
	}
	return b.String()
}()

// TestAcceleratorCounters sends connection attempts that the accelerator
// drops, and compares what save -c counts with what iptables-legacy-save
// -c counts for the same attempts under the same rules: the rule that
// drops, the jumps, gotos and RETURNs on the way to it, and the policies.
func TestAcceleratorCounters(t *testing.T) {
	testenv.RequireTool(t, "iptables-legacy-restore", "iptables-legacy-save")
	bin := buildBpfwall(t)
	r := newRouted(t)
	rules := writeFile(t, "counted.v4", acceleratorCounted)
	// Each attempt sends one SYN: its connect gives up before the first
	// retransmission.
	probes := []probe{
		{"client", "rc", 23}, {"client", "rc", 24}, {"client", "rc", 25}, {"client", "rc", 27},
		{"client", "rc", 28}, {"client", "server", 26}, {"client", "server", 29}, {"client", "rc", 23},
		{"client", "rc", 44}, {"client", "rc", 51}, {"client", "server", 57}, {"client", "rc", 31},
	}
	filterTable := func(save string) string {
		start := strings.Index(save, "*filter\n")
		if start < 0 {
			t.Fatalf("no filter table in\n%s", save)
		}
		end := strings.Index(save[start:], "COMMIT\n")
		return save[start : start+end]
	}
	r.run("", bin, "restore", "--accelerate", "rc0", rules)
	r.flushConntrack()
	for _, got := range r.outcomesParallel(0, probes) {
		if !strings.HasSuffix(got, " timeout") {
			t.Errorf("bpfwall: %s, want timeout", got)
		}
	}
	drops, _ := r.acceleratorDrops(bin)
	metric := regexp.MustCompile(`(?m)^bpfwall_accelerator_dropped_packets_total\{family="ipv4",hook="accelerator",netns="\d+"\} (\d+)$`)
	if m := metric.FindStringSubmatch(r.run("", bin, "metrics")); m == nil || m[1] != fmt.Sprint(drops) {
		t.Errorf("metrics: the accelerator's drops are %v, status says %d", m, drops)
	}
	got := filterTable(r.run("", bin, "save", "-c"))
	r.run("", bin, "unload")
	r.run(acceleratorCounted, "iptables-legacy-restore")
	r.flushConntrack()
	r.outcomesParallel(0, probes)
	want := filterTable(r.run("", "iptables-legacy-save", "-c"))
	r.run(emptyRules, "iptables-legacy-restore")
	if got != want {
		t.Errorf("bpfwall save -c:\n%s\niptables-legacy-save -c:\n%s", got, want)
	}
	if drops != uint64(len(probes)-1) {
		t.Errorf("the accelerator dropped %d of the %d attempts, want all but the one to port 31", drops, len(probes))
	}
}
