package kernel

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"

	"github.com/google/nftables/expr"
	"github.com/google/nftables/xt"
	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"

	"bpfwall/rules"
)

// iptables-nft installs the matches and targets it has no native
// expression for as xtables extensions: a match or target expression
// that names the extension and carries its info, the struct the kernel
// module reads. Read prints each one it knows as the options
// iptables-save prints for it, in an "xt match NAME OPTIONS" statement;
// Parse hands them to the iptables parser (xt.go). So a rule read from
// the kernel is modelled as the same rule given to iptables-restore.
//
// The info structs are read as the kernel lays them out on this machine
// (native byte order, C alignment); every length is checked.

// xtExt prints one extension's info as iptables options; name is the
// iptables extension the options are for (conntrack with the state
// alias is "state"), or "" for the extension's own.
type xtExt func(x *exprReader, rev uint32, info []byte) (name, options string, err error)

var xtMatches = map[string]xtExt{
	"conntrack": xtConntrack,
	"state":     xtState,
	"tcp":       xtTCP,
	"udp":       xtUDP,
	"sctp":      xtSCTP,
	"multiport": xtMultiport,
	"icmp":      xtICMP("icmp", "icmp-type"),
	"icmp6":     xtICMP("icmp6", "icmpv6-type"),
	"comment":   xtComment,
	"iprange":   xtIPRange,
	"length":    xtLength,
	"dscp":      xtDSCPMatch,
	"ttl":       xtTTL("ttl"),
	"hl":        xtTTL("hl"),
	"mac":       xtMAC,
	"mark":      xtMarkMatch("mark"),
	"limit":     xtLimit,
	"pkttype":   xtPktType,
	"addrtype":  xtAddrType,
	"recent":    xtRecent,
	"hashlimit": xtHashLimit,
	"set":       xtSet,
	// bpfwall keeps these without compiling them, as it keeps them
	// from iptables-restore input.
	"owner":     xtOwner,
	"rpfilter":  xtRPFilter,
	"connmark":  xtMarkMatch("connmark"),
	"physdev":   xtPhysdev,
	"connlimit": xtConnlimit,
}

var xtTargets = map[string]xtExt{
	"REJECT": xtReject,
	"LOG":    xtLog,
	"TPROXY": xtTProxy,
	// bpfwall keeps these without compiling them, as it keeps them
	// from iptables-restore input: the nat table's, which the kernel
	// runs, and mangle's.
	"SNAT":       xtNAT("to-source"),
	"DNAT":       xtNAT("to-destination"),
	"MASQUERADE": xtNAT(""),
	"REDIRECT":   xtNAT(""),
	"MARK":       xtMarkTarget,
	"CONNMARK":   xtConnmark,
	"CHECKSUM":   xtChecksum,
	"TCPMSS":     xtTCPMSS,
	"DSCP":       xtDSCP,
	"CT":         xtCT,
}

// xtListing is what the xt matches of one listing share: the names of the
// ipsets by kernel index, and whether a set match was read.
type xtListing struct {
	ipsetNames map[uint16]string
	setMatches bool
}

// xtRaw reads a match or target expression as the kernel lists it,
// keeping its info bytes: google/nftables decodes some infos into types
// that drop what they do not know and accept short data.
func xtRaw(data []byte, target bool) (expr.Any, error) {
	ad, err := netlink.NewAttributeDecoder(data)
	if err != nil {
		return nil, err
	}
	var name string
	var rev uint32
	var info []byte
	for ad.Next() {
		// NFTA_MATCH_* and NFTA_TARGET_* number alike.
		switch ad.Type() {
		case unix.NFTA_MATCH_NAME:
			name = string(trimNUL(ad.Bytes()))
		case unix.NFTA_MATCH_REV:
			rev = binary.BigEndian.Uint32(ad.Bytes())
		case unix.NFTA_MATCH_INFO:
			info = ad.Bytes()
		}
	}
	if err := ad.Err(); err != nil {
		return nil, err
	}
	raw := xt.Unknown(info)
	if target {
		return &expr.Target{Name: name, Rev: rev, Info: &raw}, nil
	}
	return &expr.Match{Name: name, Rev: rev, Info: &raw}, nil
}

// xtTerm writes an xt match or target as an "xt" statement.
func (x *exprReader) xtTerm(kind, name string, rev uint32, info xt.InfoAny) error {
	exts := xtMatches
	if kind == "target" {
		exts = xtTargets
	}
	f, ok := exts[name]
	raw, isRaw := info.(*xt.Unknown)
	if !ok || !isRaw {
		return fmt.Errorf("xt %s %s (revision %d) is not supported", kind, name, rev)
	}
	ext, args, err := f(x, rev, *raw)
	if err != nil {
		return fmt.Errorf("xt %s %s: %w", kind, name, err)
	}
	x.flush()
	x.terms = append(x.terms, fmt.Sprintf("xt %s %s %s", kind, cmp.Or(ext, name), strconv.Quote(args)))
	return nil
}

// opts builds iptables options text.
type opts struct{ b strings.Builder }

func (o *opts) add(neg bool, name string, args ...string) {
	if o.b.Len() > 0 {
		o.b.WriteByte(' ')
	}
	if neg {
		o.b.WriteString("! ")
	}
	o.b.WriteString("--" + name)
	for _, a := range args {
		o.b.WriteByte(' ')
		o.b.WriteString(a)
	}
}

func (o *opts) String() string { return o.b.String() }

var ne = binary.NativeEndian

// needRev checks that the extension's revision is one of sizes' and that
// info holds the bytes its struct has there.
func needRev(rev uint32, info []byte, sizes map[uint32]int) error {
	n, ok := sizes[rev]
	if !ok {
		return fmt.Errorf("revision %d is not supported", rev)
	}
	return need(info, n)
}

func need(info []byte, n int) error {
	if len(info) < n {
		return fmt.Errorf("info of %d bytes, want %d", len(info), n)
	}
	return nil
}

// cString is a NUL-terminated string of a fixed-size field.
func cString(b []byte) string {
	if i := bytes.IndexByte(b, 0); i >= 0 {
		b = b[:i]
	}
	return string(b)
}

// addrOf reads an address of the rule's family from a union
// nf_inet_addr.
func (x *exprReader) addrOf(b []byte) netip.Addr {
	if x.fam == "ip6" {
		a, _ := netip.AddrFromSlice(b[:16])
		return a
	}
	a, _ := netip.AddrFromSlice(b[:4])
	return a
}

