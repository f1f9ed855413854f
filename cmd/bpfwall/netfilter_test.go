package main

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cilium/ebpf/link"
	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"golang.org/x/sys/unix"

	"bpfwall/internal/testenv"
	"bpfwall/internal/topology"
	"bpfwall/loader"
)

// TestNetfilterStage: an xdp filter that tests the conntrack state comes
// with its netfilter stage, pinned beside it, which decides pings (their
// state only conntrack knows); a swap replaces the stage, a swap to rules
// without state matches and unload remove it.
func TestNetfilterStage(t *testing.T) {
	bin := buildBpfwall(t)
	peer := freshNetns(t)
	c := cli{t, bin}
	pingRules := func(verdict string) string {
		return "*filter\n:INPUT DROP [0:0]\n:FORWARD DROP [0:0]\n:OUTPUT ACCEPT [0:0]\n" +
			"-A INPUT -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT\n" +
			"-A INPUT -p icmp -m conntrack --ctstate NEW -j " + verdict + "\n" +
			"-A INPUT -p tcp -j ACCEPT\n" +
			"COMMIT\n"
	}
	ping := func() bool {
		t.Helper()
		got, err := pingFrom(peer, net.IPv4(10, 9, 0, 2))
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	ns, err := loader.NetNS()
	if err != nil {
		t.Fatal(err)
	}
	pin := filepath.Join(os.Getenv("BPFWALL_ROOT"), strconv.FormatUint(ns, 10), "xdp", "netfilter_link")
	stage := func() *loader.NetfilterStage {
		t.Helper()
		st := c.status()
		if len(st) != 1 {
			t.Fatalf("status: %d filters", len(st))
		}
		return st[0].Netfilter
	}
	// gone checks that the netfilter link id no longer exists.
	gone := func(id link.ID) {
		t.Helper()
		if l, err := link.NewFromID(id); err == nil {
			l.Close()
			t.Errorf("netfilter link %d still exists", id)
		}
	}

	c.ok(pingRules("ACCEPT"), "restore", "--hook", "xdp", "-i", "veth1")
	if _, err := os.Stat(pin); err != nil {
		t.Fatalf("netfilter link not pinned: %v", err)
	}
	first := stage()
	if first == nil || first.Hook != "prerouting" || first.Priority != -199 || first.Family != "ipv4" {
		t.Fatalf("status: netfilter stage %+v", first)
	}
	if l, err := link.LoadPinnedLink(pin, nil); err != nil {
		t.Fatal(err)
	} else {
		info, err := l.Info()
		l.Close()
		if err != nil || info.ID != first.Link || info.Type != link.NetfilterType {
			t.Errorf("pinned link: %+v, %v; status says link %d", info, err, first.Link)
		}
	}
	if !ping() {
		t.Error("ping (NEW accepted by the netfilter stage) got no reply")
	}
	if st := stage(); st.Counts.Deferred == 0 || st.Counts.Evaluated == 0 {
		t.Errorf("status: the stage counted %+v", st.Counts)
	}

	// A swap attaches a new stage and lets the old one go.
	c.ok(pingRules("DROP"), "restore")
	second := stage()
	if second == nil || second.Link == first.Link || second.Program == first.Program {
		t.Fatalf("after a swap: netfilter stage %+v, was %+v", second, first)
	}
	gone(first.Link)
	if ping() {
		t.Error("ping (NEW dropped by the netfilter stage) got a reply")
	}

	// Rules without state matches need no stage.
	c.ok(udpRules, "restore")
	if st := stage(); st != nil {
		t.Errorf("after a swap to rules without state matches: netfilter stage %+v", st)
	}
	if _, err := os.Stat(pin); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("netfilter link pin after a swap to rules without state matches: %v", err)
	}
	gone(second.Link)
	if !ping() {
		t.Error("ping (policy ACCEPT, no stage) got no reply")
	}

	c.ok(pingRules("ACCEPT"), "restore", "-i", "lo")
	third := stage()
	veth1, err := net.InterfaceByName("veth1")
	if err != nil {
		t.Fatal(err)
	}
	if third == nil || !slices.Equal(sorted(third.Ifaces), sorted([]int{1, veth1.Index})) {
		t.Fatalf("after a swap back to rules with state matches, on lo too: netfilter stage %+v", third)
	}
	// Packets from an interface the filter leaves are not the stage's.
	c.ok("", "unload", "-i", "lo")
	if st := stage(); st == nil || !slices.Equal(st.Ifaces, []int{veth1.Index}) {
		t.Errorf("after unload -i lo: netfilter stage %+v", st)
	}
	c.ok("", "unload")
	gone(third.Link)
	if _, err := os.Stat(pin); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("netfilter link pin after unload: %v", err)
	}
}

