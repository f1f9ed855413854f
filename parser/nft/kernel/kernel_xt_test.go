package kernel

import (
	"fmt"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/google/nftables"

	"bpfwall/internal/testenv"
	"bpfwall/parser/iptables"
	"bpfwall/parser/nft"
	"bpfwall/rules"
)

// xtRules4 and xtRules6 use every xtables extension Read decodes,
// with their options and negations; iptables-nft installs the ones it has
// no native expression for as xt matches and targets.
const xtRules4 = `*filter
:INPUT ACCEPT [0:0]
:FORWARD DROP [0:0]
:OUTPUT ACCEPT [0:0]
:ssh - [0:0]
-A INPUT -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT
-A INPUT -m conntrack ! --ctstate INVALID,UNTRACKED,SNAT --ctproto 6 --ctdir REPLY -j ACCEPT
-A INPUT -m conntrack --ctstate NEW --ctorigsrc 10.0.0.0/8 ! --ctorigdst 192.0.2.0/24 --ctrepldstport 1000:2000 --ctstatus ASSURED,SEEN_REPLY ! --ctexpire 10:20 -j ACCEPT
-A INPUT -m conntrack ! --ctstatus NONE -j ACCEPT
-A INPUT -m state --state NEW,RELATED -j ACCEPT
-A INPUT -m state ! --state INVALID -j ACCEPT
-A INPUT -p tcp -m tcp --sport 1024:65535 --dport 22 ! --tcp-option 2 -j ssh
-A INPUT -p tcp -m multiport ! --sports 1:1023,8080 -j DROP
-A INPUT -p udp -m multiport --ports 53,67:68,123 -j ACCEPT
-A INPUT -p sctp -m sctp --sport 1:1024 ! --dport 80 -j DROP
-A INPUT -p sctp -m sctp --dport 0:65535 -j ACCEPT
-A INPUT -p icmp -m icmp --icmp-type 3/4 -j ACCEPT
-A INPUT -p icmp -m icmp ! --icmp-type 8 -j DROP
-A INPUT -p icmp -m icmp --icmp-type any -j ACCEPT
-A INPUT -m comment --comment "a \"quoted\" comment\\" -j ACCEPT
-A INPUT -m iprange ! --src-range 10.0.0.1-10.0.0.9 --dst-range 192.0.2.0-192.0.2.255 -j DROP
-A INPUT -m length ! --length 1000:65535 -j ACCEPT
-A INPUT -m ttl ! --ttl-eq 64 -j DROP
-A INPUT -m ttl --ttl-gt 200 -j DROP
-A INPUT -m mac ! --mac-source 02:00:00:00:00:01 -j DROP
-A INPUT -m mark ! --mark 0x10/0xf0 -j DROP
-A INPUT -m pkttype ! --pkt-type broadcast -j DROP
-A INPUT -m addrtype ! --src-type LOCAL --dst-type LOCAL,BROADCAST --limit-iface-in -j ACCEPT
-A INPUT -m recent --rcheck --seconds 60 --hitcount 4 --rttl --name SSH --mask 255.255.255.255 --rsource -j DROP
-A INPUT -m recent ! --update --seconds 10 --reap --name other --mask 255.255.255.0 --rdest
-A INPUT -m recent --set --name DEFAULT --mask 255.255.255.255 --rsource
-A INPUT -m hashlimit --hashlimit-upto 100/min --hashlimit-burst 20 --hashlimit-mode srcip,dstport --hashlimit-name web --hashlimit-htable-expire 30000 --hashlimit-srcmask 24 -j ACCEPT
-A INPUT -m hashlimit --hashlimit-above 7/hour --hashlimit-name slow --hashlimit-htable-size 512 --hashlimit-htable-max 1024 --hashlimit-htable-gcinterval 500 -j DROP
-A INPUT -p tcp -j REJECT --reject-with tcp-reset
-A INPUT -j LOG --log-prefix "in: " --log-level 6 --log-tcp-sequence --log-ip-options --log-uid
-A INPUT -j LOG
-A INPUT -j REJECT --reject-with icmp-admin-prohibited
-A INPUT -j REJECT
-A OUTPUT -m owner --uid-owner 0-10 ! --gid-owner 5 -j ACCEPT
-A OUTPUT -m owner ! --socket-exists -j DROP
-A INPUT -p tcp -m tcp --dport 80 -m connlimit --connlimit-above 20 --connlimit-mask 24 --connlimit-saddr -j REJECT --reject-with tcp-reset
-A INPUT -m connlimit --connlimit-upto 3 --connlimit-mask 32 --connlimit-daddr -j ACCEPT
-A OUTPUT -p tcp -m tcp --tcp-flags SYN,RST SYN -j TCPMSS --clamp-mss-to-pmtu
-A ssh -p udp -m udp ! --dport 53 -j RETURN
-A ssh -p tcp -m tcp ! --tcp-flags SYN,RST,ACK SYN -j DROP
COMMIT
`

