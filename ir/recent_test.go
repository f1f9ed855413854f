package ir_test

import (
	"fmt"
	"maps"
	"net/netip"
	"strings"
	"testing"

	"bpfwall/ir"
	"bpfwall/model"
	"bpfwall/parser/iptables"
	"bpfwall/rules"
)

// recentStep is one packet at a time (jiffies) and the outcome it must
// have ("ACCEPT r1", "DROP policy").
type recentStep struct {
	at       uint64
	src, dst string
	ttl      int // 64 when 0; ttlZero for 0
	want     string
}

const ttlZero = -1

// runRecent lowers INPUT of text and sends the steps through one State.
func runRecent(t *testing.T, chain, text string, steps []recentStep) *ir.State {
	t.Helper()
	fam := rules.IPv4
	if strings.Contains(text, "::") {
		fam = rules.IPv6
	}
	p := lowerText(t, fam, chain, text)
	st := &ir.State{}
	for i, s := range steps {
		st.Jiffies = s.at
		dst := s.dst
		if dst == "" {
			dst = "10.9.9.9"
			if fam == rules.IPv6 {
				dst = "2001:db8:9::9"
			}
		}
		ttl := uint8(s.ttl)
		switch s.ttl {
		case 0:
			ttl = 64
		case ttlZero:
			ttl = 0
		}
		pkt := &model.Packet{Family: fam, Src: netip.MustParseAddr(s.src), Dst: netip.MustParseAddr(dst), TTL: ttl, Proto: 17, Length: 100}
		if got := outcome(p.EvalState(st, pkt)); got != s.want {
			t.Fatalf("step %d (%+v): got %s, want %s", i, s, got, s.want)
		}
	}
	return st
}

const recentHead = "*filter\n:INPUT ACCEPT [0:0]\n:FORWARD ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n"

