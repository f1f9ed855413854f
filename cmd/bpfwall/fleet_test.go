package main

import (
	"bpfwall/internal/topology"
	"bufio"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestContainerEntrypoint runs the container image's entrypoint as the
// DaemonSet runs it, against a network namespace, by default (every chain
// at its netfilter hook) and with BPFWALL_HOOK=xdp: it restores the rule
// file at start, serves metrics, restores again when the file changes (a
// ConfigMap update), keeps the running filter when the new file is bad,
// and leaves the filter loaded when stopped.
func TestContainerEntrypoint(t *testing.T) {
	bin := buildBpfwall(t)
	peer := freshNetns(t)
	c := cli{t, bin}
	runEntrypoint(t, c, peer, nil, "netfilter", `hook="netfilter-filter-INPUT"`)
	runEntrypoint(t, c, peer, []string{"BPFWALL_HOOK=xdp", "BPFWALL_IFACES=veth1"}, "xdp (veth1)", `hook="xdp"`)
}

// runEntrypoint runs the entrypoint with env, which restores on where;
// the metrics of its rules have label.
func runEntrypoint(t *testing.T, c cli, peer *topology.Netns, env []string, where, label string) {
	t.Helper()
	dir := t.TempDir()
	rules := filepath.Join(dir, "rules.v4")
	write := func(text string) {
		t.Helper()
		// As a ConfigMap volume updates: a new file renamed into place.
		tmp := rules + ".new"
		if err := os.WriteFile(tmp, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, rules); err != nil {
			t.Fatal(err)
		}
	}
	write(udpRules)
	cmd := exec.Command("sh", "../../dist/container/entrypoint.sh")
	cmd.Env = append(append(os.Environ(), "BPFWALL="+c.bin, "BPFWALL_RULES="+rules, "BPFWALL_RULES6="+filepath.Join(dir, "rules.v6"),
		"BPFWALL_METRICS=127.0.0.1:0", "BPFWALL_INTERVAL=0.2"), env...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	lines := make(chan string, 100)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	var metricsURL string
	await := func(what string) {
		t.Helper()
		deadline := time.After(30 * time.Second)
		for {
			select {
			case l, ok := <-lines:
				if !ok {
					t.Fatalf("the entrypoint ended before saying %q", what)
				}
				if _, a, ok := strings.Cut(l, "serving metrics on "); ok {
					metricsURL = a
				}
				if strings.Contains(l, what) {
					return
				}
			case <-deadline:
				t.Fatalf("the entrypoint did not say %q in 30s", what)
			}
		}
	}
	await("restored " + rules + " on " + where)
	if got := sendUDP(t, peer, 5002, 3); got != 0 {
		t.Errorf("%s: udp/5002 under the first rules: %d of 3 arrived through DROP", where, got)
	}
	await("serving metrics on ")
	if body := fetch(t, metricsURL); !strings.Contains(body, `bpfwall_rule_packets_total{chain="INPUT",family="ipv4",`+label) {
		t.Errorf("%s: metrics:\n%s", where, body)
	}

	write(strings.Replace(udpRules, "--dport 5002 -j DROP", "--dport 5002 -j ACCEPT", 1))
	await("restored " + rules + " on " + where)
	if got := sendUDP(t, peer, 5002, 3); got != 3 {
		t.Errorf("%s: udp/5002 after the change: %d of 3 arrived", where, got)
	}
	prog := c.status()[0].Program
	write("*filter\n-A INPUT -j NOSUCHTARGET\nCOMMIT\n")
	hook, _, _ := strings.Cut(where, " ")
	await("restore of " + rules + " on " + hook + " failed; the filter that ran before stays")
	if st := c.status(); len(st) != 1 || st[0].Program != prog {
		t.Errorf("%s: a bad file changed the filter: %+v", where, st)
	}

	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	await("stopping; the filters stay loaded")
	if err := cmd.Wait(); err != nil {
		t.Errorf("%s: the entrypoint on SIGTERM: %v", where, err)
	}
	if st := c.status(); len(st) != 1 || st[0].Program != prog {
		t.Errorf("%s: after the entrypoint stopped: %+v", where, st)
	}
	c.ok("", "unload")
}

// fetch GETs url over a connection dialled from the calling thread, which
// is in the test's network namespace (http.Get would dial from another).
func fetch(t *testing.T, url string) string {
	t.Helper()
	host := strings.TrimPrefix(url, "http://")
	host, _, _ = strings.Cut(host, "/")
	conn, err := net.Dial("tcp", host)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	req, err := http.NewRequest("GET", url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := req.Write(conn); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d %v", url, resp.StatusCode, err)
	}
	return string(body)
}
