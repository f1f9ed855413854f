package rules

// ICMPCode is nft's "icmp code" (or "icmpv6 code") without a type: the
// packet is ICMP (ICMPv6 if V6) and its code, of whatever type, is in
// CodeMin..CodeMax. iptables' icmp match tests a code only with its type,
// so this prints as bpfwall's own "-m nft-icmp-code --code 3:5".
type ICMPCode struct {
	Located
	V6               bool
	CodeMin, CodeMax uint8
}

func (m *ICMPCode) Name() string { return "nft-icmp-code" }

func (m *ICMPCode) appendSave(b []byte) []byte {
	b = append(b, " --code "...)
	b = appendUint(b, uint64(m.CodeMin))
	if m.CodeMax != m.CodeMin {
		b = append(b, ':')
		b = appendUint(b, uint64(m.CodeMax))
	}
	return b
}
