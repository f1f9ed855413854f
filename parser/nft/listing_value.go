package nft

import (
	"fmt"
	"net/netip"
	"os/user"
	"slices"
	"strconv"
	"strings"
	"time"
)

// How a listing prints values: each selector's values have a type, and
// nft lists each type its own way.

// vtype is the type of a selector's values, which decides how a listing
// prints them.
type vtype uint8

const (
	tRaw        vtype = iota
	tMark             // 0x%08x
	tProto            // a number
	tService          // a number
	tUID              // a number: names resolve on this host
	tGID              // a number: names resolve on this host
	tAddr4            // an IPv4 address
	tAddr6            // an IPv6 address, as inet_ntop prints it
	tCtState          // flags in bit order
	tCtStatus         // flags in bit order
	tTCPFlags         // flags in bit order
	tICMPType         // a name
	tICMPv6Type       // a name
	tICMPCode         // a number
	tICMPv6Code       // a number
	tDSCP             // a name
	tECN              // a name
	tEther            // a name
	tTime             // 1m7s
	tPktType          // a name
	tIfGroup          // "default" or a number
	tMAC              // two hex digits per octet
	tPriority         // major:minor in hex
	tCtEvent          // flags in bit order
	tHour             // "HH:MM", or "HH:MM:SS" when the seconds are not zero
	tDay              // a day's name
	tDate             // "YYYY-MM-DD HH:MM:SS", in UTC
)

// typeNames are the set types of a "type" declaration.
var typeNames = map[string]vtype{
	"ipv4_addr": tAddr4, "ipv6_addr": tAddr6, "inet_service": tService, "inet_proto": tProto,
	"mark": tMark, "ct_state": tCtState, "ether_addr": tMAC, "ether_type": tEther,
	"icmp_type": tICMPType, "icmpv6_type": tICMPv6Type, "dscp": tDSCP, "ecn": tECN,
	"uid": tUID, "gid": tGID, "pkt_type": tPktType, "ct_status": tCtStatus, "tcp_flag": tTCPFlags,
}

// selectorType is the type of a selector's values; key is the selector
// as a listing prints it ("ip saddr", "meta mark", "tcp dport").
func selectorType(key string) vtype {
	words := strings.Fields(key)
	if len(words) == 0 {
		return tRaw
	}
	last := words[len(words)-1]
	switch key {
	case "meta mark", "ct mark", "mark":
		return tMark
	case "ip protocol", "meta l4proto", "l4proto", "ct protocol", "ct original protocol", "ct reply protocol":
		return tProto
	case "meta skuid", "skuid":
		return tUID
	case "meta skgid", "skgid":
		return tGID
	case "ct state":
		return tCtState
	case "ct status":
		return tCtStatus
	case "tcp flags":
		return tTCPFlags
	case "icmp type":
		return tICMPType
	case "icmpv6 type":
		return tICMPv6Type
	case "icmp code":
		return tICMPCode
	case "icmpv6 code":
		return tICMPv6Code
	case "ip dscp", "ip6 dscp":
		return tDSCP
	case "ip ecn", "ip6 ecn":
		return tECN
	case "meta protocol", "protocol", "ether type", "vlan type":
		return tEther
	case "ct expiration":
		return tTime
	case "meta pkttype", "pkttype":
		return tPktType
	case "iifgroup", "oifgroup":
		return tIfGroup
	case "meta priority":
		return tPriority
	case "ct event":
		return tCtEvent
	case "meta hour":
		return tHour
	case "meta day":
		return tDay
	case "meta time":
		return tDate
	}
	switch {
	case last == "nexthdr":
		return tProto
	case last == "sport" || last == "dport" || last == "proto-src" || last == "proto-dst":
		return tService
	case (last == "saddr" || last == "daddr") && (words[0] == "ether" || slices.Contains(words, "ether")):
		return tMAC
	case last == "saddr" || last == "daddr" || last == "nexthop":
		if slices.Contains(words, "ip6") {
			return tAddr6
		}
		if slices.Contains(words, "ip") {
			return tAddr4
		}
	}
	return tRaw
}

func isFlagType(t vtype) bool {
	return t == tCtState || t == tCtStatus || t == tTCPFlags || t == tCtEvent
}

// flagBits are the bits of each flag type's names.
func flagBits(t vtype) map[string]uint64 {
	out := map[string]uint64{}
	switch t {
	case tCtState:
		for k, v := range ctStateNames {
			out[k] = uint64(v)
		}
	case tCtStatus:
		for k, v := range ctStatusWords {
			out[k] = uint64(v)
		}
	case tTCPFlags:
		for k, v := range tcpFlagNames {
			out[k] = uint64(v)
		}
	case tCtEvent:
		for i, k := range ctEvents {
			out[k] = 1 << i
		}
	}
	return out
}

// sortFlags orders flag names by their bits, as nft lists them.
func sortFlags(t vtype, names []string) []string {
	bits := flagBits(t)
	out := slices.Clone(names)
	slices.SortStableFunc(out, func(a, b string) int {
		ba, oka := bits[a]
		bb, okb := bits[b]
		if !oka || !okb {
			return 0
		}
		return int(ba) - int(bb)
	})
	return out
}