func portText(lo, hi uint16) string {
	if lo == hi {
		return strconv.Itoa(int(lo))
	}
	return fmt.Sprintf("%d:%d", lo, hi)
}

// Conntrack states as xt_conntrack numbers them (XT_CONNTRACK_STATE_*).
var xtCTStateNames = []struct {
	bit  uint16
	name string
}{{1 << 0, "INVALID"}, {1 << 3, "NEW"}, {1 << 2, "RELATED"}, {1 << 1, "ESTABLISHED"}, {1 << 8, "UNTRACKED"}, {1 << 6, "SNAT"}, {1 << 7, "DNAT"}}

func stateText(mask uint16, names []struct {
	bit  uint16
	name string
}) (string, error) {
	var out []string
	for _, n := range names {
		if mask&n.bit != 0 {
			out = append(out, n.name)
			mask &^= n.bit
		}
	}
	if mask != 0 || len(out) == 0 {
		return "", fmt.Errorf("state bits %#x", mask)
	}
	return strings.Join(out, ","), nil
}

// The flags of struct xt_conntrack_mtinfo*.
const (
	ctFlagState      = 1 << 0
	ctFlagProto      = 1 << 1
	ctFlagStatus     = 1 << 6
	ctFlagExpires    = 1 << 7
	ctFlagDirection  = 1 << 12
	ctFlagStateAlias = 1 << 13
	ctFlagsAddrPorts = 0xf<<2 | 0xf<<8
)

func xtConntrack(x *exprReader, rev uint32, info []byte) (string, string, error) {
	if err := needRev(rev, info, map[uint32]int{1: 152, 2: 156, 3: 164}); err != nil {
		return "", "", err
	}
	flags, inv := ne.Uint16(info[146:]), ne.Uint16(info[148:])
	state := uint16(info[150])
	if rev >= 2 {
		state = ne.Uint16(info[150:])
	}
	var o opts
	if flags&ctFlagStateAlias != 0 {
		// iptables-nft installs -m state as conntrack.
		if flags != ctFlagState|ctFlagStateAlias {
			return "", "", fmt.Errorf("the state alias with flags %#x", flags)
		}
		s, err := stateText(state, xtCTStateNames)
		if err != nil {
			return "", "", err
		}
		o.add(inv&ctFlagState != 0, "state", s)
		return "state", o.String(), nil
	}
	if flags&ctFlagState != 0 {
		s, err := stateText(state, xtCTStateNames)
		if err != nil {
			return "", "", err
		}
		o.add(inv&ctFlagState != 0, "ctstate", s)
	}
	if flags&ctFlagProto != 0 {
		o.add(inv&ctFlagProto != 0, "ctproto", strconv.Itoa(int(ne.Uint16(info[136:]))))
	}
	// The address and port tests, in libxt_conntrack's order: bpfwall
	// keeps them, and lowering refuses them where a chain is compiled.
	for k, name := range []string{"ctorigsrc", "ctorigdst", "ctreplsrc", "ctrepldst"} {
		bit := uint16(1) << (2 + k)
		if flags&bit == 0 {
			continue
		}
		a, m := x.addrOf(info[32*k:]), x.addrOf(info[32*k+16:])
		bits := 0
		for _, c := range m.AsSlice() {
			bits += onesPrefix(c)
		}
		if !isPrefixMask(m.AsSlice()) {
			return "", "", fmt.Errorf("--%s with mask %s", name, m)
		}
		o.add(inv&bit != 0, name, fmt.Sprintf("%s/%d", a, bits))
	}
	for k, name := range []string{"ctorigsrcport", "ctorigdstport", "ctreplsrcport", "ctrepldstport"} {
		bit := uint16(1) << (8 + k)
		if flags&bit == 0 {
			continue
		}
		// Network order up to revision 2, which tests one port; host
		// order in revision 3's ranges.
		lo := binary.BigEndian.Uint16(info[138+2*k:])
		hi := lo
		if rev == 3 {
			lo, hi = ne.Uint16(info[138+2*k:]), ne.Uint16(info[154+2*k:])
		}
		o.add(inv&bit != 0, name, portText(lo, hi))
	}
	if flags&ctFlagStatus != 0 {
		status := ne.Uint16(info[152:])
		if rev == 1 {
			status = uint16(info[151])
		}
		var names []string
		for b, n := range []string{"EXPECTED", "SEEN_REPLY", "ASSURED", "CONFIRMED"} {
			if status&(1<<b) != 0 {
				names = append(names, n)
				status &^= 1 << b
			}
		}
		if status != 0 {
			return "", "", fmt.Errorf("--ctstatus bits %#x", status)
		}
		if len(names) == 0 {
			names = []string{"NONE"}
		}
		o.add(inv&ctFlagStatus != 0, "ctstatus", strings.Join(names, ","))
	}
	if flags&ctFlagExpires != 0 {
		lo, hi := ne.Uint32(info[128:]), ne.Uint32(info[132:])
		v := strconv.FormatUint(uint64(lo), 10)
		if hi != lo {
			v += ":" + strconv.FormatUint(uint64(hi), 10)
		}
		o.add(inv&ctFlagExpires != 0, "ctexpire", v)
	}
	if flags&ctFlagDirection != 0 {
		dir := "ORIGINAL"
		if inv&ctFlagDirection != 0 {
			dir = "REPLY"
		}
		o.add(false, "ctdir", dir)
	}
	if rest := flags &^ (ctFlagState | ctFlagProto | ctFlagStatus | ctFlagExpires | ctFlagDirection | ctFlagsAddrPorts); rest != 0 {
		return "", "", fmt.Errorf("flags %#x are not supported", rest)
	}
	return "conntrack", o.String(), nil
}

// XT_STATE_* bits of struct xt_state_info.
var xtStateNames = []struct {
	bit  uint16
	name string
}{{1 << 0, "INVALID"}, {1 << 3, "NEW"}, {1 << 2, "RELATED"}, {1 << 1, "ESTABLISHED"}, {1 << 6, "UNTRACKED"}}

