package abi

import (
	"cmp"
	"encoding/binary"
	"fmt"
	"net/netip"
	"slices"

	"bpfwall/ir"
)

// RecentMap names the ARRAY map of recent table i (ir.Recent's Table): one
// value holding the whole table behind one bpf_spin_lock, as xt_recent
// holds every table behind its recent_lock, so that a match's lookup,
// eviction, reap and update are one step. The value is a header and
// ir.RecentListTot slots; a slot holds struct recent_entry (its address,
// TTL, index, nstamps and ring of stamps) and a sequence number that orders
// the slots as the table's lru_list does: the least recently updated entry
// has the smallest. The slots in use are the first RecentEntries (a
// removal moves the last one into the freed slot), so that a search looks
// at as many slots as the table lists addresses; a free slot has sequence
// number 0.
func RecentMap(i int) string { return fmt.Sprintf("recent%d", i) }

// The header of a RecentMap value.
const (
	RecentLock     = 0  // struct bpf_spin_lock
	RecentSeq      = 8  // u64: the last sequence number given
	RecentEntries  = 16 // u32: slots in use (t->entries)
	RecentFound    = 20 // u32: scratch, a slot the search found
	RecentMinSeq   = 24 // u64: scratch, the smallest sequence number seen
	RecentMinSlot  = 32 // u32: scratch, its slot
	_              = 36 // u32: unused
	RecentTime     = 40 // u64: the latest time a match used (jiffies); see RecentNow
	RecentSlotsOff = 48
)

// A slot.
const (
	RecentSlotSeq     = 0  // u64
	RecentSlotAddr    = 8  // [4]u32, host order as the parsed packet holds it
	RecentSlotTTL     = 24 // u8
	RecentSlotIndex   = 26 // u16
	RecentSlotNstamps = 28 // u16
	RecentSlotStamps  = 32 // [stamps]u64 jiffies
)

func RecentSlotSize(stamps int) int { return RecentSlotStamps + 8*stamps }

// RecentValueSize is the size of a RecentMap value for tables of stamps
// stamps per entry.
func RecentValueSize(stamps int) int {
	return RecentSlotsOff + ir.RecentListTot*RecentSlotSize(stamps)
}

// RecentSlot is one entry of a RecentMap value.
type RecentSlot struct {
	Seq            uint64
	Addr           [4]uint32
	TTL            uint8
	Index, NStamps uint16
	Stamps         []uint64
}

// RecentSlots decodes the slots in use of a RecentMap value, least
// recently updated first.
func RecentSlots(value []byte, stamps int) []RecentSlot {
	var out []RecentSlot
	le := binary.NativeEndian
	size := RecentSlotSize(stamps)
	for i := range ir.RecentListTot {
		s := value[RecentSlotsOff+i*size:]
		seq := le.Uint64(s[RecentSlotSeq:])
		if seq == 0 {
			continue
		}
		e := RecentSlot{Seq: seq, TTL: s[RecentSlotTTL], Index: le.Uint16(s[RecentSlotIndex:]), NStamps: le.Uint16(s[RecentSlotNstamps:])}
		for w := range e.Addr {
			e.Addr[w] = le.Uint32(s[RecentSlotAddr+4*w:])
		}
		for j := range stamps {
			e.Stamps = append(e.Stamps, le.Uint64(s[RecentSlotStamps+8*j:]))
		}
		out = append(out, e)
	}
	slices.SortFunc(out, func(a, b RecentSlot) int { return cmp.Compare(a.Seq, b.Seq) })
	return out
}

// RecentNow is the latest time (jiffies) a match of the table whose
// RecentMap value is value used: the tick the packet read, or the table's
// time when that was later.
func RecentNow(value []byte) uint64 { return binary.NativeEndian.Uint64(value[RecentTime:]) }

// RecentAddrOf is a slot's address words for address a: host-order words
// as the parsed packet holds them, zero after an IPv4 address.
func RecentAddrOf(a netip.Addr) [4]uint32 {
	var w [4]uint32
	b := a.AsSlice()
	for i := 0; i < len(b)/4; i++ {
		w[i] = binary.BigEndian.Uint32(b[4*i:])
	}
	return w
}
