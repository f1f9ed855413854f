package loader

import (
	"encoding/binary"
	"fmt"
	"slices"
	"strings"

	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

// Upper devices and the netfilter stage.
//
// The stage evaluates the packets of class U that netfilter sees on the
// devices in its interface map. A packet that came in on an attached
// interface reaches PRE_ROUTING on another device when that interface is
// the lower of a stacked device: a VLAN, macvlan/macvtap, ipvlan/ipvtap
// or MACsec device takes the packets addressed to it from its lower
// device, and a bond or team master takes every packet of its slaves, a
// bridge those of its ports addressed to it. The stage must evaluate them
// there, as netfilter does, or they pass unevaluated (before the stage
// existed, a state match dropped them at the ingress program).
//
// A stacked device of the first kind receives only from its lower
// device (or, for macvlan in bridge mode and ipvlan, from its siblings on
// the same lower: packets between them do not pass the lower's program,
// and the stage evaluates those of class U too); it is added. A master
// receives from all its lower devices: it is added when every one of them
// is one the stage already evaluates, else the load is refused, since
// the stage would filter the packets of a port bpfwall is not attached
// to, or leave those of an attached port unevaluated. Any other master
// (VRF, Open vSwitch, ...) is refused.
//
// The devices are those of the load or swap: a stacked device created
// afterwards is not followed until the next swap (status says so).

// stackedKinds are the kinds of device whose only lower device is
// IFLA_LINK.
var stackedKinds = []string{"vlan", "macvlan", "macvtap", "ipvlan", "ipvtap", "macsec"}

// masterKinds are the kinds of master device the stage can follow.
var masterKinds = []string{"bond", "team", "bridge"}

// netLink is what the loader needs to know about a network device.
type netLink struct {
	index  int
	name   string
	kind   string
	lower  int    // IFLA_LINK: the lower device of a stacked device
	master int    // IFLA_MASTER
	remote bool   // IFLA_LINK_NETNSID: lower is in another namespace
	xdp    uint32 // IFLA_XDP_PROG_ID: the XDP program attached, if any
}

// listLinks lists the network devices of the calling thread's namespace.
func listLinks() (map[int]*netLink, error) {
	conn, err := netlink.Dial(unix.NETLINK_ROUTE, nil)
	if err != nil {
		return nil, fmt.Errorf("list network devices: %w", err)
	}
	defer conn.Close()
	req := netlink.Message{
		Header: netlink.Header{Type: unix.RTM_GETLINK, Flags: netlink.Request | netlink.Dump},
		Data:   make([]byte, unix.SizeofIfInfomsg),
	}
	msgs, err := conn.Execute(req)
	if err != nil {
		return nil, fmt.Errorf("list network devices: %w", err)
	}
	out := make(map[int]*netLink)
	for _, m := range msgs {
		if len(m.Data) < unix.SizeofIfInfomsg {
			continue
		}
		l := &netLink{index: int(int32(binary.NativeEndian.Uint32(m.Data[4:8])))}
		ad, err := netlink.NewAttributeDecoder(m.Data[unix.SizeofIfInfomsg:])
		if err != nil {
			return nil, fmt.Errorf("list network devices: %w", err)
		}
		for ad.Next() {
			switch ad.Type() {
			case unix.IFLA_IFNAME:
				l.name = ad.String()
			case unix.IFLA_LINK:
				l.lower = int(ad.Uint32())
			case unix.IFLA_MASTER:
				l.master = int(ad.Uint32())
			case unix.IFLA_LINK_NETNSID:
				l.remote = true
			case unix.IFLA_XDP:
				ad.Nested(func(nad *netlink.AttributeDecoder) error {
					for nad.Next() {
						if nad.Type() == unix.IFLA_XDP_PROG_ID {
							l.xdp = nad.Uint32()
						}
					}
					return nil
				})
			case unix.IFLA_LINKINFO:
				ad.Nested(func(nad *netlink.AttributeDecoder) error {
					for nad.Next() {
						if nad.Type() == unix.IFLA_INFO_KIND {
							l.kind = nad.String()
						}
					}
					return nil
				})
			}
		}
		if err := ad.Err(); err != nil {
			return nil, fmt.Errorf("list network devices: %w", err)
		}
		out[l.index] = l
	}
	return out, nil
}

// stageUppers returns the upper devices of the interfaces ifindexes,
// recursively, on which netfilter sees their packets: the devices the
// netfilter stage evaluates besides the interfaces (see above). It fails
// naming a master device the stage cannot follow exactly.
func stageUppers(ifindexes []int) ([]Iface, error) {
	links, err := listLinks()
	if err != nil {
		return nil, err
	}
	return uppersOf(links, ifindexes, true)
}

// uppersOf computes stageUppers over links; with strict unset, a master
// it cannot follow is left out instead of refused.
func uppersOf(links map[int]*netLink, ifindexes []int, strict bool) ([]Iface, error) {
	in := make(map[int]bool)
	for _, i := range ifindexes {
		in[i] = true
	}
	var out []Iface
	for changed := true; changed; {
		changed = false
		for _, l := range sortedLinks(links) {
			if in[l.index] {
				continue
			}
			switch {
			case slices.Contains(stackedKinds, l.kind) && !l.remote && in[l.lower]:
			case l.kind != "" && isMasterOf(links, l.index, in):
				if !slices.Contains(masterKinds, l.kind) {
					if strict {
						return nil, fmt.Errorf("netfilter stage: %s is a %s master of %s: netfilter sees the packets of class U (ICMP, fragments, protocols other than TCP and UDP) of %[3]s on it, "+
							"and the stage cannot follow a %[2]s exactly; use rules without conntrack state matches",
							l.name, l.kind, strings.Join(lowerNames(links, l.index, isIn(in)), ", "))
					}
					continue
				}
				if others := lowerNames(links, l.index, notIn(in)); len(others) > 0 {
					if strict {
						return nil, fmt.Errorf("netfilter stage: %s is the %s of %s, and of %s, which this filter is not attached to: "+
							"the packets of class U (ICMP, fragments, protocols other than TCP and UDP) of the attached ones reach netfilter on %s, "+
							"where the stage cannot tell them from those of %s; attach the filter to every one of them, or use rules without conntrack state matches",
							l.name, l.kind, strings.Join(lowerNames(links, l.index, isIn(in)), ", "), strings.Join(others, ", "), l.name, strings.Join(others, ", "))
					}
					continue
				}
			default:
				continue
			}
			in[l.index] = true
			out = append(out, Iface{Index: l.index, Name: l.name})
			changed = true
		}
	}
	return out, nil
}

func sortedLinks(links map[int]*netLink) []*netLink {
	out := make([]*netLink, 0, len(links))
	for _, l := range links {
		out = append(out, l)
	}
	slices.SortFunc(out, func(a, b *netLink) int { return a.index - b.index })
	return out
}

// isMasterOf reports whether some device of set has master as master.
func isMasterOf(links map[int]*netLink, master int, set map[int]bool) bool {
	return len(lowerNames(links, master, isIn(set))) > 0
}

// lowerNames names the devices enslaved to master that pick selects.
func lowerNames(links map[int]*netLink, master int, sel func(int) bool) []string {
	var out []string
	for _, l := range sortedLinks(links) {
		if l.master == master && sel(l.index) {
			out = append(out, l.name)
		}
	}
	return out
}

func isIn(set map[int]bool) func(int) bool  { return func(i int) bool { return set[i] } }
func notIn(set map[int]bool) func(int) bool { return func(i int) bool { return !set[i] } }