// formatAtom prints one literal of type t as nft lists it.
func formatAtom(s string, t vtype) string {
	quoted := strings.HasPrefix(s, `"`)
	u := unquote(s)
	num := func() (uint64, bool) {
		n, err := strconv.ParseUint(u, 0, 64)
		return n, err == nil
	}
	switch t {
	case tMark:
		if n, ok := num(); ok {
			return fmt.Sprintf("0x%08x", n)
		}
	case tProto:
		if p, ok := moreProtos[u]; ok {
			return strconv.Itoa(int(p))
		}
		if p, err := parseProto(u); err == nil {
			return strconv.Itoa(int(p))
		}
	case tService:
		if p, err := parsePort(u); err == nil {
			return strconv.Itoa(int(p))
		}
	case tUID, tGID:
		if _, ok := num(); ok {
			return u
		}
		if t == tUID {
			if usr, err := user.Lookup(u); err == nil {
				return usr.Uid
			}
		} else if g, err := user.LookupGroup(u); err == nil {
			return g.Gid
		}
	case tAddr4, tAddr6:
		if a, err := netip.ParseAddr(u); err == nil {
			return addrText(a)
		}
		if n, ok := num(); ok && t == tAddr4 && n <= 0xffffffff {
			return netip.AddrFrom4([4]byte{byte(n >> 24), byte(n >> 16), byte(n >> 8), byte(n)}).String()
		}
	case tPriority:
		if n, ok := num(); ok && n <= 0xffffffff {
			return fmt.Sprintf("%x:%x", n>>16, n&0xffff)
		}
	case tCtEvent:
		if n, ok := num(); ok {
			if s := flagNames(t, n); s != "" {
				return s
			}
		}
	case tHour:
		if h, m, sec, ok := hourOf(u); ok && quoted {
			if sec != 0 {
				return fmt.Sprintf("\"%02d:%02d:%02d\"", h, m, sec)
			}
			return fmt.Sprintf("\"%02d:%02d\"", h, m)
		}
	case tDay:
		if n, ok := num(); ok && n < uint64(len(daySpec.syms)) {
			return strconv.Quote(daySpec.syms[n])
		}
	case tDate:
		if n, ok := num(); ok && !quoted {
			// nft reads a date in the local time zone.
			return strconv.Quote(time.Unix(int64(n), 0).Local().Format(time.DateTime))
		}
	case tCtState, tCtStatus, tTCPFlags:
		if n, ok := num(); ok {
			if s := flagNames(t, n); s != "" {
				return s
			}
		}
	case tICMPType:
		if n, ok := num(); ok {
			if s := nameOf(icmpTypes, uint8(n)); s != "" && n < 256 {
				return s
			}
		}
	case tICMPv6Type:
		if u == "mld-listener-reduction" {
			return "mld-listener-done"
		}
		if n, ok := num(); ok && n < 256 {
			if s := nameOf(icmpv6Types, uint8(n)); s != "" {
				if s == "mld-listener-reduction" {
					s = "mld-listener-done"
				}
				return s
			}
		}
	case tICMPCode:
		if v, ok := icmpCodes[u]; ok {
			return strconv.Itoa(int(v))
		}
	case tICMPv6Code:
		if v, ok := icmpv6Codes[u]; ok {
			return strconv.Itoa(int(v))
		}
	case tDSCP:
		if n, ok := num(); ok && n < 64 {
			if s := dscpName(uint8(n)); s != "" {
				return s
			}
			return fmt.Sprintf("0x%02x", n)
		}
	case tECN:
		if n, ok := num(); ok && n < uint64(len(ecnSpec.syms)) {
			return ecnSpec.syms[n]
		}
	case tEther:
		if n, ok := num(); ok {
			if s := nameOf(etherTypes, uint16(n)); s != "" {
				return s
			}
		}
		if u == "vlan" {
			return "8021q"
		}
	case tTime:
		if d, ok := parseTime(u); ok && !quoted {
			return durationText(d.Uint64())
		}
	case tPktType:
		if n, ok := num(); ok {
			if s := nameOf(pktTypeNames, uint8(n)); s != "" {
				return s
			}
		}
		if u == "unicast" {
			return "host"
		}
	case tIfGroup:
		if u == "0" {
			return `"default"`
		}
	case tMAC:
		if mac, err := parseMAC(u); err == nil {
			return mac.String()
		}
	}
	return s
}

// moreProtos are names of /etc/protocols nft resolves that a rule's
// protocol match does not take.
var moreProtos = map[string]uint8{"ip": 0, "hopopt": 0, "ipcomp": 108, "ipv6-route": 43, "ipv6-frag": 44, "ipv6-opts": 60, "ipv6-nonxt": 59}

// ctEvents are the conntrack event bits by name, in bit order.
var ctEvents = []string{"new", "related", "destroy", "reply", "assured", "protoinfo", "helper", "mark", "seqadj", "secmark", "label"}