func xtState(x *exprReader, rev uint32, info []byte) (string, string, error) {
	if err := need(info, 4); err != nil {
		return "", "", err
	}
	mask := ne.Uint32(info)
	if mask > 0xffff {
		return "", "", fmt.Errorf("state bits %#x", mask)
	}
	s, err := stateText(uint16(mask), xtStateNames)
	if err != nil {
		return "", "", err
	}
	var o opts
	o.add(false, "state", s)
	return "state", o.String(), nil
}

// xtTCPFlagNames are the flags libxt_tcp names, in its order.
var xtTCPFlagNames = []string{"FIN", "SYN", "RST", "PSH", "ACK", "URG"}

func tcpFlagText(f uint8) (string, error) {
	switch f {
	case 0:
		return "NONE", nil
	case 0x3f:
		return "ALL", nil
	}
	if f&^0x3f != 0 {
		return "", fmt.Errorf("tcp flags %#x (ECE and CWR have no name in iptables)", f)
	}
	var out []string
	for i, n := range xtTCPFlagNames {
		if f&(1<<i) != 0 {
			out = append(out, n)
		}
	}
	return strings.Join(out, ","), nil
}

// ports adds --sport and --dport of an xt_tcp or xt_udp info.
func (o *opts) ports(info []byte, inv uint8) {
	if lo, hi := ne.Uint16(info[0:]), ne.Uint16(info[2:]); lo != 0 || hi != 0xffff {
		o.add(inv&1 != 0, "sport", portText(lo, hi))
	}
	if lo, hi := ne.Uint16(info[4:]), ne.Uint16(info[6:]); lo != 0 || hi != 0xffff {
		o.add(inv&2 != 0, "dport", portText(lo, hi))
	}
}

func xtTCP(x *exprReader, rev uint32, info []byte) (string, string, error) {
	if err := need(info, 12); err != nil {
		return "", "", err
	}
	inv := info[11]
	var o opts
	o.ports(info, inv)
	if opt := info[8]; opt != 0 {
		o.add(inv&8 != 0, "tcp-option", strconv.Itoa(int(opt)))
	}
	if mask := info[9]; mask != 0 {
		m, err := tcpFlagText(mask)
		if err != nil {
			return "", "", err
		}
		c, err := tcpFlagText(info[10])
		if err != nil {
			return "", "", err
		}
		o.add(inv&4 != 0, "tcp-flags", m, c)
	}
	if inv&^0xf != 0 {
		return "", "", fmt.Errorf("inversion flags %#x", inv)
	}
	return "tcp", o.String(), nil
}

func xtUDP(x *exprReader, rev uint32, info []byte) (string, string, error) {
	if err := need(info, 9); err != nil {
		return "", "", err
	}
	inv := info[8]
	if inv&^3 != 0 {
		return "", "", fmt.Errorf("inversion flags %#x", inv)
	}
	var o opts
	o.ports(info, inv)
	return "udp", o.String(), nil
}

// xtSCTP reads struct xt_sctp_info: dpts and spts (u16 pairs), the
// chunk map (256 bytes), the chunk match type and flag info (u32, 4×3
// bytes), flag_count, flags and invflags. Chunk types are refused: the
// compiler refuses them, and their text is not read back.
func xtSCTP(x *exprReader, rev uint32, info []byte) (string, string, error) {
	if err := needRev(rev, info, map[uint32]int{0: 292}); err != nil {
		return "", "", err
	}
	const src, dst, chunks = 1, 2, 4
	flags, inv := ne.Uint32(info[284:]), ne.Uint32(info[288:])
	if flags&chunks != 0 {
		return "", "", fmt.Errorf("--chunk-types is not supported")
	}
	if flags&^(src|dst) != 0 || inv&^flags != 0 {
		return "", "", fmt.Errorf("flags %#x, inversion flags %#x", flags, inv)
	}
	var o opts
	if flags&src != 0 {
		o.add(inv&src != 0, "sport", portText(ne.Uint16(info[4:]), ne.Uint16(info[6:])))
	}
	if flags&dst != 0 {
		o.add(inv&dst != 0, "dport", portText(ne.Uint16(info[0:]), ne.Uint16(info[2:])))
	}
	return "sctp", o.String(), nil
}

func xtMultiport(x *exprReader, rev uint32, info []byte) (string, string, error) {
	if err := needRev(rev, info, map[uint32]int{1: 48}); err != nil {
		return "", "", err
	}
	dir, ok := map[uint8]string{0: "sports", 1: "dports", 2: "ports"}[info[0]]
	count := int(info[1])
	if !ok || count == 0 || count > 15 {
		return "", "", fmt.Errorf("flags %d with %d ports", info[0], count)
	}
	var ports []string
	for i := 0; i < count; i++ {
		p := ne.Uint16(info[2+2*i:])
		if info[32+i] != 0 && i+1 < count {
			// A range takes two entries.
			ports = append(ports, portText(p, ne.Uint16(info[2+2*(i+1):])))
			i++
			continue
		}
		ports = append(ports, strconv.Itoa(int(p)))
	}
	var o opts
	o.add(info[47] != 0, dir, strings.Join(ports, ","))
	return "multiport", o.String(), nil
}

// xtICMP reads struct ipt_icmp and ip6t_icmp, which are alike.
func xtICMP(ext, option string) xtExt {
	return func(x *exprReader, rev uint32, info []byte) (string, string, error) {
		if err := need(info, 4); err != nil {
			return "", "", err
		}
		typ, lo, hi, inv := info[0], info[1], info[2], info[3]
		if inv&^1 != 0 {
			return "", "", fmt.Errorf("inversion flags %#x", inv)
		}
		var arg string
		switch {
		case typ == 0xff && lo == 0 && hi == 0xff:
			arg = "any"
		case lo == 0 && hi == 0xff:
			arg = strconv.Itoa(int(typ))
		case lo == hi:
			arg = fmt.Sprintf("%d/%d", typ, lo)
		default:
			return "", "", fmt.Errorf("type %d with codes %d to %d", typ, lo, hi)
		}
		var o opts
		o.add(inv != 0, option, arg)
		return ext, o.String(), nil
	}
}

func xtComment(x *exprReader, rev uint32, info []byte) (string, string, error) {
	if err := need(info, 256); err != nil {
		return "", "", err
	}
	var o opts
	o.add(false, "comment", rules.Quote(cString(info[:256])))
	return "comment", o.String(), nil
}

