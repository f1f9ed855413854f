package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"bpfwall/internal/testenv"
	"bpfwall/internal/topology"
	"bpfwall/loader"
)

// These tests run the bpfwall binary, as an operator would, in a fresh
// network namespace: the filter must outlive each command.

// buildBpfwall builds the command into a temporary directory, and points
// the commands the test runs at a bpffs and a lock of the test's own
// (testenv.Isolate).
func buildBpfwall(t *testing.T) string {
	t.Helper()
	testenv.Isolate(t)
	bin := filepath.Join(t.TempDir(), "bpfwall")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// sh runs commands written as lines in the calling thread's namespace,
// and fails the test at the first that fails.
func sh(t testing.TB, lines ...string) {
	t.Helper()
	if err := topology.RunLines(lines...); err != nil {
		t.Fatal(err)
	}
}

// freshNetns moves the test's goroutine, locked to its thread, into a new
// network namespace with veth1 up at 10.9.0.2/24, whose peer veth0 is
// 10.9.0.1/24 in a second namespace, and returns that peer namespace.
func freshNetns(t *testing.T) *topology.Netns {
	t.Helper()
	testenv.EnterFreshNetns(t)
	peer := testenv.NewNetns(t)
	sh(t, "ip link set lo up", "ip link add veth0 type veth peer name veth1")
	if err := peer.MoveLink("veth0"); err != nil {
		t.Fatal(err)
	}
	sh(t, "ip addr add 10.9.0.2/24 dev veth1", "ip link set veth1 up")
	// A permanent neighbour: under load an ARP probe can time out and the
	// peer would drop datagrams before they reach the filter.
	veth1, err := net.InterfaceByName("veth1")
	if err != nil {
		t.Fatal(err)
	}
	err = peer.Do(func() error {
		return topology.RunLines(
			"ip addr add 10.9.0.1/24 dev veth0",
			"ip link set veth0 up",
			"ip neigh replace 10.9.0.2 lladdr "+veth1.HardwareAddr.String()+" dev veth0 nud permanent",
		)
	})
	if err != nil {
		t.Fatalf("in the peer: %v", err)
	}
	ns, err := loader.NetNS()
	if err != nil {
		t.Fatal(err)
	}
	if root := os.Getenv("BPFWALL_ROOT"); root != "" {
		t.Cleanup(func() { os.RemoveAll(filepath.Join(root, strconv.FormatUint(ns, 10))) })
	}
	return peer
}

// sendUDP sends n datagrams of 32 bytes from the peer to 10.9.0.2:port
// and returns how many arrived.
func sendUDP(t *testing.T, peer *topology.Netns, port, n int) int {
	t.Helper()
	conn, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(10, 9, 0, 2), Port: port})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	script := "for i in $(seq " + strconv.Itoa(n) + "); do printf '%032d' 0 >/dev/udp/10.9.0.2/" + strconv.Itoa(port) + "; done"
	err = peer.Do(func() error {
		if out, err := exec.Command("bash", "-c", script).CombinedOutput(); err != nil {
			return fmt.Errorf("%w\n%s", err, out)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("send: %v", err)
	}
	got := 0
	buf := make([]byte, 100)
	for {
		// On a loaded two-core machine softirqs can wait behind the
		// verifier of a parallel test for hundreds of milliseconds.
		conn.SetReadDeadline(time.Now().Add(time.Second))
		if _, err := conn.Read(buf); err != nil {
			return got
		}
		got++
	}
}

type cli struct {
	t   *testing.T
	bin string
}

// run runs bpfwall with stdin and returns its output and exit code.
func (c cli) run(stdin string, args ...string) (stdout, stderr string, code int) {
	c.t.Helper()
	return c.runWith(strings.NewReader(stdin), args...)
}

// runFromFile runs bpfwall with its stdin a regular file holding text,
// as "bpfwall restore < rules.v4" does, and returns its output and exit
// code.
func (c cli) runFromFile(text string, args ...string) (stdout, stderr string, code int) {
	c.t.Helper()
	path := filepath.Join(c.t.TempDir(), "rules")
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		c.t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		c.t.Fatal(err)
	}
	defer f.Close()
	return c.runWith(f, args...)
}

func (c cli) runWith(stdin io.Reader, args ...string) (stdout, stderr string, code int) {
	c.t.Helper()
	cmd := exec.Command(c.bin, args...)
	cmd.Stdin = stdin
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err := cmd.Run()
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		c.t.Fatal(err)
	}
	return o.String(), e.String(), code
}

// ok runs bpfwall and fails the test unless it succeeds.
func (c cli) ok(stdin string, args ...string) string {
	c.t.Helper()
	out, errOut, code := c.run(stdin, args...)
	if code != 0 {
		c.t.Fatalf("bpfwall %s: exit %d\n%s", strings.Join(args, " "), code, errOut)
	}
	return out
}

func (c cli) status() []filterStatus {
	c.t.Helper()
	var st []filterStatus
	if err := json.Unmarshal([]byte(c.ok("", "status", "--json")), &st); err != nil {
		c.t.Fatal(err)
	}
	return st
}

const udpRules = `*filter
:INPUT ACCEPT [0:0]
:FORWARD ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
-A INPUT -p udp -m udp --dport 5001 -j ACCEPT
-A INPUT -p udp -m udp --dport 5002 -j DROP
COMMIT
`

