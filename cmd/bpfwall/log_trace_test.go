package main

import (
	"strings"
	"testing"

	"bpfwall/internal/testenv"
)

// TestTraceLogged checks that trace names the LOG rules that logged each
// packet, in order, in a called chain too.
func TestTraceLogged(t *testing.T) {
	testenv.RequireRoot(t)
	rules := writeFile(t, "log.rules", `*filter
:INPUT DROP [0:0]
:FORWARD ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
:LOGDROP - [0:0]
-A INPUT -p tcp -m tcp --dport 22 -j LOG --log-prefix "ssh: "
-A INPUT -p tcp -m tcp --dport 22 -j ACCEPT
-A INPUT -p udp -j LOGDROP
-A INPUT -j LOG
-A LOGDROP -j LOG --log-prefix "udp: "
-A LOGDROP -j DROP
COMMIT
`)
	packets := writeFile(t, "p.jsonl", `{"proto":"tcp","dport":22}
{"proto":"udp","dport":53}
{"proto":"icmp","type":8}
`)
	out, errOut, code := runCmd(t, "trace", "--packets", packets, rules)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	want := strings.ReplaceAll(`{"packet":1,"summary":"IP 10.0.0.1.1234 > 10.0.0.2.22: Flags [S], length 24","verdict":"ACCEPT","rule":"R:7","chain":"INPUT","logged":["R:6"]}
{"packet":2,"summary":"IP 10.0.0.1.1234 > 10.0.0.2.53: UDP, length 36","verdict":"DROP","rule":"R:11","chain":"LOGDROP","logged":["R:10"]}
{"packet":3,"summary":"IP 10.0.0.1 > 10.0.0.2: ICMP type 8 code 0","verdict":"DROP","rule":"policy","chain":"INPUT","logged":["R:9"]}
`, "R:", rules+":")
	if out != want {
		t.Errorf("trace:\n%s\nwant:\n%s", out, want)
	}
}
