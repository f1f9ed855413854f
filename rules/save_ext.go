package rules

import (
	"strconv"
	"strings"
)

// Canonical printing of the typed extensions, option for option as the
// save functions of iptables 1.8.11's extensions print them.

func appendUint(b []byte, v uint64) []byte { return strconv.AppendUint(b, v, 10) }

// appendFlag appends " [!] --name".
func appendFlag(b []byte, name string, neg bool) []byte {
	b = appendNeg(b, neg)
	b = append(b, " --"...)
	return append(b, name...)
}

// appendPorts prints a tcp or udp port option; the full range prints only
// when inverted.
func appendPorts(b []byte, name string, r PortRange, neg bool) []byte {
	if r == AnyPort && !neg {
		return b
	}
	b = appendFlag(b, name, neg)
	b = append(b, ' ')
	return appendPortRange(b, r)
}

func appendPortRange(b []byte, r PortRange) []byte {
	b = appendUint(b, uint64(r.Lo))
	if r.Lo != r.Hi {
		b = append(b, ':')
		b = appendUint(b, uint64(r.Hi))
	}
	return b
}

func (m *TCP) appendSave(b []byte) []byte {
	b = appendPorts(b, "sport", m.SrcPorts, m.SrcNeg)
	b = appendPorts(b, "dport", m.DstPorts, m.DstNeg)
	if m.Option != 0 || m.OptionNeg {
		b = appendFlag(b, "tcp-option", m.OptionNeg)
		b = append(b, ' ')
		b = appendUint(b, uint64(m.Option))
	}
	if m.FlagMask != 0 || m.FlagsNeg {
		b = appendFlag(b, "tcp-flags", m.FlagsNeg)
		b = append(b, ' ')
		b = appendTCPFlags(b, m.FlagMask)
		b = append(b, ' ')
		b = appendTCPFlags(b, m.FlagComp)
	}
	return b
}

// appendTCPFlags prints flag bits by name, lowest bit first; ECE and CWR
// have no name in iptables and are not printed.
func appendTCPFlags(b []byte, flags uint8) []byte {
	names := [...]string{"FIN", "SYN", "RST", "PSH", "ACK", "URG"}
	first := true
	for i, n := range names {
		if flags&(1<<i) == 0 {
			continue
		}
		if !first {
			b = append(b, ',')
		}
		b = append(b, n...)
		first = false
	}
	if first {
		b = append(b, "NONE"...)
	}
	return b
}

func (m *UDP) appendSave(b []byte) []byte {
	b = appendPorts(b, "sport", m.SrcPorts, m.SrcNeg)
	return appendPorts(b, "dport", m.DstPorts, m.DstNeg)
}

func (m *Multiport) appendSave(b []byte) []byte {
	name := map[MultiportDir]string{MultiportSrc: "sports", MultiportDst: "dports", MultiportBoth: "ports"}[m.Dir]
	b = appendFlag(b, name, m.Neg)
	for i, r := range m.Ports {
		if i == 0 {
			b = append(b, ' ')
		} else {
			b = append(b, ',')
		}
		b = appendPortRange(b, r)
	}
	return b
}

func (m *IPRange) appendSave(b []byte) []byte {
	for _, x := range []struct {
		name string
		r    *AddrRange
		neg  bool
	}{{"src-range", m.Src, m.SrcNeg}, {"dst-range", m.Dst, m.DstNeg}} {
		if x.r == nil {
			continue
		}
		b = appendFlag(b, x.name, x.neg)
		b = append(b, ' ')
		b = append(b, x.r.From.String()...)
		b = append(b, '-')
		b = append(b, x.r.To.String()...)
	}
	return b
}

// appendSave prints the type as a number; "any" is IPv4's type 255 with
// every code. A code range other than 0:255 prints as "min:max", which
// iptables-save abbreviates to its minimum and so would change the rule.
func (m *ICMP) appendSave(b []byte) []byte {
	name := "icmp-type"
	if m.V6 {
		name = "icmpv6-type"
	}
	b = appendFlag(b, name, m.Neg)
	b = append(b, ' ')
	if !m.V6 && m.Type == 0xff && m.CodeMin == 0 && m.CodeMax == 0xff {
		return append(b, "any"...)
	}
	b = appendUint(b, uint64(m.Type))
	if m.CodeMin != 0 || m.CodeMax != 0xff {
		b = append(b, '/')
		b = appendUint(b, uint64(m.CodeMin))
		if m.CodeMin != m.CodeMax {
			b = append(b, ':')
			b = appendUint(b, uint64(m.CodeMax))
		}
	}
	return b
}

