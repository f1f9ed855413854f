package rules

import "net/netip"

// Target is what a rule does when it matches ("-j name ..." or "-g chain").
// The set of kinds is closed.
type Target interface {
	// Name is the target as written after -j (the chain for jumps).
	Name() string
	Position() Pos
	// appendSave appends " -j NAME opts" or " -g CHAIN" as iptables-save
	// prints it.
	appendSave(b []byte) []byte
}

// Accept is -j ACCEPT.
type Accept struct{ Located }

// Drop is -j DROP.
type Drop struct{ Located }

// Return is -j RETURN.
type Return struct{ Located }

// Jump is -j CHAIN: evaluate CHAIN, continue here on RETURN or fall-through.
type Jump struct {
	Located
	Chain string
}

// Goto is -g CHAIN: evaluate CHAIN; its RETURN returns to our caller.
type Goto struct {
	Located
	Chain string
}

// Reject is -j REJECT. With is the canonical --reject-with name
// (icmp-port-unreachable, tcp-reset, icmp6-adm-prohibited, ...).
type Reject struct {
	Located
	With string
}

// LOG flags, as in xt_LOG.
const (
	LogTCPSeq    uint8 = 0x01
	LogTCPOpt    uint8 = 0x02
	LogIPOpt     uint8 = 0x04
	LogUID       uint8 = 0x08
	LogMACDecode uint8 = 0x20
)

// Log is -j LOG; it does not end the evaluation of the chain.
type Log struct {
	Located
	Level  uint8 // syslog level; 4 (warning) by default
	Prefix string
	Flags  uint8
}

// TProxy is -j TPROXY (xt_TPROXY revision 1): the packet goes to the
// socket on Addr:Port (Addr invalid: --on-ip not given, the address the
// packet arrived on), with the packet mark set to (mark & ^Mask) ^ Mark.
// Only in the mangle table's PREROUTING chain, for -p tcp or -p udp.
type TProxy struct {
	Located
	Family     Family // of the rule set, for printing the unspecified address
	Port       uint16
	Addr       netip.Addr
	Mark, Mask uint32
}

// GenericTarget is any other target, kept by name and options.
type GenericTarget struct {
	Located
	Target  string
	Options []Option
}

func (t *Accept) Name() string        { return "ACCEPT" }
func (t *Drop) Name() string          { return "DROP" }
func (t *Return) Name() string        { return "RETURN" }
func (t *Jump) Name() string          { return t.Chain }
func (t *Goto) Name() string          { return t.Chain }
func (t *Reject) Name() string        { return "REJECT" }
func (t *Log) Name() string           { return "LOG" }
func (t *TProxy) Name() string        { return "TPROXY" }
func (t *GenericTarget) Name() string { return t.Target }
