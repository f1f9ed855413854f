package main

import (
	"strings"
	"testing"

	"bpfwall/internal/testenv"
)

// sharedStateRules share state between hooks as netfilter does: a knock
// on the router's port 23 (INPUT) opens port 80 through it (FORWARD),
// one recent table; INPUT and FORWARD both reach LIMITED, one token
// bucket of 3 connections; and mac matches, which a connection of the
// router to itself (lo, no Ethernet header) fails even inverted.
const sharedStateRules = `*filter
:INPUT ACCEPT [0:0]
:FORWARD DROP [0:0]
:OUTPUT ACCEPT [0:0]
:LIMITED - [0:0]
-A INPUT -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT
-A INPUT -p tcp --dport 23 -m recent --set --name knock
-A INPUT -p tcp --dport 8080 -j LIMITED
-A INPUT -p tcp --dport 80 -m mac ! --mac-source 02:71:00:00:00:99 -j DROP
-A FORWARD -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT
-A FORWARD -p tcp --dport 80 -m recent --rcheck --name knock -j ACCEPT
-A FORWARD -p tcp --dport 8080 -j LIMITED
-A FORWARD -p tcp --dport 443 -m mac --mac-source CLIENTMAC -j ACCEPT
-A FORWARD -p tcp --dport 22 -m mac ! --mac-source CLIENTMAC -j ACCEPT
-A LIMITED -m limit --limit 1/hour --limit-burst 3 -j ACCEPT
-A LIMITED -j DROP
COMMIT
`

// sharedStateProbes run in order: each may change what the next meets.
var sharedStateProbes = []probe{
	{"client", "server", 80}, // before the knock: dropped
	{"client", "rc", 23},     // the knock
	{"client", "server", 80}, // after it: open
	{"client", "rc", 8080}, {"client", "server", 8080}, {"client", "rc", 8080},
	{"client", "server", 8080}, // the fourth connection LIMITED sees: dropped
	{"client", "rc", 80},       // from another MAC address: dropped
	{"router", "rc", 80},       // over lo: no MAC address, not dropped
	{"client", "server", 443}, {"client", "server", 22}, {"server", "client", 22},
}

// TestRestoreSharedState restores, with --no-delegate, chains that share
// a recent table and a token bucket between hooks and test MAC
// addresses, and compares what a sequence of connections meets with
// what it meets under iptables-legacy. The other family's chains may not
// name the same recent table.
func TestRestoreSharedState(t *testing.T) {
	testenv.RequireTool(t, "iptables-legacy-restore")
	bin := buildBpfwall(t)
	r := newRouted(t)
	r.listen(r.server, 22, 80, 443, 8080)
	r.listen(r.router, 23, 80, 8080)
	r.listen(r.client, 22)
	text := strings.ReplaceAll(sharedStateRules, "CLIENTMAC", routedMACs["client"])
	out := r.run("", bin, "restore", "--no-delegate", "-v", writeFile(t, "shared.v4", text))
	for _, chain := range []string{"filter INPUT", "filter FORWARD"} {
		if !strings.Contains(out, "netfilter ipv4 "+chain+": compiled") {
			t.Errorf("restore -v does not say it compiled %s:\n%s", chain, out)
		}
	}
	got := r.outcomes(0, sharedStateProbes...)
	// The kernel's table is the IPv6 rules' too; bpfwall's holds IPv4
	// addresses only.
	v6 := writeFile(t, "shared.v6", "*filter\n:INPUT ACCEPT [0:0]\n-A INPUT -p tcp --dport 23 -m recent --set --name knock\nCOMMIT\n")
	if out, err := r.try("", bin, "restore", "-6", v6); err == nil || !strings.Contains(out, `recent table "knock" is also used by the netfilter filter`) {
		t.Errorf("an IPv6 restore naming the IPv4 chains' recent table: %v\n%s", err, out)
	}
	r.run("", bin, "unload")
	r.flushConntrack()
	r.run(text, "iptables-legacy-restore")
	t.Cleanup(func() { r.try(emptyRules, "iptables-legacy-restore") })
	want := r.outcomes(0, sharedStateProbes...)
	compareOutcomes(t, "iptables", got, want)
	// The kernel's outcomes must show the sharing, or the test tests
	// nothing: the knock opened port 80, and the fourth connection
	// through LIMITED, the second forwarded, was dropped.
	for i, o := range map[int]string{0: "timeout", 2: "open", 5: "open", 6: "timeout", 8: "open"} {
		if !strings.HasSuffix(want[i], " "+o) {
			t.Errorf("under iptables, probe %d is %q, want %s", i, want[i], o)
		}
	}
}
