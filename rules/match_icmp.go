package rules

// ICMP is "-m icmp" (IPv4) and "-m icmp6" (IPv6, V6 set). Type 255 with codes
// 0..255 is "any".
type ICMP struct {
	Located
	V6               bool
	Type             uint8
	CodeMin, CodeMax uint8
	Neg              bool
}

func (m *ICMP) Name() string {
	if m.V6 {
		return "icmp6"
	}
	return "icmp"
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