func TestOperatorPath(t *testing.T) {
	bin := buildBpfwall(t)
	for _, hook := range []string{"xdp", "tc-ingress"} {
		t.Run(hook, func(t *testing.T) {
			peer := freshNetns(t)
			c := cli{t, bin}
			c.ok(udpRules, "restore", "--hook", hook, "-i", "veth1")

			// The command has exited; the filter stays and filters.
			if got := sendUDP(t, peer, 5001, 10); got != 10 {
				t.Errorf("udp/5001: %d of 10 arrived", got)
			}
			if got := sendUDP(t, peer, 5002, 10); got != 0 {
				t.Errorf("udp/5002: %d of 10 arrived through DROP", got)
			}
			st := c.status()
			if len(st) != 1 || st[0].Hook != hook || st[0].Rules != 2 || len(st[0].Ifaces) != 1 || st[0].Ifaces[0].Name != "veth1" {
				t.Fatalf("status: %+v", st)
			}
			if st[0].Counters.RulePackets != 20 || st[0].File != "<stdin>" {
				t.Errorf("status counters %+v, file %q", st[0].Counters, st[0].File)
			}
			prog := st[0].Program
			// 32 bytes of data, 8 of UDP header, 20 of IP header.
			wantSave := "[10:600] -A INPUT -p udp -m udp --dport 5001 -j ACCEPT\n[10:600] -A INPUT -p udp -m udp --dport 5002 -j DROP\n"
			if out := c.ok("", "save", "-c"); !strings.Contains(out, wantSave) {
				t.Errorf("save -c:\n%s\nwant it to contain\n%s", out, wantSave)
			}

			// Bad input at every stage changes nothing.
			for _, bad := range []struct{ name, input, msg string }{
				{"parse error", strings.Replace(udpRules, "--dport 5002", "--dport 5002 --frob", 1), "line 6 failed"},
				{"unsupported", strings.Replace(udpRules, "-j DROP", "-m conntrack --ctstate DNAT -j DROP", 1), "conntrack state SNAT/DNAT (read only at the chain's own netfilter hook: --hook netfilter, or restore without -i) is not supported"},
			} {
				_, errOut, code := c.run(bad.input, "restore")
				if code != 1 || !strings.Contains(errOut, bad.msg) {
					t.Errorf("%s: exit %d, stderr %q; want 1 and %q", bad.name, code, errOut, bad.msg)
				}
			}
			if _, errOut, code := c.run(udpRules, "load", "--hook", hook, "-i", "nosuch0", "-"); code != 1 || !strings.Contains(errOut, "nosuch0") {
				t.Errorf("missing interface: exit %d, %q", code, errOut)
			}
			if st := c.status(); st[0].Program != prog || st[0].Counters.RulePackets != 20 {
				t.Errorf("after bad input: program %d, counters %+v; want %d and 20 packets", st[0].Program, st[0].Counters, prog)
			}

			// restore -n adds a rule; the others keep their counters.
			c.ok("*filter\n-A INPUT -p udp -m udp --dport 5003 -j DROP\nCOMMIT\n", "restore", "-n")
			out := c.ok("", "save", "-c")
			if !strings.Contains(out, wantSave+"[0:0] -A INPUT -p udp -m udp --dport 5003 -j DROP\n") {
				t.Errorf("after restore -n, save -c:\n%s", out)
			}
			if st := c.status(); st[0].Program == prog {
				t.Errorf("restore -n did not swap the program")
			}
			// A full restore starts at zero, as iptables-restore does; -c
			// takes the file's counters.
			c.ok(udpRules, "restore")
			if out := c.ok("", "save", "-c"); !strings.Contains(out, "[0:0] -A INPUT -p udp -m udp --dport 5001") {
				t.Errorf("after restore, save -c:\n%s", out)
			}
			c.ok(strings.Replace(udpRules, "-A INPUT -p udp -m udp --dport 5001", "[7:700] -A INPUT -p udp -m udp --dport 5001", 1), "restore", "-c")
			if got := sendUDP(t, peer, 5001, 3); got != 3 {
				t.Errorf("udp/5001 after restore -c: %d of 3", got)
			}
			if out := c.ok("", "save", "-c"); !strings.Contains(out, "[10:880] -A INPUT -p udp -m udp --dport 5001") {
				t.Errorf("after restore -c, save -c:\n%s", out)
			}

			c.ok("", "unload")
			if st := c.status(); len(st) != 0 {
				t.Errorf("status after unload: %+v", st)
			}
			if got := sendUDP(t, peer, 5002, 5); got != 5 {
				t.Errorf("after unload, udp/5002: %d of 5 arrived", got)
			}
		})
	}
}

