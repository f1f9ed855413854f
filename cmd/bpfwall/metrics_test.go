package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// TestMetrics: bpfwall metrics prints what the Prometheus text parser
// accepts, and its per-rule counters are save -c's, summed over the
// filters (xdp and tc-egress here) that run the same rule set; metrics
// --listen serves the same at /metrics.
func TestMetrics(t *testing.T) {
	bin := buildBpfwall(t)
	peer := freshNetns(t)
	c := cli{t, bin}
	if out := c.ok("", "metrics"); strings.Contains(out, "bpfwall_rule_packets_total") {
		t.Errorf("metrics with nothing loaded:\n%s", out)
	}
	rules := strings.Replace(udpRules, "-A INPUT -p udp -m udp --dport 5001 -j ACCEPT",
		"-A INPUT -s 10.9.0.1/32,10.9.0.7/32 -p udp -m udp --dport 5001 -j ACCEPT\n-A OUTPUT -p udp -j ACCEPT", 1)
	c.ok(rules, "restore", "-i", "veth1")
	c.ok(rules, "restore", "--hook", "tc-egress", "-i", "veth1")
	sendUDP(t, peer, 5001, 7)
	sendUDP(t, peer, 5002, 4)

	families := parseMetrics(t, c.ok("", "metrics"))
	got := make(map[int][2]float64) // by save line
	saved := c.ok("", "save", "-c")
	lineOf := make(map[string]int) // rule label -> save line, from status
	for _, st := range c.statusRules() {
		for _, r := range st.RuleCounters {
			lineOf[st.Hook+" "+r.Rule] = r.Line
		}
	}
	for _, name := range []string{"bpfwall_rule_packets_total", "bpfwall_rule_bytes_total"} {
		mf := families[name]
		if mf == nil || mf.GetType() != dto.MetricType_COUNTER {
			t.Fatalf("no counter %s in the metrics", name)
		}
		for _, m := range mf.Metric {
			l := labels(m)
			for _, want := range []string{"netns", "hook", "family", "table", "chain", "rule", "target"} {
				if _, ok := l[want]; !ok {
					t.Errorf("%s %v has no label %s", name, l, want)
				}
			}
			line, ok := lineOf[l["hook"]+" "+l["rule"]]
			if !ok {
				t.Fatalf("%s: rule %q of %s is not in status --json --rules", name, l["rule"], l["hook"])
			}
			v := got[line]
			if name == "bpfwall_rule_packets_total" {
				v[0] += m.Counter.GetValue()
			} else {
				v[1] += m.Counter.GetValue()
			}
			got[line] = v
		}
	}
	// save -c's counters, by line.
	want := make(map[int][2]float64)
	counter := regexp.MustCompile(`^\[(\d+):(\d+)\] -A `)
	for i, line := range strings.Split(saved, "\n") {
		if m := counter.FindStringSubmatch(line); m != nil {
			p, _ := strconv.ParseFloat(m[1], 64)
			b, _ := strconv.ParseFloat(m[2], 64)
			want[i+1] = [2]float64{p, b}
		}
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("metrics' rule counters by save line %v, save -c's %v\n%s", got, want, saved)
	}
	if want[5] != [2]float64{7, 7 * 60} || want[7] != [2]float64{4, 4 * 60} {
		t.Errorf("save -c does not show the traffic sent:\n%s", saved)
	}
	if l := labels(families["bpfwall_rule_packets_total"].Metric[0]); !strings.HasPrefix(l["rule"], "<stdin>:") {
		t.Errorf("rule label %q, want <stdin>:LINE", l["rule"])
	}
	for _, name := range []string{"bpfwall_policy_packets_total", "bpfwall_program_info", "bpfwall_program_instructions", "bpfwall_interface_attached"} {
		if mf := families[name]; mf == nil || len(mf.Metric) != 2 {
			t.Errorf("%s: want one per filter (2), have %v", name, mf)
		}
	}

	// --listen serves the same families.
	cmd := exec.Command(bin, "metrics", "--listen", "127.0.0.1:0")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	addr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			if _, a, ok := strings.Cut(sc.Text(), "serving metrics on "); ok {
				addr <- a
			}
		}
		close(addr)
	}()
	var url string
	select {
	case url = <-addr:
	case <-time.After(10 * time.Second):
		t.Fatal("metrics --listen said nothing for 10s")
	}
	served := parseMetrics(t, fetch(t, url))
	for name, mf := range families {
		if s := served[name]; s == nil || len(s.Metric) != len(mf.Metric) {
			t.Errorf("served %s: %v, printed %d series", name, s, len(mf.Metric))
		}
	}
	c.ok("", "unload")
}

// statusRules is status --json --rules.
func (c cli) statusRules() []filterStatus {
	c.t.Helper()
	var st []filterStatus
	if err := json.Unmarshal([]byte(c.ok("", "status", "--json", "--rules")), &st); err != nil {
		c.t.Fatal(err)
	}
	return st
}

func parseMetrics(t *testing.T, text string) map[string]*dto.MetricFamily {
	t.Helper()
	p := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := p.TextToMetricFamilies(strings.NewReader(text))
	if err != nil {
		t.Fatalf("the Prometheus text parser refuses the metrics: %v\n%s", err, text)
	}
	return mfs
}

func labels(m *dto.Metric) map[string]string {
	out := make(map[string]string)
	for _, l := range m.Label {
		out[l.GetName()] = l.GetValue()
	}
	return out
}