func xtIPRange(x *exprReader, rev uint32, info []byte) (string, string, error) {
	if err := needRev(rev, info, map[uint32]int{1: 65}); err != nil {
		return "", "", err
	}
	flags := info[64]
	if flags&^0x33 != 0 {
		return "", "", fmt.Errorf("flags %#x", flags)
	}
	var o opts
	if flags&1 != 0 {
		o.add(flags&0x10 != 0, "src-range", x.addrOf(info[0:]).String()+"-"+x.addrOf(info[16:]).String())
	}
	if flags&2 != 0 {
		o.add(flags&0x20 != 0, "dst-range", x.addrOf(info[32:]).String()+"-"+x.addrOf(info[48:]).String())
	}
	return "iprange", o.String(), nil
}

func xtLength(x *exprReader, rev uint32, info []byte) (string, string, error) {
	if err := need(info, 5); err != nil {
		return "", "", err
	}
	var o opts
	o.add(info[4] != 0, "length", portText(ne.Uint16(info[0:]), ne.Uint16(info[2:])))
	return "length", o.String(), nil
}

// xtTTL reads struct ipt_ttl_info and ip6t_hl_info, which are alike.
func xtTTL(ext string) xtExt {
	return func(x *exprReader, rev uint32, info []byte) (string, string, error) {
		if err := need(info, 2); err != nil {
			return "", "", err
		}
		v := strconv.Itoa(int(info[1]))
		var o opts
		switch info[0] {
		case 0:
			o.add(false, ext+"-eq", v)
		case 1:
			o.add(true, ext+"-eq", v)
		case 2:
			o.add(false, ext+"-lt", v)
		case 3:
			o.add(false, ext+"-gt", v)
		default:
			return "", "", fmt.Errorf("mode %d", info[0])
		}
		return ext, o.String(), nil
	}
}

// xtDSCPMatch reads struct xt_dscp_info: the code point and whether inverted.
func xtDSCPMatch(x *exprReader, rev uint32, info []byte) (string, string, error) {
	if err := need(info, 2); err != nil {
		return "", "", err
	}
	var o opts
	o.add(info[1] != 0, "dscp", fmt.Sprintf("0x%02x", info[0]))
	return "dscp", o.String(), nil
}

func xtMAC(x *exprReader, rev uint32, info []byte) (string, string, error) {
	if err := need(info, 12); err != nil {
		return "", "", err
	}
	var o opts
	o.add(ne.Uint32(info[8:]) != 0, "mac-source", strings.ToUpper(net.HardwareAddr(info[:6]).String()))
	return "mac", o.String(), nil
}

// xtMarkMatch reads struct xt_mark_mtinfo1 and xt_connmark_mtinfo1, which
// are alike: mark, mask, invert.
func xtMarkMatch(ext string) xtExt {
	return func(x *exprReader, rev uint32, info []byte) (string, string, error) {
		if err := needRev(rev, info, map[uint32]int{1: 9}); err != nil {
			return "", "", err
		}
		v := fmt.Sprintf("%#x", ne.Uint32(info[0:]))
		if mask := ne.Uint32(info[4:]); mask != 0xffffffff {
			v += fmt.Sprintf("/%#x", mask)
		}
		var o opts
		o.add(info[8] != 0, "mark", v)
		return ext, o.String(), nil
	}
}

// rateText finds "n/unit" that iptables reads back as avg, the interval
// between packets in 1/scale s: n = scale*unit/avg, rounded down. secs is
// the unit's length.
func rateText(avg, scale uint64) (text string, secs uint64, err error) {
	for _, u := range []struct {
		name string
		secs uint64
	}{{"sec", 1}, {"min", 60}, {"hour", 3600}, {"day", 86400}} {
		if avg == 0 {
			break
		}
		n := scale * u.secs / avg
		if n != 0 && scale*u.secs/n == avg {
			return fmt.Sprintf("%d/%s", n, u.name), u.secs, nil
		}
	}
	return "", 0, fmt.Errorf("no rate reads back as an interval of %d/%d s", avg, scale)
}

func xtLimit(x *exprReader, rev uint32, info []byte) (string, string, error) {
	if err := need(info, 8); err != nil {
		return "", "", err
	}
	rate, _, err := rateText(uint64(ne.Uint32(info[0:])), 10000)
	if err != nil {
		return "", "", err
	}
	var o opts
	o.add(false, "limit", rate)
	o.add(false, "limit-burst", strconv.Itoa(int(ne.Uint32(info[4:]))))
	return "limit", o.String(), nil
}

func xtPktType(x *exprReader, rev uint32, info []byte) (string, string, error) {
	if err := need(info, 8); err != nil {
		return "", "", err
	}
	name, ok := map[uint32]string{0: "unicast", 1: "broadcast", 2: "multicast", 3: "otherhost", 4: "outgoing"}[ne.Uint32(info[0:])]
	if !ok {
		return "", "", fmt.Errorf("packet type %d", ne.Uint32(info[0:]))
	}
	var o opts
	o.add(ne.Uint32(info[4:]) != 0, "pkt-type", name)
	return "pkttype", o.String(), nil
}

// addrTypeNames are the RTN_* types of xt_addrtype, bit i for type i.
var addrTypeNames = []string{"UNSPEC", "UNICAST", "LOCAL", "BROADCAST", "ANYCAST", "MULTICAST", "BLACKHOLE", "UNREACHABLE", "PROHIBIT", "THROW", "NAT", "XRESOLVE"}

func addrTypeText(m uint16) (string, error) {
	var out []string
	for i, n := range addrTypeNames {
		if m&(1<<i) != 0 {
			out = append(out, n)
		}
	}
	if m>>len(addrTypeNames) != 0 {
		return "", fmt.Errorf("address types %#x", m)
	}
	return strings.Join(out, ","), nil
}

func xtAddrType(x *exprReader, rev uint32, info []byte) (string, string, error) {
	if err := needRev(rev, info, map[uint32]int{1: 8}); err != nil {
		return "", "", err
	}
	src, dst, flags := ne.Uint16(info[0:]), ne.Uint16(info[2:]), ne.Uint32(info[4:])
	if flags&^0xf != 0 {
		return "", "", fmt.Errorf("flags %#x", flags)
	}
	var o opts
	for _, t := range []struct {
		mask uint16
		inv  bool
		name string
	}{{src, flags&1 != 0, "src-type"}, {dst, flags&2 != 0, "dst-type"}} {
		if t.mask == 0 {
			continue
		}
		s, err := addrTypeText(t.mask)
		if err != nil {
			return "", "", err
		}
		o.add(t.inv, t.name, s)
	}
	if flags&4 != 0 {
		o.add(false, "limit-iface-in")
	}
	if flags&8 != 0 {
		o.add(false, "limit-iface-out")
	}
	return "addrtype", o.String(), nil
}

