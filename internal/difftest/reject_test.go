package difftest

import (
	"bpfwall/internal/testenv"
	"bpfwall/model"
	"bytes"
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"
	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"

	"bpfwall/codegen"
	"bpfwall/internal/packets"
	"bpfwall/internal/topology"
	"bpfwall/ir"
	"bpfwall/loader"
	"bpfwall/parser/iptables"
	"bpfwall/parser/nft"
	"bpfwall/rules"
)

// The firewall's and the sender's IPv6 addresses for the REJECT test;
// the topology gives them IPv4 ones.
var (
	fwAddr6     = netip.MustParseAddr("2001:db8::1")
	senderAddr6 = netip.MustParseAddr("2001:db8::2")
)

// rejectRules has the INPUT rules of the REJECT test, by family: a
// --reject-with per destination port.
var rejectRules = map[rules.Family]string{
	rules.IPv4: `*filter
:INPUT ACCEPT [0:0]
:FORWARD ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
-A INPUT -f -j REJECT
-A INPUT -p tcp --dport 23 -j REJECT --reject-with tcp-reset
-A INPUT -p udp --dport 100 -j REJECT --reject-with icmp-net-unreachable
-A INPUT -p udp --dport 101 -j REJECT --reject-with icmp-host-unreachable
-A INPUT -p udp --dport 102 -j REJECT --reject-with icmp-proto-unreachable
-A INPUT -p udp --dport 103 -j REJECT
-A INPUT -p udp --dport 109 -j REJECT --reject-with icmp-net-prohibited
-A INPUT -p udp --dport 110 -j REJECT --reject-with icmp-host-prohibited
-A INPUT -p udp --dport 113 -j REJECT --reject-with icmp-admin-prohibited
-A INPUT -p tcp --dport 103 -j REJECT
-A INPUT -p icmp -j REJECT
-A INPUT -p 253 -j REJECT
COMMIT
`,
	rules.IPv6: `*filter
:INPUT ACCEPT [0:0]
:FORWARD ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
-A INPUT -p tcp --dport 23 -j REJECT --reject-with tcp-reset
-A INPUT -p udp --dport 100 -j REJECT --reject-with icmp6-no-route
-A INPUT -p udp --dport 101 -j REJECT --reject-with icmp6-adm-prohibited
-A INPUT -p udp --dport 103 -j REJECT --reject-with icmp6-addr-unreachable
-A INPUT -p udp --dport 104 -j REJECT
-A INPUT -p udp --dport 105 -j REJECT --reject-with icmp6-policy-fail
-A INPUT -p udp --dport 106 -j REJECT --reject-with icmp6-reject-route
-A INPUT -p tcp --dport 104 -j REJECT
-A INPUT -p icmpv6 -j REJECT
-A INPUT -p 253 -j REJECT
COMMIT
`,
}

// rejectNFT is rejectRules in nft's words, both families in one inet
// table, with nft's reject statements: plain, with icmp, icmpv6 and icmpx
// types, and with tcp reset. (A rule for fragments is missing: bpfwall
// refuses "ip frag-off & 0x1fff != 0"; the fragment probe is accepted.)
const rejectNFT = `table inet filter {
	chain input {
		type filter hook input priority filter; policy accept;
		tcp dport 23 reject with tcp reset
		udp dport 100 reject with icmpx type no-route
		meta nfproto ipv4 udp dport 101 reject with icmpx type host-unreachable
		meta nfproto ipv4 udp dport 102 reject with icmp type prot-unreachable
		meta nfproto ipv4 udp dport 103 reject
		meta nfproto ipv4 udp dport 109 reject with icmp type net-prohibited
		meta nfproto ipv4 udp dport 110 reject with icmp type host-prohibited
		meta nfproto ipv4 udp dport 113 reject with icmpx type admin-prohibited
		meta nfproto ipv4 tcp dport 103 reject
		meta nfproto ipv6 udp dport 101 reject with icmpv6 type admin-prohibited
		meta nfproto ipv6 udp dport 103 reject with icmpx type host-unreachable
		meta nfproto ipv6 udp dport 104 reject with icmpx type port-unreachable
		meta nfproto ipv6 udp dport 105 reject with icmpv6 type policy-fail
		meta nfproto ipv6 udp dport 106 reject with icmpv6 type reject-route
		meta nfproto ipv6 tcp dport 104 reject
		meta l4proto icmp reject
		meta l4proto ipv6-icmp reject
		meta l4proto 253 reject
	}
}
`

// dropInput is what the firewall's netfilter holds while a program
// rejects: whatever the program lets through gets no answer from the
// stack, which would look like a REJECT's (a closed port's RST or port
// unreachable).
const dropInput = "*filter\n:INPUT DROP [0:0]\n:FORWARD ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\nCOMMIT\n"

// TestRejectAgainstKernel sends the same probes to the firewall's own
// addresses three times: rejected by iptables-legacy (ip6tables-legacy)
// REJECT rules in INPUT, then by the compiled rules attached to the
// firewall's interface on xdp (generic) and on tc-ingress; the replies
// captured at the sender must be the kernel's, field by field. What
// legitimately differs is left out of the comparison (see
// normalizeReply): the IP ID of an ICMP error, and the flow label of an
// ICMPv6 error.
func TestRejectAgainstKernel(t *testing.T) {
	requireKernel(t)
	topo := NewTopology(t, TopologyOptions{})
	topo.rejectSetup(t)
	root := testenv.BPFFS(t)
	t.Cleanup(func() {
		if err := os.RemoveAll(root); err != nil {
			t.Error(err)
		}
	})
	for _, src := range []struct {
		name string
		nft  bool
	}{{"iptables", false}, {"nft", true}} {
		for _, fam := range []rules.Family{rules.IPv4, rules.IPv6} {
			t.Run(fmt.Sprintf("%s/%s", src.name, fam), func(t *testing.T) {
				topo.compareRejects(t, root, rejectCase{fam: fam, nft: src.nft, probes: rejectProbes(t, fam)})
			})
		}
	}
	// A RST from FORWARD: it comes from the packet's destination, beyond
	// the firewall.
	for _, fam := range []rules.Family{rules.IPv4, rules.IPv6} {
		t.Run(fmt.Sprintf("forward/%s", fam), func(t *testing.T) {
			topo.compareRejects(t, root, rejectCase{fam: fam, chain: "FORWARD", rules: rejectForward[fam], probes: forwardProbes(t, fam)})
		})
	}
}

