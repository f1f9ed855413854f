package kernel

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"bpfwall/parser/nft"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"
)

// The statements and lookups of the kernel's rules, written as nft text.

// ifaceName is the name of the interface whose index data holds (host
// byte order), in the calling thread's network namespace: what nft lists
// for iif and oif.
func ifaceName(data []byte) (string, error) {
	idx := binary.NativeEndian.Uint32(data)
	ifi, err := net.InterfaceByIndex(int(idx))
	if err != nil {
		return "", fmt.Errorf("interface index %d: %w", idx, err)
	}
	return ifi.Name, nil
}

// ctStateNames names the state bits of m.
func ctStateList(m uint32) ([]string, error) {
	var names []string
	left := m
	for _, b := range nft.CTStateBits {
		if m&b.Bit != 0 {
			names = append(names, b.Name)
			left &^= b.Bit
		}
	}
	if left != 0 || len(names) == 0 {
		return nil, fmt.Errorf("ct state %#x is not supported", m)
	}
	return names, nil
}

func ctStateSet(op string, names []string) string {
	if len(names) == 1 {
		return "ct state " + op + names[0]
	}
	return "ct state " + op + "{ " + strings.Join(names, ", ") + " }"
}

// ctCmp writes a comparison of the conntrack state. A packet has one
// state bit, so (state & m) != 0 is membership in m and (state & m) == 0
// is its negation.
func (x *exprReader) ctCmp(l load, e *expr.Cmp) error {
	if len(e.Data) != 4 || (e.Op != expr.CmpOpEq && e.Op != expr.CmpOpNeq) {
		return fmt.Errorf("ct state comparison is not supported")
	}
	v := binary.NativeEndian.Uint32(e.Data)
	neg := ""
	if e.Op == expr.CmpOpNeq {
		neg = "!= "
	}
	x.flush()
	if l.mask != nil && v == 0 {
		names, err := ctStateList(binary.NativeEndian.Uint32(l.mask))
		if err != nil {
			return err
		}
		op := "!= "
		if e.Op == expr.CmpOpNeq {
			op = ""
		}
		x.terms = append(x.terms, ctStateSet(op, names))
		return nil
	}
	if l.mask != nil && v&binary.NativeEndian.Uint32(l.mask) != v {
		return fmt.Errorf("ct state & %#x compared with %#x is not supported", binary.NativeEndian.Uint32(l.mask), v)
	}
	// (state & m) == v for one bit v in m, or state == v: the state is v.
	names, err := ctStateList(v)
	if err != nil || len(names) != 1 {
		return fmt.Errorf("ct state compared with %#x is not supported", v)
	}
	x.terms = append(x.terms, ctStateSet(neg, names))
	return nil
}

// ctStatusCmp writes a comparison of the entry's status: masked, as
// "ct status & mask == value" with the numbers, which Parse reads as it
// reads the text (the flags it has, snat and dnat, and what it refuses);
// unmasked, a comparison of the whole word.
func (x *exprReader) ctStatusCmp(l load, e *expr.Cmp) error {
	if len(e.Data) != 4 || (e.Op != expr.CmpOpEq && e.Op != expr.CmpOpNeq) {
		return fmt.Errorf("ct status comparison is not supported")
	}
	op := "=="
	if e.Op == expr.CmpOpNeq {
		op = "!="
	}
	x.flush()
	v := binary.NativeEndian.Uint32(e.Data)
	if l.mask == nil {
		x.terms = append(x.terms, fmt.Sprintf("ct status %s %#x", op, v))
		return nil
	}
	x.terms = append(x.terms, fmt.Sprintf("ct status & %#x %s %#x", binary.NativeEndian.Uint32(l.mask), op, v))
	return nil
}

var logLevelText = map[expr.LogLevel]string{
	expr.LogLevelEmerg: "emerg", expr.LogLevelAlert: "alert", expr.LogLevelCrit: "crit", expr.LogLevelErr: "err",
	expr.LogLevelWarning: "warn", expr.LogLevelNotice: "notice", expr.LogLevelInfo: "info", expr.LogLevelDebug: "debug",
	expr.LogLevelAudit: "audit",
}

