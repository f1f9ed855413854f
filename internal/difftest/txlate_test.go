package difftest

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"bpfwall/codegen"
	"bpfwall/internal/packets"
	"bpfwall/internal/testenv"
	"bpfwall/ir"
	"bpfwall/loader"
	"bpfwall/model"
	"bpfwall/parser/iptables"
	"bpfwall/parser/nft"
	"bpfwall/rules"
)

// txlatePair is one example of iptables-translate's test files: an
// iptables rule and the nft commands it translates to.
type txlatePair struct {
	pos  string // file:line of the iptables line
	tool string // iptables, ip6tables, ebtables, ...
	args string // the iptables command line after the tool's name
	nft  []string
}

// readTxlate reads the pairs of one .txlate file: a command line, then
// one or more "nft '...'" lines.
func readTxlate(t *testing.T, path string) []*txlatePair {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []*txlatePair
	var cur *txlatePair
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == "" || strings.HasPrefix(line, "#"):
		case strings.HasPrefix(line, "nft "):
			if cur == nil {
				t.Fatalf("%s:%d: nft line without a command before it", path, n)
			}
			cmd := strings.TrimPrefix(line, "nft ")
			if len(cmd) >= 2 && cmd[0] == '\'' && cmd[len(cmd)-1] == '\'' {
				cmd = cmd[1 : len(cmd)-1]
			}
			cur.nft = append(cur.nft, cmd)
		default:
			tool, args, _ := strings.Cut(line, " ")
			cur = &txlatePair{pos: fmt.Sprintf("%s:%d", filepath.Base(path), n), tool: strings.TrimSuffix(tool, "-translate"), args: args}
			out = append(out, cur)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// ruleCmdRE is an nft rule command: verb, family, table, chain, rule.
var ruleCmdRE = regexp.MustCompile(`^(add|insert) rule (ip|ip6|inet) (\S+) (\S+) (.*)$`)

// modelChain is the filter chain a pair's rule is compared in: filter's
// chains stay, and the others go to FORWARD, which allows both -i and -o.
func modelChain(chain string) string {
	switch chain {
	case "INPUT", "FORWARD", "OUTPUT":
		return chain
	}
	return "FORWARD"
}

// iptablesText turns an iptables command line with -A or -I into
// iptables-save text of a filter table with the rule in chain; ok is
// false for other commands.
func iptablesText(args string) (text, chain string, ok bool) {
	words := strings.Fields(args)
	var rest []string
	for i := 0; i < len(words); i++ {
		switch words[i] {
		case "-t", "--table":
			i++ // the rule goes to filter whatever its table
		case "-A", "--append", "-I", "--insert":
			if i+1 >= len(words) {
				return "", "", false
			}
			chain = modelChain(words[i+1])
			i++
			if i+1 < len(words) && regexp.MustCompile(`^[0-9]+$`).MatchString(words[i+1]) {
				i++ // -I CHAIN NUM
			}
		default:
			rest = append(rest, words[i])
		}
	}
	if chain == "" {
		return "", "", false
	}
	text = "*filter\n:INPUT ACCEPT [0:0]\n:FORWARD ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n" +
		"-A " + chain + " " + strings.Join(rest, " ") + "\nCOMMIT\n"
	return text, chain, true
}

// nftText declares the tables and base chains the pair's rule commands
// need, with chain's hook, and appends the commands; ok is false unless
// there is exactly one rule command.
func nftText(cmds []string, chain string) (string, bool) {
	var decl, body strings.Builder
	nrules := 0
	for _, c := range cmds {
		m := ruleCmdRE.FindStringSubmatch(c)
		if m == nil {
			body.WriteString(c + "\n")
			continue
		}
		nrules++
		fmt.Fprintf(&decl, "add table %s %s\n", m[2], m[3])
		fmt.Fprintf(&decl, "add chain %s %s %s { type filter hook %s priority 0; policy accept; }\n", m[2], m[3], m[4], strings.ToLower(chain))
		body.WriteString(c + "\n")
	}
	return decl.String() + body.String(), nrules == 1
}

// skipReason names the construct in the first error of a parse or
// lowering, for counting.
func skipReason(side string, err error) string {
	var l rules.ErrorList
	var one *rules.Error
	msg := err.Error()
	switch {
	case errors.As(err, &l) && len(l) > 0:
		msg = l[0].Msg
	case errors.As(err, &one):
		msg = one.Msg
	}
	msg, _, _ = strings.Cut(msg, "\n")
	return side + ": " + msg
}

// txlateVerdict is what a program does with a probe: its verdict, whether
// a rule matched (the rules without a target only count), and why.
type txlateVerdict struct {
	verdict ir.Verdict
	matched bool
	res     ir.Result
	pkt     *model.Packet
}

func txlateEval(p *ir.Program, frame []byte, meta model.Meta) (txlateVerdict, error) {
	pkt, err := model.Decode(frame, meta)
	if err != nil {
		return txlateVerdict{}, err
	}
	v := txlateVerdict{pkt: pkt}
	v.res = p.Trace(pkt, func(*ir.Rule) { v.matched = true })
	v.verdict = v.res.Verdict
	return v, nil
}

// expectedDifference says why iptables and nft may disagree on a probe,
// or returns "" when they must agree. These are malformed probes, and
// one kind of well-formed one:
//   - xtables matches drop a packet whose header they read is cut short
//     (hotdrop), where nft loads only the bytes it compares, and the rule
//     matches or not by them (or fails to no match when they are cut);
//   - ip6tables' extension header walk steps over an authentication
//     header, nft's (IP6_FH_F_AUTH) stops there, so the probe's protocol
//     is 51 for nft. The generator writes no AH: only a damaged byte does.
//   - a non-first fragment, when the nft rule loads from the transport
//     header: xt_tcp, xt_udp, xt_multiport and the icmp matches never
//     match one, nft's loads of 1, 2 or 4 bytes (nft_payload_fast_eval)
//     read the fragment's data in IPv4, the IPv6 header in IPv6. Not
//     malformed, but a difference of the two engines, not of the
//     translation;
//   - where netfilter sees the datagram, a first fragment without the
//     transport bytes a rule reads is dropped (docs/fragments.md); an nft
//     load can read further than the xt match's header;
//   - an interface name no device can have (dev_valid_name): the
//     translation of "! -i +", which matches nothing, is iifname
//     "INVAL/D".
//
// Besides, iptables-translate leaves out some matches that are not quite
// no-ops; txlateInexact lists them.
func expectedDifference(pr *txlatePair, ipt, nft txlateVerdict, nftLoads bool) string {
	switch {
	case nft.res.Skipped == ir.SkipTinyFragment && ipt.res.Skipped == "":
		return "first fragment shorter than the nft load"
	case ipt.res.Hotdrop:
		return "iptables hotdrop"
	case nftLoads && ipt.pkt.FragOffset != 0:
		return "non-first fragment, nft transport load"
	case ipt.pkt.Family == rules.IPv6 && ipt.pkt.AuthHeader:
		return "ipv6 authentication header"
	case !validIfname(ipt.pkt.InIface) || !validIfname(ipt.pkt.OutIface):
		return "invalid interface name"
	}
	for _, x := range txlateInexact {
		if pr.args == x.args && x.applies(ipt.pkt) {
			return x.why
		}
	}
	return ""
}

// txlateInexact are the translations that differ from the iptables rule
// on some well-formed packets.
var txlateInexact = []struct {
	args, why string
	applies   func(*model.Packet) bool
}{
	// xt_tcp and xt_udp never match a non-first fragment; "meta l4proto"
	// does.
	{"-I OUTPUT -p tcp --sport 0:65535 -j ACCEPT", "full port range translated away (non-first fragment)", nonFirstFragment},
	{"-I OUTPUT -p udp --sport 0:65535 -j ACCEPT", "full port range translated away (non-first fragment)", nonFirstFragment},
	// "! --uid-owner" holds for a packet without a process's socket;
	// "skuid !=" ends the rule there.
	{"-t nat -A OUTPUT -p tcp --dport 80 -m owner ! --uid-owner 1000 -j ACCEPT", "owner negation translated to skuid != (no socket)", noFile},
}

func nonFirstFragment(p *model.Packet) bool { return p.FragOffset != 0 }

func noFile(p *model.Packet) bool { return p.Socket == nil || !p.Socket.File }

// validIfname is dev_valid_name; an empty name is no interface.
func validIfname(s string) bool {
	return s == "" || len(s) < 16 && s != "." && s != ".." && !strings.ContainsAny(s, "/: \t\n\v\f\r")
}

// txlateProbes returns frames from both programs' generators: each rule
// aimed at, and n picked field by field.
func txlateProbes(progs []*ir.Program, meta model.Meta, n int) []packets.Aimed {
	var out []packets.Aimed
	for i, p := range progs {
		g := packets.NewGenerator(p, uint64(i+1))
		for _, r := range p.Rules {
			out = append(out, g.Aim(r, packets.AimOptions{Meta: meta})...)
		}
		for range n {
			f := g.Random()
			m := meta
			if m.InIface != "" {
				m.InIface = f.Iface
			}
			out = append(out, packets.Aimed{Frame: f.Data, Meta: m})
		}
	}
	return out
}

// TestTxlatePairs compares each iptables rule of the iptables-translate
// examples with its nft translation: where both sides parse and lower
// into the same chain, the two programs must agree under ir.Eval, verdict
// and whether the rule matched, on probes aimed at both.
func TestTxlatePairs(t *testing.T) {
	dir := testenv.Corpus(t, "iptables-txlate")
	files, err := filepath.Glob(filepath.Join(dir, "*.txlate"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no .txlate files in %s (%v)", dir, err)
	}
	outcomes := map[string]int{}
	excluded := map[string]int{}
	agree, probes := 0, 0
	for _, f := range files {
		for _, pr := range readTxlate(t, f) {
			reason, n, ex := comparePair(t, pr, nil)
			probes += n
			for k, v := range ex {
				excluded[k] += v
			}
			if reason == "" {
				agree++
				continue
			}
			outcomes[reason]++
		}
	}
	t.Logf("iptables-txlate: %d pairs agree on %d probes", agree, probes)
	for _, k := range slices.Sorted(maps.Keys(excluded)) {
		t.Logf("  %5d probes excluded: %s", excluded[k], k)
	}
	keys := slices.SortedFunc(maps.Keys(outcomes), func(a, b string) int {
		if outcomes[a] != outcomes[b] {
			return outcomes[b] - outcomes[a]
		}
		return strings.Compare(a, b)
	})
	for _, k := range keys {
		t.Logf("  %3d pairs skipped: %s", outcomes[k], k)
	}
	if agree < 75 {
		t.Errorf("only %d pairs compared, 78 did", agree)
	}
}

// TestTxlateCompiled compiles both programs of every pair TestTxlatePairs
// compares (xdp or tc-ingress for INPUT and FORWARD, tc-egress for
// OUTPUT), loads them
// and runs every probe through both with BPF_PROG_TEST_RUN: their verdicts
// must agree with each other and with ir.Eval's, on the probes where
// the two rules must agree.
func TestTxlateCompiled(t *testing.T) {
	testenv.RequireRoot(t)
	dir := testenv.Corpus(t, "iptables-txlate")
	files, err := filepath.Glob(filepath.Join(dir, "*.txlate"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no .txlate files in %s (%v)", dir, err)
	}
	c := &txlateCompiled{skipped: map[string]int{}}
	for _, f := range files {
		for _, pr := range readTxlate(t, f) {
			comparePair(t, pr, c)
		}
	}
	t.Logf("iptables-txlate compiled: %d pairs agree on %d probes run through both programs (%d short frames a tc test run refuses)", c.pairs, c.probes, c.refused)
	for _, k := range slices.Sorted(maps.Keys(c.skipped)) {
		t.Logf("  %3d pairs not compiled: %s", c.skipped[k], k)
	}
	if c.pairs < 60 {
		t.Errorf("only %d pairs compiled and compared", c.pairs)
	}
}

// txlateCompiled runs the compiled programs of the pairs; it counts what
// it did.
type txlateCompiled struct {
	pairs, probes, refused int
	skipped                map[string]int
}

func usesCTState(p *ir.Program) bool {
	for _, r := range p.Rules {
		for _, m := range r.Matches {
			if _, ok := m.(ir.CTState); ok {
				return true
			}
		}
	}
	return false
}

// shortIPHeader: BPF_PROG_TEST_RUN refuses an skb whose ethertype
// promises an IP header the frame does not hold.
func shortIPHeader(data []byte) bool {
	switch binary.BigEndian.Uint16(data[12:]) {
	case 0x0800:
		return len(data) < 14+20
	case 0x86dd:
		return len(data) < 14+40
	}
	return false
}

// load compiles and loads both programs for chain's hook; ok is false
// (and the reason counted) when either does not compile.
func (c *txlateCompiled) load(t *testing.T, pr *txlatePair, chain string, progs ...*ir.Program) ([]*loader.Loaded, bool) {
	// xdp, or tc-ingress for what xdp cannot see (marks, packet types,
	// conntrack); tc-egress for OUTPUT.
	hooks := []codegen.Hook{codegen.HookXDP, codegen.HookTCIngress}
	if chain == "OUTPUT" {
		hooks = []codegen.Hook{codegen.HookTCEgress}
	}
	var out []*loader.Loaded
	for i, p := range progs {
		var cp *codegen.Program
		var err error
		for _, h := range hooks {
			if cp, err = codegen.Compile(p, codegen.Options{Trace: true, Hook: h}); err == nil {
				break
			}
		}
		if err != nil {
			c.skipped[skipReason([]string{"iptables", "nft"}[i]+" compile", err)]++
			closeAll(out)
			return nil, false
		}
		l, err := loader.Load(cp, loader.Options{})
		if err != nil {
			t.Errorf("%s: load: %v", pr.pos, err)
			closeAll(out)
			return nil, false
		}
		out = append(out, l)
	}
	return out, true
}

func closeAll(ls []*loader.Loaded) {
	for _, l := range ls {
		l.Close()
	}
}

// comparePair compares one pair. It returns why the pair was skipped
// ("" when compared), the probes compared and the probes excluded by
// reason; disagreements are test errors. With c, the compiled programs
// are run on the probes too.
func comparePair(t *testing.T, pr *txlatePair, c *txlateCompiled) (skip string, nprobes int, excluded map[string]int) {
	t.Helper()
	var fam rules.Family
	switch pr.tool {
	case "iptables":
		fam = rules.IPv4
	case "ip6tables":
		fam = rules.IPv6
	default:
		return "not an ip or ip6 rule (" + pr.tool + ")", 0, nil
	}
	iptText, chain, ok := iptablesText(pr.args)
	if !ok {
		return "not a rule command", 0, nil
	}
	nftSrc, ok := nftText(pr.nft, chain)
	if !ok {
		return "nft side is not one rule", 0, nil
	}
	rs, err := iptables.Parse(pr.pos, []byte(iptText), iptables.Options{Family: fam, ForceFamily: true})
	if err != nil {
		return skipReason("iptables parse", err), 0, nil
	}
	ipt, err := ir.Lower(rs, ir.LowerOptions{Chain: chain})
	if err != nil {
		return skipReason("iptables lower", err), 0, nil
	}
	nrs, err := nft.Parse(pr.pos, []byte(nftSrc), nft.Options{Family: fam})
	if err != nil {
		return skipReason("nft parse", err), 0, nil
	}
	nfp, err := ir.Lower(nrs, ir.LowerOptions{Chain: chain})
	if err != nil {
		return skipReason("nft lower", err), 0, nil
	}
	if err := ir.Verify(nfp); err != nil {
		t.Errorf("%s: nft program does not verify: %v\n%s", pr.pos, err, nftSrc)
	}
	meta := model.Meta{InIface: "eth0", OutIface: "eth1"}
	switch chain {
	case "INPUT":
		meta.OutIface = ""
	case "OUTPUT":
		meta.InIface = ""
	}
	loads := false
	for _, r := range nfp.Rules {
		for _, m := range r.Matches {
			if _, ok := m.(ir.Transport); ok {
				loads = true
			}
		}
	}
	excluded = map[string]int{}
	var loaded []*loader.Loaded
	if c != nil {
		var ok bool
		if loaded, ok = c.load(t, pr, chain, ipt, nfp); !ok {
			return "not compiled", 0, nil
		}
		defer closeAll(loaded)
		c.pairs++
	}
	ct := usesCTState(ipt) || usesCTState(nfp)
	bad := 0
	for _, a := range txlateProbes([]*ir.Program{ipt, nfp}, meta, 200) {
		vi, err1 := txlateEval(ipt, a.Frame, a.Meta)
		vn, err2 := txlateEval(nfp, a.Frame, a.Meta)
		if err1 != nil || err2 != nil {
			t.Fatalf("%s: decode: %v %v", pr.pos, err1, err2)
		}
		nprobes++
		// Run receives a frame on lo: it cannot show the fate of one
		// whose IP-layer checks depend on the device, nor the class
		// eth_type_trans gives a group address there (lo's broadcast
		// address is zero), which the probe's meta does not follow.
		runnable := a.Frame[0]&1 == 0 && (chain == "OUTPUT" || !loader.LoopbackOnly(a.Frame))
		if loaded != nil && expectedDifference(pr, vi, vn, loads) == "" && runnable {
			c.probes++
			iface := a.Meta.InIface
			if chain == "OUTPUT" {
				iface = a.Meta.OutIface
			}
			var vs []ir.Verdict
			for _, l := range loaded {
				o, err := l.Run(a.Frame, iface)
				if err != nil && l.Program.Hook != codegen.HookXDP && errors.Is(err, unix.EINVAL) && shortIPHeader(a.Frame) {
					break // a tc test run refuses it; xdp runs have such frames
				}
				if err != nil {
					t.Fatalf("%s: test run of %d bytes on %s (%s): %v", pr.pos, len(a.Frame), iface, chain, err)
				}
				vs = append(vs, o.Verdict)
			}
			if len(vs) < 2 {
				c.probes--
				c.refused++
				continue
			}
			// A compiled REJECT may show as a drop to the test run. A
			// conntrack state comes from the kernel's table, which a test
			// run's packet is not in: ir.Eval's probe has none to agree
			// with, and only the two programs are compared.
			evalOK := vs[0] == vi.verdict || vi.verdict == ir.VerdictReject && vs[0] == ir.VerdictDrop || ct
			if vs[0] != vs[1] || !evalOK {
				if bad++; bad <= 3 {
					t.Errorf("%s: %s %s\n  nft %s\n  packet %+v\n  compiled iptables %v, compiled nft %v, ir.Eval %v",
						pr.pos, pr.tool, pr.args, strings.Join(pr.nft, "; "), *vi.pkt, vs[0], vs[1], vi.verdict)
				}
			}
		}
		if c != nil {
			continue // the ir comparison is TestTxlatePairs'
		}
		if vi.verdict == vn.verdict && vi.matched == vn.matched {
			continue
		}
		if why := expectedDifference(pr, vi, vn, loads); why != "" {
			excluded[why]++
			continue
		}
		if bad++; bad <= 3 {
			t.Errorf("%s: %s %s\n  nft %s\n  packet %+v\n  iptables: %s (matched %v)\n  nft:      %s (matched %v)",
				pr.pos, pr.tool, pr.args, strings.Join(pr.nft, "; "), *vi.pkt, vi.res, vi.matched, vn.res, vn.matched)
		}
	}
	return "", nprobes, excluded
}
