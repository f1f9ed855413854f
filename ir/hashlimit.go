package ir

import (
	"math/bits"
	"net/netip"
	"slices"

	"bpfwall/model"
	"bpfwall/rules"
)

// xtHashlimitScale is XT_HASHLIMIT_SCALE_v2.
const xtHashlimitScale = 1000000

// CreditsPerJiffy64 is xt_hashlimit's CREDITS_PER_JIFFY: the largest power
// of two not above 2^64-1 / (hz*60*60*24).
func CreditsPerJiffy64(hz int) uint64 {
	maxCPJ := ^uint64(0) / (uint64(hz) * 60 * 60 * 24)
	return 1 << (bits.Len64(maxCPJ) - 1)
}

// hashlimitCredits is xt_hashlimit's user2credits for revision 3, in u64.
func hashlimitCredits(user uint64, hz int) uint64 {
	hzCPJ := uint64(hz) * CreditsPerJiffy64(hz)
	if xtHashlimitScale >= hzCPJ {
		return user / (xtHashlimitScale / hzCPJ)
	}
	return user * (hzCPJ / xtHashlimitScale)
}

// CreditsPerJiffyBytes is xt_hashlimit's CREDITS_PER_JIFFY_BYTES: the
// largest power of two not above 0xFFFFFFFF / hz.
func CreditsPerJiffyBytes(hz int) uint64 {
	return 1 << (bits.Len32(uint32(0xFFFFFFFF/hz)) - 1)
}

// MsecsToJiffies is the kernel's msecs_to_jiffies for hz dividing 1000
// (rounding up), or a multiple of it.
func MsecsToJiffies(ms uint32, hz int) uint64 {
	if 1000%hz == 0 {
		per := uint64(1000 / hz)
		return (uint64(ms) + per - 1) / per
	}
	return uint64(ms) * uint64(hz/1000)
}

// hlKey is a table key: the masked addresses and the ports of the mode.
type hlKey struct {
	src, dst     netip.Addr
	sport, dport uint16
}

// hlEntry is one key's bucket (struct dsthash_ent's rateinfo); capLeft is
// a byte rate's credit_cap, the refills its burst has left.
type hlEntry struct {
	expires, prev, credit, capLeft uint64
}

// HashKeyAddr masks an address as hashlimit_init_dst does: the first bits
// of the address, the rest zero.
func HashKeyAddr(a netip.Addr, bits uint8) netip.Addr {
	p, _ := a.Prefix(int(bits))
	return p.Addr()
}

// hashlimit is hashlimit_mt_common; it reports whether the match holds, or
// hotdrop when the table has no room for a new key.
func (s *State) hashlimit(m HashLimit, pkt *model.Packet) outcome {
	hz := s.hz()
	now := s.now(m, s.Jiffies)
	capacity, cost := m.Credits(hz)
	if s.tables == nil {
		s.tables = make(map[int]map[hlKey]*hlEntry)
	}
	t := s.tables[m.Table]
	if t == nil {
		t = make(map[hlKey]*hlEntry)
		s.tables[m.Table] = t
	}
	expired := func(e *hlEntry) bool { return int64(now-e.expires) >= 0 }
	k := m.key(pkt)
	e := t[k]
	switch {
	case e == nil:
		if len(t) >= int(m.Max) {
			// The collector's sweep: when the table is full, and at most
			// once per gcinterval, as often as the kernel's collector
			// runs. Sweeping for every new key would cost a walk of the
			// whole table per packet while the table stays full.
			if s.sweeps == nil {
				s.sweeps = make(map[int]uint64)
			}
			if int64(now-s.sweeps[m.Table]) >= 0 {
				s.sweeps[m.Table] = now + m.GCInterval
				for k, e := range t {
					if expired(e) {
						delete(t, k)
					}
				}
			}
			if len(t) >= int(m.Max) {
				return hotdrop
			}
		}
		e = &hlEntry{prev: now, credit: capacity, capLeft: m.Burst}
		t[k] = e
	case expired(e):
		*e = hlEntry{prev: now, credit: capacity, capLeft: m.Burst}
	}
	e.expires = now + m.Expire
	if delta := now - e.prev; delta != 0 {
		e.prev = now
		if m.Bytes {
			old := e.credit
			e.credit += CreditsPerJiffyBytes(hz) * delta
			if old >= e.credit { // overflow
				e.credit = capacity
			}
		} else {
			e.credit += delta * CreditsPerJiffy64(hz)
		}
		e.credit = min(e.credit, capacity)
	}
	if m.Bytes {
		// hashlimit_byte_cost, of skb->len: the IP datagram.
		cost = min((uint64(pkt.Length)>>4+1)*cost, capacity)
		if e.credit < cost && e.capLeft != 0 {
			e.capLeft--
			e.credit = capacity
		}
		cost = uint64(uint32(cost))
	}
	ok := e.credit >= cost
	if ok {
		e.credit -= cost
	}
	return is(ok != m.Above)
}

// The kernel's default table size on a machine with more than 1 GiB of
// memory (htable_create), and the most entries bpfwall gives a table.
const (
	hashlimitDefaultSize = 8192
	hashlimitMaxSize     = 1048576 // HASHLIMIT_MAX_SIZE
	hashlimitMaxEntries  = 1 << 22
)

func init() {
	lowers(func(l *lowerer, ms []Match, r *rules.Rule, m *rules.HashLimit, nft bool) []Match {
		return l.hashlimit(ms, r, m, nft)
	})
}

