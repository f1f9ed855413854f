package abi

import (
	"encoding/binary"
	"fmt"
	"net/netip"

	"bpfwall/ir"
	"bpfwall/model"
	"bpfwall/rules"
)

// HashLimitMap names the HASH map of hashlimit table i (ir.HashLimit's
// Table): a HashKey per key, a HashEntry behind a bpf_spin_lock as its
// value, at most the table's Max entries. A full map is the kernel's full
// table: a packet with a new key is dropped, after a sweep of the expired
// entries if none ran in the last gcinterval (see ir.HashLimit, HashGCMap).
func HashLimitMap(i int) string { return fmt.Sprintf("hashlimit%d", i) }

// A key: the masked addresses (host-order words, as parse stores them)
// and the ports the table's mode names, zero elsewhere.
const (
	HashKeySrc   = 0
	HashKeyDst   = 16
	HashKeySport = 32 // u16
	HashKeyDport = 34 // u16
	HashKeySize  = 36
)

// HashGCMap is the ARRAY map holding, for each hashlimit table, the
// earliest jiffies64 of the next sweep of its expired entries: a full
// table is swept at most once per --hashlimit-htable-gcinterval, as often
// as the kernel's collector runs (see ir.HashLimit).
const HashGCMap = "hashlimit_gc"

// HashKey is a HashLimitMap key.
type HashKey struct {
	Src, Dst     [4]uint32
	Sport, Dport uint16
}

// A value: struct dsthash_ent's lock, expiry and rateinfo.
const (
	HashEntryLock    = 0
	HashEntryExpires = 8  // u64 jiffies
	HashEntryPrev    = 16 // u64 jiffies
	HashEntryCredit  = 24 // u64
	HashEntryCapLeft = 32 // u64: a byte rate's credit_cap, the burst refills left
	HashEntrySize    = 40
)

// HashEntry is a HashLimitMap value.
type HashEntry struct {
	Lock, _                        uint32
	Expires, Prev, Credit, CapLeft uint64
}

// HashKeyOf is the HashLimitMap key the program builds for pkt in the
// table of m: for tests that look a packet's entry up.
func HashKeyOf(m ir.HashLimit, pkt *model.Packet) HashKey {
	var k HashKey
	words := func(a netip.Addr) [4]uint32 {
		var w [4]uint32
		b := a.AsSlice()
		for i := 0; i*4 < len(b); i++ {
			w[i] = binary.BigEndian.Uint32(b[4*i:])
		}
		return w
	}
	if m.Mode&rules.HashSrcIP != 0 {
		k.Src = words(ir.HashKeyAddr(pkt.Src, m.SrcMask))
	}
	if m.Mode&rules.HashDstIP != 0 {
		k.Dst = words(ir.HashKeyAddr(pkt.Dst, m.DstMask))
	}
	if m.Mode&rules.HashSrcPort != 0 {
		k.Sport = pkt.SrcPort
	}
	if m.Mode&rules.HashDstPort != 0 {
		k.Dport = pkt.DstPort
	}
	return k
}
