package main

import (
	"slices"
	"testing"
)

// TestRestoreFamilyIsTheFlags: restore reads its input as IPv4 unless
// given -6, as iptables-restore does, in both modes. It used to guess
// the family from the content, and "-p ipv6-icmp", protocol 58 in IPv4
// too, made an IPv4 file IPv6: the netfilter restore failed, and restore
// -i loaded an IPv6 filter where IPv4 was asked for.
func TestRestoreFamilyIsTheFlags(t *testing.T) {
	bin := buildBpfwall(t)
	freshNetns(t)
	c := cli{t, bin}
	text := "*filter\n:INPUT ACCEPT [0:0]\n:FORWARD ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n-A INPUT -p ipv6-icmp -j DROP\nCOMMIT\n"
	for _, args := range [][]string{{"restore"}, {"restore", "-i", "veth1"}, {"restore", "-6"}, {"restore", "-6", "-i", "veth1"}} {
		c.ok(text, args...)
		want := "ipv4"
		if slices.Contains(args, "-6") {
			want = "ipv6"
		}
		st := c.status()
		if len(st) == 0 {
			t.Fatalf("%v: no filter loaded", args)
		}
		for _, f := range st {
			if f.Family != want {
				t.Errorf("%v: a filter of family %s, want %s", args, f.Family, want)
			}
		}
		c.ok("", "unload")
	}
}