// rejectCase is a rule set and the probes that compareRejects sends.
type rejectCase struct {
	fam    rules.Family
	nft    bool   // the rules are rejectNFT
	rules  string // iptables-save text; rejectRules[fam] when empty
	chain  string // INPUT when empty
	probes []rejectProbe
	// minReplies is how many replies the kernel must send at least (half
	// the probes when 0): comparing silences proves nothing.
	minReplies int
}

// rejectForward resets forwarded TCP connections to port 23, and rejects
// UDP and ICMP with errors from the address routing picks.
var rejectForward = map[rules.Family]string{
	rules.IPv4: `*filter
:INPUT ACCEPT [0:0]
:FORWARD ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
-A FORWARD -p tcp --dport 23 -j REJECT --reject-with tcp-reset
-A FORWARD -p udp --dport 103 -j REJECT
-A FORWARD -p udp --dport 110 -j REJECT --reject-with icmp-host-prohibited
-A FORWARD -p icmp -j REJECT
COMMIT
`,
	rules.IPv6: `*filter
:INPUT ACCEPT [0:0]
:FORWARD ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
-A FORWARD -p tcp --dport 23 -j REJECT --reject-with tcp-reset
-A FORWARD -p udp --dport 104 -j REJECT
-A FORWARD -p udp --dport 101 -j REJECT --reject-with icmp6-adm-prohibited
-A FORWARD -p icmpv6 -j REJECT
COMMIT
`,
}

// forwardProbes are TCP segments to port 23 of an address the firewall
// forwards to.
func forwardProbes(t *testing.T, fam rules.Family) []rejectProbe {
	var out []rejectProbe
	dst := net.IP{198, 51, 100, 7}
	if fam == rules.IPv6 {
		dst = net.ParseIP("2001:db8:1::7")
	}
	for _, p := range rejectProbes(t, fam) {
		if !forwardProbe(p.name, fam) {
			continue
		}
		f := retarget(t, p.frame, dst)
		out = append(out, rejectProbe{name: p.name, frame: f})
		if strings.HasPrefix(p.name, "udp to 10") || strings.HasPrefix(p.name, "tcp-reset") {
			// ip_forward answers TTL 1 with time exceeded before
			// FORWARD: no REJECT, no rule counts it.
			out = append(out, rejectProbe{name: p.name + " with ttl 1", frame: withTTL1(f)})
		}
	}
	return out
}

// withTTL1 returns frame with TTL (hop limit) 1 and its IPv4 header
// checksum made right again.
func withTTL1(frame []byte) []byte {
	f := bytes.Clone(frame)
	ip := ipPacket(f)
	if ip[0]>>4 == 6 {
		ip[7] = 1
		return f
	}
	ip[8] = 1
	binary.BigEndian.PutUint16(ip[10:], 0)
	binary.BigEndian.PutUint16(ip[10:], ^onesSum(ip[:int(ip[0]&0xf)*4]))
	return f
}

// forwardProbe reports whether rejectForward[fam] has a rule for the
// probe called name.
func forwardProbe(name string, fam rules.Family) bool {
	prefixes := []string{"tcp-reset", "no tcp-reset"}
	if fam == rules.IPv4 {
		prefixes = append(prefixes, "udp to 103", "udp to 110", "a large packet", "no error to a bad udp", "udp without",
			"icmp echo", "no error to an icmp error", "no error to a non-first fragment", "every tos bit")
	} else {
		prefixes = append(prefixes, "udp to 104", "udp to 101", "a large packet", "no error to a bad udp",
			"icmpv6 echo", "no error to an icmpv6 error")
	}
	for _, p := range prefixes {
		if strings.HasPrefix(name, p) {
			return true
		}
	}
	return false
}

// retarget returns frame sent to dst instead, with its checksums made
// right again (a probe meant to have a bad one keeps it bad).
func retarget(t *testing.T, frame []byte, dst net.IP) []byte {
	f := bytes.Clone(frame)
	ip := ipPacket(f)
	bad := !transportValidUDP(ip)
	var l4 []byte
	var proto byte
	if ip[0]>>4 == 4 {
		copy(ip[16:20], dst.To4())
		binary.BigEndian.PutUint16(ip[10:], 0)
		binary.BigEndian.PutUint16(ip[10:], ^onesSum(ip[:20]))
		if binary.BigEndian.Uint16(ip[6:])&0x1fff != 0 {
			return f // a fragment's data has no header to fix
		}
		l4, proto = ip[int(ip[0]&0xf)*4:], ip[9]
	} else {
		copy(ip[24:40], dst.To16())
		l4, proto = ip[40:], ip[6]
	}
	at := map[byte]int{6: 16, 17: 6}
	off, ok := at[proto]
	if !ok || (proto == 17 && binary.BigEndian.Uint16(l4[6:]) == 0) {
		return f
	}
	binary.BigEndian.PutUint16(l4[off:], 0)
	binary.BigEndian.PutUint16(l4[off:], ^onesSum(append(pseudoSum(ip, len(ip)-len(l4), proto), l4...)))
	if bad {
		ip[len(ip)-1] ^= 0x01
	}
	return f
}