func logText(e *expr.Log) (string, error) {
	has := func(attr int) bool { return e.Key&(1<<attr) != 0 }
	s := "log"
	if has(unix.NFTA_LOG_PREFIX) {
		s += " prefix " + strconv.Quote(string(bytes.TrimRight(e.Data, "\x00")))
	}
	if has(unix.NFTA_LOG_GROUP) {
		s += fmt.Sprintf(" group %d", e.Group)
	}
	if has(unix.NFTA_LOG_SNAPLEN) {
		s += fmt.Sprintf(" snaplen %d", e.Snaplen)
	}
	if has(unix.NFTA_LOG_QTHRESHOLD) {
		s += fmt.Sprintf(" queue-threshold %d", e.QThreshold)
	}
	if has(unix.NFTA_LOG_LEVEL) {
		name, ok := logLevelText[e.Level]
		if !ok {
			return "", fmt.Errorf("log level %d is not supported", e.Level)
		}
		s += " level " + name
	}
	if has(unix.NFTA_LOG_FLAGS) {
		f := e.Flags
		switch {
		case f&expr.LogFlagsMask == expr.LogFlagsMask:
			s += " flags all"
		case f&^expr.LogFlagsMask != 0:
			return "", fmt.Errorf("log flags %#x are not supported", f)
		default:
			s += nft.LogFlagsText(uint8(f))
		}
	}
	return s, nil
}

var limitUnitText = map[expr.LimitTime]string{
	expr.LimitTimeSecond: "second", expr.LimitTimeMinute: "minute", expr.LimitTimeHour: "hour",
	expr.LimitTimeDay: "day", expr.LimitTimeWeek: "week",
}

func limitText(e *expr.Limit) string {
	s := "limit rate "
	if e.Over {
		s += "over "
	}
	s += strconv.FormatUint(e.Rate, 10)
	unit := "packets"
	if e.Type == expr.LimitTypePktBytes {
		s += " bytes"
		unit = "bytes"
	}
	s += "/" + limitUnitText[e.Unit]
	if e.Burst != 0 || unit == "bytes" {
		s += fmt.Sprintf(" burst %d %s", e.Burst, unit)
	}
	return s
}

var (
	icmpRejectCodes   = map[uint8]string{0: "net-unreachable", 1: "host-unreachable", 2: "prot-unreachable", 3: "port-unreachable", 9: "net-prohibited", 10: "host-prohibited", 13: "admin-prohibited"}
	icmpv6RejectCodes = map[uint8]string{0: "no-route", 1: "admin-prohibited", 3: "addr-unreachable", 4: "port-unreachable", 5: "policy-fail", 6: "reject-route"}
	icmpxRejectCodes  = map[uint8]string{0: "no-route", 1: "port-unreachable", 2: "host-unreachable", 3: "admin-prohibited"}
)

// rejectText writes a reject statement; the family's default (port
// unreachable) is the bare "reject" nft lists.
func (x *exprReader) rejectText(e *expr.Reject) (string, error) {
	switch e.Type {
	case unix.NFT_REJECT_TCP_RST:
		return "reject with tcp reset", nil
	case unix.NFT_REJECT_ICMPX_UNREACH:
		name, ok := icmpxRejectCodes[e.Code]
		if !ok {
			return "", fmt.Errorf("reject with icmpx code %d is not supported", e.Code)
		}
		if name == "port-unreachable" && x.fam == "inet" {
			return "reject", nil
		}
		return "reject with icmpx type " + name, nil
	case unix.NFT_REJECT_ICMP_UNREACH:
		l3 := x.l3
		if x.fam == "ip" || x.fam == "ip6" {
			l3 = x.fam
		}
		codes, kind, dflt := icmpRejectCodes, "icmp", uint8(3)
		switch l3 {
		case "ip":
		case "ip6":
			codes, kind, dflt = icmpv6RejectCodes, "icmpv6", 4
		default:
			return "", fmt.Errorf("reject with icmp code %d of no family", e.Code)
		}
		name, ok := codes[e.Code]
		if !ok {
			return "", fmt.Errorf("reject with %s code %d is not supported", kind, e.Code)
		}
		if e.Code == dflt && x.fam == l3 {
			return "reject", nil
		}
		return "reject with " + kind + " type " + name, nil
	}
	return "", fmt.Errorf("reject type %d is not supported", e.Type)
}

