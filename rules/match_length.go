package rules

// Length is "-m length": the IP packet length (IPv6: payload plus 40) in
// Min..Max.
type Length struct {
	Located
	Min, Max uint16
	Neg      bool
}

func (m *Length) Name() string { return "length" }

func (m *Length) appendSave(b []byte) []byte {
	b = appendFlag(b, "length", m.Neg)
	b = append(b, ' ')
	return appendPortRange(b, PortRange{m.Min, m.Max})
}