// The check_set bits of struct xt_recent_mtinfo.
const (
	recentCheck  = 1 << 0
	recentSet    = 1 << 1
	recentUpdate = 1 << 2
	recentRemove = 1 << 3
	recentTTL    = 1 << 4
	recentReap   = 1 << 5
)

func xtRecent(x *exprReader, rev uint32, info []byte) (string, string, error) {
	if err := needRev(rev, info, map[uint32]int{0: 211, 1: 228}); err != nil { // to the end of side, and of mask
		return "", "", err
	}
	seconds, hits, cs, inv := ne.Uint32(info[0:]), ne.Uint32(info[4:]), info[8], info[9] != 0
	var o opts
	cmd := ""
	for _, c := range []struct {
		bit  uint8
		name string
	}{{recentSet, "set"}, {recentCheck, "rcheck"}, {recentUpdate, "update"}, {recentRemove, "remove"}} {
		if cs&c.bit != 0 {
			if cmd != "" {
				return "", "", fmt.Errorf("both --%s and --%s", cmd, c.name)
			}
			cmd = c.name
		}
	}
	if cmd == "" || cs&^0x3f != 0 {
		return "", "", fmt.Errorf("check_set %#x", cs)
	}
	o.add(inv, cmd)
	if seconds != 0 {
		o.add(false, "seconds", strconv.FormatUint(uint64(seconds), 10))
	}
	if cs&recentReap != 0 {
		o.add(false, "reap")
	}
	if hits != 0 {
		o.add(false, "hitcount", strconv.FormatUint(uint64(hits), 10))
	}
	if cs&recentTTL != 0 {
		o.add(false, "rttl")
	}
	o.add(false, "name", rules.Quote(cString(info[10:210])))
	if rev == 1 {
		o.add(false, "mask", x.addrOf(info[212:]).String())
	}
	switch info[210] {
	case 0:
		o.add(false, "rsource")
	case 1:
		o.add(false, "rdest")
	default:
		return "", "", fmt.Errorf("side %d", info[210])
	}
	return "recent", o.String(), nil
}

// The mode bits of struct hashlimit_cfg*.
const (
	hashDstIP     = 1 << 0
	hashDstPort   = 1 << 1
	hashSrcIP     = 1 << 2
	hashSrcPort   = 1 << 3
	hashInvert    = 1 << 4
	hashBytes     = 1 << 5
	hashRateMatch = 1 << 6
)

func xtHashLimit(x *exprReader, rev uint32, info []byte) (string, string, error) {
	if err := needRev(rev, info, map[uint32]int{2: 294, 3: 298}); err != nil {
		return "", "", err
	}
	name := cString(info[:255])
	c := info[256:]
	avg, burst, mode := ne.Uint64(c[0:]), ne.Uint64(c[8:]), ne.Uint32(c[16:])
	size, max, gc, expire := ne.Uint32(c[20:]), ne.Uint32(c[24:]), ne.Uint32(c[28:]), ne.Uint32(c[32:])
	masks := c[36:]
	if rev == 3 {
		masks = c[40:]
	}
	if mode&hashBytes != 0 {
		return "", "", fmt.Errorf("a byte rate is not supported")
	}
	if mode&hashRateMatch != 0 || mode&^0x5f != 0 {
		return "", "", fmt.Errorf("mode %#x is not supported", mode)
	}
	rate, secs, err := rateText(avg, 1000000)
	if err != nil {
		return "", "", err
	}
	// Options at their defaults are left out, as libxt_hashlimit's save
	// does; the parser puts the same values back.
	var o opts
	if mode&hashInvert != 0 {
		o.add(false, "hashlimit-above", rate)
	} else {
		o.add(false, "hashlimit-upto", rate)
	}
	if burst != 5 {
		o.add(false, "hashlimit-burst", strconv.FormatUint(burst, 10))
	}
	var keys []string
	for _, k := range []struct {
		bit  uint32
		name string
	}{{hashSrcIP, "srcip"}, {hashSrcPort, "srcport"}, {hashDstIP, "dstip"}, {hashDstPort, "dstport"}} {
		if mode&k.bit != 0 {
			keys = append(keys, k.name)
		}
	}
	if len(keys) > 0 {
		o.add(false, "hashlimit-mode", strings.Join(keys, ","))
	}
	o.add(false, "hashlimit-name", rules.Quote(name))
	for _, v := range []struct {
		name      string
		v, unless uint32
	}{{"htable-size", size, 0}, {"htable-max", max, 0}, {"htable-gcinterval", gc, 1000}, {"htable-expire", expire, uint32(secs * 1000)}} {
		if v.v != v.unless {
			o.add(false, "hashlimit-"+v.name, strconv.FormatUint(uint64(v.v), 10))
		}
	}
	full := uint8(32)
	if x.fam == "ip6" {
		full = 128
	}
	if masks[0] != full {
		o.add(false, "hashlimit-srcmask", strconv.Itoa(int(masks[0])))
	}
	if masks[1] != full {
		o.add(false, "hashlimit-dstmask", strconv.Itoa(int(masks[1])))
	}
	return "hashlimit", o.String(), nil
}

func xtReject(x *exprReader, rev uint32, info []byte) (string, string, error) {
	if err := need(info, 4); err != nil {
		return "", "", err
	}
	with := ne.Uint32(info)
	names := []string{"icmp-net-unreachable", "icmp-host-unreachable", "icmp-proto-unreachable", "icmp-port-unreachable", "", "icmp-net-prohibited", "icmp-host-prohibited", "tcp-reset", "icmp-admin-prohibited"}
	if x.fam == "ip6" {
		names = []string{"icmp6-no-route", "icmp6-adm-prohibited", "", "icmp6-addr-unreachable", "icmp6-port-unreachable", "", "tcp-reset", "icmp6-policy-fail", "icmp6-reject-route"}
	}
	if int(with) >= len(names) || names[with] == "" {
		return "", "", fmt.Errorf("reject type %d is not supported", with)
	}
	var o opts
	o.add(false, "reject-with", names[with])
	return "REJECT", o.String(), nil
}

