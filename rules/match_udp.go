package rules

// UDP is "-m udp" (xt_udp).
type UDP struct {
	Located
	SrcPorts, DstPorts PortRange
	SrcNeg, DstNeg     bool
}

func (m *UDP) Name() string { return "udp" }

func (m *UDP) appendSave(b []byte) []byte {
	b = appendPorts(b, "sport", m.SrcPorts, m.SrcNeg)
	return appendPorts(b, "dport", m.DstPorts, m.DstNeg)
}
