package difftest

import (
	"cmp"
	"encoding/binary"
	"fmt"
	"slices"

	"bpfwall/ir"
	"bpfwall/model"
	"bpfwall/rules"
)

// AsForward returns iptables-save text of rs's filter table with chain
// (INPUT or FORWARD) as the FORWARD chain, the user chains it reaches, and
// INPUT and OUTPUT empty: the probes cross FORWARD. Other tables and unreachable chains are left out, since the
// kernel would run conntrack for any rule of the table that needs it.
func AsForward(rs *rules.Ruleset, chain string) ([]byte, error) {
	t := rs.Table("filter")
	if t == nil || t.Chain(chain) == nil {
		return nil, fmt.Errorf("no filter chain %s", chain)
	}
	nt := t.Clone()
	src := nt.Chain(chain)
	reached := map[string]bool{}
	var walk func(c *rules.Chain)
	walk = func(c *rules.Chain) {
		for _, r := range c.Rules {
			var to string
			switch tg := r.Target.(type) {
			case *rules.Jump:
				to = tg.Chain
			case *rules.Goto:
				to = tg.Chain
			}
			if next := nt.Chain(to); next != nil && !reached[to] {
				reached[to] = true
				walk(next)
			}
		}
	}
	walk(src)
	fwdRules, fwdPolicy := src.Rules, src.Policy // src may be INPUT, emptied below
	chains := nt.Chains[:0]
	for _, c := range nt.Chains {
		switch {
		case c.Name == "INPUT" || c.Name == "OUTPUT":
			c.Rules, c.Policy = nil, rules.PolicyAccept
		case c.Name == "FORWARD":
			c.Rules, c.Policy = fwdRules, fwdPolicy
		case !c.Builtin && !reached[c.Name]:
			continue
		}
		chains = append(chains, c)
	}
	nt.Chains = chains
	out := &rules.Ruleset{Family: rs.Family, Tables: []*rules.Table{nt}}
	return out.Save(rules.SaveOptions{}), nil
}

// maxIfaceLen is IFNAMSIZ - 1.
const maxIfaceLen = 15

// Interfaces returns the names prog's -i and -o matches test, most tested
// first; a wildcard "eth+" gives "eth0". Names the topology cannot take
// (the loopback device, "+") are left out.
func Interfaces(prog *ir.Program) (in, out []string) {
	count := map[ir.IfaceDir]map[string]int{ir.IfaceIn: {}, ir.IfaceOut: {}}
	for _, r := range prog.Rules {
		for _, m := range r.Matches {
			m, ok := m.(ir.Iface)
			if !ok || m.Name == "" {
				continue
			}
			name := m.Name
			if m.Prefix {
				name += "0"
			}
			if len(name) <= maxIfaceLen && name != "lo" {
				count[m.Dir][name]++
			}
		}
	}
	sorted := func(c map[string]int) []string {
		var names []string
		for n := range c {
			names = append(names, n)
		}
		slices.SortFunc(names, func(a, b string) int {
			return cmp.Or(c[b]-c[a], cmp.Compare(a, b))
		})
		return names
	}
	return sorted(count[ir.IfaceIn]), sorted(count[ir.IfaceOut])
}

// UsesConntrack reports whether prog tests conntrack state.
func UsesConntrack(prog *ir.Program) bool {
	for _, r := range prog.Rules {
		for _, m := range r.Matches {
			if _, ok := m.(ir.CTState); ok {
				return true
			}
		}
	}
	return false
}

// UsesLimit reports whether prog has matches whose answer depends on
// when a probe comes and on the probes before it: token buckets (limit,
// hashlimit, nft limit) and recent lists.
func UsesLimit(prog *ir.Program) bool {
	for _, r := range prog.Rules {
		if slices.ContainsFunc(r.Matches, ir.Clocked) {
			return true
		}
	}
	return false
}

// ConntrackNew reports whether conntrack sees frame as the first packet
// of a new connection (ctstate NEW): an unfragmented TCP SYN, UDP
// datagram or ICMP echo request, without IPv6 extension headers, whose
// checksums hold (nf_conntrack_checksum). Other probes may be INVALID
// or held for reassembly, which the rules under test cannot tell apart.
// Probes whose state bpfwall's programs cannot know (ICMP echo requests:
// the conntrack kfuncs look up TCP and UDP only; see
// model.Packet.ConntrackWithoutEntry and TestConntrackFlows) are left out
// too: the program drops them at a state match.
func ConntrackNew(c *Case, frame []byte) bool {
	pkt, err := decode(c, frame)
	if err != nil || Forwarded(pkt, frame) != "" || pkt.FragOffset != 0 || pkt.MoreFragments {
		return false
	}
	if pkt.ConntrackWithoutEntry(true) != model.ConnNew {
		return false
	}
	ip := ipPacket(frame)
	var l4, pseudo []byte
	if pkt.Family == rules.IPv4 {
		ihl := int(ip[0]&0x0f) * 4
		l4 = ip[ihl:]
		pseudo = append(append(ip[12:20:20], 0, pkt.Proto), byte(len(l4)>>8), byte(len(l4)))
	} else {
		if ip[6] != pkt.Proto {
			return false // extension headers
		}
		l4 = ip[40:]
		pseudo = append(ip[8:40:40], 0, 0, byte(len(l4)>>8), byte(len(l4)), 0, 0, 0, pkt.Proto)
	}
	switch {
	case pkt.Proto == 6 && len(l4) >= 20 && pkt.TCPFlags == 0x02:
	case pkt.Proto == 17 && len(l4) >= 8 && int(binary.BigEndian.Uint16(l4[4:])) == len(l4):
		if pkt.Family == rules.IPv4 && binary.BigEndian.Uint16(l4[6:]) == 0 {
			return true // no checksum
		}
	case pkt.Proto == 1 && pkt.Family == rules.IPv4 && len(l4) >= 8 && pkt.ICMPType == 8 && pkt.ICMPCode == 0:
		pseudo = nil // ICMP sums only itself
	case pkt.Proto == 58 && pkt.Family == rules.IPv6 && len(l4) >= 8 && pkt.ICMPType == 128 && pkt.ICMPCode == 0:
	default:
		return false
	}
	return sum16(append(slices.Clone(pseudo), l4...)) == 0xffff
}

// sum16 is the ones' complement sum of b folded to 16 bits.
func sum16(b []byte) uint16 {
	var s uint32
	for i := 0; i+1 < len(b); i += 2 {
		s += uint32(binary.BigEndian.Uint16(b[i:]))
	}
	if len(b)%2 == 1 {
		s += uint32(b[len(b)-1]) << 8
	}
	for s > 0xffff {
		s = s>>16 + s&0xffff
	}
	return uint16(s)
}