// tproxyText writes a tproxy statement from the immediates it reads.
func (x *exprReader) tproxyText(e *expr.TProxy) (string, error) {
	s := "tproxy "
	if x.fam == "inet" {
		switch e.Family {
		case unix.NFPROTO_IPV4:
			s += "ip "
		case unix.NFPROTO_IPV6:
			s += "ip6 "
		}
	}
	s += "to "
	if e.RegAddr != 0 {
		l, ok := x.regs[e.RegAddr]
		a, ok2 := netip.AddrFromSlice(l.imm)
		if !ok || !ok2 {
			return "", fmt.Errorf("tproxy address is not an immediate address")
		}
		if a.Is6() {
			s += "[" + a.String() + "]"
		} else {
			s += a.String()
		}
	}
	if e.RegPort != 0 {
		l, ok := x.regs[e.RegPort]
		if !ok || len(l.imm) < 2 {
			return "", fmt.Errorf("tproxy port is not an immediate port")
		}
		s += fmt.Sprintf(":%d", binary.BigEndian.Uint16(l.imm))
	}
	return s, nil
}

// keyPart is one key of a lookup: its text, how many bytes of the
// element key it takes, and how they read.
type keyPart struct {
	key    string
	n      uint32 // the value's bytes
	width  uint32 // bytes in the element key: n, or n padded to 4 in a concatenation
	format func([]byte) (string, error)
	addr   bool
	ifname bool
}

func numberText(b []byte) (string, error) {
	var v uint64
	for _, c := range b {
		v = v<<8 | uint64(c)
	}
	return strconv.FormatUint(v, 10), nil
}

// part reads the key a load puts in a register.
func (x *exprReader) part(l load) (keyPart, error) {
	switch {
	case l.ct && l.status:
		return keyPart{}, fmt.Errorf("lookup of ct status is not supported")
	case l.ct:
		return keyPart{key: "ct state", n: 4, format: func(b []byte) (string, error) {
			names, err := ctStateList(binary.NativeEndian.Uint32(b))
			if err != nil || len(names) != 1 {
				return "", fmt.Errorf("ct state %x in a set is not supported", b)
			}
			return names[0], nil
		}}, nil
	case l.meta:
		switch l.key {
		case expr.MetaKeyL4PROTO:
			return keyPart{key: "meta l4proto", n: 1, format: numberText}, nil
		case expr.MetaKeyIIFNAME, expr.MetaKeyOIFNAME:
			key := map[expr.MetaKey]string{expr.MetaKeyIIFNAME: "iifname", expr.MetaKeyOIFNAME: "oifname"}[l.key]
			return keyPart{key: key, n: 16, ifname: true, format: func(b []byte) (string, error) {
				name, _, exact := bytes.Cut(b, []byte{0})
				s := string(name)
				if !exact {
					s += "*"
				}
				return strconv.Quote(s), nil
			}}, nil
		case expr.MetaKeyIIF, expr.MetaKeyOIF:
			key := map[expr.MetaKey]string{expr.MetaKeyIIF: "iif", expr.MetaKeyOIF: "oif"}[l.key]
			return keyPart{key: key, n: 4, format: func(b []byte) (string, error) {
				name, err := ifaceName(b)
				return strconv.Quote(name), err
			}}, nil
		case expr.MetaKeyMARK:
			return keyPart{key: "meta mark", n: 4, format: func(b []byte) (string, error) {
				return fmt.Sprintf("%#x", binary.NativeEndian.Uint32(b)), nil
			}}, nil
		case expr.MetaKeySKUID, expr.MetaKeySKGID:
			key := map[expr.MetaKey]string{expr.MetaKeySKUID: "meta skuid", expr.MetaKeySKGID: "meta skgid"}[l.key]
			return keyPart{key: key, n: 4, format: func(b []byte) (string, error) {
				return strconv.FormatUint(uint64(binary.NativeEndian.Uint32(b)), 10), nil
			}}, nil
		}
		return keyPart{}, fmt.Errorf("lookup of meta key %d is not supported", l.key)
	case l.imm != nil:
		return keyPart{}, fmt.Errorf("lookup of an immediate value")
	}
	f, err := x.field(l, 0)
	if l.mask != nil && (err != nil || f.kind != fieldDSCP) {
		return keyPart{}, fmt.Errorf("lookup of a masked payload is not supported")
	}
	if err != nil {
		return keyPart{}, err
	}
	if f.n != l.n || f.n != f.width {
		return keyPart{}, fmt.Errorf("lookup of part of %s is not supported", f.key)
	}
	return keyPart{key: f.key, n: f.n, addr: f.kind == fieldAddr, format: func(b []byte) (string, error) { return f.value(b), nil }}, nil
}

