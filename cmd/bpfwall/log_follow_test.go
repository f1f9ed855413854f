package main

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestLogFollowsSwap runs `bpfwall log` as an operator would while the
// filter is swapped: it prints the old program's event with the old rule's
// position, then the new program's with the new one's, as text.
func TestLogFollowsSwap(t *testing.T) {
	bin := buildBpfwall(t)
	peer := freshNetns(t)
	c := cli{t, bin}
	dir := t.TempDir()
	write := func(name, prefix string, pad int) string {
		path := filepath.Join(dir, name)
		src := "*filter\n:INPUT ACCEPT [0:0]\n:FORWARD ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n" +
			strings.Repeat("-A INPUT -p tcp -m tcp --dport 9 -j DROP\n", pad) +
			"-A INPUT -p udp -m udp --dport 5001 -j LOG --log-prefix \"" + prefix + "\"\nCOMMIT\n"
		if err := os.WriteFile(path, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
		return path
	}
	one, two := write("one.rules", "one: ", 0), write("two.rules", "two: ", 2)
	c.ok("", "load", "-i", "veth1", one)

	cmd := exec.Command(bin, "log", "--count", "2", "--timeout", "30s")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	lines := bufio.NewScanner(stdout)
	next := func() string {
		if !lines.Scan() {
			t.Fatalf("bpfwall log ended early: %v", lines.Err())
		}
		return lines.Text()
	}

	if got := sendUDP(t, peer, 5001, 1); got != 1 {
		t.Fatalf("udp/5001: %d of 1 arrived", got)
	}
	first := next()
	// A second reader would take some of the first one's events.
	if _, errOut, code := c.run("", "log", "--timeout", "1s"); code != 1 || !strings.Contains(errOut, fmt.Sprintf("another bpfwall log (pid %d) reads the xdp filter's events", cmd.Process.Pid)) {
		t.Errorf("a second bpfwall log: exit %d, %q; want a refusal naming the first", code, errOut)
	}
	c.ok("", "load", "-i", "veth1", two)
	if got := sendUDP(t, peer, 5001, 1); got != 1 {
		t.Fatalf("udp/5001 after the swap: %d of 1 arrived", got)
	}
	second := next()
	if err := cmd.Wait(); err != nil {
		t.Fatalf("bpfwall log: %v", err)
	}
	// 32 bytes of data: LEN=60 for IP, 40 for UDP.
	line := `IN=veth1 OUT= MAC=([0-9a-f]{2}:){13}[0-9a-f]{2} SRC=10\.9\.0\.1 DST=10\.9\.0\.2 LEN=60 TOS=0x00 PREC=0x00 TTL=64 ID=\d+ DF PROTO=UDP SPT=\d+ DPT=5001 LEN=40 $`
	for _, c := range []struct{ got, want string }{
		{first, "^" + regexp.QuoteMeta(one) + `:5: one: ` + line},
		{second, "^" + regexp.QuoteMeta(two) + `:7: two: ` + line},
	} {
		if !regexp.MustCompile(c.want).MatchString(c.got) {
			t.Errorf("bpfwall log printed\n%q\nwant\n%q", c.got, c.want)
		}
	}
	if st := c.status(); len(st) != 1 || st[0].Log == nil || st[0].Log.Rules != 1 || st[0].Log.Lost != 0 {
		t.Fatalf("status: %+v", st)
	}
	// With no reader, a ring buffer of some 1900 events overflows: status
	// counts the events lost.
	sendUDP(t, peer, 5001, 2500) // the receiving socket's buffer overflows too
	if st := c.status(); st[0].Log == nil || st[0].Log.Lost < 500 {
		t.Errorf("status after 2500 events unread: %+v", st[0].Log)
	}
	c.ok("", "unload")
}

// TestLogSyslog: log --syslog writes each line to a syslog socket as the
// kernel's LOG writes it to its log: facility kern, the rule's level.
func TestLogSyslog(t *testing.T) {
	bin := buildBpfwall(t)
	peer := freshNetns(t)
	c := cli{t, bin}
	rules := "*filter\n:INPUT ACCEPT [0:0]\n:FORWARD ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n" +
		"-A INPUT -p udp -m udp --dport 5001 -j LOG --log-prefix \"in: \" --log-level 6\nCOMMIT\n"
	c.ok(rules, "restore", "-i", "veth1")
	sock := filepath.Join(t.TempDir(), "log")
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: sock, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	cmd := exec.Command(bin, "log", "--count", "1", "--timeout", "30s", "--syslog="+sock)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	// Until the reader has the ring buffer open, events wait in it.
	if got := sendUDP(t, peer, 5001, 1); got != 1 {
		t.Fatalf("udp/5001: %d of 1 arrived", got)
	}
	conn.SetReadDeadline(time.Now().Add(30 * time.Second))
	buf := make([]byte, 4096)
	n, err := conn.Read(buf)
	if err != nil {
		t.Fatalf("no syslog message: %v", err)
	}
	msg := string(buf[:n])
	// <6>: facility kern (0), level info (6).
	if !regexp.MustCompile(`^<6>[^\n]*? bpfwall\[\d+\]: in: IN=veth1 OUT= MAC=\S+ SRC=10\.9\.0\.1 DST=10\.9\.0\.2 .*DPT=5001 LEN=40 \n?$`).MatchString(msg) {
		t.Errorf("syslog message %q", msg)
	}
	rest, _ := io.ReadAll(out)
	if err := cmd.Wait(); err != nil {
		t.Fatalf("bpfwall log --syslog: %v", err)
	}
	if len(rest) != 0 {
		t.Errorf("log --syslog printed on stdout too: %q", rest)
	}
	c.ok("", "unload")
}