func (m *Comment) appendSave(b []byte) []byte {
	b = append(b, " --comment "...)
	return append(b, Quote(m.Text)...)
}

// ctStates are the conntrack states in the order iptables prints them.
var ctStates = []struct {
	bit  uint16
	name string
}{
	{CTInvalid, "INVALID"}, {CTNew, "NEW"}, {CTRelated, "RELATED"}, {CTEstablished, "ESTABLISHED"},
	{CTUntracked, "UNTRACKED"}, {CTSnat, "SNAT"}, {CTDnat, "DNAT"},
}

func appendCTStates(b []byte, mask uint16) []byte {
	b = append(b, ' ')
	first := true
	for _, s := range ctStates {
		if mask&s.bit == 0 {
			continue
		}
		if !first {
			b = append(b, ',')
		}
		b = append(b, s.name...)
		first = false
	}
	return b
}

// appendRawOptions prints options whose arguments are canonical already
// (numbers, addresses, ranges), without quoting.
func appendRawOptions(b []byte, opts []Option) []byte {
	for _, o := range opts {
		b = appendFlag(b, o.Name, o.Neg)
		for _, a := range o.Args {
			b = append(b, ' ')
			b = append(b, a...)
		}
	}
	return b
}

func (m *Conntrack) appendSave(b []byte) []byte {
	if m.State != 0 || m.StateNeg {
		b = appendFlag(b, "ctstate", m.StateNeg)
		b = appendCTStates(b, m.State)
	}
	return appendRawOptions(b, m.Other)
}

func (m *State) appendSave(b []byte) []byte {
	b = appendFlag(b, "state", m.Neg)
	return appendCTStates(b, m.State)
}

func (m *Set) appendSave(b []byte) []byte {
	b = appendFlag(b, "match-set", m.Neg)
	b = append(b, ' ')
	b = append(b, m.SetName...)
	for i, d := range m.Dirs {
		if i == 0 {
			b = append(b, ' ')
		} else {
			b = append(b, ',')
		}
		if d == SetSrc {
			b = append(b, "src"...)
		} else {
			b = append(b, "dst"...)
		}
	}
	return appendRawOptions(b, m.Other)
}

func (m *Length) appendSave(b []byte) []byte {
	b = appendFlag(b, "length", m.Neg)
	b = append(b, ' ')
	return appendPortRange(b, PortRange{m.Min, m.Max})
}

func appendCompare(b []byte, prefix string, op CompareOp, v uint8) []byte {
	switch op {
	case OpEq, OpNe:
		b = appendFlag(b, prefix+"-eq", op == OpNe)
	case OpLt:
		b = appendFlag(b, prefix+"-lt", false)
	case OpGt:
		b = appendFlag(b, prefix+"-gt", false)
	}
	b = append(b, ' ')
	return appendUint(b, uint64(v))
}

func (m *TTL) appendSave(b []byte) []byte { return appendCompare(b, "ttl", m.Op, m.Value) }
func (m *HL) appendSave(b []byte) []byte  { return appendCompare(b, "hl", m.Op, m.Value) }

func (m *MAC) appendSave(b []byte) []byte {
	b = appendFlag(b, "mac-source", m.Neg)
	b = append(b, ' ')
	return append(b, m.Addr.String()...)
}

func (m *Mark) appendSave(b []byte) []byte {
	b = appendFlag(b, "mark", m.Neg)
	b = append(b, " 0x"...)
	b = strconv.AppendUint(b, uint64(m.Value), 16)
	if m.Mask != 0xffffffff {
		b = append(b, "/0x"...)
		b = strconv.AppendUint(b, uint64(m.Mask), 16)
	}
	return b
}

// limitRates are the units libxt_limit prints a rate in, largest first,
// with their length in 1/10000 s.
var limitRates = []struct {
	name string
	mult uint32
}{{"day", 864000000}, {"hour", 36000000}, {"min", 600000}, {"sec", 10000}}

// limitDefaultBurst is the burst iptables-save leaves out.
const limitDefaultBurst = 5

