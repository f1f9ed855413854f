package rules

// MaskedAddr is nft's "ip saddr & MASK == VALUE" (or !=) in a rule whose
// own -s (-d for daddr) holds another address test already: OpenWrt's fw4
// writes a zone's subnet-mask matches so. iptables has no option for a
// second one, so it prints as bpfwall's own "-m nft-addr [!] --src
// VALUE/MASK" (--dst for daddr).
type MaskedAddr struct {
	Located
	Dst bool
	Net Net
	Neg bool
}

func (m *MaskedAddr) Name() string { return "nft-addr" }

func (m *MaskedAddr) appendSave(b []byte) []byte {
	if m.Neg {
		b = append(b, " !"...)
	}
	if m.Dst {
		b = append(b, " --dst "...)
	} else {
		b = append(b, " --src "...)
	}
	return append(b, m.Net.String()...)
}