const xtRules6 = `*filter
:INPUT DROP [0:0]
:FORWARD ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
-A INPUT -m conntrack --ctstate ESTABLISHED -j ACCEPT
-A INPUT -p ipv6-icmp -m icmp6 --icmpv6-type 1/3 -j ACCEPT
-A INPUT -p ipv6-icmp -m icmp6 ! --icmpv6-type 128 -j ACCEPT
-A INPUT -m hl --hl-lt 2 -j DROP
-A INPUT -p sctp -m sctp ! --sport 5060 -j DROP
-A INPUT -m iprange --src-range 2001:db8::1-2001:db8::ff -j DROP
-A INPUT -m recent --update --seconds 30 --name v6 --mask ffff:ffff:ffff:ffff:: --rsource -j DROP
-A INPUT -m hashlimit --hashlimit-above 3/sec --hashlimit-mode srcip --hashlimit-name h6 --hashlimit-srcmask 64 -j DROP
-A INPUT -p tcp -j REJECT --reject-with tcp-reset
-A INPUT -j REJECT --reject-with icmp6-adm-prohibited
-A INPUT -j REJECT
COMMIT
`

// xtRulesMangle has TPROXY, which only mangle PREROUTING takes, and the
// mangle and nat targets bpfwall reads without compiling them.
const xtRulesMangle = `*mangle
:PREROUTING ACCEPT [0:0]
:INPUT ACCEPT [0:0]
:FORWARD ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
:POSTROUTING ACCEPT [0:0]
-A PREROUTING -p tcp -m tcp --dport 80 -j TPROXY --on-port 8080 --on-ip 127.0.0.1 --tproxy-mark 0x1/0x1
-A PREROUTING -p udp -j TPROXY --on-port 53 --tproxy-mark 0x2/0xff
-A PREROUTING -p tcp -j TPROXY --on-port 443
-A PREROUTING -m rpfilter --loose --invert -j DROP
-A PREROUTING -j CONNMARK --restore-mark --nfmask 0xff --ctmask 0xff
-A OUTPUT -j MARK --set-xmark 0x1/0xffffffff
-A OUTPUT -j CONNMARK --set-xmark 0x2/0xf
-A POSTROUTING -p udp -m udp --dport 68 -j CHECKSUM --checksum-fill
-A POSTROUTING -j DSCP --set-dscp 0x2e
-A POSTROUTING -p tcp -m tcp --tcp-flags SYN,RST SYN -j TCPMSS --set-mss 1400
-A OUTPUT -m connmark ! --mark 0x1/0xf -j DROP
-A FORWARD -m physdev --physdev-in veth+ ! --physdev-out eth0 --physdev-is-bridged -j ACCEPT
COMMIT
*nat
:PREROUTING ACCEPT [0:0]
:INPUT ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
:POSTROUTING ACCEPT [0:0]
-A PREROUTING -p tcp -m tcp --dport 80 -j DNAT --to-destination 10.0.0.2:8080
-A PREROUTING -p tcp -m tcp --dport 81 -j REDIRECT --to-ports 3128
-A OUTPUT -p tcp -j DNAT --to-destination 10.0.0.3-10.0.0.9:1000-2000 --random --persistent
-A POSTROUTING -o eth0 -j MASQUERADE
-A POSTROUTING -p udp -o eth1 -j MASQUERADE --to-ports 1024-2048 --random-fully
-A POSTROUTING -s 10.1.0.0/16 -j SNAT --to-source 198.51.100.1
COMMIT
`

// xtRulesRaw has the raw table's CT target.
const xtRulesRaw = `*raw
:PREROUTING ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
-A PREROUTING -p tcp -m tcp --dport 21 -j CT --helper ftp
-A PREROUTING -p udp -m udp --dport 53 -j CT --notrack
-A OUTPUT -j CT --zone 7
COMMIT
`

// xtRulesSets name ipsets (xtSets): xt set matches name them by the
// kernel's index.
const xtRulesSets = `*filter
:INPUT ACCEPT [0:0]
:FORWARD ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
-A INPUT -m set --match-set blocked src -j DROP
-A INPUT -m set ! --match-set allowed dst -j DROP
-A INPUT -m set --match-set pairs src,dst ! --update-counters ! --update-subcounters -j ACCEPT
-A INPUT -m set --match-set blocked dst --return-nomatch -j ACCEPT
COMMIT
`

