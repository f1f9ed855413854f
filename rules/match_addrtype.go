package rules

import "strings"

// Address types of "-m addrtype" (bit 1<<RTN_x).
const (
	AddrUnspec      uint16 = 1 << 0
	AddrUnicast     uint16 = 1 << 1
	AddrLocal       uint16 = 1 << 2
	AddrBroadcast   uint16 = 1 << 3
	AddrAnycast     uint16 = 1 << 4
	AddrMulticast   uint16 = 1 << 5
	AddrBlackhole   uint16 = 1 << 6
	AddrUnreachable uint16 = 1 << 7
	AddrProhibit    uint16 = 1 << 8
	AddrThrow       uint16 = 1 << 9
	AddrNAT         uint16 = 1 << 10
	AddrXResolve    uint16 = 1 << 11
)

// AddrType is "-m addrtype" (revision 1).
type AddrType struct {
	Located
	Src, Dst                    uint16 // Addr* bits; 0: not tested
	SrcNeg, DstNeg              bool
	LimitIfaceIn, LimitIfaceOut bool
}

func (m *AddrType) Name() string { return "addrtype" }

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

var addrTypeNames = []string{
	"UNSPEC", "UNICAST", "LOCAL", "BROADCAST", "ANYCAST", "MULTICAST",
	"BLACKHOLE", "UNREACHABLE", "PROHIBIT", "THROW", "NAT", "XRESOLVE",
}
