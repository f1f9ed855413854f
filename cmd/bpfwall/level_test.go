package main

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// bpfilterRules is n INPUT rules of the bpfilter benchmark's shape: n-1
// `-s X/32 -p udp --dport P -j DROP`, then `-p udp --dport 1500 -j DROP`.
func bpfilterRules(n int) string {
	var b strings.Builder
	b.WriteString("*filter\n:INPUT ACCEPT [0:0]\n:FORWARD ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n")
	for i := range n - 1 {
		fmt.Fprintf(&b, "-A INPUT -s 10.%d.%d.%d/32 -p udp -m udp --dport %d -j DROP\n", 1+i>>16&0xff, i>>8&0xff, i&0xff, 2000+i%60000)
	}
	b.WriteString("-A INPUT -p udp -m udp --dport 1500 -j DROP\nCOMMIT\n")
	return b.String()
}

var compileReport = regexp.MustCompile(`(\d+) rules, (\d+) instructions, (\d+) processed by the verifier`)

// TestRestoreCompilesAsCompile: the program restore attaches is the one
// compile builds and verifies (-O1 by default, the same instruction
// count), and its size does not grow with the rules; restore -O0 attaches
// the plain program and status says so.
func TestRestoreCompilesAsCompile(t *testing.T) {
	bin := buildBpfwall(t)
	freshNetns(t)
	c := cli{t, bin}
	dir := t.TempDir()
	insns := map[int]int{}
	for _, n := range []int{1000, 10000} {
		file := filepath.Join(dir, fmt.Sprintf("r%d.v4", n))
		if err := os.WriteFile(file, []byte(bpfilterRules(n)), 0o600); err != nil {
			t.Fatal(err)
		}
		m := compileReport.FindStringSubmatch(c.ok("", "compile", file))
		if m == nil {
			t.Fatalf("compile %d rules: no report", n)
		}
		want, _ := strconv.Atoi(m[2])
		args := []string{"restore", file}
		if n == 1000 {
			args = []string{"restore", "-i", "veth1", file}
		}
		c.ok("", args...)
		st := c.status()
		if len(st) != 1 {
			t.Fatalf("%d rules: status lists %d filters", n, len(st))
		}
		if st[0].Level != "-O1" || st[0].Instructions != want || st[0].Rules != n {
			t.Errorf("%d rules: restore attached %s, %d instructions, %d rules; compile reports -O1, %d instructions, %d rules",
				n, st[0].Level, st[0].Instructions, st[0].Rules, want, n)
		}
		insns[n] = st[0].Instructions
		t.Logf("%d rules: %d instructions, %d processed by the verifier", n, st[0].Instructions, st[0].VerifiedInsns)
	}
	if insns[10000] > insns[1000] {
		t.Errorf("-O1 program grows with the rules: %d instructions at 1k rules, %d at 10k", insns[1000], insns[10000])
	}
	// -O0 through restore and load is the plain program, which grows.
	small := filepath.Join(dir, "r100.v4")
	if err := os.WriteFile(small, []byte(bpfilterRules(100)), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"restore", "-O0", small}, {"load", "-O0", "-i", "veth1", small}} {
		c.ok("", args...)
		st := c.status()
		if len(st) != 1 || st[0].Level != "-O0" || st[0].Instructions <= insns[1000] {
			t.Errorf("%s: status %+v, want -O0 and more than the -O1 program's %d instructions", strings.Join(args, " "), st, insns[1000])
		}
	}
	if out := c.ok("", "status"); !strings.Contains(out, "-O0, ") {
		t.Errorf("status does not show the level:\n%s", out)
	}
	if _, errOut, code := c.run("", "restore", "-O2", small); code != 2 {
		t.Errorf("restore -O2: exit %d, want 2 (usage)\n%s", code, errOut)
	}
	c.ok("", "unload")
}