var pingID atomic.Uint32

// pingFrom sends one ICMP echo request from the network namespace peer
// to dst and reports whether the reply came within two seconds.
func pingFrom(peer *topology.Netns, dst net.IP) (bool, error) {
	replied := false
	err := peer.Do(func() error {
		conn, err := net.ListenPacket("ip4:icmp", "0.0.0.0")
		if err != nil {
			return err
		}
		defer conn.Close()
		// A new identifier each time: an echo request of a
		// conntrack entry that saw its reply is ESTABLISHED.
		id := uint16(pingID.Add(1))
		req := &layers.ICMPv4{TypeCode: layers.CreateICMPv4TypeCode(layers.ICMPv4TypeEchoRequest, 0), Id: id, Seq: 1}
		buf := gopacket.NewSerializeBuffer()
		if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{ComputeChecksums: true}, req, gopacket.Payload("bpfwall")); err != nil {
			return err
		}
		if _, err := conn.WriteTo(buf.Bytes(), &net.IPAddr{IP: dst}); err != nil {
			return err
		}
		deadline := time.Now().Add(2 * time.Second)
		b := make([]byte, 1500)
		for {
			conn.SetReadDeadline(deadline)
			n, from, err := conn.ReadFrom(b)
			if err != nil {
				return nil // no reply
			}
			if n >= 8 && b[0] == 0 && from.(*net.IPAddr).IP.Equal(dst) && uint16(b[4])<<8|uint16(b[5]) == id {
				replied = true
				return nil
			}
		}
	})
	return replied, err
}

func sorted(s []int) []int {
	s = slices.Clone(s)
	slices.Sort(s)
	return s
}

