package rules

// SCTP is "-m sctp" (xt_sctp): ports, and chunk types, which are kept as
// written.
type SCTP struct {
	Located
	SrcPorts, DstPorts PortRange
	SrcNeg, DstNeg     bool
	// SrcGiven and DstGiven say a port option was given: libxt_sctp
	// prints it then, every port (0:65535) too.
	SrcGiven, DstGiven bool
	// Chunks are --chunk-types' two arguments, "all INIT,DATA" say, as
	// written; "" without the option.
	Chunks    string
	ChunksNeg bool
}

func (m *SCTP) Name() string { return "sctp" }

func (m *SCTP) appendSave(b []byte) []byte {
	if m.SrcGiven {
		b = appendFlag(b, "sport", m.SrcNeg)
		b = appendPortRange(append(b, ' '), m.SrcPorts)
	}
	if m.DstGiven {
		b = appendFlag(b, "dport", m.DstNeg)
		b = appendPortRange(append(b, ' '), m.DstPorts)
	}
	if m.Chunks != "" {
		b = appendFlag(b, "chunk-types", m.ChunksNeg)
		b = append(append(b, ' '), m.Chunks...)
	}
	return b
}