// hourOf reads "HH:MM[:SS]" as nft does: seconds past midnight, modulo a
// day.
func hourOf(s string) (h, m, sec int, ok bool) {
	v, ok := hourParts(s)
	if !ok {
		return 0, 0, 0, false
	}
	total := (v[0]*3600 + v[1]*60 + v[2]) % 86400
	return total / 3600, total % 3600 / 60, total % 60, true
}

// rangeAtom prints an end of a range: as formatAtom, but a type whose
// values list as names lists numbers.
func rangeAtom(s string, t vtype) string {
	u := unquote(s)
	switch t {
	case tDSCP:
		if v, ok := dscpValue(u); ok {
			return fmt.Sprintf("0x%02x", v)
		}
	case tICMPType, tICMPv6Type:
		names := icmpTypes
		if t == tICMPv6Type {
			names = icmpv6Types
		}
		if v, err := lookupByte(names, u); err == nil {
			return strconv.Itoa(int(v))
		}
	case tECN:
		if i := slices.Index(ecnSpec.syms, u); i >= 0 {
			return strconv.Itoa(i)
		}
	case tEther:
		if v, ok := etherTypes[u]; ok {
			return fmt.Sprintf("0x%04x", v)
		}
		if u == "vlan" {
			return "0x8100"
		}
	case tPktType:
		if v, ok := pktTypeNames[u]; ok {
			return strconv.Itoa(int(v))
		}
	case tDay:
		if i := slices.IndexFunc(daySpec.syms, func(d string) bool { return strings.EqualFold(d, u) || strings.EqualFold(d[:3], u) }); i >= 0 {
			return strconv.Itoa(i)
		}
	case tCtState, tCtStatus, tTCPFlags, tCtEvent:
		if v, ok := flagBits(t)[u]; ok {
			return strconv.FormatUint(v, 10)
		}
	}
	if _, err := strconv.ParseUint(u, 0, 64); err == nil && namedType(t) {
		return s // formatAtom would name it
	}
	return formatAtom(s, t)
}

// namedType says whether formatAtom prints a number of type t as a name.
func namedType(t vtype) bool {
	switch t {
	case tECN, tEther, tPktType, tIfGroup, tDay, tCtState, tCtStatus, tTCPFlags, tCtEvent, tICMPType, tICMPv6Type, tDSCP:
		return true
	}
	return false
}

// etherTypes are nft's names of link-layer protocols.
var etherTypes = map[string]uint16{"ip": 0x0800, "arp": 0x0806, "ip6": 0x86dd, "8021q": 0x8100, "8021ad": 0x88a8}

// dscpName is nft's name of a code point, if it has one.
func dscpName(v uint8) string {
	for _, n := range []string{"cs0", "cs1", "cs2", "cs3", "cs4", "cs5", "cs6", "cs7", "lephb", "af11", "af12", "af13", "af21", "af22", "af23", "af31", "af32", "af33", "af41", "af42", "af43", "va", "ef"} {
		if dscpNames[n] == v {
			return n
		}
	}
	return ""
}

// flagNames prints a numeric flag value as its names, "" when a bit has
// none.
func flagNames(t vtype, n uint64) string {
	bits := flagBits(t)
	var names []string
	for b := uint64(1); b != 0 && b <= n; b <<= 1 {
		if n&b == 0 {
			continue
		}
		nm := ""
		for k, v := range bits {
			if v == b {
				nm = k
			}
		}
		if nm == "" {
			return ""
		}
		names = append(names, nm)
	}
	return strings.Join(sortFlags(t, names), ",")
}

// addrText prints an address as nft does (inet_ntop): an IPv6 address
// whose first 96 bits are zero, or that maps IPv4, ends in dotted form.
func addrText(a netip.Addr) string {
	if a.Is4() {
		return a.String()
	}
	b := a.As16()
	zero := func(bs []byte) bool { return !slices.ContainsFunc(bs, func(x byte) bool { return x != 0 }) }
	if zero(b[:10]) && (b[10] == 0 && b[11] == 0 && (b[12] != 0 || b[13] != 0) || b[10] == 0xff && b[11] == 0xff) {
		v4 := netip.AddrFrom4([4]byte(b[12:])).String()
		if b[10] == 0xff {
			return "::ffff:" + v4
		}
		return "::" + v4
	}
	return a.String()
}

// durationText prints seconds as nft lists a time: days, hours, minutes
// and seconds, each when not zero.
func durationText(ms uint64) string {
	if ms%1000 != 0 {
		return fmt.Sprintf("%dms", ms)
	}
	s := ms / 1000
	if s == 0 {
		return "0s"
	}
	var b strings.Builder
	for _, u := range []struct {
		n    uint64
		unit string
	}{{86400, "d"}, {3600, "h"}, {60, "m"}, {1, "s"}} {
		if s >= u.n {
			fmt.Fprintf(&b, "%d%s", s/u.n, u.unit)
			s %= u.n
		}
	}
	return b.String()
}

// timeSeconds prints a listed time as seconds, as nft lists a range of
// times.
func timeSeconds(s string) string {
	if d, ok := parseTime(s); ok && d.Uint64()%1000 == 0 {
		return fmt.Sprintf("%ds", d.Uint64()/1000)
	}
	return s
}