// transportValidUDP is transportValid, UDP and ICMP included.
func transportValidUDP(ip []byte) bool {
	hl, proto := 40, ip[6]
	if ip[0]>>4 == 4 {
		hl, proto = int(ip[0]&0xf)*4, ip[9]
	}
	if proto == 17 {
		return binary.BigEndian.Uint16(ip[hl+6:]) == 0 || onesSum(append(pseudoSum(ip, hl, proto), ip[hl:]...)) == 0xffff
	}
	return transportValid(ip)
}

// compareRejects loads the REJECT rules of family fam (nft's with nft)
// into the firewall's netfilter, collects its replies to the probes,
// then replaces them by the compiled rules on each hook and compares.
func (topo *Topology) compareRejects(t *testing.T, root string, rc rejectCase) {
	fam, nftRules, probes := rc.fam, rc.nft, rc.probes
	text := rc.rules
	if text == "" {
		text = rejectRules[fam]
	}
	var err error
	if nftRules {
		err = topo.LoadNFT(fam, []byte(rejectNFT))
	} else {
		err = topo.Load(fam, []byte(text))
	}
	if err != nil {
		t.Fatal(err)
	}
	kernel := make([][]byte, len(probes))
	replied := 0
	for i, p := range probes {
		if kernel[i], err = topo.reply(p.frame, fam); err != nil {
			t.Fatalf("%s: %v", p.name, err)
		}
		if kernel[i] != nil {
			replied++
		}
	}
	// A test that compares silences proves nothing.
	if rc.minReplies == 0 {
		rc.minReplies = len(probes) / 2
	}
	if replied < rc.minReplies {
		t.Fatalf("the kernel replied to only %d of %d probes", replied, len(probes))
	}
	t.Logf("the kernel replied to %d of %d probes", replied, len(probes))
	if nftRules {
		err = topo.LoadNFT(fam, nil)
	}
	if err == nil {
		err = topo.Load(fam, []byte(dropInput))
	}
	if err != nil {
		t.Fatal(err)
	}
	var rs *rules.Ruleset
	if nftRules {
		rs, err = nft.Parse("reject.nft", []byte(rejectNFT), nft.Options{Family: fam})
	} else {
		rs, err = iptables.Parse("reject.rules", []byte(text), iptables.Options{Family: fam, ForceFamily: true})
	}
	if err != nil {
		t.Fatal(err)
	}
	prog, err := ir.Lower(rs, ir.LowerOptions{Chain: rc.chain})
	if err != nil {
		t.Fatal(err)
	}
	for _, run := range []struct {
		name string
		hook codegen.Hook
		mode loader.XDPMode
	}{{"xdp", codegen.HookXDP, loader.XDPGeneric}, {"xdp-native", codegen.HookXDP, loader.XDPNative}, {"tc-ingress", codegen.HookTCIngress, 0}} {
		hook := run.hook
		t.Run(run.name, func(t *testing.T) {
			p, err := codegen.Compile(prog, codegen.Options{Trace: true, Hook: hook})
			if err != nil {
				t.Fatal(err)
			}
			if run.mode == loader.XDPNative {
				// A veth's XDP_TX reaches its peer only when the peer
				// runs NAPI: an XDP program there turns it on.
				defer topo.passXDP(t)()
			}
			detach := topo.attach(t, root, rs, p, run.mode)
			defer detach()
			for i, pr := range probes {
				got, err := topo.reply(pr.frame, fam)
				if err != nil {
					t.Fatalf("%s: %v", pr.name, err)
				}
				if groupRST(pr.frame, kernel[i], got) || ipv6LayerError(pr.frame, kernel[i], got) {
					continue // a documented divergence
				}
				if why := compareReplies(kernel[i], got); why != "" {
					t.Errorf("%s: %s\nprobe: %x\nkernel: %s\nbpfwall: %s", pr.name, why, pr.frame, dumpFrame(kernel[i]), dumpFrame(got))
				}
			}
		})
	}
}

// rejectSetup gives the firewall an IPv6 address facing the sender, turns
// the kernel's ICMP rate limits off and sets a TTL and hop limit that are
// not the defaults.
func (topo *Topology) rejectSetup(t *testing.T) {
	fw := topo.Firewall
	batch := fmt.Sprintf("addr add %s/128 dev %s nodad\nroute add %s/128 dev %s\nneigh replace %s lladdr %s dev %s nud permanent\n",
		fwAddr6, topo.InIface, senderAddr6, topo.InIface, senderAddr6, senderMAC, topo.InIface)
	if err := topology.RunInput([]byte(batch), "ip", "-n", fw, "-batch", "-"); err != nil {
		t.Fatal(err)
	}
	// The kernel's ICMP rate limits (per peer, icmp_ratelimit; global,
	// icmp_msgs_per_sec) would stop its errors after a burst; bpfwall does
	// not limit (see /work/notes/reject.md). Both are off here.
	if err := topology.Sysctl(fw, "net/ipv4/icmp_ratemask", "0", "net/ipv6/icmp/ratelimit", "0",
		"net/ipv4/icmp_msgs_per_sec", "1000000", "net/ipv4/icmp_msgs_burst", "1000000"); err != nil {
		t.Fatal(err)
	}
	// Replies take the namespace's TTL and hop limit, which the loader
	// reads; not the default 64 here.
	if err := topology.Sysctl(fw, "net/ipv4/ip_default_ttl", "77", "net/ipv6/conf/default/hop_limit", "78",
		"net/ipv6/conf/"+topo.InIface+"/hop_limit", "78"); err != nil {
		t.Fatal(err)
	}
}