// TestRecent follows recent_mt case by case.
func TestRecent(t *testing.T) {
	const s = 250 // jiffies per second at HZ 250
	const t0 = 1 << 32
	a, b := "10.0.0.1", "10.0.0.2"
	cases := []struct {
		name  string
		rules string
		steps []recentStep
	}{
		{"ssh: the fourth hit in 60 s is dropped, and dropping stamps again",
			"-A INPUT -m recent --set --name SSH\n-A INPUT -m recent --update --seconds 60 --hitcount 4 --name SSH -j DROP\n",
			[]recentStep{
				{t0, a, "", 0, "ACCEPT policy"}, {t0 + 1, a, "", 0, "ACCEPT policy"}, {t0 + 2, a, "", 0, "ACCEPT policy"},
				{t0 + 3, a, "", 0, "DROP r1"}, {t0 + 3, b, "", 0, "ACCEPT policy"},
				// 60 s after the third: its stamp, the two of the fourth
				// (set and update) and this packet's are in the window.
				{t0 + 2 + 60*s, a, "", 0, "DROP r1"},
				// 61 s on, only this packet's own set stamp counts.
				{t0 + 3 + 121*s, a, "", 0, "ACCEPT policy"},
			}},
		{"rcheck without seconds holds while the address is listed; remove takes it out",
			"-A INPUT -s 10.0.0.9 -m recent --set\n-A INPUT -d 10.0.0.7 -m recent --remove -j ACCEPT\n-A INPUT -m recent --rcheck -j DROP\n",
			[]recentStep{
				{t0, a, "", 0, "ACCEPT policy"},
				{t0 + 1, "10.0.0.9", "", 0, "DROP r2"}, // set, then rcheck finds it
				{t0 + 1e9, "10.0.0.9", "", 0, "DROP r2"},
				{t0 + 1e9, "10.0.0.9", "10.0.0.7", 0, "ACCEPT r1"},     // set, remove
				{t0 + 1e9, "10.0.0.8", "10.0.0.7", 0, "ACCEPT policy"}, // not listed: remove fails
			}},
		{"rttl: the TTL of the last set must match, unless either is 0",
			"-A INPUT -s 10.0.0.0/24 -m recent --set --name T\n-A INPUT -m recent --rcheck --rttl --name T -j DROP\n-A INPUT -m recent --rcheck --name T -j REJECT\n",
			[]recentStep{
				{t0, a, "", 64, "DROP r1"},
				{t0, "10.0.1.1", "", 64, "ACCEPT policy"},
				{t0 + 1, "10.0.0.1", "", 63, "DROP r1"}, // the set records 63 first
				{t0 + 2, "10.0.0.3", "", 10, "DROP r1"},
			}},
		{"rttl on update: a packet with another TTL does not find the entry",
			"-A INPUT -s 10.0.0.1 -p 17 -m recent --set --name T\n-A INPUT -s 10.0.0.2 -m recent --update --rttl --name T --rdest -j DROP\n",
			[]recentStep{
				{t0, b, "", 0, "ACCEPT policy"},  // not listed
				{t0, a, "", 50, "ACCEPT policy"}, // 10.0.0.1 with TTL 50
				{t0, b, a, 51, "ACCEPT policy"},  // dest 10.0.0.1, TTL 51: no entry
				{t0, b, a, 50, "DROP r1"},        // TTL 50
				{t0, b, a, ttlZero, "DROP r1"},   // TTL 0 finds any, and records 0
				{t0, b, a, 99, "DROP r1"},        // the entry's TTL 0 matches any
			}},
		{"mask: a /24 is one entry",
			"-A INPUT -s 10.0.0.1 -m recent --set --mask 255.255.255.0\n-A INPUT -m recent --rcheck --mask 255.255.255.0 -j DROP\n",
			[]recentStep{
				{t0, "10.0.0.200", "", 0, "ACCEPT policy"},
				{t0, a, "", 0, "DROP r1"},
				{t0, "10.0.0.200", "", 0, "DROP r1"},
				{t0, "10.0.1.200", "", 0, "ACCEPT policy"},
			}},
		{"inverted: ! --rcheck holds for an unlisted address; ! --set never holds but sets",
			"-A INPUT -s 10.0.0.1 -m recent ! --set -j DROP\n-A INPUT -m recent ! --rcheck --seconds 1 -j DROP\n",
			[]recentStep{
				{t0, b, "", 0, "DROP r1"},
				{t0, a, "", 0, "ACCEPT policy"},
				{t0 + s, a, "", 0, "ACCEPT policy"},
				{t0 + s, b, "", 0, "DROP r1"},
			}},
		{"! --update stamps when the hit test fails (ret includes the inversion)",
			"-A INPUT -s 10.0.0.1 -d 10.9.9.9 -m recent --set\n-A INPUT -m recent ! --update --seconds 1 --hitcount 2 -j DROP\n-A INPUT -m recent --rcheck --seconds 1 --hitcount 3 -j REJECT\n",
			[]recentStep{
				{t0, a, "", 0, "DROP r1"},                   // one stamp: fails, inverted holds, stamps (2)
				{t0 + 1, a, "10.1.1.1", 0, "ACCEPT policy"}, // two stamps: holds, inverted fails, no stamp; rcheck 3 fails
				{t0 + 2, a, "", 0, "REJECT r2"},             // set (3): update holds, inverted fails; rcheck counts 3
			}},
		{"seconds*HZ is u32: 17179870 s wraps to 204 jiffies",
			"-A INPUT -s 10.0.0.1 -m recent --set\n-A INPUT -s 10.0.0.2 -m recent --rcheck --seconds 17179870 --rdest -j DROP\n",
			[]recentStep{
				{t0, a, "", 0, "ACCEPT policy"},
				{t0 + 204, b, a, 0, "DROP r1"},
				{t0 + 205, b, a, 0, "ACCEPT policy"},
			}},
		{"reap removes the least recently updated entry once its last stamp is out of the window",
			"-A INPUT -s 10.0.0.1 -d 10.9.9.9 -m recent --set\n-A INPUT -s 10.0.0.2 -d 10.9.9.9 -m recent --set\n-A INPUT -d 10.0.0.0/24 -m recent --rcheck --seconds 10 --reap --rdest\n-A INPUT -m recent --rcheck -j DROP\n",
			[]recentStep{
				{t0, a, "", 0, "DROP r3"},
				{t0 + 5*s, b, "", 0, "DROP r3"},
				{t0 + 11*s, "10.0.0.3", "10.0.0.4", 0, "ACCEPT policy"}, // not listed: no reap
				{t0 + 11*s, a, "10.1.1.1", 0, "DROP r3"},
				{t0 + 11*s, "10.0.0.3", b, 0, "ACCEPT policy"}, // b is listed: reaps a, the head
				{t0 + 11*s, a, "10.1.1.1", 0, "ACCEPT policy"},
				{t0 + 11*s, b, "10.1.1.1", 0, "DROP r3"},
				// b is the head now, and within the window: kept.
				{t0 + 15*s, "10.0.0.3", b, 0, "ACCEPT policy"},
				{t0 + 15*s, b, "10.1.1.1", 0, "DROP r3"},
				{t0 + 15*s + 1, "10.0.0.3", b, 0, "ACCEPT policy"}, // b's last stamp is out: reaped
				{t0 + 15*s + 1, b, "10.1.1.1", 0, "ACCEPT policy"},
			}},
		{"reap keeps the entry an update is about to stamp",
			"-A INPUT -s 10.0.0.1 -d 10.9.9.9 -m recent --set\n-A INPUT -d 10.0.0.1 -m recent --update --seconds 10 --reap --rdest\n-A INPUT -m recent --rcheck -j DROP\n",
			[]recentStep{
				{t0, a, "", 0, "DROP r2"},
				{t0 + 5*s, "10.0.0.3", a, 0, "ACCEPT policy"},  // a is the head, in the window: updated
				{t0 + 15*s, "10.0.0.3", a, 0, "ACCEPT policy"}, // a is the head, stamped at t0+5s: holds, updated, kept
				{t0 + 15*s, a, "10.1.1.1", 0, "DROP r2"},
				{t0 + 26*s, "10.0.0.3", a, 0, "ACCEPT policy"}, // out of the window: fails, reaped
				{t0 + 26*s, a, "10.1.1.1", 0, "ACCEPT policy"},
			}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			runRecent(t, "INPUT", recentHead+tc.rules+"COMMIT\n", tc.steps)
		})
	}
}