// reg32 is a register's index in 32-bit registers: nft numbers the
// 128-bit registers 1-4 and the 32-bit ones from 8.
func reg32(r uint32) uint32 {
	if r >= 8 {
		return r
	}
	return 8 + (r-1)*4
}

// keyParts reads the keys a lookup's source registers hold: one, or the
// fields of a concatenation in consecutive registers, keyLen bytes.
func (x *exprReader) keyParts(src, keyLen uint32) ([]keyPart, error) {
	loads := map[uint32]load{}
	for r, l := range x.regs {
		loads[reg32(r)] = l
	}
	var parts []keyPart
	at := reg32(src)
	for total := uint32(0); total < keyLen; {
		l, ok := loads[at]
		if !ok {
			return nil, fmt.Errorf("lookup reads an unset register")
		}
		p, err := x.part(l)
		if err != nil {
			return nil, err
		}
		p.width = (p.n + 3) &^ 3
		parts = append(parts, p)
		total += p.width
		at += p.width / 4
	}
	if len(parts) == 1 {
		parts[0].width = parts[0].n
	}
	return parts, nil
}

// partText writes the values lo..hi of one part: a value, a prefix or a
// range.
func partText(p keyPart, lo, hi []byte) (string, error) {
	a, err := p.format(lo)
	if err != nil || bytes.Equal(lo, hi) {
		return a, err
	}
	if p.ifname {
		// "eth*" is the names from "eth" and zeros to "eth" and 0xff.
		k := 0
		for k < len(lo) && lo[k] == hi[k] {
			k++
		}
		if !bytes.ContainsFunc(lo[k:], func(r rune) bool { return r != 0 }) && !slices.ContainsFunc(hi[k:], func(c byte) bool { return c != 0xff }) {
			return strconv.Quote(string(lo[:k]) + "*"), nil
		}
		return "", fmt.Errorf("interface name range %q-%q is not supported", lo, hi)
	}
	if p.addr {
		from, _ := netip.AddrFromSlice(lo)
		to, _ := netip.AddrFromSlice(hi)
		if ps := nft.RangePrefixes(from, to); len(ps) == 1 {
			return ps[0].String(), nil
		}
	}
	b, err := p.format(hi)
	return a + "-" + b, err
}

// elementTexts writes a set's elements for the keys parts, with their
// verdicts for a verdict map.
// verdictMap reports whether s maps to verdicts. google/nftables v0.3.0
// records a verdict data type as the set's key type (and so loses the
// key's length, which lookup then takes from the register).
func verdictMap(s *nftables.Set) bool {
	return s.IsMap && (s.DataType.Name == "verdict" || s.KeyType.Name == "verdict")
}

func elementTexts(ks kernelSet, parts []keyPart) ([]string, error) {
	s := ks.set
	verdicts := verdictMap(s)
	var keyLen uint32
	for _, p := range parts {
		keyLen += p.width
	}
	elems := slices.Clone(ks.elems)
	// By key; at one key the end of an interval comes before the start of
	// the next (adjacent intervals share it).
	slices.SortStableFunc(elems, func(a, b nftables.SetElement) int {
		if c := bytes.Compare(a.Key, b.Key); c != 0 {
			return c
		}
		switch {
		case a.IntervalEnd && !b.IntervalEnd:
			return -1
		case b.IntervalEnd && !a.IntervalEnd:
			return 1
		}
		return 0
	})
	var out []string
	for i, el := range elems {
		if len(el.Key) == 0 && !el.IntervalEnd {
			// The catch-all element (NFT_SET_ELEM_CATCHALL) has no key.
			t, err := withVerdict(s, verdicts, el, "*")
			if err != nil {
				return nil, err
			}
			out = append(out, t)
			continue
		}
		if uint32(len(el.Key)) < keyLen {
			return nil, fmt.Errorf("set %s has a key of %d bytes, the lookup %d", s.Name, len(el.Key), keyLen)
		}
		if el.IntervalEnd {
			continue
		}
		end := el.Key
		switch {
		case len(el.KeyEnd) > 0:
			end = el.KeyEnd
		case s.Interval && len(parts) == 1:
			// The interval ends before the next element: its end element
			// (nft stores the first key after it), or the start of the
			// next interval, which takes the place of the end when the
			// two are adjacent; at the last key when there is none.
			end = bytes.Repeat([]byte{0xff}, int(keyLen))
			if i+1 < len(elems) {
				end = prev(elems[i+1].Key[:keyLen])
			}
		}
		var texts []string
		off := uint32(0)
		for _, p := range parts {
			t, err := partText(p, el.Key[off:off+p.n], end[off:off+p.n])
			if err != nil {
				return nil, err
			}
			texts = append(texts, t)
			off += p.width
		}
		t, err := withVerdict(s, verdicts, el, strings.Join(texts, " . "))
		if err != nil {
			return nil, err
		}
		out = append(out, t)
	}
	return out, nil
}