// attach attaches p to the firewall's ingress interface as `bpfwall
// load` does, and returns the function that detaches it.
func (topo *Topology) attach(t *testing.T, root string, rs *rules.Ruleset, p *codegen.Program, mode loader.XDPMode) func() {
	t.Helper()
	meta, counters, err := loader.NewMeta(rs, p, "reject")
	if err != nil {
		t.Fatal(err)
	}
	err = topology.Do(topo.Firewall, func() error {
		place, err := loader.Here(root, p.Hook)
		if err != nil {
			return err
		}
		swap := loader.Swap{Place: place, Program: p, Meta: meta, Counters: counters, Ifaces: []string{topo.InIface}, XDPMode: mode}
		err = runSwap(&swap)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return func() {
		err := topology.Do(topo.Firewall, func() error {
			place, err := loader.Here(root, p.Hook)
			if err != nil {
				return err
			}
			_, err = loader.Unload(place, nil)
			return err
		})
		if err != nil {
			t.Error(err)
		}
	}
}

// passXDP attaches a program that passes every frame to the sender's
// veth in native mode, and returns the function that detaches it.
func (topo *Topology) passXDP(t *testing.T) func() {
	t.Helper()
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Type:         ebpf.XDP,
		License:      "GPL",
		Instructions: asm.Instructions{asm.Mov.Imm(asm.R0, 2), asm.Return()}, // XDP_PASS
	})
	if err != nil {
		t.Fatal(err)
	}
	var l link.Link
	err = topology.Do(topo.Sender, func() error {
		ifi, err := net.InterfaceByName(topology.SenderIface)
		if err != nil {
			return err
		}
		l, err = link.AttachXDP(link.XDPOptions{Program: prog, Interface: ifi.Index, Flags: link.XDPDriverMode})
		return err
	})
	if err != nil {
		prog.Close()
		t.Fatal(err)
	}
	return func() {
		l.Close()
		prog.Close()
	}
}

// reply sends frame from the sender and returns the one IP packet of
// family fam that came back to the sender's address before the
// firewall's answer to a sentinel sent after it, or nil.
func (topo *Topology) reply(frame []byte, fam rules.Family) ([]byte, error) {
	if err := topo.send.drain(); err != nil {
		return nil, err
	}
	end, mark := sentinel()
	if err := onOneCPU(func() error {
		if err := topo.send.send(frame); err != nil {
			return err
		}
		return topo.send.send(end)
	}); err != nil {
		return nil, err
	}
	var got []byte
	buf := make([]byte, 1<<16)
	deadline := time.Now().Add(sentinelTimeout)
	for {
		f, err := topo.send.recv(buf, time.Until(deadline))
		if err != nil {
			return nil, err
		}
		if f == nil {
			return nil, fmt.Errorf("no arp reply from the firewall within %v", sentinelTimeout)
		}
		if isReply(f, mark) {
			return got, nil
		}
		if !toSender(f, fam) {
			continue // router solicitations, MLD reports
		}
		if got != nil {
			return nil, fmt.Errorf("two replies: %x and %x", got, f)
		}
		got = bytes.Clone(f)
	}
}

// toSender reports whether frame is an IP packet of family fam to the
// sender's address.
func toSender(frame []byte, fam rules.Family) bool {
	ip := ipPacket(frame)
	switch {
	case ip == nil:
		return false
	case fam == rules.IPv4:
		return ip[0]>>4 == 4 && netip.AddrFrom4([4]byte(ip[16:20])) == senderAddr
	}
	return ip[0]>>4 == 6 && netip.AddrFrom16([16]byte(ip[24:40])) == senderAddr6
}

// compareReplies returns how bpfwall's reply differs from the kernel's,
// or "".
// groupRST reports the divergence docs/reject.md documents: the kernel
// resets a TCP segment sent to a group MAC address (from the device's
// MAC address, which the program does not know), and bpfwall sends
// nothing.
func groupRST(probe, kernel, got []byte) bool {
	ip := ipPacket(kernel)
	if got != nil || len(probe) == 0 || probe[0]&1 == 0 || ip == nil {
		return false
	}
	if ip[0]>>4 == 4 {
		return len(ip) > 9 && ip[9] == 6
	}
	return len(ip) > 6 && ip[6] == 6
}

// ipv6LayerError reports the other divergence docs/reject.md documents:
// the kernel's IPv6 layer answers a packet whose hop-by-hop options it
// refuses with a parameter problem, before netfilter sees it; bpfwall
// drops the packet, as the IP layer does, and sends nothing.
func ipv6LayerError(probe, kernel, got []byte) bool {
	ip := ipPacket(kernel)
	if got != nil || ip == nil || ip[0]>>4 != 6 || len(ip) <= 40 || ip[6] != 58 || ip[40] != 4 {
		return false
	}
	pkt, err := model.Decode(probe, model.Meta{})
	return err == nil && pkt.Invalid != ""
}

