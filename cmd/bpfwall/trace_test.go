package main

import (
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"bpfwall/internal/packets"
	"bpfwall/internal/testenv"
)

// ctFlowRules test the conntrack state, as most rule sets do.
const ctFlowRules = `*filter
:INPUT DROP [0:0]
:FORWARD ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
-A INPUT -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT
-A INPUT -m conntrack --ctstate INVALID -j DROP
-A INPUT -p tcp -m tcp --dport 22 -j ACCEPT
-A INPUT -p udp -m udp --dport 53 -j ACCEPT
-A INPUT -p icmp -m icmp --icmp-type 8 -j ACCEPT
-A INPUT -p tcp -m tcp --dport 80 -j REJECT --reject-with tcp-reset
COMMIT
`

// ctFlow is a capture of flows through ctFlowRules: a TCP connection with
// its replies and RST, a DNS exchange, a ping and its reply, a reply that
// belongs to no flow, and segments of no connection.
var ctFlow = []packets.Desc{
	{Src: "10.0.0.1", Dst: "10.0.0.2", SPort: 40000, DPort: 22, Flags: tcpFlags(0x02)},
	{Src: "10.0.0.2", Dst: "10.0.0.1", SPort: 22, DPort: 40000, Flags: tcpFlags(0x12)},
	{Src: "10.0.0.1", Dst: "10.0.0.2", SPort: 40000, DPort: 22, Flags: tcpFlags(0x10)},
	{Proto: "udp", Src: "10.0.0.1", Dst: "10.0.0.2", SPort: 5353, DPort: 53},
	{Proto: "udp", Src: "10.0.0.2", Dst: "10.0.0.1", SPort: 53, DPort: 5353},
	{Proto: "icmp", Src: "10.0.0.1", Dst: "10.0.0.2", Type: 8},
	{Proto: "icmp", Src: "10.0.0.2", Dst: "10.0.0.1", Type: 0},
	{Proto: "icmp", Src: "10.0.0.3", Dst: "10.0.0.2", Type: 0},
	{Src: "10.0.0.2", Dst: "10.0.0.1", SPort: 22, DPort: 40000, Flags: tcpFlags(0x04)},
	{Src: "10.0.0.3", Dst: "10.0.0.2", SPort: 40001, DPort: 80, Flags: tcpFlags(0x10)},
	{Src: "10.0.0.3", Dst: "10.0.0.2", SPort: 40002, DPort: 80, Flags: tcpFlags(0x02)},
	{Src: "10.0.0.3", Dst: "10.0.0.2", SPort: 40003, DPort: 23, Flags: tcpFlags(0x11)},
}

func tcpFlags(f uint8) *uint8 { return &f }