// TestConntrackHeld: a filter that tests the conntrack state keeps
// conntrack on in its namespace while it is loaded, says so in status,
// and filters by the state.
func TestConntrackHeld(t *testing.T) {
	bin := buildBpfwall(t)
	peer := freshNetns(t)
	c := cli{t, bin}
	ctRules := "*filter\n:INPUT DROP [0:0]\n:FORWARD DROP [0:0]\n:OUTPUT ACCEPT [0:0]\n" +
		"-A INPUT -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT\n" +
		"-A INPUT -p udp -m udp --dport 5001 -m conntrack --ctstate NEW -j ACCEPT\n" +
		"-A INPUT -p tcp -j ACCEPT\n" + // the peer's neighbour entry is permanent; nothing else must pass
		"COMMIT\n"
	held := func() bool {
		t.Helper()
		h, err := loader.ConntrackHeld()
		if err != nil {
			t.Fatal(err)
		}
		return h
	}
	c.ok(ctRules, "restore", "--hook", "tc-ingress", "-i", "veth1")
	if !held() {
		t.Fatal("no conntrack table after loading a filter that tests the state")
	}
	if st := c.status(); len(st) != 1 || !strings.HasPrefix(st[0].Conntrack, "on:") {
		t.Errorf("status: %+v", st)
	}
	if got := sendUDP(t, peer, 5001, 5); got != 5 {
		t.Errorf("udp/5001, NEW (no reply makes it ESTABLISHED): %d of 5 arrived", got)
	}
	if got := sendUDP(t, peer, 5002, 5); got != 0 {
		t.Errorf("udp/5002, NEW: %d of 5 arrived", got)
	}
	// The ingress programs read nf_conntrack_tcp_loose per packet: any
	// value loads (TestTCPConversations compares the verdicts).
	loose := "/proc/sys/net/netfilter/nf_conntrack_tcp_loose"
	if err := os.WriteFile(loose, []byte("0"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, errOut, code := c.run(ctRules, "restore")
	if err := os.WriteFile(loose, []byte("1"), 0o644); err != nil {
		t.Fatal(err)
	}
	if code != 0 {
		t.Errorf("restore with nf_conntrack_tcp_loose 0: exit %d, %q", code, errOut)
	}
	// A rule set without state matches lets conntrack go.
	c.ok(udpRules, "restore")
	if held() {
		t.Error("the conntrack table stayed after a swap to rules without state matches")
	}
	if st := c.status(); len(st) != 1 || st[0].Conntrack != "" {
		t.Errorf("status: %+v", st)
	}
	c.ok(ctRules, "restore")
	if !held() {
		t.Error("no conntrack table after a swap to rules with state matches")
	}
	c.ok("", "unload")
	if held() {
		t.Error("the conntrack table stayed after unload")
	}
}

func TestLockContention(t *testing.T) {
	bin := buildBpfwall(t)
	freshNetns(t)
	c := cli{t, bin}
	held, err := loader.Acquire(os.Getenv("BPFWALL_LOCKFILE"), 0)
	if err != nil {
		t.Fatal(err)
	}
	// As iptables: a held lock is exit 4, a resource problem.
	_, errOut, code := c.run(udpRules, "restore", "-i", "veth1")
	if code != 4 || !strings.Contains(errOut, "Perhaps you want to use the -w option?") {
		t.Errorf("locked, no -w: exit %d, %q", code, errOut)
	}
	for _, wait := range [][]string{{"-w", "0.3"}, {"-w0.3"}, {"--wait=0.3"}, {"--wait", "0.3", "-W", "1000"}} {
		_, errOut, code = c.run(udpRules, append([]string{"restore", "-i", "veth1"}, wait...)...)
		if code != 4 || !strings.Contains(errOut, "Stopped waiting after 0.3s") {
			t.Errorf("locked, %s: exit %d, %q", strings.Join(wait, " "), code, errOut)
		}
	}
	if st := c.status(); len(st) != 0 {
		t.Fatalf("a locked-out restore loaded a filter: %+v", st)
	}
	go func() {
		time.Sleep(300 * time.Millisecond)
		held.Release()
	}()
	c.ok(udpRules, "restore", "-w", "5", "-i", "veth1")
	if st := c.status(); len(st) != 1 {
		t.Errorf("after waiting for the lock: %+v", st)
	}
	// -w without a number waits for as long as it takes.
	if held, err = loader.Acquire(os.Getenv("BPFWALL_LOCKFILE"), 0); err != nil {
		t.Fatal(err)
	}
	go func() {
		time.Sleep(300 * time.Millisecond)
		held.Release()
	}()
	c.ok("", "unload", "-w")
	if st := c.status(); len(st) != 0 {
		t.Errorf("after unload -w: %+v", st)
	}
}

// TestPrivateMountNamespace: under ip netns exec, which gives the command
// a mount namespace of its own with /sys remounted, hiding the bpffs, a
// filter is pinned on the host's bpffs, reached through an ancestor
// process, and stays after the command, as iptables rules do; the next
// command under ip netns exec, or under nsenter, finds it.
func TestPrivateMountNamespace(t *testing.T) {
	testenv.RequireRoot(t)
	testenv.RequireTool(t, "ip")
	bin := buildBpfwall(t)
	// A bpffs of the test's own under /sys/fs/bpf, which ip netns exec
	// hides as it hides /sys/fs/bpf, so that the test never pins under
	// the production root.
	if !loader.OnBPFFS("/sys/fs/bpf") {
		if err := unix.Mount("bpf", "/sys/fs/bpf", "bpf", 0, "mode=0700"); err != nil {
			t.Fatalf("mount bpffs at /sys/fs/bpf: %v", err)
		}
	}
	mnt := fmt.Sprintf("/sys/fs/bpf/bwmnt%d", os.Getpid())
	if err := os.Mkdir(mnt, 0o700); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(mnt) })
	if err := unix.Mount("bpf", mnt, "bpf", 0, "mode=0700"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Unmount(mnt, unix.MNT_DETACH) })
	env := append(withoutEnv(os.Environ(), "BPFWALL_ROOT"), "BPFWALL_ROOT="+mnt+"/bpfwall")

	name := fmt.Sprintf("bwmnt%d", os.Getpid())
	if out, err := exec.Command("ip", "netns", "add", name).CombinedOutput(); err != nil {
		t.Fatalf("ip netns add: %v\n%s", err, out)
	}
	t.Cleanup(func() { exec.Command("ip", "netns", "del", name).Run() })
	rules := filepath.Join(t.TempDir(), "r.rules")
	if err := os.WriteFile(rules, []byte("*filter\n:INPUT ACCEPT [0:0]\n:FORWARD ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n-A INPUT -p tcp --dport 22 -j DROP\nCOMMIT\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	run := func(args ...string) (string, error) {
		cmd := exec.Command(args[0], args[1:]...)
		cmd.Env = env
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	// bpfwall run by ip netns exec, and from a script ip netns exec runs,
	// whose shell shares the private namespace.
	for _, script := range []string{`exec "$0" load --hook tc-ingress -i lo "$1"`, `"$0" load --hook tc-ingress -i lo "$1" && "$0" status`} {
		if out, err := run("ip", "netns", "exec", name, "sh", "-c", "ip link set lo up && "+script, bin, rules); err != nil {
			t.Fatalf("load under ip netns exec (%s): %v\n%s", script, err, out)
		}
		// The command and its mount namespace are gone; the filter stays.
		for _, status := range [][]string{{"ip", "netns", "exec", name, bin, "status"}, {"nsenter", "--net=/run/netns/" + name, bin, "status"}} {
			out, err := run(status...)
			if err != nil || !strings.Contains(out, "tc-ingress: program") || !strings.Contains(out, "attached to lo") {
				t.Errorf("%s after load under ip netns exec (%s): %v\n%s", strings.Join(status[:len(status)-2], " "), script, err, out)
			}
		}
		if out, err := run("ip", "netns", "exec", name, bin, "unload"); err != nil {
			t.Errorf("unload under ip netns exec: %v\n%s", err, out)
		}
		if out, err := run("nsenter", "--net=/run/netns/"+name, bin, "status"); err != nil || !strings.Contains(out, "no filter loaded") {
			t.Errorf("status after unload: %v\n%s", err, out)
		}
	}
	// In netfilter mode the kernel's rules that answer REJECT name the
	// answers' pins (-m bpf --object-pinned): iptables-restore, a child
	// without bpfwall's descriptors, must be able to open them too.
	rejects := filepath.Join(t.TempDir(), "reject.rules")
	if err := os.WriteFile(rejects, []byte("*filter\n:INPUT ACCEPT [0:0]\n:FORWARD ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n-A INPUT -p tcp --dport 23 -j REJECT --reject-with tcp-reset\nCOMMIT\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := run("ip", "netns", "exec", name, "sh", "-c", `ip link set lo up && exec "$0" restore "$1"`, bin, rejects); err != nil {
		t.Fatalf("restore of a REJECT rule under ip netns exec: %v\n%s", err, out)
	}
	if out, err := run("ip", "netns", "exec", name, "iptables-save"); err != nil || !strings.Contains(out, "-m bpf --object-pinned ") {
		t.Errorf("the kernel's rules after restore: %v\n%s\nwant the REJECT answer", err, out)
	}
	if out, err := run("ip", "netns", "exec", name, bin, "unload"); err != nil {
		t.Errorf("unload under ip netns exec: %v\n%s", err, out)
	}
}

// withoutEnv returns env without the variable name.
func withoutEnv(env []string, name string) []string {
	var out []string
	for _, kv := range env {
		if !strings.HasPrefix(kv, name+"=") {
			out = append(out, kv)
		}
	}
	return out
}

// TestVanishingBpffs: a bpffs mounted in a private mount namespace goes,
// with the filter pinned on it, when the namespace ends; load refuses it
// and says why.
func TestVanishingBpffs(t *testing.T) {
	testenv.RequireTool(t, "unshare")
	bin := buildBpfwall(t)
	freshNetns(t)
	mnt := t.TempDir()
	rules := filepath.Join(t.TempDir(), "r.rules")
	if err := os.WriteFile(rules, []byte(udpRules), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("unshare", "-m", "--propagation", "private", "sh", "-c", `mount -t bpf bpf "$2" && chmod 700 "$2" && BPFWALL_ROOT="$2/bpfwall" exec "$0" restore -i veth1 "$1"`, bin, rules, mnt)
	out, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "mounted only in this command's mount namespace") {
		t.Errorf("restore onto a private bpffs: %v\n%s\nwant a refusal", err, out)
	}
	if st := (cli{t, bin}).status(); len(st) != 0 {
		t.Errorf("status after the refusal: %+v", st)
	}
}

// TestStrayFilter: a command that cannot see a running filter's pins
// (ip netns exec hides /sys/fs/bpf) says that a bpfwall program runs
// that no pin describes, and fails, instead of "no filter loaded".
func TestStrayFilter(t *testing.T) {
	bin := buildBpfwall(t)
	freshNetns(t)
	c := cli{t, bin}
	c.ok(udpRules, "restore", "-i", "veth1")
	id := c.status()[0].Program
	other := testenv.BPFFS(t)    // a bpffs without these pins
	plain := t.TempDir() + "/bf" // not on a bpffs at all
	for root, hint := range map[string]string{other: "its pins are on a bpffs this command does not see", plain: "bpffs is not mounted at " + filepath.Dir(plain)} {
		for _, args := range [][]string{{"status"}, {"status", "--json"}} {
			cmd := exec.Command(bin, args...)
			cmd.Env = append(os.Environ(), "BPFWALL_ROOT="+root)
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			err := cmd.Run()
			want := fmt.Sprintf("a bpfwall program (id %d) runs at xdp on veth1", id)
			if err == nil || !strings.Contains(stderr.String(), want) || !strings.Contains(stderr.String(), hint) {
				t.Errorf("%v with pins under %s: %v\n%s\nwant %q and %q", args, root, err, stderr.Bytes(), want, hint)
			}
		}
	}
	// With its pins in sight, the filter is no stray.
	if _, errOut, code := c.run("", "status"); code != 0 || errOut != "" {
		t.Errorf("status: exit %d, %s", code, errOut)
	}
	c.ok("", "unload")
}

// TestDeletedInterface: an interface deleted under a filter shows as
// gone in status, and the next restore drops it: the link of a filter
// that keeps other interfaces, the filter whose every interface is gone.
func TestDeletedInterface(t *testing.T) {
	bin := buildBpfwall(t)
	peer := freshNetns(t)
	c := cli{t, bin}
	for _, name := range []string{"vk1", "vk2"} {
		for _, args := range [][]string{{"link", "add", name, "type", "veth", "peer", "name", name + "p"}, {"link", "set", name, "up"}} {
			if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
				t.Fatalf("ip %s: %v\n%s", strings.Join(args, " "), err, out)
			}
		}
	}
	c.ok(udpRules, "restore", "-i", "veth1", "-i", "vk1")
	c.ok(udpRules, "restore", "--hook", "tc-ingress", "-i", "vk2")
	for _, name := range []string{"vk1", "vk2"} {
		if out, err := exec.Command("ip", "link", "del", name).CombinedOutput(); err != nil {
			t.Fatalf("ip link del: %v\n%s", err, out)
		}
	}
	gone := map[string]bool{}
	for _, st := range c.status() {
		for _, ifc := range st.Ifaces {
			gone[st.Hook+" "+ifc.Name] = ifc.Gone
		}
	}
	if want := map[string]bool{"xdp veth1": false, "xdp vk1": true, "tc-ingress vk2": true}; !maps.Equal(gone, want) {
		t.Errorf("status says gone: %v, want %v", gone, want)
	}
	if out := c.ok("", "status"); !strings.Contains(out, "every interface is gone") {
		t.Errorf("status does not say the tc-ingress filter filters nothing:\n%s", out)
	}
	// Bad input changes nothing, not even the filter that filters
	// nothing.
	if _, errOut, code := c.run(strings.Replace(udpRules, "-j DROP", "-j NOSUCH", 1), "restore"); code != 1 || len(c.status()) != 2 {
		t.Fatalf("restore of bad input: exit %d, %d filters left, want 1 and 2\n%s", code, len(c.status()), errOut)
	}
	_, errOut, code := c.run(udpRules, "restore")
	if code != 0 || !strings.Contains(errOut, "the tc-ingress filter was attached only to interfaces that are gone, vk2") {
		t.Fatalf("restore: exit %d\n%s", code, errOut)
	}
	st := c.status()
	if len(st) != 1 || st[0].Hook != "xdp" || len(st[0].Ifaces) != 1 || st[0].Ifaces[0].Name != "veth1" {
		t.Errorf("status after restore: %+v, want the xdp filter on veth1 alone", st)
	}
	if got := sendUDP(t, peer, 5002, 10); got != 0 {
		t.Errorf("udp/5002: %d of 10 arrived through DROP", got)
	}
	c.ok(udpRules, "restore")
	c.ok("", "unload")
}

// TestMemoryGuard: in a memory cgroup too small for the rule set, the
// command stops with a message saying so, instead of the OOM killer's
// silent SIGKILL. (300k rules need well over twice the 127 MiB the guard
// allows of 150: 100k came to fit.)
func TestMemoryGuard(t *testing.T) {
	testenv.RequireRoot(t)
	bin := buildBpfwall(t)
	dir := memoryCgroup(t, 150<<20)
	var b strings.Builder
	b.WriteString("*filter\n:INPUT ACCEPT [0:0]\n:FORWARD ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n")
	for i := range 300000 {
		fmt.Fprintf(&b, "-A INPUT -s 10.%d.%d.%d/32 -p tcp -m tcp --dport %d -j DROP\n", i>>16&255, i>>8&255, i&255, 1+i%60000)
	}
	b.WriteString("COMMIT\n")
	rules := filepath.Join(t.TempDir(), "big.rules")
	if err := os.WriteFile(rules, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("sh", "-c", `echo $$ > "$1/cgroup.procs" && exec "$0" compile "$2"`, bin, dir, rules)
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 1 || !strings.Contains(string(out), "bpfwall: out of memory") || !strings.Contains(string(out), "memory cgroup") {
		t.Fatalf("compile in a 150 MiB cgroup: %v\n%s\nwant exit 1 and the memory guard's message", err, out)
	}
	t.Logf("%s", out)
}

// memoryCgroup makes a memory cgroup with a limit of limit bytes below
// the test's own (cgroup v2 or v1) and returns its directory.
func memoryCgroup(t *testing.T, limit int) string {
	t.Helper()
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		t.Fatal(err)
	}
	name := fmt.Sprintf("bpfwall-test-%d", os.Getpid())
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		f := strings.SplitN(line, ":", 3)
		var dir, file string
		switch {
		case len(f) == 3 && f[1] == "memory":
			dir, file = filepath.Join("/sys/fs/cgroup/memory", f[2], name), "memory.limit_in_bytes"
		case len(f) == 3 && f[0] == "0" && f[1] == "":
			if _, err := os.Stat(filepath.Join("/sys/fs/cgroup", f[2], "memory.max")); err != nil {
				continue
			}
			dir, file = filepath.Join("/sys/fs/cgroup", f[2], name), "memory.max"
		default:
			continue
		}
		if err := os.Mkdir(dir, 0o755); err != nil {
			continue
		}
		t.Cleanup(func() {
			for range 50 {
				if os.Remove(dir) == nil {
					return
				}
				time.Sleep(20 * time.Millisecond) // its process is exiting
			}
		})
		if err := os.WriteFile(filepath.Join(dir, file), []byte(strconv.Itoa(limit)), 0o644); err != nil {
			t.Fatalf("memory limit: %v", err)
		}
		return dir
	}
	testenv.Unavailable(t, "no memory cgroup controller to make a cgroup in")
	return ""
}

