package rules

// Packet types of "-m pkttype", as in linux/if_packet.h.
const (
	PacketHost      uint8 = 0
	PacketBroadcast uint8 = 1
	PacketMulticast uint8 = 2
	PacketOtherHost uint8 = 3
	PacketOutgoing  uint8 = 4
)

// PktType is "-m pkttype".
type PktType struct {
	Located
	Type uint8
	Neg  bool
}

func (m *PktType) Name() string { return "pkttype" }

func (m *PktType) appendSave(b []byte) []byte {
	b = appendFlag(b, "pkt-type", m.Neg)
	b = append(b, ' ')
	switch m.Type {
	case PacketHost:
		return append(b, "unicast"...)
	case PacketBroadcast:
		return append(b, "broadcast"...)
	case PacketMulticast:
		return append(b, "multicast"...)
	case PacketOtherHost:
		return append(b, "otherhost"...)
	}
	return appendUint(b, uint64(m.Type))
}
