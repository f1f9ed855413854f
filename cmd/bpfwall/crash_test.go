package main

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"bpfwall/loader"
)

// TestRestoreKilledMidSwap kills restore with SIGKILL while its links
// switch: stopped with SIGSTOP at the moment its new filter is complete
// and not yet committed, as a systemd stop timeout or the OOM killer can
// find it. The next command, status or restore, completes the swap: the
// new rules run on every interface, status and save describe them, and
// the next restore succeeds.
func TestRestoreKilledMidSwap(t *testing.T) {
	bin := buildBpfwall(t)
	peer := freshNetns(t)
	c := cli{t, bin}
	ifaces := []string{"veth1"}
	for i := 2; i <= 4; i++ {
		// More links make the window between the new meta's pin and the
		// commit, where the links switch, wider.
		name := "vk" + strconv.Itoa(i)
		for _, c := range [][]string{{"link", "add", name, "type", "veth", "peer", "name", name + "p"}, {"link", "set", name, "up"}, {"link", "set", name + "p", "up"}} {
			if out, err := exec.Command("ip", c...).CombinedOutput(); err != nil {
				t.Fatalf("ip %s: %v\n%s", strings.Join(c, " "), err, out)
			}
		}
		ifaces = append(ifaces, name)
	}
	dir := t.TempDir()
	drop5002, accept5002 := filepath.Join(dir, "drop.rules"), filepath.Join(dir, "accept.rules")
	if err := os.WriteFile(drop5002, []byte(udpRules), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(accept5002, []byte(strings.Replace(udpRules, "--dport 5002 -j DROP", "--dport 5002 -j ACCEPT", 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	args := []string{"restore"}
	for _, i := range ifaces {
		args = append(args, "-i", i)
	}
	c.ok("", append(args, drop5002)...)
	ns, err := loader.NetNS()
	if err != nil {
		t.Fatal(err)
	}
	pins := filepath.Join(os.Getenv("BPFWALL_ROOT"), strconv.FormatUint(ns, 10), "xdp")

	// (No subtests: they would run outside the namespace.)
	for _, next := range []string{"status", "restore"} {
		func() {
			killMidSwap(t, bin, pins, accept5002)
			var out, errOut string
			var code int
			if next == "status" {
				out, errOut, code = c.run("", "status", "--json")
			} else {
				// A restore of the same file: what it would have done
				// happens once.
				out, errOut, code = c.run("", "restore", accept5002)
			}
			if code != 0 || !strings.Contains(errOut, "left the swap half done: completed") {
				t.Fatalf("%s after the kill: exit %d\n%s\n%s", next, code, out, errOut)
			}
			checkRuns(t, c, accept5002, ifaces)
			if got := sendUDP(t, peer, 5002, 10); got != 10 {
				t.Errorf("udp/5002: %d of 10 arrived through the new ACCEPT", got)
			}
			// The next swap succeeds.
			c.ok("", "restore", drop5002)
			checkRuns(t, c, drop5002, ifaces)
			if got := sendUDP(t, peer, 5002, 10); got != 0 {
				t.Errorf("udp/5002: %d of 10 arrived through DROP", got)
			}
		}()
	}
	c.ok("", "unload")
}

// killMidSwap runs bpfwall restore of file and kills it while the pins
// in dir hold a complete new filter not yet committed.
func killMidSwap(t *testing.T, bin, dir, file string) {
	t.Helper()
	for try := 0; try < 50; try++ {
		cmd := exec.Command(bin, "restore", file)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		caught := false
		for !caught {
			if err := cmd.Process.Signal(syscall.SIGSTOP); err != nil {
				break // it has exited
			}
			if !waitStopped(cmd.Process.Pid) {
				break
			}
			_, meta := os.Stat(filepath.Join(dir, "meta_new"))
			_, prog := os.Stat(filepath.Join(dir, "program_new"))
			if caught = meta == nil && prog == nil; caught {
				cmd.Process.Kill()
			} else {
				cmd.Process.Signal(syscall.SIGCONT)
				time.Sleep(200 * time.Microsecond)
			}
		}
		err := cmd.Wait()
		if caught {
			t.Logf("killed at try %d: %v", try, err)
			return
		}
		if err != nil {
			t.Fatalf("restore: %v\n%s", err, stderr.Bytes())
		}
	}
	t.Fatal("restore was never found between its new meta's pin and its commit")
}

// waitStopped waits until process pid is stopped, and says whether it
// is (not if it exited).
func waitStopped(pid int) bool {
	for range 1000 {
		stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
		if err != nil {
			return false
		}
		// pid (comm) state ...
		f := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:]))
		switch f[0] {
		case "T", "t":
			return true
		case "Z", "X":
			return false
		}
		time.Sleep(20 * time.Microsecond)
	}
	return false
}

// checkRuns checks that status and save describe the filter loaded from
// file, attached to ifaces, and that each interface runs its program.
func checkRuns(t *testing.T, c cli, file string, ifaces []string) {
	t.Helper()
	st := c.status()
	if len(st) != 1 || st[0].File != file || len(st[0].Ifaces) != len(ifaces) {
		t.Fatalf("status: %+v, want the filter of %s on %v", st, file, ifaces)
	}
	for _, ifc := range st[0].Ifaces {
		out, err := exec.Command("ip", "-j", "-d", "link", "show", "dev", ifc.Name).Output()
		if err != nil {
			t.Fatal(err)
		}
		var links []struct {
			XDP struct {
				Prog struct {
					ID uint32 `json:"id"`
				} `json:"prog"`
			} `json:"xdp"`
		}
		if err := json.Unmarshal(out, &links); err != nil || len(links) != 1 {
			t.Fatalf("ip link show %s: %v", ifc.Name, err)
		}
		if id := links[0].XDP.Prog.ID; id != st[0].Program {
			t.Errorf("%s runs program %d, status says %d", ifc.Name, id, st[0].Program)
		}
	}
	src, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := appends(c.ok("", "save")), appends(string(src)); !slices.Equal(got, want) {
		t.Errorf("save prints rules %q, want those of %s, %q", got, file, want)
	}
}

// appends returns the -A lines of a rule set.
func appends(text string) []string {
	var out []string
	for _, line := range strings.Split(text, "\n") {
		if strings.HasPrefix(line, "-A ") {
			out = append(out, line)
		}
	}
	return out
}