func compareReplies(kernel, got []byte) string {
	switch {
	case kernel == nil && got == nil:
		return ""
	case kernel == nil:
		return "the kernel sent nothing, bpfwall a reply"
	case got == nil:
		return "the kernel replied, bpfwall sent nothing"
	}
	if ip := ipPacket(got); ip != nil && ip[0]>>4 == 4 && !ipv4HeaderValid(ip) {
		return "bpfwall's IPv4 header checksum is wrong"
	}
	if ip := ipPacket(got); ip != nil && !transportValid(ip) {
		return "bpfwall's transport checksum is wrong"
	}
	k, g := normalizeReply(finishChecksum(kernel)), normalizeReply(got)
	if bytes.Equal(k, g) {
		return ""
	}
	if len(k) != len(g) {
		return fmt.Sprintf("%d bytes, the kernel's %d", len(g), len(k))
	}
	for i := range k {
		if k[i] != g[i] {
			return fmt.Sprintf("byte %d is %#02x, the kernel's %#02x", i, g[i], k[i])
		}
	}
	return ""
}

// normalizeReply clears what legitimately differs between the kernel's
// reply and the program's: an ICMP error's IP ID, which the kernel takes
// from ip_select_ident's hashed counters and the program draws at random
// (the header checksum is recomputed), and an ICMPv6 error's flow label,
// which the kernel hashes from the flow with a boot-time secret
// (auto_flowlabels) and the program leaves 0.
func normalizeReply(frame []byte) []byte {
	f := bytes.Clone(frame)
	ip := ipPacket(f)
	switch {
	case ip == nil:
	case ip[0]>>4 == 4 && ip[9] == 1:
		ip[4], ip[5] = 0, 0
		ip[10], ip[11] = 0, 0
		binary.BigEndian.PutUint16(ip[10:], ^onesSum(ip[:int(ip[0]&0xf)*4]))
	case ip[0]>>4 == 6 && ip[6] == 58:
		ip[1] &= 0xf0
		ip[2], ip[3] = 0, 0
	}
	return f
}

// finishChecksum returns the kernel's RST with its TCP checksum
// completed. The kernel leaves an IPv4 RST's to the device
// (CHECKSUM_PARTIAL: the field holds the pseudo-header's sum), and a veth
// passes the frame on as it is; the program writes the whole checksum.
func finishChecksum(frame []byte) []byte {
	f := bytes.Clone(frame)
	ip := ipPacket(f)
	if ip == nil {
		return f
	}
	hl, proto := 40, ip[6]
	if ip[0]>>4 == 4 {
		hl, proto = int(ip[0]&0xf)*4, ip[9]
	}
	if proto != 6 || len(ip) < hl+20 {
		return f
	}
	tcp := ip[hl:]
	pseudo := pseudoSum(ip, hl, 6)
	// nf_reject_ip_tcphdr_put: ~tcp_v4_check(), the folded sum itself.
	if binary.BigEndian.Uint16(tcp[16:]) != onesSum(pseudo) {
		return f // not a partial checksum: compare it as it is
	}
	binary.BigEndian.PutUint16(tcp[16:], 0)
	binary.BigEndian.PutUint16(tcp[16:], ^onesSum(append(pseudo, tcp...)))
	return f
}

// pseudoSum is the pseudo-header of the IP packet ip, whose transport
// header starts at hl.
func pseudoSum(ip []byte, hl int, proto byte) []byte {
	n := len(ip) - hl
	if ip[0]>>4 == 4 {
		return append(bytes.Clone(ip[12:20]), 0, proto, byte(n>>8), byte(n))
	}
	return append(bytes.Clone(ip[8:40]), byte(n>>24), byte(n>>16), byte(n>>8), byte(n), 0, 0, 0, proto)
}

// transportValid reports whether the TCP, ICMP or ICMPv6 checksum of ip
// is right.
func transportValid(ip []byte) bool {
	hl, proto := 40, ip[6]
	if ip[0]>>4 == 4 {
		hl, proto = int(ip[0]&0xf)*4, ip[9]
	}
	switch proto {
	case 1:
		return onesSum(ip[hl:]) == 0xffff
	case 6, 58:
		return onesSum(append(pseudoSum(ip, hl, proto), ip[hl:]...)) == 0xffff
	}
	return true
}

func ipv4HeaderValid(ip []byte) bool {
	n := int(ip[0]&0xf) * 4
	return len(ip) >= n && onesSum(ip[:n]) == 0xffff
}

func onesSum(b []byte) uint16 {
	var s uint32
	for i := 0; i+1 < len(b); i += 2 {
		s += uint32(binary.BigEndian.Uint16(b[i:]))
	}
	if len(b)%2 == 1 {
		s += uint32(b[len(b)-1]) << 8
	}
	for s > 0xffff {
		s = s&0xffff + s>>16
	}
	return uint16(s)
}

func dumpFrame(f []byte) string {
	if f == nil {
		return "nothing"
	}
	return fmt.Sprintf("%x\n%s", f, gopacket.NewPacket(f, layers.LayerTypeEthernet, gopacket.Default).Dump())
}

// rejectProbe is a frame from the sender to the firewall.
type rejectProbe struct {
	name  string
	frame []byte
}