// TestNetfilterStageUppers: netfilter sees the pings that came in on an
// attached interface on its macvlan device; the stage evaluates them
// there, as iptables-legacy does (before, it accepted them unevaluated).
// A macvlan created after the load is named by status; a bridge with a
// port the filter is not attached to is refused, one whose every port is
// attached is followed.
func TestNetfilterStageUppers(t *testing.T) {
	testenv.RequireTool(t, "iptables-legacy-restore")
	bin := buildBpfwall(t)
	peer := freshNetns(t)
	c := cli{t, bin}
	sh(t, "ip link add mv0 link veth1 type macvlan mode bridge")
	sh(t, "ip addr add 10.9.0.3/24 dev mv0")
	sh(t, "ip link set mv0 up")
	mv0, err := net.InterfaceByName("mv0")
	if err != nil {
		t.Fatal(err)
	}
	if err := peer.Do(func() error {
		return topology.RunLines("ip neigh replace 10.9.0.3 lladdr " + mv0.HardwareAddr.String() + " dev veth0 nud permanent")
	}); err != nil {
		t.Fatalf("static neighbour in the peer: %v", err)
	}
	pingRules := func(verdict string) string {
		return "*filter\n:INPUT DROP [0:0]\n:FORWARD DROP [0:0]\n:OUTPUT ACCEPT [0:0]\n" +
			"-A INPUT -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT\n" +
			"-A INPUT -p icmp -m conntrack --ctstate NEW -j " + verdict + "\n" +
			"-A INPUT -p tcp -j ACCEPT\n" +
			"COMMIT\n"
	}
	pings := func() [2]bool {
		t.Helper()
		var got [2]bool
		for i, dst := range []net.IP{net.IPv4(10, 9, 0, 2), net.IPv4(10, 9, 0, 3)} {
			ok, err := pingFrom(peer, dst)
			if err != nil {
				t.Fatal(err)
			}
			got[i] = ok
		}
		return got
	}
	for _, verdict := range []string{"DROP", "ACCEPT"} {
		cmd := exec.Command("iptables-legacy-restore")
		cmd.Stdin = strings.NewReader(pingRules(verdict))
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("iptables-legacy-restore: %v\n%s", err, out)
		}
		want := pings()
		cmd = exec.Command("iptables-legacy-restore")
		cmd.Stdin = strings.NewReader("*filter\n:INPUT ACCEPT [0:0]\n:FORWARD ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\nCOMMIT\n")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("iptables-legacy-restore: %v\n%s", err, out)
		}
		if want != [2]bool{verdict == "ACCEPT", verdict == "ACCEPT"} {
			t.Fatalf("iptables-legacy, ICMP NEW %s: replies to veth1, mv0: %v", verdict, want)
		}
		_, errOut, code := c.run(pingRules(verdict), "restore", "--hook", "xdp", "-i", "veth1")
		if code != 0 {
			t.Fatalf("restore: exit %d\n%s", code, errOut)
		}
		if !strings.Contains(errOut, "upper devices mv0;") || !strings.Contains(errOut, "not followed") {
			t.Errorf("restore does not say which upper devices the stage follows:\n%s", errOut)
		}
		if got := pings(); got != want {
			t.Errorf("ICMP NEW %s: replies to veth1, mv0: bpfwall %v, iptables-legacy %v", verdict, got, want)
		}
		st := c.status()
		if len(st) != 1 || st[0].Netfilter == nil || !slices.Contains(st[0].Netfilter.Ifaces, mv0.Index) ||
			len(st[0].Netfilter.Uppers) != 1 || st[0].Netfilter.Uppers[0].Name != "mv0" {
			t.Fatalf("status: %+v", st)
		}
		if verdict == "DROP" {
			c.ok("", "unload")
		}
	}

	// A device stacked later is not followed; status names it.
	sh(t, "ip link add mv1 link veth1 type macvlan mode bridge")
	if nf := c.status()[0].Netfilter; len(nf.NotFollowed) != 1 || nf.NotFollowed[0].Name != "mv1" {
		t.Errorf("status after mv1 appeared: not followed %+v", nf.NotFollowed)
	}
	if out := c.ok("", "status"); !strings.Contains(out, "not followed, created since the load: mv1") {
		t.Errorf("status does not warn of mv1:\n%s", out)
	}
	c.ok("", "unload")

	// A bridge: followed only when the filter is attached to every port.
	sh(t, "ip link add br0 type bridge")
	sh(t, "ip link add vb0 type veth peer name vb1")
	for _, d := range []string{"vb0", "vb1"} {
		sh(t, "ip link set "+d+" master br0")
		sh(t, "ip link set "+d+" up")
	}
	_, errOut, code := c.run(pingRules("DROP"), "restore", "--hook", "xdp", "-i", "vb0")
	if code == 0 || !strings.Contains(errOut, "br0 is the bridge of vb0, and of vb1, which this filter is not attached to") {
		t.Errorf("restore on one port of a bridge: exit %d\n%s", code, errOut)
	}
	c.ok(pingRules("DROP"), "restore", "--hook", "xdp", "-i", "vb0", "-i", "vb1")
	if nf := c.status()[0].Netfilter; len(nf.Uppers) != 1 || nf.Uppers[0].Name != "br0" {
		t.Errorf("status on both ports of a bridge: uppers %+v", nf.Uppers)
	}
	// Detached from one port, vb0's program would still defer what
	// netfilter sees on br0, which the stage could no longer evaluate: as
	// restore refuses that, unload -i of one port does, and the stage
	// still follows the bridge.
	br0, err := net.InterfaceByName("br0")
	if err != nil {
		t.Fatal(err)
	}
	if _, errOut, code := c.run("", "unload", "-i", "vb1"); code == 0 || !strings.Contains(errOut, "unload every port of it at once") {
		t.Errorf("unload -i vb1 of a followed bridge: exit %d\n%s", code, errOut)
	}
	if nf := c.status()[0].Netfilter; len(nf.Uppers) != 1 || !slices.Contains(nf.Ifaces, br0.Index) {
		t.Errorf("after a refused unload -i vb1: netfilter stage %+v", nf)
	}
	c.ok("", "unload", "-i", "vb0", "-i", "vb1")
}