// TestRecentEviction: a table holds ip_list_tot (100) addresses; a new one
// evicts the least recently updated (recent_entry_init), which an update
// moves to the end (recent_entry_update).
func TestRecentEviction(t *testing.T) {
	text := recentHead + "-A INPUT -d 10.9.9.9 -m recent --set\n-A INPUT -d 10.9.9.8 -m recent --update\n-A INPUT -m recent --rcheck -j DROP\nCOMMIT\n"
	src := func(i int) string { return fmt.Sprintf("10.0.%d.%d", i/200, i%200+1) }
	var steps []recentStep
	for i := range ir.RecentListTot {
		steps = append(steps, recentStep{uint64(i), src(i), "", 0, "DROP r2"})
	}
	steps = append(steps,
		recentStep{200, src(0), "10.9.9.8", 0, "DROP r2"},        // 0 is now the most recently updated
		recentStep{201, src(ir.RecentListTot), "", 0, "DROP r2"}, // evicts 1
		recentStep{202, src(1), "10.1.1.1", 0, "ACCEPT policy"},
		recentStep{202, src(0), "10.1.1.1", 0, "DROP r2"},
		recentStep{202, src(2), "10.1.1.1", 0, "DROP r2"},
		recentStep{203, src(ir.RecentListTot + 1), "", 0, "DROP r2"}, // evicts 2
		recentStep{204, src(2), "10.1.1.1", 0, "ACCEPT policy"},
		recentStep{204, src(3), "10.1.1.1", 0, "DROP r2"},
	)
	st := runRecent(t, "INPUT", text, steps)
	es := st.RecentEntries(0)
	if len(es) != ir.RecentListTot {
		t.Fatalf("%d entries, want %d", len(es), ir.RecentListTot)
	}
	if es[0].Addr.String() != src(3) || es[len(es)-1].Addr.String() != src(ir.RecentListTot+1) {
		t.Errorf("least recently updated %s, most %s", es[0].Addr, es[len(es)-1].Addr)
	}
}

// TestRecentRing: an entry keeps its last 32 stamps (a table with a
// --set rule and no larger --hitcount), index wrapping as
// recent_entry_update's does.
func TestRecentRing(t *testing.T) {
	text := recentHead + "-A INPUT -m recent --set\n-A INPUT -m recent --rcheck --hitcount 32 --seconds 1 -j DROP\nCOMMIT\n"
	var steps []recentStep
	for i := range 40 {
		want := "ACCEPT policy"
		if i >= 31 {
			want = "DROP r1"
		}
		steps = append(steps, recentStep{uint64(1000 + i), "10.0.0.1", "", 0, want})
	}
	// The ring holds 1008..1039; 1258 replaces 1008 (the window starts
	// at 1008: 32 hits), 1262 replaces 1009 (the window starts at 1012:
	// 30 hits).
	steps = append(steps, recentStep{1258, "10.0.0.1", "", 0, "DROP r1"}, recentStep{1262, "10.0.0.1", "", 0, "ACCEPT policy"})
	st := runRecent(t, "INPUT", text, steps)
	e := st.RecentEntries(0)[0]
	if len(e.Stamps) != 32 || e.NStamps != 32 || e.Index != 10 || e.Stamps[9] != 1262 || e.Stamps[10] != 1010 {
		t.Errorf("entry %+v", e)
	}
}

