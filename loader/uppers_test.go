package loader

import (
	"slices"
	"strings"
	"testing"
)

// TestUppersOf: the upper devices the netfilter stage follows, over
// synthetic link lists (this VM has no 8021q, bonding or ipvlan modules;
// TestNetfilterStageUppers covers macvlan and bridge on the kernel).
func TestUppersOf(t *testing.T) {
	links := func(ls ...*netLink) map[int]*netLink {
		m := make(map[int]*netLink)
		for _, l := range ls {
			m[l.index] = l
		}
		return m
	}
	eth0 := &netLink{index: 2, name: "eth0"}
	eth1 := &netLink{index: 3, name: "eth1"}
	peer := &netLink{index: 4, name: "veth-peer", kind: "veth", lower: 2}
	vlan := &netLink{index: 10, name: "eth0.5", kind: "vlan", lower: 2}
	qinq := &netLink{index: 11, name: "eth0.5.7", kind: "vlan", lower: 10}
	ipvl := &netLink{index: 12, name: "ipvl0", kind: "ipvlan", lower: 10}
	other := &netLink{index: 13, name: "mv9", kind: "macvlan", lower: 3}
	remote := &netLink{index: 14, name: "mvr", kind: "macvlan", lower: 2, remote: true}
	names := func(ifs []Iface) string {
		var out []string
		for _, i := range ifs {
			out = append(out, i.Name)
		}
		slices.Sort(out)
		return strings.Join(out, ",")
	}
	for _, c := range []struct {
		name     string
		links    map[int]*netLink
		attached []int
		want     string // the uppers, or the error's text
		refused  bool
	}{
		{"stacked, recursively; not a veth peer, another lower's macvlan, a macvlan in another namespace",
			links(eth0, eth1, peer, vlan, qinq, ipvl, other, remote), []int{2}, "eth0.5,eth0.5.7,ipvl0", false},
		{"bond of one attached and one other slave",
			links(&netLink{index: 2, name: "eth0", master: 20}, &netLink{index: 3, name: "eth1", master: 20}, &netLink{index: 20, name: "bond0", kind: "bond"}),
			[]int{2}, "bond0 is the bond of eth0, and of eth1, which this filter is not attached to", true},
		{"bond of attached slaves, a VLAN on it",
			links(&netLink{index: 2, name: "eth0", master: 20}, &netLink{index: 3, name: "eth1", master: 20}, &netLink{index: 20, name: "bond0", kind: "bond"},
				&netLink{index: 21, name: "bond0.9", kind: "vlan", lower: 20}),
			[]int{2, 3}, "bond0,bond0.9", false},
		{"a bridge above a bond: every port evaluated",
			links(&netLink{index: 2, name: "eth0", master: 20}, &netLink{index: 20, name: "bond0", kind: "bond", master: 30}, &netLink{index: 30, name: "br0", kind: "bridge"}),
			[]int{2}, "bond0,br0", false},
		{"VRF",
			links(&netLink{index: 2, name: "eth0", master: 40}, &netLink{index: 40, name: "vrf-blue", kind: "vrf"}),
			[]int{2}, "vrf-blue is a vrf master of eth0", true},
	} {
		got, err := uppersOf(c.links, c.attached, true)
		switch {
		case c.refused && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%s: %v, %v; want an error with %q", c.name, names(got), err, c.want)
		case !c.refused && (err != nil || names(got) != c.want):
			t.Errorf("%s: %v, %v; want %s", c.name, names(got), err, c.want)
		}
		if c.refused {
			// Unload's lenient pass leaves the master out.
			if got, err := uppersOf(c.links, c.attached, false); err != nil || len(got) != 0 {
				t.Errorf("%s, not strict: %v, %v", c.name, names(got), err)
			}
		}
	}
}