// withVerdict appends to the text of element el of s its verdict, when s
// is a verdict map looked up as one.
func withVerdict(s *nftables.Set, verdicts bool, el nftables.SetElement, t string) (string, error) {
	if !verdicts {
		return t, nil
	}
	if el.VerdictData == nil {
		return "", fmt.Errorf("map %s maps to data, not verdicts", s.Name)
	}
	v, err := verdictText(el.VerdictData)
	if err != nil {
		return "", err
	}
	return t + " : " + v, nil
}

func (x *exprReader) lookup(e *expr.Lookup) error {
	ks, ok := x.sets[e.SetName]
	if !ok {
		return fmt.Errorf("lookup in set %s, which is not listed", e.SetName)
	}
	s := ks.set
	switch {
	case s.HasTimeout || s.Dynamic:
		return fmt.Errorf("set %s with timeouts or dynamic updates is not supported", e.SetName)
	case s.IsMap && e.IsDestRegSet && e.DestRegister != 0:
		return fmt.Errorf("lookup in map %s to a register (a data map) is not supported", e.SetName)
	case !s.IsMap && e.IsDestRegSet:
		return fmt.Errorf("lookup in set %s to a register is not supported", e.SetName)
	}
	keyLen := s.KeyType.Bytes
	if len(ks.elems) > 0 {
		keyLen = uint32(len(ks.elems[0].Key))
	}
	if keyLen == 0 {
		// google/nftables knows no key type for some sets (typeof
		// ones); an empty one's key is the load it looks up.
		l, ok := x.regs[e.SourceRegister]
		if !ok || l.n == 0 {
			return fmt.Errorf("set %s: the key's length is not known", e.SetName)
		}
		keyLen = l.n
	}
	// A map looked up without a register is a set of its keys (nft's
	// "ip saddr @map").
	asSet := s.IsMap && !e.IsDestRegSet
	parts, err := x.keyParts(e.SourceRegister, keyLen)
	if err != nil {
		return err
	}
	elems, err := elementTexts(ks, parts)
	if err != nil {
		return err
	}
	var keys []string
	for _, p := range parts {
		keys = append(keys, p.key)
	}
	key := strings.Join(keys, " . ")
	op := ""
	if e.Invert {
		op = "!= "
	}
	if s.IsMap && !asSet {
		op = "vmap "
	}
	x.flush()
	if s.Anonymous {
		if len(elems) == 0 {
			return fmt.Errorf("empty anonymous set %s", e.SetName)
		}
		x.terms = append(x.terms, fmt.Sprintf("%s %s{ %s }", key, op, strings.Join(elems, ", ")))
		return nil
	}
	decl := fmt.Sprintf("set %s { typeof %s;", s.Name, key)
	if s.IsMap && !asSet {
		decl = fmt.Sprintf("map %s { typeof %s : verdict;", s.Name, key)
	}
	if s.Interval {
		decl += " flags interval;"
	}
	if len(elems) > 0 {
		decl += " elements = { " + strings.Join(elems, ", ") + " };"
	}
	x.declare[s.Name] = decl + " }"
	x.terms = append(x.terms, fmt.Sprintf("%s %s@%s", key, op, s.Name))
	return nil
}