// xtTProxy reads struct xt_tproxy_target_info_v1 (revision 0 is IPv4's
// older layout, which iptables no longer installs).
func xtTProxy(x *exprReader, rev uint32, info []byte) (string, string, error) {
	if err := needRev(rev, info, map[uint32]int{1: 26}); err != nil {
		return "", "", err
	}
	mask, value := ne.Uint32(info[0:]), ne.Uint32(info[4:])
	var o opts
	o.add(false, "on-port", strconv.Itoa(int(binary.BigEndian.Uint16(info[24:]))))
	if a := x.addrOf(info[8:]); !a.IsUnspecified() {
		o.add(false, "on-ip", a.String())
	}
	if mask != 0 || value != 0 {
		o.add(false, "tproxy-mark", fmt.Sprintf("%#x/%#x", value, mask))
	}
	return "TPROXY", o.String(), nil
}

func xtLog(x *exprReader, rev uint32, info []byte) (string, string, error) {
	if err := need(info, 32); err != nil {
		return "", "", err
	}
	level, flags := info[0], info[1]
	var o opts
	if p := cString(info[2:32]); p != "" {
		o.add(false, "log-prefix", rules.Quote(p))
	}
	o.add(false, "log-level", strconv.Itoa(int(level)))
	for _, f := range []struct {
		bit  uint8
		name string
	}{{rules.LogTCPSeq, "log-tcp-sequence"}, {rules.LogTCPOpt, "log-tcp-options"}, {rules.LogIPOpt, "log-ip-options"}, {rules.LogUID, "log-uid"}, {rules.LogMACDecode, "log-macdecode"}} {
		if flags&f.bit != 0 {
			o.add(false, f.name)
			flags &^= f.bit
		}
	}
	if flags != 0 {
		return "", "", fmt.Errorf("log flags %#x are not supported", flags)
	}
	return "LOG", o.String(), nil
}

// The flags of struct xt_set_info and of the set match (ipset/ip_set.h).
const (
	ipsetInvMatch          = 1 << 0 // IPSET_INV_MATCH; bit i: dimension i is src
	ipsetReturnNomatch     = 1 << 7 // IPSET_RETURN_NOMATCH
	ipsetSkipCounters      = 1 << 3 // IPSET_FLAG_SKIP_COUNTER_UPDATE
	ipsetSkipSubcounters   = 1 << 4 // IPSET_FLAG_SKIP_SUBCOUNTER_UPDATE
	ipsetMatchCounters     = 1 << 5 // IPSET_FLAG_MATCH_COUNTERS
	ipsetFlagReturnNomatch = 1 << 7 // IPSET_FLAG_RETURN_NOMATCH
)

// xtSet reads struct xt_set_info_match_v1, v3 and v4 (revision 2 is v1's
// layout). The set is named by its kernel index, which ipset turns back
// into the name.
func xtSet(x *exprReader, rev uint32, info []byte) (string, string, error) {
	if err := needRev(rev, info, map[uint32]int{1: 4, 2: 4, 3: 44, 4: 44}); err != nil {
		return "", "", err
	}
	index, dim, flags := ne.Uint16(info[0:]), int(info[2]), info[3]
	if dim < 1 || dim > 6 {
		return "", "", fmt.Errorf("%d dimensions", dim)
	}
	name, err := x.xt.ipsetName(index)
	if err != nil {
		return "", "", err
	}
	dirs := make([]string, dim)
	for i := range dirs {
		dirs[i] = "dst"
		if flags&(1<<(i+1)) != 0 {
			dirs[i] = "src"
		}
	}
	var o opts
	o.add(flags&ipsetInvMatch != 0, "match-set", rules.Quote(name), strings.Join(dirs, ","))
	if flags&ipsetReturnNomatch != 0 {
		o.add(false, "return-nomatch")
	}
	if rev >= 3 {
		// struct ip_set_counter_match0 (v3: u8 op, u64 value) and
		// ip_set_counter_match (v4: u64 value, u8 op); then u32 flags.
		opPackets, opBytes, mflags := info[8], info[24], ne.Uint32(info[40:])
		if rev == 4 {
			opPackets, opBytes = info[16], info[32]
		}
		if opPackets != 0 || opBytes != 0 || mflags&ipsetMatchCounters != 0 {
			return "", "", fmt.Errorf("counter tests (--packets-*, --bytes-*) are not supported")
		}
		if mflags&ipsetSkipCounters != 0 {
			o.add(true, "update-counters")
		}
		if mflags&ipsetSkipSubcounters != 0 {
			o.add(true, "update-subcounters")
		}
		if mflags&ipsetFlagReturnNomatch != 0 && flags&ipsetReturnNomatch == 0 {
			o.add(false, "return-nomatch")
		}
	}
	x.xt.setMatches = true
	return "set", o.String(), nil
}

// ipsetName asks ipset for the name of the set of kernel index i.
func (xs *xtListing) ipsetName(i uint16) (string, error) {
	if name, ok := xs.ipsetNames[i]; ok {
		return name, nil
	}
	conn, err := netlink.Dial(unix.NETLINK_NETFILTER, nil)
	if err != nil {
		return "", fmt.Errorf("open netlink: %w", err)
	}
	defer conn.Close()
	ae := netlink.NewAttributeEncoder()
	ae.Uint8(ipsetAttrProtocol, ipsetProtocol)
	ae.Do(ipsetAttrIndex, func() ([]byte, error) { return binary.BigEndian.AppendUint16(nil, i), nil })
	data, err := ae.Encode()
	if err != nil {
		return "", err
	}
	msgs, err := conn.Execute(netlink.Message{
		Header: netlink.Header{Type: netlink.HeaderType(nfnlSubsysIPSet<<8 | ipsetCmdGetByIndex), Flags: netlink.Request},
		Data:   append([]byte{unix.AF_INET, unix.NFNETLINK_V0, 0, 0}, data...),
	})
	if err != nil {
		return "", fmt.Errorf("ipset index %d: %w", i, err)
	}
	for _, m := range msgs {
		if len(m.Data) < 4 {
			continue
		}
		ad, err := netlink.NewAttributeDecoder(m.Data[4:])
		if err != nil {
			return "", err
		}
		for ad.Next() {
			if ad.Type() == ipsetAttrSetName {
				name := string(trimNUL(ad.Bytes()))
				if xs.ipsetNames == nil {
					xs.ipsetNames = map[uint16]string{}
				}
				xs.ipsetNames[i] = name
				return name, nil
			}
		}
	}
	return "", fmt.Errorf("ipset index %d: no set name in the reply", i)
}

