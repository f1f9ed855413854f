package iptables

import (
	"net/netip"
	"strings"
	"testing"

	"bpfwall/rules"
)

// TestRecent checks the configuration libxt_recent (revision 1) would
// send the kernel for each rule, and the refusals of libxt_recent and of
// the kernel's recent_mt_check, each at the option it is about.
func TestRecent(t *testing.T) {
	all4 := netip.MustParseAddr("255.255.255.255")
	cases := []struct {
		name    string
		rule    string
		v6      bool
		want    rules.Recent // Pos is not compared
		wantErr string       // a part of the error
	}{
		{name: "defaults", rule: "--set",
			want: rules.Recent{Command: rules.RecentSet, Table: "DEFAULT", Mask: all4}},
		{name: "update", rule: "--update --seconds 60 --hitcount 4 --rttl --name SSH",
			want: rules.Recent{Command: rules.RecentUpdate, Seconds: 60, HitCount: 4, TTL: true, Table: "SSH", Mask: all4}},
		{name: "inverted rcheck with reap, mask and rdest", rule: "! --rcheck --seconds 10 --reap --mask 255.255.0.0 --rdest --name x",
			want: rules.Recent{Command: rules.RecentCheck, Invert: true, Seconds: 10, Reap: true, Table: "x", Mask: netip.MustParseAddr("255.255.0.0"), Dest: true}},
		{name: "the last side wins", rule: "--remove --rdest --rsource",
			want: rules.Recent{Command: rules.RecentRemove, Table: "DEFAULT", Mask: all4}},
		{name: "ipv6 mask", v6: true, rule: "--rcheck --hitcount 65535",
			want: rules.Recent{Command: rules.RecentCheck, HitCount: 65535, Table: "DEFAULT", Mask: netip.MustParseAddr("ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff")}},
		{name: "no command", rule: "--name x", wantErr: "rules:2:11: recent: you must specify one of"},
		{name: "two commands", rule: "--set --update", wantErr: "rules:2:26: recent: --update cannot be used with --set"},
		{name: "reap without seconds", rule: "--rcheck --reap", wantErr: "rules:2:29: recent: --reap needs --seconds"},
		{name: "zero seconds", rule: "--rcheck --seconds 0", wantErr: "--seconds: bad value"},
		{name: "rttl with set", rule: "--set --rttl", wantErr: "rules:2:26: recent: --rttl cannot be used with --set"},
		{name: "seconds with set", rule: "--set --seconds 5", wantErr: "rules:2:26: recent: --seconds cannot be used with --set (the kernel refuses it)"},
		{name: "hitcount with remove", rule: "--remove --hitcount 2", wantErr: "recent: --hitcount cannot be used with --remove"},
		// recent_mt_check refuses a non-zero hit_count: 0 is none.
		{name: "zero hitcount with set", rule: "--set --hitcount 0",
			want: rules.Recent{Command: rules.RecentSet, Table: "DEFAULT", Mask: all4}},
		{name: "zero hitcount with remove", rule: "--remove --hitcount 0 --name r",
			want: rules.Recent{Command: rules.RecentRemove, Table: "r", Mask: all4}},
		{name: "hitcount too large", rule: "--rcheck --hitcount 65536", wantErr: "hitcount (65536) is larger than allowed maximum (65535)"},
		{name: "slash in name", rule: "--set --name a/b", wantErr: "contains a '/'"},
		{name: "dotdot name", rule: "--set --name ..", wantErr: "invalid --name"},
		{name: "long name", rule: "--set --name " + strings.Repeat("n", 200), wantErr: "longer than 199"},
		{name: "mask of the other family", rule: "--set --mask ffff::", wantErr: "is not an ipv4 netmask"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			fam := rules.IPv4
			if tc.v6 {
				fam = rules.IPv6
			}
			src := "*filter\n-A INPUT -m recent " + tc.rule + " -j ACCEPT\nCOMMIT\n"
			rs, err := Parse("rules", []byte(src), Options{Family: fam, ForceFamily: true})
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want one saying %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			m, ok := rs.Table("filter").Chain("INPUT").Rules[0].Matches[0].(*rules.Recent)
			if !ok {
				t.Fatalf("match %T, want *rules.Recent", rs.Table("filter").Chain("INPUT").Rules[0].Matches[0])
			}
			got := *m
			got.Pos = rules.Pos{}
			if got != tc.want {
				t.Errorf("got %+v\nwant %+v", got, tc.want)
			}
		})
	}
}