const xtSets = `create blocked hash:net family inet hashsize 1024 maxelem 65536
add blocked 10.9.0.0/16
create allowed hash:ip family inet hashsize 1024 maxelem 65536
add allowed 192.0.2.7
create pairs hash:ip,port family inet hashsize 1024 maxelem 65536
`

// TestReadKernelXT loads rule sets with iptables-nft-restore and reads them
// back with Read: the model must print as iptables-save text exactly
// as the model of the same input given to the iptables parser (with the
// same ipsets), and the
// kernel must have held each extension as an xt match or target (so that
// the decoders were what read them).
func TestReadKernelXT(t *testing.T) {
	testenv.RequireRoot(t)
	testenv.RequireTool(t, "iptables-nft-restore", "ip6tables-nft-restore")
	for _, tc := range []struct {
		fam   rules.Family
		tool  string
		text  string
		wantX []string
		sets  string // ipset restore input
		// rulesOnly compares the rules, not the tables: the model holds
		// a mangle table's hooks other than pre- and postrouting in
		// filter's.
		rulesOnly bool
	}{
		{rules.IPv4, "iptables-nft-restore", xtRules4, []string{
			"match conntrack", "match state", "match tcp", "match multiport", "match sctp", "match icmp", "match comment", "match iprange",
			"match length", "match ttl", "match mac", "match pkttype", "match addrtype", "match recent", "match hashlimit",
			"target REJECT", "target LOG", "match owner", "target TCPMSS", "match connlimit"}, "", false},
		{rules.IPv6, "ip6tables-nft-restore", xtRules6, []string{
			"match conntrack", "match icmp6", "match hl", "match sctp", "match iprange", "match recent", "match hashlimit", "target REJECT"}, "", false},
		{rules.IPv4, "iptables-nft-restore", xtRulesSets, []string{"match set"}, xtSets, false},
		{rules.IPv4, "iptables-nft-restore", xtRulesMangle, []string{"target TPROXY", "match rpfilter", "target CONNMARK", "target MARK",
			"target CHECKSUM", "target DSCP", "target TCPMSS", "match connmark", "match physdev", "target DNAT", "target REDIRECT", "target MASQUERADE", "target SNAT"}, "", true},
		{rules.IPv4, "iptables-nft-restore", xtRulesRaw, []string{"target CT"}, "", true},
	} {
		name := tc.fam.String()
		if tc.sets != "" {
			name += "/ipset"
			testenv.RequireTool(t, "ipset")
		}
		if tc.rulesOnly {
			name += "/" + strings.TrimPrefix(strings.Fields(tc.text)[0], "*")
		}
		t.Run(name, func(t *testing.T) {
			var got *rules.Ruleset
			var text []byte
			var err error
			var sets map[string]*rules.IPSet
			if tc.sets != "" {
				if sets, err = iptables.ParseIPSets("sets", []byte(tc.sets)); err != nil {
					t.Fatal(err)
				}
			}
			testenv.InFreshNetns(t, func() {
				if tc.sets != "" {
					cmd := exec.Command("ipset", "restore")
					cmd.Stdin = strings.NewReader(tc.sets)
					if out, err := cmd.CombinedOutput(); err != nil {
						t.Errorf("ipset restore: %v\n%s", err, out)
						return
					}
				}
				cmd := exec.Command(tc.tool)
				cmd.Stdin = strings.NewReader(tc.text)
				if out, err := cmd.CombinedOutput(); err != nil {
					t.Errorf("%s: %v\n%s", tc.tool, err, out)
					return
				}
				conn, cerr := nftables.New()
				if cerr != nil {
					t.Error(cerr)
					return
				}
				text, _, err = kernelText(conn, &xtListing{})
				conn.CloseLasting()
				if err == nil {
					got, err = Read(nft.Options{Family: tc.fam, IPSets: func() (map[string]*rules.IPSet, error) { return sets, nil }})
				}
			})
			if t.Failed() {
				return
			}
			if err != nil {
				t.Fatalf("Read: %v", err)
			}
			seen := map[string]bool{}
			for _, m := range regexp.MustCompile(`xt (match|target) (\S+)`).FindAllStringSubmatch(string(text), -1) {
				seen[m[1]+" "+m[2]] = true
			}
			for _, w := range tc.wantX {
				if !seen[w] {
					t.Errorf("the kernel did not hold xt %s; its rule set reads\n%s", w, text)
				}
			}
			want, err := iptables.Parse("rules", []byte(tc.text), iptables.Options{Family: tc.fam, ForceFamily: true, Sets: sets})
			if err != nil {
				t.Fatal(err)
			}
			if tc.rulesOnly {
				// The model orders hooks, not tables; it has no nat
				// table, whose targets the kernel text must show as
				// the input has them.
				if nat := want.Table("nat"); nat != nil {
					for _, c := range nat.Chains {
						for _, r := range c.Rules {
							_, opts, _ := strings.Cut(r.Spec(), " -j "+r.Target.Name()+" ")
							if w := fmt.Sprintf("xt target %s %q", r.Target.Name(), opts); !strings.Contains(string(text), w) {
								t.Errorf("the kernel text has no %s", w)
							}
						}
					}
					want.Tables = slices.DeleteFunc(want.Tables, func(t *rules.Table) bool { return t.Name == "nat" })
				}
			}
			g, w := string(got.Save(rules.SaveOptions{})), string(want.Save(rules.SaveOptions{}))
			if tc.rulesOnly {
				g, w = ruleLines(g), ruleLines(w)
			}
			if g != w {
				t.Errorf("read from the kernel:\n%s\nthe iptables parser's:\n%s\nkernel text:\n%s", g, w, text)
			}
		})
	}
}