// ipset's netlink protocol (include/uapi/linux/netfilter/ipset/ip_set.h).
const (
	nfnlSubsysIPSet    = 6
	ipsetCmdGetByIndex = 15
	ipsetProtocol      = 7
	ipsetAttrProtocol  = 1
	ipsetAttrSetName   = 2
	ipsetAttrIndex     = 11
)

// The flags of struct nf_nat_range and nf_nat_ipv4_range.
const (
	natMapIPs        = 1 << 0
	natProto         = 1 << 1
	natRandom        = 1 << 2
	natPersistent    = 1 << 3
	natRandomFully   = 1 << 4
	natKnownFlagBits = 0x1f
)

// xtNAT reads the range of SNAT and DNAT (option to: --to-source,
// --to-destination) and of MASQUERADE and REDIRECT (to == "": ports
// only): struct nf_nat_ipv4_multi_range_compat at revision 0 of an IPv4
// table, struct nf_nat_range at revision 1 (and at 0 in IPv6), struct
// nf_nat_range2 at revision 2.
func xtNAT(to string) xtExt {
	return func(x *exprReader, rev uint32, info []byte) (string, string, error) {
		var flags uint32
		var lo, hi netip.Addr
		var plo, phi uint16
		switch {
		case rev == 0 && x.fam == "ip":
			if err := need(info, 20); err != nil {
				return "", "", err
			}
			if n := ne.Uint32(info[0:]); n != 1 {
				return "", "", fmt.Errorf("%d ranges", n)
			}
			flags = ne.Uint32(info[4:])
			lo, hi = x.addrOf(info[8:]), x.addrOf(info[12:])
			plo, phi = binary.BigEndian.Uint16(info[16:]), binary.BigEndian.Uint16(info[18:])
		case rev <= 2:
			if err := need(info, 40); err != nil {
				return "", "", err
			}
			flags = ne.Uint32(info[0:])
			lo, hi = x.addrOf(info[4:]), x.addrOf(info[20:])
			plo, phi = binary.BigEndian.Uint16(info[36:]), binary.BigEndian.Uint16(info[38:])
		default:
			return "", "", fmt.Errorf("revision %d is not supported", rev)
		}
		if flags&^natKnownFlagBits != 0 {
			return "", "", fmt.Errorf("range flags %#x are not supported", flags)
		}
		var o opts
		ports := ""
		if flags&natProto != 0 {
			ports = portText(plo, phi)
			ports = strings.Replace(ports, ":", "-", 1)
		}
		switch {
		case to != "":
			var v string
			if flags&natMapIPs != 0 {
				v = lo.String()
				if hi != lo {
					v += "-" + hi.String()
				}
				if x.fam == "ip6" && ports != "" {
					v = "[" + v + "]"
				}
			}
			if ports != "" {
				v += ":" + ports
			}
			o.add(false, to, v)
		case flags&natMapIPs != 0:
			return "", "", fmt.Errorf("an address range is not supported")
		case ports != "":
			o.add(false, "to-ports", ports)
		}
		if flags&natRandom != 0 {
			o.add(false, "random")
		}
		if flags&natRandomFully != 0 {
			o.add(false, "random-fully")
		}
		if flags&natPersistent != 0 {
			o.add(false, "persistent")
		}
		return "", o.String(), nil
	}
}

func xtMarkTarget(x *exprReader, rev uint32, info []byte) (string, string, error) {
	if err := needRev(rev, info, map[uint32]int{2: 8}); err != nil {
		return "", "", err
	}
	var o opts
	o.add(false, "set-xmark", fmt.Sprintf("%#x/%#x", ne.Uint32(info[0:]), ne.Uint32(info[4:])))
	return "MARK", o.String(), nil
}

func xtConnmark(x *exprReader, rev uint32, info []byte) (string, string, error) {
	if err := needRev(rev, info, map[uint32]int{1: 14, 2: 14}); err != nil {
		return "", "", err
	}
	// Revision 1 has the mode after the masks; revision 2 a shift
	// direction and count first.
	ctmark, ctmask, nfmask := ne.Uint32(info[0:]), ne.Uint32(info[4:]), ne.Uint32(info[8:])
	mode := info[12]
	if rev == 2 {
		if err := need(info, 15); err != nil {
			return "", "", err
		}
		if info[13] != 0 {
			return "", "", fmt.Errorf("a shift is not supported")
		}
		mode = info[14]
	}
	var o opts
	switch mode {
	case 0:
		o.add(false, "set-xmark", fmt.Sprintf("%#x/%#x", ctmark, ctmask))
	case 1:
		o.add(false, "save-mark")
		o.add(false, "nfmask", fmt.Sprintf("%#x", nfmask))
		o.add(false, "ctmask", fmt.Sprintf("%#x", ctmask))
	case 2:
		o.add(false, "restore-mark")
		o.add(false, "nfmask", fmt.Sprintf("%#x", nfmask))
		o.add(false, "ctmask", fmt.Sprintf("%#x", ctmask))
	default:
		return "", "", fmt.Errorf("mode %d", mode)
	}
	return "CONNMARK", o.String(), nil
}

func xtChecksum(x *exprReader, rev uint32, info []byte) (string, string, error) {
	if err := need(info, 1); err != nil {
		return "", "", err
	}
	if info[0] != 1 {
		return "", "", fmt.Errorf("operation %d", info[0])
	}
	var o opts
	o.add(false, "checksum-fill")
	return "CHECKSUM", o.String(), nil
}

func xtTCPMSS(x *exprReader, rev uint32, info []byte) (string, string, error) {
	if err := need(info, 2); err != nil {
		return "", "", err
	}
	var o opts
	if mss := ne.Uint16(info); mss == 0xffff {
		o.add(false, "clamp-mss-to-pmtu")
	} else {
		o.add(false, "set-mss", strconv.Itoa(int(mss)))
	}
	return "TCPMSS", o.String(), nil
}