func TestRecentStamps(t *testing.T) {
	for hits, want := range map[uint32]int{0: 32, 1: 1, 4: 4, 5: 8, 32: 32, 33: 64, 348: 512, 65535: 65536} {
		if got := ir.RecentStamps(hits); got != want {
			t.Errorf("RecentStamps(%d) = %d, want %d", hits, got, want)
		}
	}
}

// TestRecentLowerErrors: what bpfwall cannot compile exactly is refused
// at the match.
func TestRecentLowerErrors(t *testing.T) {
	cases := []struct {
		name, chain, rules, want string
	}{
		{"shared chain", "INPUT", "-N c\n-A INPUT -j c\n-A FORWARD -j c\n-A c -m recent --set\n",
			"rules:8:7: recent match in chain c, which chain FORWARD also reaches"},
		{"name used by another hook", "INPUT", "-A INPUT -m recent --set --name x\n-A FORWARD -m recent --rcheck --name x\n",
			`rules:5:11: recent table "x" is also used at rules:6:13`},
		{"two masks", "INPUT", "-A INPUT -m recent --set --mask 255.0.0.0\n-A INPUT -m recent --rcheck\n",
			`rules:6:11: recent table "DEFAULT" has --mask 255.255.255.255 here and 255.0.0.0 at rules:5:11`},
		{"rttl in OUTPUT", "OUTPUT", "-A OUTPUT -m recent --set\n-A OUTPUT -m recent --rcheck --rttl\n",
			`rules:5:12: recent table "DEFAULT" in OUTPUT, with --rttl at rules:6:12`},
		{"too many stamps", "INPUT", "-A INPUT -m recent --rcheck --hitcount 1025\n",
			"recent --hitcount 1025: bpfwall keeps at most 1024 stamps per address"},
		// recent_mt_check runs for every rule loaded: the first one naming
		// the table (builtin chains, then user chains by name) creates it
		// with its mask, reachable or not.
		{"mask of a rule no hook reaches", "INPUT", ":BBB - [0:0]\n:AAA - [0:0]\n-A INPUT -j BBB\n-A AAA -m recent --rcheck --name S --mask 255.255.255.0\n-A BBB -m recent --set --name S\n",
			`rules:9:9: recent table "S" has --mask 255.255.255.255 here and 255.255.255.0 at rules:8:9`},
		{"ring of a rule no hook reaches", "INPUT", ":AAA - [0:0]\n-A AAA -m recent --rcheck --name S --hitcount 2000\n-A INPUT -m recent --set --name S\n",
			`rules:7:11: recent table "S": --hitcount 2000 at rules:6:9`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rs, err := parseText(rules.IPv4, recentHead+tc.rules+"COMMIT\n")
			if err != nil {
				t.Fatal(err)
			}
			_, err = ir.Lower(rs, ir.LowerOptions{Chain: tc.chain})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want one saying %q", err, tc.want)
			}
		})
	}
	// A rule no hook reaches sizes the ring of the table it names.
	prog := lowerText(t, rules.IPv4, "INPUT", recentHead+":AAA - [0:0]\n-A INPUT -m recent --set --name S\n-A AAA -m recent --rcheck --name S --hitcount 40\nCOMMIT\n")
	if got := prog.Rules[0].Matches[0].(ir.Recent).Stamps; got != 64 {
		t.Errorf("ring of %d stamps, want 64 (--hitcount 40 in an unreachable chain)", got)
	}
	// Without --rttl, OUTPUT compiles: the TTL is never compared.
	lowerText(t, rules.IPv4, "OUTPUT", recentHead+"-A OUTPUT -m recent --set\n-A OUTPUT -m recent --rcheck\nCOMMIT\n")
}

func parseText(fam rules.Family, text string) (*rules.Ruleset, error) {
	return iptables.Parse("rules", []byte(text), iptables.Options{Family: fam, ForceFamily: true})
}

// TestRecentClockNeverGoesBack: a match that comes with an earlier tick
// than the table last used (a CPU that read jiffies before another took
// the table's lock) uses the table's time, as if it had read the clock
// under the lock as the kernel does.
func TestRecentClockNeverGoesBack(t *testing.T) {
	text := recentHead + "-A INPUT -m recent --set\nCOMMIT\n"
	st := runRecent(t, "INPUT", text, []recentStep{
		{1000, "10.0.0.1", "", 0, "ACCEPT policy"},
		{990, "10.0.0.1", "", 0, "ACCEPT policy"},
		{1005, "10.0.0.1", "", 0, "ACCEPT policy"},
	})
	e := st.RecentEntries(0)[0]
	if e.Stamps[0] != 1000 || e.Stamps[1] != 1000 || e.Stamps[2] != 1005 {
		t.Errorf("stamps %v, want 1000 1000 1005", e.Stamps[:3])
	}
}

