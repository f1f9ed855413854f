package rules

import "fmt"

// DSCP is "-m dscp" (libxt_dscp, xt_dscp.c): the six DSCP bits of the IPv4
// TOS byte or the IPv6 traffic class equal Value (0-63). --dscp-class is
// read as the class's value, which is what iptables-save prints.
type DSCP struct {
	Located
	Value uint8
	Neg   bool
}

func (m *DSCP) Name() string { return "dscp" }

func (m *DSCP) appendSave(b []byte) []byte {
	b = appendFlag(b, "dscp", m.Neg)
	return fmt.Appendf(b, " 0x%02x", m.Value)
}

// DSCPClasses are the DiffServ classes --dscp-class takes, by name, with
// their code points (libxt_dscp's dscp_helper.c).
var DSCPClasses = map[string]uint8{
	"CS0": 0x00, "CS1": 0x08, "CS2": 0x10, "CS3": 0x18,
	"CS4": 0x20, "CS5": 0x28, "CS6": 0x30, "CS7": 0x38,
	"BE":   0x00,
	"AF11": 0x0a, "AF12": 0x0c, "AF13": 0x0e,
	"AF21": 0x12, "AF22": 0x14, "AF23": 0x16,
	"AF31": 0x1a, "AF32": 0x1c, "AF33": 0x1e,
	"AF41": 0x22, "AF42": 0x24, "AF43": 0x26,
	"EF": 0x2e,
}