// hashlimit lowers -m hashlimit: exactly, or an error saying why not.
func (l *lowerer) hashlimit(ms []Match, r *rules.Rule, m *rules.HashLimit, nft bool) []Match {
	if m.Unsupported != "" {
		l.errorf(m.Pos, "hashlimit %s is not supported", m.Unsupported)
		return ms
	}
	if nft {
		l.errorf(m.Pos, "hashlimit match in an nft rule")
		return ms
	}
	if m.Bytes && l.prog.Reassembled {
		l.errorf(m.Pos, "hashlimit in bytes in %s: netfilter counts the reassembled datagram there, bpfwall sees its fragments, whose datagram length is unknown", l.hook)
		return ms
	}
	if !l.ownBucket(r, m) {
		return ms
	}
	if m.GCInterval == 0 || m.Expire == 0 {
		l.errorf(m.Pos, "hashlimit: a zero --hashlimit-htable-gcinterval or -expire (the kernel refuses it)")
		return ms
	}
	h := hashConfig(m)
	switch c, cost := h.Credits(DefaultHZ); {
	case m.Bytes && cost == 0:
		l.errorf(m.Pos, "hashlimit: byte rate too high (the kernel refuses it)")
		return ms
	case !m.Bytes && (m.Burst == 0 || c < cost):
		l.errorf(m.Pos, "hashlimit: burst %d too large for the rate (the kernel refuses it)", m.Burst)
		return ms
	}
	if h.Max > hashlimitMaxEntries {
		l.errorf(m.Pos, "hashlimit: a table of %d entries; bpfwall makes tables of up to %d", h.Max, hashlimitMaxEntries)
		return ms
	}
	if m.Mode&(rules.HashSrcPort|rules.HashDstPort) != 0 {
		// hashlimit_init_dst reads the ports of any protocol, fragment or
		// not, and drops packets too short for them; bpfwall reads them
		// where an earlier match of the rule has made sure the packet is
		// an unfragmented one with ports (-p tcp -m tcp, ...).
		guarded := false
		for _, x := range ms {
			if g, ok := x.(L4Header); ok && g.Len >= 4 {
				guarded = true
			}
		}
		portProto := !r.ProtoNeg && (r.Proto == model.ProtoTCP || r.Proto == model.ProtoUDP || r.Proto == model.ProtoUDPLite || r.Proto == model.ProtoSCTP || r.Proto == model.ProtoDCCP)
		if !guarded || !portProto {
			l.errorf(m.Pos, "hashlimit --hashlimit-mode with ports needs an earlier -m tcp, udp or multiport match in the rule")
			return ms
		}
	}
	if pos, ok := l.hashTableElsewhere(m.Table); ok {
		l.errorf(m.Pos, "hashlimit table %q is also used at %s, by a chain of another hook or table: netfilter shares one table between them, and bpfwall compiles each hook on its own", m.Table, pos)
		return ms
	}
	t := l.hashTable(m.Table)
	h.Table = t.index
	other := t.first
	other.Above, other.Table, other.Pos = h.Above, h.Table, h.Pos
	if other != h {
		// The kernel keys and fills the shared table as the rule that
		// created it says, reachable or not.
		l.errorf(m.Pos, "hashlimit table %q has another configuration at %s, the rule that creates it when the rule set loads", m.Table, t.pos)
		return ms
	}
	return append(ms, h)
}

// hashConfig returns the table configuration hashlimit match m gives a
// table it creates (htable_create), with m's Above, Pos and Name.
func hashConfig(m *rules.HashLimit) HashLimit {
	h := HashLimit{
		Name: m.Table, Pos: m.Pos,
		Mode: m.Mode, SrcMask: m.SrcMask, DstMask: m.DstMask,
		Avg: m.Avg, Burst: m.Burst, Above: m.Above, Bytes: m.Bytes,
		Expire:     MsecsToJiffies(m.Expire, DefaultHZ),
		GCInterval: MsecsToJiffies(m.GCInterval, DefaultHZ),
	}
	// hashlimit_mt_check_common truncates a size or max above
	// HASHLIMIT_MAX_SIZE to it (iptables-save then prints the truncated
	// values); htable_create then sizes the table.
	size, max := min(m.Size, hashlimitMaxSize), min(m.Max, hashlimitMaxSize)
	if size == 0 {
		size, h.MemorySized = hashlimitDefaultSize, true
	}
	switch {
	case max == 0:
		h.Max = 8 * size
	case max < size:
		h.Max = size
	default:
		h.Max = max
	}
	return h
}

// hashTable returns the hashlimit table called name: its configuration is
// that of the match that creates it, the first in load order over every
// rule of the rule set, reachable or not (hashlimit_mt_check runs for each
// rule loaded). Families have tables of their own (htable_find_get), and a
// rule set is of one family.
func (l *lowerer) hashTable(name string) hashTable {
	if t, ok := l.hashTables[name]; ok {
		return t
	}
	if l.hashTables == nil {
		l.hashTables = make(map[string]hashTable)
	}
	t := hashTable{index: len(l.hashTables)}
	l.eachMatchInLoadOrder(func(_ *rules.Rule, m rules.Match) bool {
		h, ok := m.(*rules.HashLimit)
		if ok && h.Table == name {
			t.first, t.pos = hashConfig(h), h.Pos
		}
		return !ok || h.Table != name
	})
	l.hashTables[name] = t
	return t
}

// hashTableElsewhere returns where a hashlimit match outside the program's
// chains uses table name.
func (l *lowerer) hashTableElsewhere(name string) (rules.Pos, bool) {
	return l.matchElsewhere(func(m rules.Match) bool {
		h, ok := m.(*rules.HashLimit)
		return ok && h.Table == name
	})
}

// inProgram reports whether r is a rule of the chains being lowered.
func (l *lowerer) inProgram(r *rules.Rule) bool {
	for _, c := range l.chains {
		if slices.Contains(c.Rules, r) {
			return true
		}
	}
	return false
}