// TestTraceFollowsConntrack: trace runs a rule set that tests the
// conntrack state where conntrack sees the packets in turn, so that each
// packet's verdict and deciding rule are what the kernel's netfilter
// gives the same packets in the same order; without it (--no-conntrack)
// every reply would be NEW or INVALID.
func TestTraceFollowsConntrack(t *testing.T) {
	testenv.RequireTool(t, "iptables-legacy-restore", "iptables-legacy-save")
	bin := buildBpfwall(t)
	freshNetns(t)
	dir := t.TempDir()
	rulesFile := filepath.Join(dir, "ct.rules")
	var jsonl strings.Builder
	for _, d := range ctFlow {
		b, err := json.Marshal(d)
		if err != nil {
			t.Fatal(err)
		}
		jsonl.Write(append(b, '\n'))
	}
	packetsFile := filepath.Join(dir, "flow.jsonl")
	for name, text := range map[string]string{rulesFile: ctFlowRules, packetsFile: jsonl.String()} {
		if err := os.WriteFile(name, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// Run alone, in a namespace whose conntrack has seen nothing (the
	// oracle below fills it), a reply has no flow: the SYN-ACK is INVALID.
	out := cli{t, bin}.ok("", "trace", "-q", "--no-conntrack", "--packets", packetsFile, rulesFile)
	if lines := strings.Split(out, "\n"); !strings.Contains(lines[1], `"rule":"`+rulesFile+`:6"`) {
		t.Errorf("trace --no-conntrack, packet 2: %s; want rule 6 (INVALID)", lines[1])
	}
	want := kernelDecisions(t, ctFlowRules, ctFlow)
	for _, hook := range []string{"xdp", "tc-ingress"} {
		out, errOut, code := cli{t, bin}.run("", "trace", "-q", "--hook", hook, "--packets", packetsFile, rulesFile)
		if code != 0 {
			t.Fatalf("trace --hook %s: exit %d\n%s", hook, code, errOut)
		}
		lines := strings.Split(strings.TrimSpace(out), "\n")
		if len(lines) != len(ctFlow) {
			t.Fatalf("trace --hook %s: %d lines for %d packets\n%s", hook, len(lines), len(ctFlow), out)
		}
		for i, l := range lines {
			var tl traceLine
			if err := json.Unmarshal([]byte(l), &tl); err != nil {
				t.Fatal(err)
			}
			got := tl.Rule
			if got != "policy" {
				got = strings.TrimPrefix(got, rulesFile+":")
			}
			if got != want[i] {
				t.Errorf("%s, packet %d (%s): decided by %s, the kernel's netfilter by %s", hook, i+1, tl.Summary, got, want[i])
			}
		}
	}
}

// kernelDecisions sends frames one by one into a network namespace whose
// netfilter runs rules (iptables-legacy), every destination local, and
// returns the line of rules whose rule decided each, or "policy", from
// the counters.
func kernelDecisions(t *testing.T, rules string, flow []packets.Desc) []string {
	t.Helper()
	// The thread is in the test's namespace (freshNetns): the oracle's
	// devices go beside veth1.
	sh(t,
		"ip link add oracle0 type veth peer name oracle1",
		"ip link set oracle0 up",
		"ip link set oracle1 up",
		"ip addr add 10.0.0.1/32 dev lo",
		"ip addr add 10.0.0.2/32 dev lo",
		"ip addr add 10.0.0.3/32 dev lo",
		"sysctl -qw net.ipv4.conf.all.rp_filter=0 net.ipv4.conf.oracle1.rp_filter=0 net.ipv4.conf.oracle1.accept_local=1",
	)
	// What the host answers (RSTs, echo replies, port unreachables) must
	// not change the flows: untracked, and dropped.
	oracle := strings.Replace(rules, ":OUTPUT ACCEPT [0:0]\n", ":OUTPUT ACCEPT [0:0]\n-A OUTPUT -j DROP\n", 1) +
		"*raw\n:PREROUTING ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n-A OUTPUT -j NOTRACK\nCOMMIT\n"
	cmd := exec.Command("iptables-legacy-restore")
	cmd.Stdin = strings.NewReader(oracle)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("iptables-legacy-restore: %v\n%s", err, out)
	}
	t.Cleanup(func() {
		exec.Command("iptables-legacy", "-F").Run()
		exec.Command("iptables-legacy", "-t", "raw", "-F").Run()
	})
	// The lines of the INPUT rules, in order.
	var lines []string
	for i, l := range strings.Split(rules, "\n") {
		if strings.HasPrefix(l, "-A INPUT ") {
			lines = append(lines, strconv.Itoa(i+1))
		}
	}
	in, err := net.InterfaceByName("oracle1")
	if err != nil {
		t.Fatal(err)
	}
	peer, err := net.InterfaceByName("oracle0")
	if err != nil {
		t.Fatal(err)
	}
	sock, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(sock)
	counters := func() []int {
		out, err := exec.Command("iptables-legacy-save", "-c", "-t", "filter").Output()
		if err != nil {
			t.Fatal(err)
		}
		var n []int
		re := regexp.MustCompile(`^(?::INPUT \S+ )?\[(\d+):\d+\]( -A INPUT |$)`)
		for _, l := range strings.Split(string(out), "\n") {
			if m := re.FindStringSubmatch(l); m != nil {
				v, _ := strconv.Atoi(m[1])
				n = append(n, v) // the policy first, then the rules
			}
		}
		return n
	}
	var out []string
	for i, d := range flow {
		frame, err := d.Frame()
		if err != nil {
			t.Fatal(err)
		}
		copy(frame, in.HardwareAddr)
		before := counters()
		if err := unix.Sendto(sock, frame, 0, &unix.SockaddrLinklayer{Ifindex: peer.Index, Halen: 6}); err != nil {
			t.Fatal(err)
		}
		decided := ""
		for deadline := time.Now().Add(5 * time.Second); decided == "" && time.Now().Before(deadline); time.Sleep(time.Millisecond) {
			after := counters()
			for j := range after {
				if j < len(before) && after[j] != before[j] {
					decided = "policy"
					if j > 0 {
						decided = lines[j-1]
					}
				}
			}
		}
		if decided == "" {
			t.Fatalf("packet %d (%+v): no INPUT rule or policy counted it", i+1, d)
		}
		out = append(out, decided)
	}
	if testing.Verbose() {
		fmt.Println("kernel:", out)
	}
	return out
}