// rejectProbes are the probes for rejectRules[fam]: every --reject-with,
// TCP resets for a SYN, for data with and without an ACK and for a FIN,
// the quote of a large packet, and the packets the kernel sends nothing
// to.
func rejectProbes(t *testing.T, fam rules.Family) []rejectProbe {
	v6 := fam == rules.IPv6
	eth := func() *layers.Ethernet {
		typ := layers.EthernetTypeIPv4
		if v6 {
			typ = layers.EthernetTypeIPv6
		}
		return &layers.Ethernet{SrcMAC: senderMAC, DstMAC: fwInMAC, EthernetType: typ}
	}
	ip := func(proto layers.IPProtocol) gopacket.NetworkLayer {
		if v6 {
			return &layers.IPv6{Version: 6, TrafficClass: 0x2e, FlowLabel: 0x12345, NextHeader: proto, HopLimit: 63,
				SrcIP: senderAddr6.AsSlice(), DstIP: fwAddr6.AsSlice()}
		}
		return &layers.IPv4{Version: 4, IHL: 5, TOS: 0x2e, Id: 0x1234, Flags: layers.IPv4DontFragment, TTL: 63, Protocol: proto,
			SrcIP: senderAddr.AsSlice(), DstIP: fwAddr.AsSlice()}
	}
	ser := func(ls ...gopacket.SerializableLayer) []byte {
		buf := gopacket.NewSerializeBuffer()
		if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true}, ls...); err != nil {
			t.Fatal(err)
		}
		return bytes.Clone(buf.Bytes())
	}
	udp := func(dport uint16, n int) []byte {
		nl := ip(layers.IPProtocolUDP)
		u := &layers.UDP{SrcPort: 5555, DstPort: layers.UDPPort(dport)}
		u.SetNetworkLayerForChecksum(nl)
		return ser(eth(), nl.(gopacket.SerializableLayer), u, gopacket.Payload(bytes.Repeat([]byte{0xa5}, n)))
	}
	tcp := func(dport uint16, flags byte, n int) []byte {
		nl := ip(layers.IPProtocolTCP)
		tc := &layers.TCP{SrcPort: 40000, DstPort: layers.TCPPort(dport), Seq: 0xfffffff0, Ack: 0x01020304, Window: 512,
			FIN: flags&1 != 0, SYN: flags&2 != 0, RST: flags&4 != 0, PSH: flags&8 != 0, ACK: flags&0x10 != 0}
		if tc.SYN {
			tc.Options = []layers.TCPOption{{OptionType: layers.TCPOptionKindMSS, OptionLength: 4, OptionData: []byte{5, 0xb4}}}
		}
		tc.SetNetworkLayerForChecksum(nl)
		return ser(eth(), nl.(gopacket.SerializableLayer), tc, gopacket.Payload(bytes.Repeat([]byte{0x5a}, n)))
	}
	// corrupt flips the last byte of the IP packet, which the transport
	// checksum covers.
	corrupt := func(f []byte) []byte {
		f[14+len(ipPacket(f))-1] ^= 0x01
		return f
	}
	out := []rejectProbe{
		{"tcp-reset to a syn", tcp(23, 0x02, 0)},
		{"tcp-reset to data with an ack", tcp(23, 0x18, 100)},
		{"tcp-reset to data without an ack", tcp(23, 0x08, 33)},
		{"tcp-reset to a fin", tcp(23, 0x01, 0)},
		{"tcp-reset to a syn+fin with data", tcp(23, 0x03, 7)},
		{"no tcp-reset to a rst", tcp(23, 0x14, 0)},
		{"no tcp-reset to a bad checksum", corrupt(tcp(23, 0x02, 0))},
		{"port unreachable to tcp", tcp(103+boolPort(v6), 0x02, 0)},
		{"no error to a bad udp checksum", corrupt(udp(103+boolPort(v6), 10))},
	}
	codes := []uint16{100, 101, 102, 103, 109, 110, 113}
	if v6 {
		codes = []uint16{100, 101, 103, 104, 105, 106}
	}
	for _, port := range codes {
		out = append(out, rejectProbe{fmt.Sprintf("udp to %d", port), udp(port, 10)})
	}
	big := 1400
	out = append(out, rejectProbe{"a large packet is quoted in part", udp(103+boolPort(v6), big)})
	if v6 {
		echo := &layers.ICMPv6{TypeCode: layers.CreateICMPv6TypeCode(128, 0)}
		nl := ip(layers.IPProtocolICMPv6)
		echo.SetNetworkLayerForChecksum(nl)
		errMsg := &layers.ICMPv6{TypeCode: layers.CreateICMPv6TypeCode(1, 4)}
		nl2 := ip(layers.IPProtocolICMPv6)
		errMsg.SetNetworkLayerForChecksum(nl2)
		out = append(out,
			rejectProbe{"icmpv6 echo request", ser(eth(), nl.(gopacket.SerializableLayer), echo, gopacket.Payload("\x00\x01\x00\x02ping"))},
			rejectProbe{"no error to an icmpv6 error", ser(eth(), nl2.(gopacket.SerializableLayer), errMsg, gopacket.Payload(make([]byte, 52)))},
			rejectProbe{"unknown protocol without payload", ser(eth(), ip(253).(gopacket.SerializableLayer))},
		)
		mc := udp(104, 10)
		copy(mc[0:6], []byte{0x33, 0x33, 0, 0, 0, 1})
		out = append(out, rejectProbe{"no error to a multicast frame", mc})
		// Extension headers before the transport header: the checksum is
		// the transport's, the quote has them all.
		withExt := func(kind layers.IPProtocol) []byte {
			nl := ip(kind).(*layers.IPv6)
			opt := &layers.IPv6DestinationOption{OptionType: 1, OptionLength: 4, OptionData: make([]byte, 4)}
			var ext gopacket.SerializableLayer
			if kind == layers.IPProtocolIPv6HopByHop {
				h := &layers.IPv6HopByHop{}
				h.NextHeader = layers.IPProtocolUDP
				h.Options = []*layers.IPv6HopByHopOption{(*layers.IPv6HopByHopOption)(opt)}
				ext = h
			} else {
				d := &layers.IPv6Destination{}
				d.NextHeader = layers.IPProtocolUDP
				d.Options = []*layers.IPv6DestinationOption{opt}
				ext = d
			}
			u := &layers.UDP{SrcPort: 5555, DstPort: 104}
			u.SetNetworkLayerForChecksum(nl)
			return ser(eth(), nl, ext, u, gopacket.Payload("ext"))
		}
		out = append(out,
			rejectProbe{"udp after a hop-by-hop header", withExt(layers.IPProtocolIPv6HopByHop)},
			rejectProbe{"udp after a destination options header", withExt(layers.IPProtocolIPv6Destination)},
		)
		return out
	}
	echo := ser(eth(), ip(layers.IPProtocolICMPv4).(gopacket.SerializableLayer),
		&layers.ICMPv4{TypeCode: layers.CreateICMPv4TypeCode(8, 0), Id: 1, Seq: 2}, gopacket.Payload("ping"))
	unreach := ser(eth(), ip(layers.IPProtocolICMPv4).(gopacket.SerializableLayer),
		&layers.ICMPv4{TypeCode: layers.CreateICMPv4TypeCode(3, 3)}, gopacket.Payload(make([]byte, 28)))
	noCsum := udp(103, 10)
	noCsum[14+20+6], noCsum[14+20+7] = 0, 0
	frag := udp(103, 10)
	binary.BigEndian.PutUint16(frag[14+6:], 0x0010) // offset 128, no DF
	binary.BigEndian.PutUint16(frag[14+10:], 0)
	binary.BigEndian.PutUint16(frag[14+10:], ^onesSum(frag[14:34]))
	bcast := udp(103, 10)
	copy(bcast[0:6], []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff})
	tos := udp(103, 10)
	tos[14+1] = 0xff
	binary.BigEndian.PutUint16(tos[14+10:], 0)
	binary.BigEndian.PutUint16(tos[14+10:], ^onesSum(tos[14:34]))
	withOptions := func(opts ...layers.IPv4Option) []byte {
		nl := ip(layers.IPProtocolUDP).(*layers.IPv4)
		nl.Options = opts
		u := &layers.UDP{SrcPort: 5555, DstPort: 103}
		u.SetNetworkLayerForChecksum(nl)
		return ser(eth(), nl, u, gopacket.Payload("options"))
	}
	out = append(out,
		rejectProbe{"ip options not echoed (nop, router alert)", withOptions(
			layers.IPv4Option{OptionType: 1}, layers.IPv4Option{OptionType: 1},
			layers.IPv4Option{OptionType: 148, OptionLength: 4, OptionData: []byte{0, 0}})},
		rejectProbe{"record route", withOptions(layers.IPv4Option{OptionType: 7, OptionLength: 11, OptionData: []byte{4, 0, 0, 0, 0, 0, 0, 0, 0}})},
		rejectProbe{"timestamp", withOptions(layers.IPv4Option{OptionType: 68, OptionLength: 12, OptionData: []byte{5, 0, 0, 0, 0, 0, 0, 0, 0, 0}})},
	)
	out = append(out,
		rejectProbe{"icmp echo request", echo},
		rejectProbe{"no error to a bad icmp checksum", corrupt(bytes.Clone(echo))},
		rejectProbe{"no error to an icmp error", unreach},
		rejectProbe{"udp without a checksum", noCsum},
		rejectProbe{"no error to a non-first fragment", frag},
		rejectProbe{"no error to a broadcast frame", bcast},
		rejectProbe{"every tos bit", tos},
		rejectProbe{"unknown protocol without payload", ser(eth(), ip(253).(gopacket.SerializableLayer))},
		rejectProbe{"unknown protocol with payload", ser(eth(), ip(253).(gopacket.SerializableLayer), gopacket.Payload("abcd"))},
	)
	return out
}