func (m *Limit) appendSave(b []byte) []byte {
	b = append(b, " --limit "...)
	if m.Avg == 0 {
		b = append(b, "inf"...) // printf("%f", INFINITY); the parser never makes it
	} else {
		// The largest unit that shows the rate exactly enough, as
		// libxt_limit's print_rate picks it.
		i := 1
		for ; i < len(limitRates); i++ {
			r := limitRates[i].mult
			if m.Avg > r || r/m.Avg < r%m.Avg {
				break
			}
		}
		b = appendUint(b, uint64(limitRates[i-1].mult/m.Avg))
		b = append(b, '/')
		b = append(b, limitRates[i-1].name...)
	}
	if m.Burst != limitDefaultBurst {
		b = append(b, " --limit-burst "...)
		b = appendUint(b, uint64(m.Burst))
	}
	return b
}

func (m *PktType) appendSave(b []byte) []byte {
	b = appendFlag(b, "pkt-type", m.Neg)
	b = append(b, ' ')
	switch m.Type {
	case PacketHost:
		return append(b, "unicast"...)
	case PacketBroadcast:
		return append(b, "broadcast"...)
	case PacketMulticast:
		return append(b, "multicast"...)
	case PacketOtherHost:
		return append(b, "otherhost"...)
	}
	return appendUint(b, uint64(m.Type))
}

var addrTypeNames = []string{
	"UNSPEC", "UNICAST", "LOCAL", "BROADCAST", "ANYCAST", "MULTICAST",
	"BLACKHOLE", "UNREACHABLE", "PROHIBIT", "THROW", "NAT", "XRESOLVE",
}

func appendAddrTypes(b []byte, mask uint16) []byte {
	var names []string
	for i, n := range addrTypeNames {
		if mask&(1<<i) != 0 {
			names = append(names, n)
		}
	}
	b = append(b, ' ')
	return append(b, strings.Join(names, ",")...)
}

func (m *AddrType) appendSave(b []byte) []byte {
	if m.Src != 0 {
		b = appendFlag(b, "src-type", m.SrcNeg)
		b = appendAddrTypes(b, m.Src)
	}
	if m.Dst != 0 {
		b = appendFlag(b, "dst-type", m.DstNeg)
		b = appendAddrTypes(b, m.Dst)
	}
	if m.LimitIfaceIn {
		b = append(b, " --limit-iface-in"...)
	}
	if m.LimitIfaceOut {
		b = append(b, " --limit-iface-out"...)
	}
	return b
}

func (t *Reject) appendSave(b []byte) []byte {
	b = appendJump(b, "REJECT")
	b = append(b, " --reject-with "...)
	return append(b, t.With...)
}

// appendSave prints every option, as libxt_TPROXY's save does: the
// unspecified address when --on-ip was not given.
func (t *TProxy) appendSave(b []byte) []byte {
	b = appendJump(b, "TPROXY")
	b = append(b, " --on-port "...)
	b = appendUint(b, uint64(t.Port))
	b = append(b, " --on-ip "...)
	switch {
	case t.Addr.IsValid():
		b = append(b, t.Addr.String()...)
	case t.Family == IPv6:
		b = append(b, "::"...)
	default:
		b = append(b, "0.0.0.0"...)
	}
	b = append(b, " --tproxy-mark 0x"...)
	b = strconv.AppendUint(b, uint64(t.Mark), 16)
	b = append(b, "/0x"...)
	return strconv.AppendUint(b, uint64(t.Mask), 16)
}

// logDefaultLevel is the level iptables-save leaves out (LOG_WARNING).
const logDefaultLevel = 4

func (t *Log) appendSave(b []byte) []byte {
	b = appendJump(b, "LOG")
	if t.Prefix != "" {
		b = append(b, " --log-prefix "...)
		b = append(b, Quote(t.Prefix)...)
	}
	if t.Level != logDefaultLevel {
		b = append(b, " --log-level "...)
		b = appendUint(b, uint64(t.Level))
	}
	for _, f := range []struct {
		bit  uint8
		name string
	}{
		{LogTCPSeq, "log-tcp-sequence"}, {LogTCPOpt, "log-tcp-options"}, {LogIPOpt, "log-ip-options"},
		{LogUID, "log-uid"}, {LogMACDecode, "log-macdecode"},
	} {
		if t.Flags&f.bit != 0 {
			b = append(b, " --"...)
			b = append(b, f.name...)
		}
	}
	return b
}
