package rules

import (
	"net"
	"net/netip"
)

// Match is one extension match ("-m name ..."). The set of kinds is closed:
// the typed matches below, and Generic for every extension bpfwall reads but
// does not interpret.
type Match interface {
	// Name is the extension name as written after -m.
	Name() string
	// Position is where the match was loaded (its -m, or the option that
	// loaded it implicitly).
	Position() Pos
	// XT reports whether the match, in an nft rule, is an xtables
	// extension (iptables-nft installs them): the kernel runs it as
	// iptables does, not as the nft expression of the same name.
	XT() bool
	// appendSave appends the match's options as iptables-save prints them,
	// each preceded by a space.
	appendSave(b []byte) []byte
}

// Located carries the source position of a match or target, and whether
// the kernel runs it as an xtables extension in an nft rule.
type Located struct {
	Pos     Pos
	Xtables bool
}

// Position returns where the match or target was written.
func (l Located) Position() Pos { return l.Pos }

// XT reports whether it is an xtables extension in an nft rule.
func (l Located) XT() bool { return l.Xtables }

// MarkXT marks a match read from an xtables extension of an nft rule.
func (l *Located) MarkXT() { l.Xtables = true }

// PortRange is an inclusive port range. The full range 0:65535 matches every
// port.
type PortRange struct{ Lo, Hi uint16 }

// AnyPort is the range that matches every port.
var AnyPort = PortRange{0, 65535}

// Contains reports whether p is in r.
func (r PortRange) Contains(p uint16) bool { return r.Lo <= p && p <= r.Hi }

// TCP flag bits, as in the TCP header.
const (
	TCPFin uint8 = 1 << iota
	TCPSyn
	TCPRst
	TCPPsh
	TCPAck
	TCPUrg
	TCPEce
	TCPCwr
)

// TCP is "-m tcp" (xt_tcp): a packet matches when every given condition holds.
// Unset port ranges are AnyPort; FlagMask 0 means no flag test; Option 0
// means no option test.
type TCP struct {
	Located
	SrcPorts, DstPorts PortRange
	SrcNeg, DstNeg     bool
	Option             uint8
	OptionNeg          bool
	FlagMask, FlagComp uint8
	FlagsNeg           bool
}

// UDP is "-m udp" (xt_udp).
type UDP struct {
	Located
	SrcPorts, DstPorts PortRange
	SrcNeg, DstNeg     bool
}

// MultiportDir says which ports a multiport match tests.
type MultiportDir uint8

const (
	MultiportSrc  MultiportDir = iota + 1 // --sports
	MultiportDst                          // --dports
	MultiportBoth                         // --ports: source or destination
)

// Multiport is "-m multiport" (xt_multiport revision 1): the packet's port(s)
// in any of Ports.
type Multiport struct {
	Located
	Dir   MultiportDir
	Ports []PortRange
	Neg   bool
}

// AddrRange is an inclusive address range.
type AddrRange struct{ From, To netip.Addr }

// Contains reports whether a is in r.
func (r AddrRange) Contains(a netip.Addr) bool {
	return a.BitLen() == r.From.BitLen() && r.From.Compare(a) <= 0 && a.Compare(r.To) <= 0
}

// IPRange is "-m iprange"; a nil range is not tested.
type IPRange struct {
	Located
	Src, Dst       *AddrRange
	SrcNeg, DstNeg bool
}

// ICMP is "-m icmp" (IPv4) and "-m icmp6" (IPv6, V6 set). Type 255 with codes
// 0..255 is "any".
type ICMP struct {
	Located
	V6               bool
	Type             uint8
	CodeMin, CodeMax uint8
	Neg              bool
}

// Comment is "-m comment"; it matches every packet.
type Comment struct {
	Located
	Text string
}

// Conntrack state bits of the model, shared by -m state and -m conntrack.
// They are bpfwall's own numbering: the kernel's two matches agree on the
// first four and number UNTRACKED, SNAT and DNAT differently.
const (
	CTInvalid     uint16 = 1 << 0
	CTEstablished uint16 = 1 << 1
	CTRelated     uint16 = 1 << 2
	CTNew         uint16 = 1 << 3
	CTUntracked   uint16 = 1 << 6
	CTSnat        uint16 = 1 << 7
	CTDnat        uint16 = 1 << 8
)

