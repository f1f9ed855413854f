package rules

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

func (m *TCP) Name() string { return "tcp" }

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