// TestIptablesOptions: restore and save take iptables-restore's and
// iptables-save's options, long and short, bundled; nothing loaded is
// no error for save and unload.
func TestIptablesOptions(t *testing.T) {
	bin := buildBpfwall(t)
	freshNetns(t)
	c := cli{t, bin}
	// Nothing loaded: save prints nothing, unload succeeds, as
	// iptables-save and iptables -F on empty tables.
	if out, errOut, code := c.run("", "save"); code != 0 || out != "" || errOut != "" {
		t.Errorf("save with nothing loaded: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	c.ok("", "unload")

	// -tv: a test run says what it verified and loads nothing.
	for _, args := range [][]string{{"-tv"}, {"--test", "--verbose"}, {"-t", "-v", "-M", "/sbin/modprobe", "-4"}} {
		out := c.ok(udpRules, append([]string{"restore", "-i", "veth1"}, args...)...)
		if !strings.Contains(out, "rules verified") || !strings.Contains(out, "] xdp: compiled 2 rules of INPUT into ") {
			t.Errorf("restore %s: %q", strings.Join(args, " "), out)
		}
		if st := c.status(); len(st) != 0 {
			t.Fatalf("restore %s loaded a filter: %+v", strings.Join(args, " "), st)
		}
	}
	withCounters := strings.Replace(udpRules, "-A INPUT -p udp -m udp --dport 5001", "[7:700] -A INPUT -p udp -m udp --dport 5001", 1)
	out := c.ok(withCounters, "restore", "--counters", "--table=filter", "-v", "-i", "veth1")
	for _, want := range []string{"] read <stdin>: ", "] xdp: parsed 2 rules", "] xdp: loading (the kernel verifies the program) and swapping", "xdp: program "} {
		if !strings.Contains(out, want) {
			t.Errorf("restore -v does not say %q:\n%s", want, out)
		}
	}
	if out := c.ok("", "save", "--counters"); !strings.Contains(out, "[7:700] -A INPUT -p udp -m udp --dport 5001") {
		t.Errorf("restore --counters, save --counters:\n%s", out)
	}
	// --noflush adds to the active rule set.
	c.ok("*filter\n-A INPUT -p udp -m udp --dport 5003 -j DROP\nCOMMIT\n", "restore", "--noflush")
	out = c.ok("", "save", "-t", "filter")
	if !strings.Contains(out, "--dport 5001") || !strings.Contains(out, "--dport 5003") {
		t.Errorf("after restore --noflush, save -t filter:\n%s", out)
	}
	file := filepath.Join(t.TempDir(), "saved")
	c.ok("", "save", "-f", file)
	if b, err := os.ReadFile(file); err != nil || string(b) != out {
		t.Errorf("save -f wrote %q (%v), want %q", b, err, out)
	}
	if _, errOut, code := c.run("", "save", "-t", "nat"); code != 1 || !strings.Contains(errOut, `table "nat"`) {
		t.Errorf("save -t nat: exit %d, %q", code, errOut)
	}
	// -T restores one table of the input and leaves the others.
	c.ok("*raw\n:PREROUTING ACCEPT [0:0]\nCOMMIT\n"+strings.Replace(udpRules, "5002", "5004", 1), "restore", "-T", "raw")
	if out := c.ok("", "save"); !strings.Contains(out, "*raw") || !strings.Contains(out, "--dport 5003") {
		t.Errorf("after restore -T raw:\n%s", out)
	}
	// The IPv6 family is ip6tables-save's: save -6, not save.
	if out, errOut, code := c.run("", "save", "-6"); code != 0 || out != "" {
		t.Errorf("save -6 with only IPv4 loaded: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	c.ok("", "unload")
	c.ok("", "unload")
	v6 := "*filter\n:INPUT ACCEPT [0:0]\n:FORWARD ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n-A INPUT -s 2001:db8::1/128 -j DROP\nCOMMIT\n"
	c.ok(v6, "restore", "-6", "-i", "veth1")
	if out := c.ok("", "save", "--ipv6"); !strings.Contains(out, "-A INPUT -s 2001:db8::1/128 -j DROP") {
		t.Errorf("save --ipv6:\n%s", out)
	}
	if out, errOut, code := c.run("", "save"); code != 0 || out != "" || !strings.Contains(errOut, "save -6") {
		t.Errorf("save with only IPv6 loaded: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	c.ok("", "unload")
}

// TestIPSets: rules that name ipsets take them from --ipset FILE, in
// every command that reads rules, or from the kernel without one, as
// iptables does; the filter keeps them, so that save, save -c and
// restore -n read the active rule set back.
func TestIPSets(t *testing.T) {
	testenv.RequireTool(t, "ipset")
	bin := buildBpfwall(t)
	peer := freshNetns(t)
	c := cli{t, bin}
	setRules := "*filter\n:INPUT ACCEPT [0:0]\n:FORWARD ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n" +
		"-A INPUT -p udp -m set --match-set block src -j DROP\nCOMMIT\n"
	file := filepath.Join(t.TempDir(), "sets")
	if err := os.WriteFile(file, []byte("create block hash:net family inet\nadd block 10.9.0.0/24\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c.ok(setRules, "restore", "--ipset", file, "-i", "veth1")
	if got := sendUDP(t, peer, 5001, 5); got != 0 {
		t.Errorf("from 10.9.0.1 in set block: %d of 5 arrived", got)
	}
	if out := c.ok("", "save", "-c"); !strings.Contains(out, "[5:300] -A INPUT -p udp -m set --match-set block src -j DROP") {
		t.Errorf("save -c after restore --ipset:\n%s", out)
	}
	// restore -n reads the active rule set, sets included.
	c.ok("*filter\n-A INPUT -p udp -m udp --dport 5009 -j DROP\nCOMMIT\n", "restore", "-n")
	if got := sendUDP(t, peer, 5001, 3); got != 0 {
		t.Errorf("after restore -n: %d of 3 arrived from the set", got)
	}
	c.ok("", "metrics")

	// Without --ipset, the kernel's sets: first one that does not hold
	// the peer, then, restored again, one that does.
	c.ok("", "unload")
	ipset := func(script string) {
		t.Helper()
		cmd := exec.Command("ipset", "restore", "-exist")
		cmd.Stdin = strings.NewReader(script)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("ipset restore: %v\n%s", err, out)
		}
	}
	t.Cleanup(func() { exec.Command("ipset", "destroy").Run() })
	ipset("create block hash:net family inet\nadd block 192.0.2.0/24\n")
	_, errOut, _ := c.run(setRules, "restore", "-i", "veth1")
	if !strings.Contains(errOut, "as the kernel holds them now") {
		t.Errorf("restore with the kernel's sets does not say they are a snapshot: %q", errOut)
	}
	if got := sendUDP(t, peer, 5001, 4); got != 4 {
		t.Errorf("peer not in the kernel's set: %d of 4 arrived", got)
	}
	ipset("add block 10.9.0.1\n")
	c.ok(setRules, "restore", "-q")
	if got := sendUDP(t, peer, 5001, 4); got != 0 {
		t.Errorf("peer added to the kernel's set, restored: %d of 4 arrived", got)
	}
	if out := c.ok("", "save"); !strings.Contains(out, "--match-set block src -j DROP") {
		t.Errorf("save:\n%s", out)
	}
	if out, errOut, code := c.run(setRules, "check", "-"); code != 0 || !strings.Contains(out, "1 rules") {
		t.Errorf("check with the kernel's set: exit %d, %q %q", code, out, errOut)
	}
	exec.Command("ipset", "destroy").Run()
	if _, errOut, code := c.run(setRules, "check", "-"); code != 1 || !strings.Contains(errOut, `set "block" does not exist`) {
		t.Errorf("check without the set: exit %d, %q", code, errOut)
	}
	c.ok("", "unload")
}

// TestWithoutRoot: a command run without the capabilities says what it
// needs, not cilium/ebpf's RLIMIT_MEMLOCK hint, which does not apply to
// kernels that charge BPF memory to the memory cgroup.
func TestWithoutRoot(t *testing.T) {
	freshNetns(t)
	// The test's temporary directories are root's alone: nobody runs a
	// copy of the binary and reads the example from one it can enter.
	dir, err := os.MkdirTemp("", "bpfwall-nobody-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	bin := filepath.Join(dir, "bpfwall")
	example := filepath.Join(dir, "rules.v4")
	for from, to := range map[string]string{buildBpfwall(t): bin, "../../testdata/examples/web-server.rules.v4": example} {
		b, err := os.ReadFile(from)
		if err == nil {
			err = os.WriteFile(to, b, 0o755)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"compile", example}, {"bench", "--sizes", "1", "--families", "bpfilter", "--levels", "1", "-q"}, {"status"}} {
		cmd := exec.Command(bin, args...)
		cmd.Dir = "/"
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
		out, err := cmd.CombinedOutput()
		if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 {
			t.Errorf("bpfwall %s as nobody: %v\n%s", strings.Join(args, " "), err, out)
		}
		if !strings.Contains(string(out), "bpfwall needs root, or CAP_BPF") || strings.Contains(string(out), "MEMLOCK") {
			t.Errorf("bpfwall %s as nobody:\n%s", strings.Join(args, " "), out)
		}
	}
}

// TestBpftoolNames: bpftool shows each program by its hook and chain, and
// dumps the counters as structures rather than bytes.
func TestBpftoolNames(t *testing.T) {
	testenv.RequireTool(t, "bpftool")
	bin := buildBpfwall(t)
	freshNetns(t)
	c := cli{t, bin}
	c.ok(udpRules, "restore", "-i", "veth1")
	c.ok(udpRules, "restore", "--hook", "tc-egress", "-i", "veth1")
	want := map[string]string{"xdp": "bpfwall_xdp_INPUT", "tc-egress": "bpfwall_tc_egress_OUTPUT"}
	for _, st := range c.status() {
		out, err := exec.Command("bpftool", "prog", "show", "id", strconv.Itoa(int(st.Program))).CombinedOutput()
		if err != nil || !strings.Contains(string(out), " name "+want[st.Hook]+" ") {
			t.Errorf("bpftool prog show of the %s program: %v\n%s\nwant the name %s", st.Hook, err, out, want[st.Hook])
		}
		var prog struct {
			Maps []int `json:"map_ids"`
		}
		out, err = exec.Command("bpftool", "-j", "prog", "show", "id", strconv.Itoa(int(st.Program))).Output()
		if err != nil || json.Unmarshal(out, &prog) != nil {
			t.Fatalf("bpftool -j prog show: %v\n%s", err, out)
		}
		found := false
		for _, id := range prog.Maps {
			out, err := exec.Command("bpftool", "map", "show", "id", strconv.Itoa(id)).Output()
			if err != nil || !strings.Contains(string(out), " name counters ") {
				continue
			}
			found = true
			dump, err := exec.Command("bpftool", "map", "dump", "id", strconv.Itoa(id)).Output()
			if err != nil || !strings.Contains(string(dump), `"packets": `) || !strings.Contains(string(dump), `"bytes": `) {
				t.Errorf("bpftool map dump of the %s counters: %v\n%.400s", st.Hook, err, dump)
			}
		}
		if !found {
			t.Errorf("the %s program has no counters map among %v", st.Hook, prog.Maps)
		}
	}
	c.ok("", "unload")
}

// TestCheckNFTSaysWhatNftSays runs the built binary's check on nft rule
// sets that nft -c -f refuses, for constructs bpfwall compiles and ones it
// does not, and on ones nft takes: check fails exactly when nft does, at
// the line and column nft names.
func TestCheckNFTSaysWhatNftSays(t *testing.T) {
	testenv.RequireTool(t, "nft", "unshare")
	bin := buildBpfwall(t)
	for _, rule := range []string{
		"ct zone 65535 drop",             // nft takes it; bpfwall does not compile it
		"ct zone 65536 drop",             // out of range
		"ct direction xxx drop",          // no such direction
		"ip6 saddr ::1 ip saddr 1.2.3.4", // conflicting protocols in one rule
		"tcp dport 22 ct helper \"1234567890123456\" drop",
		"udp dport 53 accept",
	} {
		src := fmt.Sprintf("table ip t {\n\tchain c {\n\t\ttype filter hook input priority 0;\n\t\t%s\n\t}\n}\n", rule)
		file := writeFile(t, "r.nft", src)
		nftOut, nftErr := exec.Command("unshare", "-n", "nft", "-c", "-f", file).CombinedOutput()
		out, err := exec.Command(bin, "check", file).CombinedOutput()
		if (err == nil) != (nftErr == nil) {
			t.Errorf("%s: check %v (%s), nft -c %v (%s)", rule, err, out, nftErr, nftOut)
			continue
		}
		if nftErr == nil {
			continue
		}
		// nft names the place as FILE:LINE:COL-END.
		m := regexp.MustCompile(regexp.QuoteMeta(file) + `:(\d+):(\d+)`).FindSubmatch(nftOut)
		if m == nil {
			t.Fatalf("nft -c: no position in %s", nftOut)
		}
		if want := fmt.Sprintf("%s:%s:%s:", file, m[1], m[2]); !strings.Contains(string(out), want) {
			t.Errorf("%s: check says %s, nft %s", rule, out, nftOut)
		}
	}
}

// TestRestoreInterfaceUnenforced: restore -i runs one chain per hook.
// Every other chain of the input with a rule or a DROP policy, which
// iptables-restore would enforce, is named in a warning at its first
// rule, so that an operator is not left believing it runs; -q silences
// the warnings, and an input of the chain alone gives none.
func TestRestoreInterfaceUnenforced(t *testing.T) {
	bin := buildBpfwall(t)
	freshNetns(t)
	c := cli{t, bin}
	text := "*nat\n:PREROUTING ACCEPT [0:0]\n:INPUT ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n:POSTROUTING ACCEPT [0:0]\n" +
		"-A POSTROUTING -o veth1 -j MASQUERADE\nCOMMIT\n" +
		"*filter\n:INPUT ACCEPT [0:0]\n:FORWARD DROP [0:0]\n:OUTPUT ACCEPT [0:0]\n:user - [0:0]\n" +
		"-A INPUT -p udp -m udp --dport 5002 -j user\n-A OUTPUT -p tcp -m tcp --dport 25 -j DROP\n-A user -j DROP\nCOMMIT\n"
	_, errOut, code := c.run(text, "restore", "-i", "veth1")
	if code != 0 {
		t.Fatalf("restore -i: exit %d\n%s", code, errOut)
	}
	for _, want := range []string{
		"<stdin>:6:2: warning: nat POSTROUTING is not enforced: restore -i runs only filter INPUT at xdp",
		"warning: filter FORWARD is not enforced",
		"<stdin>:14:2: warning: filter OUTPUT is not enforced",
	} {
		if !strings.Contains(errOut, want) {
			t.Errorf("restore -i does not say %q:\n%s", want, errOut)
		}
	}
	if strings.Contains(errOut, "INPUT is not enforced") || strings.Contains(errOut, "user is not enforced") {
		t.Errorf("restore -i warns of a chain it runs:\n%s", errOut)
	}
	if _, errOut, _ := c.run(text, "restore", "-q", "-i", "veth1"); errOut != "" {
		t.Errorf("restore -q -i printed:\n%s", errOut)
	}
	if _, errOut, _ := c.run(udpRules, "restore", "-i", "veth1"); errOut != "" {
		t.Errorf("restore -i of filter INPUT alone printed:\n%s", errOut)
	}
	// load, which takes one chain of a file, says the same.
	file := filepath.Join(t.TempDir(), "rules.v4")
	if err := os.WriteFile(file, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, errOut, code := c.run("", "load", "--hook", "tc-egress", "-i", "veth1", file); code != 0 ||
		!strings.Contains(errOut, "rules.v4:13:2: warning: filter INPUT is not enforced: load runs only filter OUTPUT at tc-egress") || strings.Contains(errOut, "OUTPUT is not enforced") {
		t.Errorf("load --hook tc-egress: exit %d\n%s", code, errOut)
	}
	c.ok("", "unload")
}
