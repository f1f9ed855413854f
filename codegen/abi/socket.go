package abi

import (
	"encoding/binary"
	"fmt"
	"net/netip"

	"bpfwall/ir"
	"bpfwall/rules"
)

// Names of the sk-lookup maps in Spec.
const (
	// TargetsMap is an ARRAY from a uint32 rule ID to the SocketKey of a
	// TPROXY rule's or nft tproxy statement's socket, followed by a uint32
	// that is 1 for a TPROXY target (which decides); the entries of other
	// rules are zero.
	TargetsMap = "targets"
	// SocketsMap is a SOCKHASH from a SocketKey to a socket. It is filled
	// by the loader and outlives the programs: a swap of the rule set keeps
	// it, so the sockets stay where they are.
	SocketsMap = "sockets"
	// SocketsMapSize is how many sockets SocketsMap holds.
	SocketsMapSize = 4096
)

// SocketKey names the socket a TPROXY rule steers to: protocol, family,
// --on-ip (zero when not given) and --on-port. Family 0 is no target.
type SocketKey struct {
	Family uint8 // 4 or 6
	Proto  uint8 // 6 or 17
	Port   uint16
	Addr   [16]byte // IPv4 in the first four bytes
}

const SocketKeySize = 20

// NewSocketKey is the key of a TPROXY action.
func NewSocketKey(fam rules.Family, t ir.TProxy) SocketKey {
	k := SocketKey{Family: 4, Proto: t.Proto, Port: t.Port}
	if fam == rules.IPv6 {
		k.Family = 6
	}
	if t.Addr.IsValid() {
		if t.Addr.Is4() {
			a := t.Addr.As4()
			copy(k.Addr[:], a[:])
		} else {
			k.Addr = t.Addr.As16()
		}
	}
	return k
}

// AddrPort is the address and port of the key; the address is the
// unspecified one when --on-ip was not given.
func (k SocketKey) AddrPort() netip.AddrPort {
	var a netip.Addr
	if k.Family == 4 {
		a = netip.AddrFrom4([4]byte(k.Addr[:4]))
	} else {
		a = netip.AddrFrom16(k.Addr)
	}
	return netip.AddrPortFrom(a, k.Port)
}

func (k SocketKey) String() string {
	return fmt.Sprintf("%s %s", rules.ProtoName(k.Proto), k.AddrPort())
}

// MarshalBinary is the key as the maps hold it (host byte order port).
func (k SocketKey) MarshalBinary() ([]byte, error) {
	b := make([]byte, SocketKeySize)
	b[0], b[1] = k.Family, k.Proto
	binary.NativeEndian.PutUint16(b[2:], k.Port)
	copy(b[4:], k.Addr[:])
	return b, nil
}

// UnmarshalBinary reads a key from a map.
func (k *SocketKey) UnmarshalBinary(b []byte) error {
	if len(b) != SocketKeySize {
		return fmt.Errorf("socket key of %d bytes, want %d", len(b), SocketKeySize)
	}
	k.Family, k.Proto = b[0], b[1]
	k.Port = binary.NativeEndian.Uint16(b[2:])
	copy(k.Addr[:], b[4:])
	return nil
}