// TestSharedState: with LowerOptions.SharedState, what netfilter shares
// between hooks lowers. Every chain of a table numbers a limit's bucket
// the same, counting the table's limits, and names recent tables as
// the rule set does.
func TestSharedState(t *testing.T) {
	text := recentHead + ":c - [0:0]\n-A INPUT -m limit --limit 1/s -j ACCEPT\n-A INPUT -j c\n-A FORWARD -j c\n" +
		"-A FORWARD -m recent --rcheck --name x -j DROP\n-A c -m limit --limit 2/s -j ACCEPT\n-A c -m recent --set --name x\nCOMMIT\n"
	rs, err := parseText(rules.IPv4, text)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ir.Lower(rs, ir.LowerOptions{Chain: "FORWARD"}); err == nil {
		t.Fatal("without SharedState, FORWARD lowers")
	}
	// The bucket of each limit, by program and the chain of its rule.
	buckets := make(map[string]int)
	for _, chain := range []string{"INPUT", "FORWARD"} {
		p, err := ir.Lower(rs, ir.LowerOptions{Chain: chain, SharedState: true})
		if err != nil {
			t.Fatalf("%s: %v", chain, err)
		}
		if p.TableBuckets != 2 {
			t.Errorf("%s: TableBuckets = %d, want 2", chain, p.TableBuckets)
		}
		recent := 0
		for _, r := range p.Rules {
			for _, m := range r.Matches {
				if b, ok := ir.Bucket(m); ok {
					buckets[chain+"/"+p.Chains[r.Chain].Name] = b
				}
				if rm, ok := m.(ir.Recent); ok && rm.Name == "x" {
					recent++
				}
			}
		}
		if recent != map[string]int{"INPUT": 1, "FORWARD": 2}[chain] {
			t.Errorf("%s: %d recent matches of table x", chain, recent)
		}
	}
	want := map[string]int{"INPUT/INPUT": 0, "INPUT/c": 1, "FORWARD/c": 1}
	if !maps.Equal(buckets, want) {
		t.Errorf("buckets %v, want %v", buckets, want)
	}
}

// TestTerminating: which chains never come back to the rule after the
// jump.
func TestTerminating(t *testing.T) {
	text := "*filter\n:INPUT ACCEPT [0:0]\n:FORWARD ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n" +
		":DROPS - [0:0]\n:TAIL - [0:0]\n:GOES - [0:0]\n:GOESBACK - [0:0]\n:RET - [0:0]\n:COND - [0:0]\n:EMPTY - [0:0]\n:CALLS - [0:0]\n" +
		"-A INPUT -j DROPS\n-A INPUT -j TAIL\n-A INPUT -j GOES\n-A INPUT -j GOESBACK\n-A INPUT -j RET\n-A INPUT -j COND\n-A INPUT -j EMPTY\n-A INPUT -j CALLS\n" +
		"-A DROPS -p tcp -j ACCEPT\n-A DROPS -j DROP\n" +
		"-A TAIL -p udp -j ACCEPT\n-A TAIL -j DROPS\n" +
		"-A GOES -p udp -g DROPS\n-A GOES -j REJECT\n" +
		"-A GOESBACK -p udp -g RET\n-A GOESBACK -j DROP\n" +
		"-A RET -p tcp -j RETURN\n-A RET -j DROP\n" +
		"-A COND -p tcp -j DROP\n" +
		"-A CALLS -j RET\n-A CALLS -j ACCEPT\n" +
		"COMMIT\n"
	p := lowerText(t, rules.IPv4, "INPUT", text)
	want := map[string]bool{"DROPS": true, "TAIL": true, "GOES": true, "GOESBACK": false, "RET": false, "COND": false, "EMPTY": false, "CALLS": true}
	term := p.Terminating()
	for ci, c := range p.Chains[1:] {
		if w, ok := want[c.Name]; !ok || term[ci+1] != w {
			t.Errorf("chain %s: terminating %v, want %v", c.Name, term[ci+1], w)
		}
		delete(want, c.Name)
	}
	if len(want) > 0 {
		t.Errorf("chains not lowered: %v", want)
	}
}