// ruleLines is the "-A" lines of iptables-save text, sorted.
func ruleLines(save string) string {
	var out []string
	for _, l := range strings.Split(save, "\n") {
		if strings.HasPrefix(l, "-A ") {
			out = append(out, l)
		}
	}
	slices.Sort(out)
	return strings.Join(out, "\n")
}

// TestReadKernelXTRefuses: an xt match or target, or an option of one,
// that bpfwall does not model is an error naming the kernel's rule and
// the extension, never a rule read without it.
func TestReadKernelXTRefuses(t *testing.T) {
	testenv.RequireRoot(t)
	testenv.RequireTool(t, "iptables-nft-restore")
	for _, tc := range []struct{ rule, want string }{
		{"-A INPUT -m statistic --mode nth --every 2 --packet 0 -j DROP", "kernel:ip filter/INPUT/handle 4: xt match statistic (revision 0) is not supported"},
		{"-A INPUT -m hashlimit --hashlimit-above 1kb/s --hashlimit-name b -j DROP", "xt match hashlimit: a byte rate is not supported"},
		{"-A INPUT -p sctp -m sctp --chunk-types any INIT -j DROP", "xt match sctp: --chunk-types is not supported"},
		{"-A OUTPUT -j CLASSIFY --set-class 1:1", "kernel:ip filter/OUTPUT/handle 4: xt target CLASSIFY (revision 0) is not supported"},
	} {
		var err error
		var ok bool
		testenv.InFreshNetns(t, func() {
			cmd := exec.Command("iptables-nft-restore")
			cmd.Stdin = strings.NewReader("*filter\n:INPUT ACCEPT [0:0]\n:FORWARD ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n" + tc.rule + "\nCOMMIT\n")
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Errorf("%s: iptables-nft-restore: %v\n%s", tc.rule, err, out)
				return
			}
			ok = true
			_, err = Read(nft.Options{})
		})
		if ok && (err == nil || !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%s: Read: %v, want %q", tc.rule, err, tc.want)
		}
	}
}

// TestXtListing: nft's listing of an xt match has no options; reading it
// from a file says so, and where the options are, instead of guessing.
func TestXtListing(t *testing.T) {
	src := "table ip filter {\n\tchain INPUT {\n\t\ttype filter hook input priority filter; policy accept;\n\t\txt match recent counter packets 0 bytes 0\n\t}\n}\n"
	_, err := nft.Parse("listing", []byte(src), nft.Options{})
	if err == nil || !strings.Contains(err.Error(), "listing:4:3: xt match recent is an xtables extension") || !strings.Contains(err.Error(), "--from-kernel") {
		t.Errorf("Parse: %v", err)
	}
	// The options form is Read's own: a file may not use it.
	src = strings.Replace(src, "xt match recent", `xt match recent "--set --name x --rsource"`, 1)
	if _, err := nft.Parse("listing", []byte(src), nft.Options{}); err == nil {
		t.Errorf("Parse took xt options from a file")
	}
	// From the kernel's listing, the options are read as iptables reads them.
	rs, err := nft.ParseListing("kernel", []byte(src), nft.Options{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	in := rs.Table("filter").Chain("INPUT")
	if len(in.Rules) != 1 || !slices.ContainsFunc(in.Rules[0].Matches, func(m rules.Match) bool {
		r, ok := m.(*rules.Recent)
		return ok && r.Command == rules.RecentSet && r.Table == "x"
	}) {
		t.Errorf("INPUT reads as %+v", in.Rules)
	}
}
