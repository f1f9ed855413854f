package ir

import (
	"fmt"
	"net/netip"

	"bpfwall/model"
	"bpfwall/rules"
)

// HashLimit is -m hashlimit (xt_hashlimit revision 3, packet rates,
// hashlimit_mt_common): a token bucket per key of table Table, the key
// being the packet's addresses (masked) and ports that Mode names. A key's
// bucket starts full, gains CreditsPerJiffy64 credits per jiffy up to its
// size and spends its cost per matching packet, in the kernel's u64
// arithmetic. The table holds at most Max keys: a packet with a new key
// finds no room and is dropped (hotdrop), as the kernel does.
//
// An entry idle for Expire jiffies is gone: the kernel's garbage
// collector removes it at its next run (every --hashlimit-htable-gcinterval
// ms), bpfwall at once, and a packet with its key then starts a new, full
// bucket. Whether the kernel's packet finds the old entry in the meantime
// depends on when its collector runs; bpfwall behaves as if it ran at the
// moment the entry expired.
type HashLimit struct {
	Table int // the program's table index, one per --hashlimit-name
	// Name is the --hashlimit-name, and Pos where the match is written:
	// the loader hands a table over to the next program by name, and
	// refuses at Pos what the kernel would keep from the running table.
	Name             string
	Pos              rules.Pos
	Mode             uint8
	SrcMask, DstMask uint8
	Avg, Burst       uint64
	Above            bool
	// Bytes is a byte rate (XT_HASHLIMIT_BYTES): a key's bucket holds one
	// second of credits, a packet costs its length in 16-byte chunks
	// times the rate's cost, and Burst times an empty bucket is refilled
	// at once (hashlimit_byte_cost).
	Bytes  bool
	Expire uint64 // jiffies
	// GCInterval is how often the kernel's collector removes expired
	// entries (jiffies): a full table sweeps them at most this often.
	GCInterval uint64
	Max        uint32
	// MemorySized is set when Max follows from the kernel's default table
	// size, which is 8192 buckets on a machine with more than 1 GiB of
	// memory, as the loader checks.
	MemorySized bool
}

// Credits returns the size of a key's bucket and the cost of a packet
// (of a 16-byte chunk with Bytes), as rateinfo_init computes them
// (cfg.avg * cfg.burst wraps in u64 as in C).
func (m HashLimit) Credits(hz int) (capacity, cost uint64) {
	if m.Bytes {
		return CreditsPerJiffyBytes(hz) * uint64(hz), uint64(uint32((uint64(uint32(m.Avg)) * uint64(hz) * CreditsPerJiffyBytes(hz)) >> 32))
	}
	return hashlimitCredits(m.Avg*m.Burst, hz), hashlimitCredits(m.Avg, hz)
}

func (m HashLimit) key(pkt *model.Packet) hlKey {
	var k hlKey
	zero := netip.IPv4Unspecified()
	if pkt.Family == rules.IPv6 {
		zero = netip.IPv6Unspecified()
	}
	k.src, k.dst = zero, zero
	if m.Mode&rules.HashSrcIP != 0 {
		k.src = HashKeyAddr(pkt.Src, m.SrcMask)
	}
	if m.Mode&rules.HashDstIP != 0 {
		k.dst = HashKeyAddr(pkt.Dst, m.DstMask)
	}
	if m.Mode&rules.HashSrcPort != 0 {
		k.sport = pkt.SrcPort
	}
	if m.Mode&rules.HashDstPort != 0 {
		k.dport = pkt.DstPort
	}
	return k
}

func (m HashLimit) String() string {
	s := fmt.Sprintf("hashlimit table %d ", m.Table)
	if m.Above {
		s += "above "
	}
	if m.Bytes {
		s += fmt.Sprintf("bytes cost %d burst %d mode %#x", m.Avg, m.Burst, m.Mode)
	} else {
		s += fmt.Sprintf("avg %dus burst %d mode %#x", m.Avg, m.Burst, m.Mode)
	}
	return s + fmt.Sprintf(" masks %d/%d expire %d max %d", m.SrcMask, m.DstMask, m.Expire, m.Max)
}

func (m HashLimit) eval(p *Program, st *State, pkt *model.Packet) outcome {
	return st.hashlimit(m, pkt)
}

func (m HashLimit) appendTo(b []byte, fam rules.Family) []byte {
	return append(b, m.String()...)
}

func (HashLimit) clocked() {}

func (m HashLimit) verify(v *verifier, st *ruleState) error {
	if m.Max == 0 || m.Expire == 0 || m.Table < 0 {
		return fmt.Errorf("hashlimit table %d with max %d, expire %d", m.Table, m.Max, m.Expire)
	}
	return nil
}