// boolPort is 1 for IPv6, whose port unreachable rule is on port 104.
func boolPort(v6 bool) uint16 {
	if v6 {
		return 1
	}
	return 0
}

// TestRejectRandomAgainstKernel sends generated frames, well-formed and
// malformed (internal/packets), aimed at the firewall's own address, to
// REJECT rules in netfilter and then to the compiled rules: every reply,
// and every silence, must be the kernel's.
func TestRejectRandomAgainstKernel(t *testing.T) {
	requireKernel(t)
	topo := NewTopology(t, TopologyOptions{})
	topo.rejectSetup(t)
	root := testenv.BPFFS(t)
	t.Cleanup(func() { os.RemoveAll(root) })
	const n = 300
	for _, fam := range []rules.Family{rules.IPv4, rules.IPv6} {
		text := rejectRandomRules[fam]
		rs, err := iptables.Parse("reject.rules", []byte(text), iptables.Options{Family: fam, ForceFamily: true})
		if err != nil {
			t.Fatal(err)
		}
		prog, err := ir.Lower(rs, ir.LowerOptions{})
		if err != nil {
			t.Fatal(err)
		}
		g := packets.NewGenerator(prog, uint64(fam)+1)
		var probes []rejectProbe
		for len(probes) < n {
			if f := aimAtFirewall(g.Random().Data, fam); f != nil {
				probes = append(probes, rejectProbe{name: fmt.Sprintf("frame %d", len(probes)), frame: f})
			}
		}
		t.Run(fam.String(), func(t *testing.T) {
			topo.compareRejects(t, root, rejectCase{fam: fam, rules: text, probes: probes, minReplies: n / 10})
		})
		// The same frames through FORWARD, to an address beyond the
		// firewall; only those routing hands to FORWARD (Forwarded).
		ftext := strings.ReplaceAll(text, "-A INPUT", "-A FORWARD")
		dst := net.IP{198, 51, 100, 7}
		if fam == rules.IPv6 {
			dst = net.ParseIP("2001:db8:1::7")
		}
		var fprobes []rejectProbe
		for _, p := range probes {
			f := readdress(p.frame, fam, dst)
			pkt, err := model.Decode(f, model.Meta{})
			if err != nil || Forwarded(pkt, f) != "" {
				continue
			}
			fprobes = append(fprobes, rejectProbe{name: p.name, frame: f})
		}
		t.Run("forward/"+fam.String(), func(t *testing.T) {
			topo.compareRejects(t, root, rejectCase{fam: fam, rules: ftext, chain: "FORWARD", probes: fprobes, minReplies: len(fprobes) / 10})
		})
	}
}

