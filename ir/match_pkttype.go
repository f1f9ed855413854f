package ir

import (
	"fmt"

	"bpfwall/rules"
)

// PktType is -m pkttype (pkttype_mt).
type PktType struct {
	Type PacketType
	Neg  bool
}

// PacketType is the link-layer class of a packet (skb->pkt_type, as in
// linux/if_packet.h).
type PacketType uint8

const (
	PacketHost      PacketType = 0
	PacketBroadcast PacketType = 1
	PacketMulticast PacketType = 2
	PacketOtherHost PacketType = 3
	PacketOutgoing  PacketType = 4
	// PacketLoopback is a multicast or broadcast packet looped back to
	// ourselves; pkttype_mt reports it as multicast or broadcast.
	PacketLoopback PacketType = 5
)

var packetTypeNames = []string{"host", "broadcast", "multicast", "otherhost", "outgoing", "loopback"}

func (t PacketType) String() string {
	if int(t) < len(packetTypeNames) {
		return packetTypeNames[t]
	}
	return fmt.Sprintf("PacketType(%d)", uint8(t))
}

func (m PktType) eval(p *Program, st *State, pkt *Packet) outcome {
	return is((p.pktType(pkt) == m.Type) != m.Neg)
}

func (m PktType) appendTo(b []byte, fam rules.Family) []byte {
	b = append(b, "pkttype "...)
	b = neg(b, m.Neg)
	return append(b, m.Type.String()...)
}

func (m PktType) verify(v *verifier, st *ruleState) error {
	if m.Type > PacketOutgoing {
		return fmt.Errorf("bad packet type %s", m.Type)
	}
	return nil
}
