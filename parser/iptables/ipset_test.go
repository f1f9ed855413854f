package iptables

import (
	"net/netip"
	"slices"
	"testing"

	"bpfwall/rules"
)

func TestParseIPSets(t *testing.T) {
	src := `create allow hash:net family inet hashsize 1024 maxelem 65536
add allow 10.0.0.0/8
add allow 192.0.2.1-192.0.2.6
add allow 10.1.0.0/16 nomatch
create six hash:ip family inet6
add six 2001:db8::1
create ports hash:ip,port family inet
add ports 10.0.0.1,tcp:80
`
	sets, err := ParseIPSets("s.ipset", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range sets["allow"].Entries {
		s := e.Addr.String()
		if e.NoMatch {
			s += " nomatch"
		}
		got = append(got, s)
	}
	want := []string{"10.0.0.0/8", "192.0.2.1/32", "192.0.2.2/31", "192.0.2.4/31", "192.0.2.6/32", "10.1.0.0/16 nomatch"}
	if !slices.Equal(got, want) {
		t.Errorf("allow = %v, want %v", got, want)
	}
	if s := sets["six"]; s.Family != 1 || s.Entries[0].Addr != netip.MustParsePrefix("2001:db8::1/128") {
		t.Errorf("six = %+v", s)
	}
	if e := sets["ports"].Entries[0]; e.Addr != netip.MustParsePrefix("10.0.0.1/32") || !slices.Equal(e.Rest, []string{"tcp:80"}) {
		t.Errorf("ports entry = %+v", e)
	}
	for _, bad := range []string{"add nosuch 10.0.0.1\n", "create a hash:ip\ncreate a hash:ip\n", "create a hash:ip\nadd a 10.0.0.9-10.0.0.1\n", "bogus line\n"} {
		if _, err := ParseIPSets("bad", []byte(bad)); err == nil {
			t.Errorf("accepted %q", bad)
		}
	}
}

func TestRangePrefixes(t *testing.T) {
	tests := []struct {
		from, to string
		n        int
	}{
		{"0.0.0.0", "255.255.255.255", 1},
		{"10.0.0.1", "10.0.0.1", 1},
		{"0.0.0.1", "255.255.255.254", 62},
		{"::1", "::2", 2},
	}
	for _, tc := range tests {
		a, b := netip.MustParseAddr(tc.from), netip.MustParseAddr(tc.to)
		ps := RangePrefixes(a, b)
		if len(ps) != tc.n {
			t.Errorf("%s-%s: %d prefixes %v, want %d", tc.from, tc.to, len(ps), ps, tc.n)
		}
		// The prefixes tile the range exactly, in order.
		next := a
		for _, p := range ps {
			if p.Addr() != next {
				t.Fatalf("%s-%s: gap or overlap at %v", tc.from, tc.to, p)
			}
			next = lastAddr(p).Next()
		}
		if lastAddr(ps[len(ps)-1]) != b {
			t.Errorf("%s-%s: ends at %v", tc.from, tc.to, lastAddr(ps[len(ps)-1]))
		}
	}
}

// TestSaveSets: SaveSets prints what ParseIPSets reads back to the same
// sets, entry options and nomatch included.
func TestSaveSets(t *testing.T) {
	src := `create allow hash:net family inet hashsize 1024 maxelem 65536 counters
add allow 10.0.0.0/8 packets 3 bytes 180
add allow 192.0.2.1-192.0.2.6
add allow 10.1.0.0/16 nomatch
create six hash:ip family inet6 netmask 64
add six 2001:db8::1 timeout 60
create ports hash:ip,port family inet
add ports 10.0.0.1,tcp:80
create macs hash:mac
add macs 00:11:22:33:44:55
`
	sets, err := ParseIPSets("s.ipset", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	saved := rules.SaveSets(sets)
	again, err := ParseIPSets("saved", saved)
	if err != nil {
		t.Fatalf("%v\n%s", err, saved)
	}
	if got := rules.SaveSets(again); string(got) != string(saved) {
		t.Errorf("not stable:\n%s\nthen\n%s", saved, got)
	}
	for name, s := range sets {
		a := again[name]
		if a == nil || a.Type != s.Type || a.Family != s.Family || !slices.Equal(a.Options, s.Options) || len(a.Entries) != len(s.Entries) {
			t.Errorf("set %s: %+v, read back %+v", name, s, a)
			continue
		}
		for i, e := range s.Entries {
			g := a.Entries[i]
			if g.Addr != e.Addr || g.NoMatch != e.NoMatch || !slices.Equal(g.Rest, e.Rest) || !slices.Equal(g.Options, e.Options) {
				t.Errorf("set %s entry %d: %+v, read back %+v", name, i, e, g)
			}
		}
	}
	if e := sets["six"].Entries[0]; !slices.Equal(e.Options, []string{"timeout", "60"}) {
		t.Errorf("entry options %q, want timeout 60", e.Options)
	}
}