// readdress is a frame aimAtFirewall made, sent to dst instead.
func readdress(frame []byte, fam rules.Family, dst net.IP) []byte {
	f := bytes.Clone(frame)
	ip := f[14:]
	if fam == rules.IPv4 {
		old := bytes.Clone(ip[12:20])
		copy(ip[16:20], dst.To4())
		adjust(ip, 10, old, ip[12:20])
		hl := int(ip[0]&0xf) * 4
		if binary.BigEndian.Uint16(ip[6:])&0x1fff == 0 && hl >= 20 && len(ip) >= hl {
			adjustL4(ip[hl:], ip[9], old, ip[12:20], false)
		}
		return f
	}
	old := bytes.Clone(ip[8:40])
	copy(ip[24:40], dst.To16())
	if off, proto, ok := upperOffset(ip); ok {
		adjustL4(ip[off:], proto, old, ip[8:40], true)
	}
	return f
}

// rejectRandomRules reset TCP and reject everything else.
var rejectRandomRules = map[rules.Family]string{
	rules.IPv4: "*filter\n:INPUT ACCEPT [0:0]\n:FORWARD ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n-A INPUT -p tcp -j REJECT --reject-with tcp-reset\n-A INPUT -j REJECT --reject-with icmp-host-prohibited\nCOMMIT\n",
	rules.IPv6: "*filter\n:INPUT ACCEPT [0:0]\n:FORWARD ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n-A INPUT -p tcp -j REJECT --reject-with tcp-reset\n-A INPUT -j REJECT --reject-with icmp6-adm-prohibited\nCOMMIT\n",
}

// aimAtFirewall readdresses a generated frame from the sender to the
// firewall (a group MAC address stays), keeping every checksum exactly
// as right or wrong as it was; nil for a frame without an IP header of
// family fam, or with a VLAN tag (no VLAN device on the firewall).
func aimAtFirewall(frame []byte, fam rules.Family) []byte {
	f := bytes.Clone(frame)
	if len(f) < 14 {
		return nil
	}
	copy(f[6:12], senderMAC)
	if f[0]&1 == 0 {
		copy(f[0:6], fwInMAC)
	}
	et := binary.BigEndian.Uint16(f[12:])
	ip := f[14:]
	switch {
	case fam == rules.IPv4 && et == 0x0800 && len(ip) >= 20 && ip[0]>>4 == 4:
		hl := int(ip[0]&0xf) * 4
		old := bytes.Clone(ip[12:20])
		copy(ip[12:16], senderAddr.AsSlice())
		copy(ip[16:20], fwAddr.AsSlice())
		adjust(ip, 10, old, ip[12:20])
		if binary.BigEndian.Uint16(ip[6:])&0x1fff != 0 || hl < 20 || len(ip) < hl {
			return f
		}
		adjustL4(ip[hl:], ip[9], old, ip[12:20], false)
	case fam == rules.IPv6 && et == 0x86dd && len(ip) >= 40 && ip[0]>>4 == 6:
		old := bytes.Clone(ip[8:40])
		copy(ip[8:24], senderAddr6.AsSlice())
		copy(ip[24:40], fwAddr6.AsSlice())
		if off, proto, ok := upperOffset(ip); ok {
			adjustL4(ip[off:], proto, old, ip[8:40], true)
		}
	default:
		return nil
	}
	return f
}

// upperOffset walks an IPv6 packet's extension headers to the transport
// header, as far as the generated frames need; false for a non-first
// fragment or a walk that leaves the packet.
func upperOffset(ip []byte) (int, byte, bool) {
	off, proto := 40, ip[6]
	for steps := 0; steps < 8; steps++ {
		switch proto {
		case 0, 43, 60:
			if len(ip) < off+2 {
				return 0, 0, false
			}
			proto, off = ip[off], off+8*(int(ip[off+1])+1)
			continue
		case 44:
			if len(ip) < off+8 || binary.BigEndian.Uint16(ip[off+2:])&0xfff8 != 0 {
				return 0, 0, false
			}
			proto, off = ip[off], off+8
			continue
		}
		break
	}
	return off, proto, off <= len(ip)
}

// adjustL4 updates the transport checksum of l4 for the change of the
// pseudo-header's addresses from old to new (RFC 1624).
func adjustL4(l4 []byte, proto byte, old, new []byte, v6 bool) {
	at := map[byte]int{6: 16, 17: 6}
	if v6 {
		at[58] = 2
	}
	off, ok := at[proto]
	if !ok || len(l4) < off+2 || (proto == 17 && binary.BigEndian.Uint16(l4[off:]) == 0) {
		return
	}
	adjust(l4, off, old, new)
}

// adjust changes the checksum at b[off:] as replacing old by new changes
// the data it covers.
func adjust(b []byte, off int, old, new []byte) {
	sum := uint32(^binary.BigEndian.Uint16(b[off:]))
	for i := 0; i+1 < len(old); i += 2 {
		sum += uint32(^binary.BigEndian.Uint16(old[i:]))
		sum += uint32(binary.BigEndian.Uint16(new[i:]))
	}
	for sum > 0xffff {
		sum = sum&0xffff + sum>>16
	}
	binary.BigEndian.PutUint16(b[off:], ^uint16(sum))
}