// Conntrack is "-m conntrack". Only the state test is interpreted by the
// compiler; every other option is kept in Other, in canonical order, so it
// prints back and makes lowering fail clearly.
type Conntrack struct {
	Located
	State    uint16 // CT* bits; 0: no state test
	StateNeg bool
	Other    []Option
}

// State is "-m state --state".
type State struct {
	Located
	State uint16 // CTInvalid, CTEstablished, CTRelated, CTNew, CTUntracked
	Neg   bool
}

// SetDir is one dimension of an ipset lookup.
type SetDir uint8

const (
	SetSrc SetDir = iota + 1
	SetDst
)

// Set is "-m set --match-set NAME src,dst". Other options of the set match
// (counters, --return-nomatch, ...) are kept in Other.
type Set struct {
	Located
	SetName string
	Dirs    []SetDir
	Neg     bool
	Other   []Option
}

// Length is "-m length": the IP packet length (IPv6: payload plus 40) in
// Min..Max.
type Length struct {
	Located
	Min, Max uint16
	Neg      bool
}

// CompareOp is the comparison of a ttl or hl match.
type CompareOp uint8

const (
	OpEq CompareOp = iota
	OpNe
	OpLt
	OpGt
)

// TTL is "-m ttl" (IPv4).
type TTL struct {
	Located
	Op    CompareOp
	Value uint8
}

// HL is "-m hl" (IPv6 hop limit).
type HL struct {
	Located
	Op    CompareOp
	Value uint8
}

// MAC is "-m mac --mac-source".
type MAC struct {
	Located
	Addr net.HardwareAddr
	Neg  bool
}

// Mark is "-m mark": (skb mark & Mask) == Value.
type Mark struct {
	Located
	Value, Mask uint32
	Neg         bool
}

// Limit is "-m limit". Avg is the average interval between packets in
// units of 1/10000 s (XT_LIMIT_SCALE), as the kernel stores it.
type Limit struct {
	Located
	Avg   uint32
	Burst uint32
}

// Packet types of "-m pkttype", as in linux/if_packet.h.
const (
	PacketHost      uint8 = 0
	PacketBroadcast uint8 = 1
	PacketMulticast uint8 = 2
	PacketOtherHost uint8 = 3
	PacketOutgoing  uint8 = 4
)

// PktType is "-m pkttype".
type PktType struct {
	Located
	Type uint8
	Neg  bool
}

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

// Option is one option of an extension bpfwall keeps without interpreting.
type Option struct {
	Name string // without the leading "--"
	Neg  bool
	Args []string
}

// Generic is any other match extension, kept by name and options so that it
// prints back; the compiler rejects it with its position.
type Generic struct {
	Located
	Ext     string
	Options []Option
}

func (m *TCP) Name() string       { return "tcp" }
func (m *UDP) Name() string       { return "udp" }
func (m *Multiport) Name() string { return "multiport" }
func (m *IPRange) Name() string   { return "iprange" }
func (m *Comment) Name() string   { return "comment" }
func (m *Conntrack) Name() string { return "conntrack" }
func (m *State) Name() string     { return "state" }
func (m *Set) Name() string       { return "set" }
func (m *Length) Name() string    { return "length" }
func (m *TTL) Name() string       { return "ttl" }
func (m *HL) Name() string        { return "hl" }
func (m *MAC) Name() string       { return "mac" }
func (m *Mark) Name() string      { return "mark" }
func (m *Limit) Name() string     { return "limit" }
func (m *PktType) Name() string   { return "pkttype" }
func (m *AddrType) Name() string  { return "addrtype" }
func (m *Generic) Name() string   { return m.Ext }

func (m *ICMP) Name() string {
	if m.V6 {
		return "icmp6"
	}
	return "icmp"
}