func xtDSCP(x *exprReader, rev uint32, info []byte) (string, string, error) {
	if err := need(info, 1); err != nil {
		return "", "", err
	}
	var o opts
	o.add(false, "set-dscp", fmt.Sprintf("0x%02x", info[0]))
	return "DSCP", o.String(), nil
}

func xtOwner(x *exprReader, rev uint32, info []byte) (string, string, error) {
	if err := needRev(rev, info, map[uint32]int{1: 18}); err != nil {
		return "", "", err
	}
	match, inv := info[16], info[17]
	if match&^0xf != 0 {
		return "", "", fmt.Errorf("flags %#x", match)
	}
	var o opts
	idText := func(lo, hi uint32) string {
		if lo == hi {
			return strconv.FormatUint(uint64(lo), 10)
		}
		return fmt.Sprintf("%d-%d", lo, hi)
	}
	if match&1 != 0 {
		o.add(inv&1 != 0, "uid-owner", idText(ne.Uint32(info[0:]), ne.Uint32(info[4:])))
	}
	if match&2 != 0 {
		o.add(inv&2 != 0, "gid-owner", idText(ne.Uint32(info[8:]), ne.Uint32(info[12:])))
	}
	if match&8 != 0 {
		o.add(false, "suppl-groups")
	}
	if match&4 != 0 {
		o.add(inv&4 != 0, "socket-exists")
	}
	return "owner", o.String(), nil
}

func xtRPFilter(x *exprReader, rev uint32, info []byte) (string, string, error) {
	if err := need(info, 1); err != nil {
		return "", "", err
	}
	f := info[0]
	if f&^0xf != 0 {
		return "", "", fmt.Errorf("flags %#x", f)
	}
	var o opts
	for _, b := range []struct {
		bit  uint8
		name string
	}{{1, "loose"}, {2, "validmark"}, {4, "accept-local"}, {8, "invert"}} {
		if f&b.bit != 0 {
			o.add(false, b.name)
		}
	}
	return "rpfilter", o.String(), nil
}

// ifaceMasked is an interface name as xtables keeps it, with the mask of
// the bytes compared: a name whose NUL is not compared is a prefix
// ("eth+").
func ifaceMasked(name, mask []byte) string {
	n := cString(name)
	k := 0
	for k < len(mask) && mask[k] == 0xff {
		k++
	}
	if k > len(n) {
		return n
	}
	return n[:k] + "+" // libxtables keeps the "+" in the name too
}

func xtPhysdev(x *exprReader, rev uint32, info []byte) (string, string, error) {
	if err := need(info, 66); err != nil {
		return "", "", err
	}
	inv, bits := info[64], info[65]
	if bits&^0x1f != 0 {
		return "", "", fmt.Errorf("flags %#x", bits)
	}
	var o opts
	if bits&8 != 0 {
		o.add(inv&8 != 0, "physdev-is-in")
	}
	if bits&1 != 0 {
		o.add(inv&1 != 0, "physdev-in", ifaceMasked(info[0:16], info[16:32]))
	}
	if bits&16 != 0 {
		o.add(inv&16 != 0, "physdev-is-out")
	}
	if bits&2 != 0 {
		o.add(inv&2 != 0, "physdev-out", ifaceMasked(info[32:48], info[48:64]))
	}
	if bits&4 != 0 {
		o.add(inv&4 != 0, "physdev-is-bridged")
	}
	return "physdev", o.String(), nil
}

// The flags of struct xt_ct_target_info.
const (
	ctTargetNotrack      = 1 << 0
	ctTargetNotrackAlias = 1 << 1 // the NOTRACK target
)

// xtCT reads struct xt_ct_target_info (revision 0) and
// xt_ct_target_info_v1 (revisions 1 and 2).
func xtCT(x *exprReader, rev uint32, info []byte) (string, string, error) {
	if err := needRev(rev, info, map[uint32]int{0: 28, 1: 60, 2: 60}); err != nil {
		return "", "", err
	}
	flags, zone := ne.Uint16(info[0:]), ne.Uint16(info[2:])
	if ne.Uint32(info[4:]) != 0 || ne.Uint32(info[8:]) != 0 {
		return "", "", fmt.Errorf("--ctevents and --expevents are not supported")
	}
	if flags&^(ctTargetNotrack|ctTargetNotrackAlias) != 0 {
		return "", "", fmt.Errorf("flags %#x (zone directions or marks) are not supported", flags)
	}
	if flags&ctTargetNotrackAlias != 0 {
		return "NOTRACK", "", nil
	}
	var o opts
	if flags&ctTargetNotrack != 0 {
		o.add(false, "notrack")
	}
	if h := cString(info[12:28]); h != "" {
		o.add(false, "helper", rules.Quote(h))
	}
	if rev > 0 {
		if tm := cString(info[28:60]); tm != "" {
			o.add(false, "timeout", rules.Quote(tm))
		}
	}
	if zone != 0 {
		o.add(false, "zone", strconv.Itoa(int(zone)))
	}
	return "CT", o.String(), nil
}

// xtConnlimit reads struct xt_connlimit_info (revision 1).
func xtConnlimit(x *exprReader, rev uint32, info []byte) (string, string, error) {
	if err := needRev(rev, info, map[uint32]int{1: 24}); err != nil {
		return "", "", err
	}
	m := x.addrOf(info[0:]).AsSlice()
	if !isPrefixMask(m) {
		return "", "", fmt.Errorf("mask %x is no prefix", m)
	}
	bits := 0
	for _, c := range m {
		bits += onesPrefix(c)
	}
	limit, flags := ne.Uint32(info[16:]), ne.Uint32(info[20:])
	if flags&^3 != 0 {
		return "", "", fmt.Errorf("flags %#x", flags)
	}
	var o opts
	if flags&1 != 0 {
		o.add(false, "connlimit-upto", strconv.FormatUint(uint64(limit), 10))
	} else {
		o.add(false, "connlimit-above", strconv.FormatUint(uint64(limit), 10))
	}
	o.add(false, "connlimit-mask", strconv.Itoa(bits))
	if flags&2 != 0 {
		o.add(false, "connlimit-daddr")
	} else {
		o.add(false, "connlimit-saddr")
	}
	return "connlimit", o.String(), nil
}
