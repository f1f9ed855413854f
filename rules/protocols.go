package rules

// ProtocolsNot is nft's "meta l4proto != { tcp, udp }" and "ip protocol
// != { … }": the packet's protocol is none of Protos. A rule's "! -p"
// holds one protocol; iptables has no option for more, so this prints as
// bpfwall's own "-m nft-protocols ! --protocols tcp,udp".
type ProtocolsNot struct {
	Located
	Protos []uint8
}

func (m *ProtocolsNot) Name() string { return "nft-protocols" }

func (m *ProtocolsNot) appendSave(b []byte) []byte {
	b = append(b, " ! --protocols "...)
	for i, p := range m.Protos {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, ProtoName(p)...)
	}
	return b
}