// TestUnloadNetNS: a deleted namespace with a stateful filter stays while
// the filter's netfilter link holds it; unload --netns from outside
// removes the filter and the namespace goes, its veth with it. A
// namespace still alive is unloaded in it.
func TestUnloadNetNS(t *testing.T) {
	bin := buildBpfwall(t)
	freshNetns(t)
	c := cli{t, bin}
	rules := "*filter\n:INPUT DROP [0:0]\n:FORWARD DROP [0:0]\n:OUTPUT ACCEPT [0:0]\n" +
		"-A INPUT -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT\nCOMMIT\n"
	for _, del := range []bool{true, false} {
		name := fmt.Sprintf("bpfwall-unload-%d-%t", os.Getpid(), del)
		sh(t, "ip netns add "+name)
		t.Cleanup(func() { exec.Command("ip", "netns", "del", name).Run() })
		sh(t, "ip link add vdh type veth peer name vdn netns "+name)
		sh(t, "ip -n "+name+" link set vdn up")
		sh(t, "ip link set vdh up")
		var st unix.Stat_t
		if err := unix.Stat("/run/netns/"+name, &st); err != nil {
			t.Fatal(err)
		}
		id := strconv.FormatUint(st.Ino, 10)
		cmd := exec.Command("nsenter", "--net=/run/netns/"+name, bin, "restore", "--hook", "xdp", "-i", "vdn")
		cmd.Stdin = strings.NewReader(rules)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("restore in %s: %v\n%s", name, err, out)
		}
		dir := filepath.Join(os.Getenv("BPFWALL_ROOT"), id)
		if _, err := os.Stat(filepath.Join(dir, "xdp", "netfilter_link")); err != nil {
			t.Fatalf("no netfilter stage pinned: %v", err)
		}
		if del {
			sh(t, "ip netns del "+name)
			if out := c.ok("", "status"); !strings.Contains(out, "network namespace "+id+" has filters pinned but no process") {
				t.Errorf("status does not name the deleted namespace %s:\n%s", id, out)
			}
		}
		c.ok("", "unload", "--netns", id)
		if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("pins of netns %s after unload --netns: %v", id, err)
		}
		if !del {
			out, err := exec.Command("nsenter", "--net=/run/netns/"+name, bin, "status").CombinedOutput()
			if err != nil || strings.Contains(string(out), "program") {
				t.Errorf("status in %s after unload --netns: %v\n%s", name, err, out)
			}
			sh(t, "ip netns del "+name)
		}
		// The namespace is freed asynchronously (cleanup_net), its veth
		// pair with it.
		for i := 0; ; i++ {
			if _, err := net.InterfaceByName("vdh"); err != nil {
				break
			}
			if i == 200 {
				t.Fatalf("the veth peer of deleted namespace %s (%s) is still there after unload --netns", name, id)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	if _, _, code := c.run("", "unload", "--netns", "12345"); code == 0 {
		t.Error("unload --netns of a namespace with no pins succeeded")
	}
}

// TestNetfilterStageLogNoMAC: on a device without an Ethernet header (a
// tun device: hard_header_len 0, mac_header == network_header) the
// stage's LOG line says "MAC= " as the kernel's does, instead of 14 bytes
// of kernel memory before the network header.
func TestNetfilterStageLogNoMAC(t *testing.T) {
	testenv.RequireTool(t, "iptables-legacy-restore")
	bin := buildBpfwall(t)
	allowNetnsLogging(t) // in the host's namespace, where the sysctl is
	freshNetns(t)
	c := cli{t, bin}
	tun, err := unix.Open("/dev/net/tun", unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(tun)
	ifr, err := unix.NewIfreq("bwtun0")
	if err != nil {
		t.Fatal(err)
	}
	ifr.SetUint16(unix.IFF_TUN | unix.IFF_NO_PI)
	if err := unix.IoctlIfreq(tun, unix.TUNSETIFF, ifr); err != nil {
		t.Fatalf("TUNSETIFF: %v", err)
	}
	sh(t, "ip addr add 10.9.9.1/24 dev bwtun0", "ip link set bwtun0 up")
	var id [3]byte
	rand.Read(id[:])
	tag := "bwnm" + hex.EncodeToString(id[:])
	rules := "*filter\n:INPUT ACCEPT [0:0]\n:FORWARD ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n" +
		"-A INPUT -p icmp -m conntrack --ctstate NEW -j LOG --log-prefix \"" + tag + " \"\n" +
		"COMMIT\n"
	var seq uint16
	send := func() {
		t.Helper()
		seq++
		ip := &layers.IPv4{Version: 4, IHL: 5, TTL: 64, Id: seq, Protocol: layers.IPProtocolICMPv4, SrcIP: net.IPv4(10, 9, 9, 2), DstIP: net.IPv4(10, 9, 9, 1)}
		icmp := &layers.ICMPv4{TypeCode: layers.CreateICMPv4TypeCode(layers.ICMPv4TypeEchoRequest, 0), Id: 0x4242 + seq, Seq: 1}
		buf := gopacket.NewSerializeBuffer()
		if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{ComputeChecksums: true, FixLengths: true}, ip, icmp, gopacket.Payload("bpfwall")); err != nil {
			t.Fatal(err)
		}
		if _, err := unix.Write(tun, buf.Bytes()); err != nil {
			t.Fatalf("write to tun: %v", err)
		}
	}

	// The kernel's line.
	cmd := exec.Command("iptables-legacy-restore")
	cmd.Stdin = strings.NewReader(rules)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("iptables-legacy-restore: %v\n%s", err, out)
	}
	var kernel string
	if lines := kmsgLines(t, 1, func(text string) bool { return strings.HasPrefix(text, tag+" ") }, func() { send() }); len(lines) > 0 {
		kernel = unescapeKmsg(lines[0])
	}
	cmd = exec.Command("iptables-legacy-restore")
	cmd.Stdin = strings.NewReader("*filter\n:INPUT ACCEPT [0:0]\n:FORWARD ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\nCOMMIT\n")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("iptables-legacy-restore: %v\n%s", err, out)
	}
	if !strings.Contains(kernel, " MAC= SRC=10.9.9.2 ") {
		t.Fatalf("the kernel's line: %q", kernel)
	}

	// bpfwall's, from the netfilter stage. The echo's id differs: a new
	// entry, NEW again.
	c.ok(rules, "restore", "--hook", "xdp", "-i", "bwtun0")
	defer c.run("", "unload")
	send()
	out := c.ok("", "log", "--json", "--hook", "xdp", "--count", "1", "--timeout", "10s")
	var ev logEvent
	if err := json.Unmarshal([]byte(out), &ev); err != nil {
		t.Fatalf("bpfwall log printed %q: %v", out, err)
	}
	if ev.Error != "" {
		t.Errorf("bpfwall log: %s", ev.Error)
	}
	// Only the echo's id and checksum, and the IP id, differ.
	want := strings.NewReplacer(fmt.Sprintf("ID=%d ", seq-1), fmt.Sprintf("ID=%d ", seq), fmt.Sprintf("ID=%d ", 0x4242+seq-1), fmt.Sprintf("ID=%d ", 0x4242+seq)).Replace(kernel)
	if ev.Line != want {
		t.Errorf("LOG line on a device without a MAC header:\nkernel  %q\nbpfwall %q", want, ev.Line)
	}
}
