package iptables

import (
	"strings"
	"testing"

	"bpfwall/rules"
)

// TestHashLimit checks the configuration libxt_hashlimit (revision 3)
// would send the kernel for each rule.
func TestHashLimit(t *testing.T) {
	cases := []struct {
		name    string
		rule    string
		v6      bool
		want    rules.HashLimit // Options and Pos are not compared
		wantErr string
	}{
		{name: "defaults", rule: "--hashlimit-upto 10/sec --hashlimit-name a",
			want: rules.HashLimit{Avg: 100000, Burst: 5, SrcMask: 32, DstMask: 32, Table: "a", GCInterval: 1000, Expire: 1000}},
		{name: "expiry follows the unit", rule: "--hashlimit-above 3/min --hashlimit-mode srcip,dstport --hashlimit-name b --hashlimit-burst 7",
			want: rules.HashLimit{Avg: 20000000, Burst: 7, Above: true, Mode: rules.HashSrcIP | rules.HashDstPort, SrcMask: 32, DstMask: 32, Table: "b", GCInterval: 1000, Expire: 60000}},
		{name: "table options", rule: "--hashlimit 1/h --hashlimit-name c --hashlimit-htable-size 16 --hashlimit-htable-max 32 --hashlimit-htable-expire 5 --hashlimit-htable-gcinterval 7 --hashlimit-srcmask 24",
			want: rules.HashLimit{Avg: 3600000000, Burst: 5, SrcMask: 24, DstMask: 32, Table: "c", Size: 16, Max: 32, GCInterval: 7, Expire: 5}},
		{name: "ipv6 masks", v6: true, rule: "! --hashlimit-above 1/s --hashlimit-mode dstip --hashlimit-name d",
			want: rules.HashLimit{Avg: 1000000, Burst: 5, Mode: rules.HashDstIP, SrcMask: 128, DstMask: 128, Table: "d", GCInterval: 1000, Expire: 1000}},
		{name: "byte rate", rule: "--hashlimit-upto 1kb/s --hashlimit-name e",
			want: rules.HashLimit{Avg: 66076419, Bytes: true, SrcMask: 32, DstMask: 32, Table: "e", GCInterval: 1000, Expire: 15000}},
		{name: "byte rate and burst", rule: "--hashlimit-above 1kb/s --hashlimit-burst 4100 --hashlimit-name e2",
			want: rules.HashLimit{Avg: 66076419, Bytes: true, Above: true, Burst: 5, SrcMask: 32, DstMask: 32, Table: "e2", GCInterval: 1000, Expire: 60000}},
		{name: "packet burst with a suffix", rule: "--hashlimit-upto 100/s --hashlimit-burst 2k --hashlimit-name e3",
			want: rules.HashLimit{Avg: 10000, Burst: 2048, SrcMask: 32, DstMask: 32, Table: "e3", GCInterval: 1000, Expire: 1000}},
		{name: "rate match", rule: "--hashlimit-upto 10/s --hashlimit-rate-match --hashlimit-name e4",
			want: rules.HashLimit{Avg: 100000, Burst: 5, SrcMask: 32, DstMask: 32, Table: "e4", GCInterval: 1000, Expire: 1000, Unsupported: "--hashlimit-rate-match"}},
		{name: "byte burst below the rate", rule: "--hashlimit-upto 1kb/s --hashlimit-burst 100 --hashlimit-name e5", wantErr: "burst cannot be smaller than 1024b"},
		{name: "no rate", rule: "--hashlimit-name f", wantErr: "you have to specify --hashlimit"},
		{name: "no name", rule: "--hashlimit-upto 1/s", wantErr: "--hashlimit-name is required"},
		{name: "bad mode", rule: "--hashlimit-upto 1/s --hashlimit-mode proto --hashlimit-name g", wantErr: "--hashlimit-mode"},
		{name: "bad unit", rule: "--hashlimit-upto 1/fortnight --hashlimit-name h", wantErr: "bad rate"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			fam := rules.IPv4
			if tc.v6 {
				fam = rules.IPv6
			}
			src := "*filter\n:INPUT ACCEPT [0:0]\n-A INPUT -m hashlimit " + tc.rule + " -j ACCEPT\nCOMMIT\n"
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
			m, ok := rs.Table("filter").Chain("INPUT").Rules[0].Matches[0].(*rules.HashLimit)
			if !ok {
				t.Fatalf("match %T, want *rules.HashLimit", rs.Table("filter").Chain("INPUT").Rules[0].Matches[0])
			}
			got := *m
			got.Options, got.Pos = nil, rules.Pos{}
			if got.Bytes != tc.want.Bytes || got.Above != tc.want.Above || got.Avg != tc.want.Avg || got.Burst != tc.want.Burst || got.Mode != tc.want.Mode ||
				got.SrcMask != tc.want.SrcMask || got.DstMask != tc.want.DstMask || got.Table != tc.want.Table ||
				got.Size != tc.want.Size || got.Max != tc.want.Max || got.GCInterval != tc.want.GCInterval ||
				got.Expire != tc.want.Expire || got.Unsupported != tc.want.Unsupported {
				t.Errorf("got  %+v\nwant %+v", got, tc.want)
			}
			if !strings.Contains(rs.Table("filter").Chain("INPUT").Rules[0].Spec(), "-m hashlimit "+tc.rule) {
				t.Errorf("prints as %q", rs.Table("filter").Chain("INPUT").Rules[0].Spec())
			}
		})
	}
}
