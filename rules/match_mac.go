package rules

import "net"

// MAC is "-m mac --mac-source".
type MAC struct {
	Located
	Addr net.HardwareAddr
	Neg  bool
}

func (m *MAC) Name() string { return "mac" }

func (m *MAC) appendSave(b []byte) []byte {
	b = appendFlag(b, "mac-source", m.Neg)
	b = append(b, ' ')
	return append(b, m.Addr.String()...)
}
