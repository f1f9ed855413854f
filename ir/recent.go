package ir

import (
	"cmp"
	"math/bits"
	"net/netip"
	"slices"

	"bpfwall/model"
	"bpfwall/rules"
)

// xt_recent's module parameters as bpfwall assumes them, their defaults
// in kernel 6.18: a table remembers RecentListTot addresses, and with
// RecentPktListTot 0 each address as many times as recent_mt_check's
// nstamp_mask says (see RecentStamps). The loader refuses a kernel whose
// /sys/module/xt_recent/parameters say otherwise.
const (
	RecentListTot    = 100
	RecentPktListTot = 0
)

// RecentMaxStamps is the most timestamps per address bpfwall keeps: a
// --hitcount above it is refused (the kernel allows 65535).
const RecentMaxStamps = 1024

// RecentStamps is recent_mt_check's nstamp_mask + 1 for a rule's hit
// count, with ip_pkt_list_tot at RecentPktListTot: a table's ring is the
// largest of its rules'.
func RecentStamps(hitCount uint32) int {
	switch {
	case RecentPktListTot != 0 && hitCount < RecentPktListTot:
		return roundUpPow2(RecentPktListTot)
	case hitCount != 0:
		return roundUpPow2(hitCount)
	}
	return 32
}

func roundUpPow2(n uint32) int {
	if n <= 1 {
		return 1
	}
	return 1 << bits.Len32(n-1)
}

// recentEntry is struct recent_entry; seq orders the entries by their
// last update (the table's lru_list).
type recentEntry struct {
	addr           netip.Addr
	ttl            uint8
	index, nstamps uint16
	stamps         []uint64
	seq            uint64
}

// recentTable is struct recent_table: the entries in the order they were
// added (a hash chain's order, which lookups follow).
type recentTable struct {
	entries []*recentEntry
	seq     uint64
	now     uint64 // the latest time a match used
}

// RecentKey is the address a recent match of table mask looks up: the
// packet's source (or destination) ANDed with the mask.
func RecentKey(a, mask netip.Addr) netip.Addr {
	if a.Is4() {
		x, y := a.As4(), mask.As4()
		for i := range x {
			x[i] &= y[i]
		}
		return netip.AddrFrom4(x)
	}
	x, y := a.As16(), mask.As16()
	for i := range x {
		x[i] &= y[i]
	}
	return netip.AddrFrom16(x)
}

// lookup is recent_entry_lookup: the first entry with the address whose
// TTL is ttl, when neither is 0.
func (t *recentTable) lookup(addr netip.Addr, ttl uint8) *recentEntry {
	for _, e := range t.entries {
		if e.addr == addr && (ttl == e.ttl || ttl == 0 || e.ttl == 0) {
			return e
		}
	}
	return nil
}

func (t *recentTable) remove(e *recentEntry) {
	t.entries = slices.DeleteFunc(t.entries, func(x *recentEntry) bool { return x == e })
}

// head is the least recently updated entry, the head of lru_list.
func (t *recentTable) head() *recentEntry {
	var h *recentEntry
	for _, e := range t.entries {
		if h == nil || e.seq < h.seq {
			h = e
		}
	}
	return h
}

// timeAfter is the kernel's time_after(a, b) on unsigned long jiffies.
func timeAfter(a, b uint64) bool { return int64(b-a) < 0 }

// recent is recent_mt; it reports whether the match holds.
func (s *State) recent(m Recent, pkt *model.Packet) outcome {
	now := s.now(m, s.Jiffies)
	if s.recentTables == nil {
		s.recentTables = make(map[int]*recentTable)
	}
	t := s.recentTables[m.Table]
	if t == nil {
		t = &recentTable{}
		s.recentTables[m.Table] = t
	}
	// The kernel reads jiffies under its lock, so a table's time never
	// goes back; bpfwall's program reads them before taking the table's
	// lock, and takes the later of its tick and the table's last.
	now = max(now, t.now)
	t.now = now
	addr := pkt.Src
	if m.Dest {
		addr = pkt.Dst
	}
	addr = RecentKey(addr, m.Mask)
	ttl := pkt.TTL
	ret := m.Invert
	lookupTTL := uint8(0)
	if m.TTL {
		lookupTTL = ttl
	}
	e := t.lookup(addr, lookupTTL)
	if e == nil {
		if m.Command != rules.RecentSet {
			return is(ret)
		}
		// recent_entry_init: a full table first loses its least
		// recently updated entry. Its allocation does not fail here.
		if len(t.entries) >= RecentListTot {
			t.remove(t.head())
		}
		t.seq++
		e = &recentEntry{addr: addr, ttl: ttl, index: 1, nstamps: 1, stamps: make([]uint64, m.Stamps), seq: t.seq}
		e.stamps[0] = now
		t.entries = append(t.entries, e)
		return is(!ret)
	}
	switch m.Command {
	case rules.RecentSet:
		ret = !ret
	case rules.RecentRemove:
		t.remove(e)
		ret = !ret
	case rules.RecentCheck, rules.RecentUpdate:
		// info->seconds * HZ is u32 arithmetic.
		time := now - uint64(m.Seconds*uint32(s.hz()))
		hits := uint32(0)
		for i := 0; i < int(e.nstamps); i++ {
			if m.Seconds != 0 && timeAfter(time, e.stamps[i]) {
				continue
			}
			hits++
			if m.HitCount == 0 || hits >= m.HitCount {
				ret = !ret
				break
			}
		}
		if m.Reap {
			// recent_entry_reap: the least recently updated entry goes
			// when its last stamp is older than the window, unless it is
			// the entry about to be updated.
			h := t.head()
			if !(h == e && m.Command == rules.RecentUpdate && ret) && timeAfter(time, h.stamps[h.index-1]) {
				t.remove(h)
			}
		}
	}
	if m.Command == rules.RecentSet || (m.Command == rules.RecentUpdate && ret) {
		// recent_entry_update
		e.index &= uint16(m.Stamps - 1)
		e.stamps[e.index] = now
		e.index++
		if e.index > e.nstamps {
			e.nstamps = e.index
		}
		t.seq++
		e.seq = t.seq
		e.ttl = ttl
	}
	return is(ret)
}

// RecentEntry is one entry of a recent table as the model holds it, for
// tests that compare it with a program's.
type RecentEntry struct {
	Addr           netip.Addr
	TTL            uint8
	Index, NStamps uint16
	Stamps         []uint64 // the ring, NStamps of them used
	Seq            uint64   // larger for a more recent update
}

// RecentEntries returns the entries of table i, least recently updated
// first.
func (s *State) RecentEntries(i int) []RecentEntry {
	t := s.recentTables[i]
	if t == nil {
		return nil
	}
	var out []RecentEntry
	for _, e := range t.entries {
		out = append(out, RecentEntry{Addr: e.addr, TTL: e.ttl, Index: e.index, NStamps: e.nstamps, Stamps: slices.Clone(e.stamps), Seq: e.seq})
	}
	slices.SortFunc(out, func(a, b RecentEntry) int { return cmp.Compare(a.Seq, b.Seq) })
	return out
}

// recentTableInfo is what lowering knows of a recent table.
type recentTableInfo struct {
	index int
	mask  netip.Addr
	pos   rules.Pos // of the match that creates the table
	// stamps is the ring size, the largest any match naming the table
	// asks for; bigHitCount and bigPos are that match's.
	stamps      int
	bigHitCount uint32
	bigPos      rules.Pos
}

// recentTable returns the table called name, found over every recent
// match of the rule set, reachable or not (recent_mt_check runs for each
// rule loaded): its mask is the one of the match that creates it, the
// first in load order, and its ring the largest any match asks for.
func (l *lowerer) recentTable(name string) *recentTableInfo {
	if t := l.recentTables[name]; t != nil {
		return t
	}
	if l.recentTables == nil {
		l.recentTables = make(map[string]*recentTableInfo)
	}
	t := &recentTableInfo{index: len(l.recentTables)}
	created := false
	l.eachMatchInLoadOrder(func(_ *rules.Rule, m rules.Match) bool {
		rm, ok := m.(*rules.Recent)
		if !ok || rm.Table != name {
			return true
		}
		if !created {
			t.mask, t.pos, created = rm.Mask, rm.Pos, true
		}
		if s := RecentStamps(rm.HitCount); s > t.stamps {
			t.stamps, t.bigHitCount, t.bigPos = s, rm.HitCount, rm.Pos
		}
		return true
	})
	l.recentTables[name] = t
	return t
}

func init() {
	lowers(func(l *lowerer, ms []Match, r *rules.Rule, m *rules.Recent, nft bool) []Match {
		return l.recent(ms, r, m, nft)
	})
}

// recent lowers -m recent: exactly, or an error saying why not.
func (l *lowerer) recent(ms []Match, r *rules.Rule, m *rules.Recent, nft bool) []Match {
	if nft {
		l.errorf(m.Pos, "recent match in an nft rule")
		return ms
	}
	if m.HitCount > RecentMaxStamps {
		l.errorf(m.Pos, "recent --hitcount %d: bpfwall keeps at most %d stamps per address", m.HitCount, RecentMaxStamps)
		return ms
	}
	if c, other, ok := l.sharedRule(r); ok && !l.sharedState {
		l.errorf(m.Pos, "recent match in chain %s, which chain %s also reaches: netfilter shares the table %q between the two hooks, and bpfwall compiles each hook on its own", c, other, m.Table)
		return ms
	}
	if pos, ok := l.recentElsewhere(m.Table); ok && !l.sharedState {
		l.errorf(m.Pos, "recent table %q is also used at %s, by a chain of another hook or table: netfilter shares one table between them, and bpfwall compiles each hook on its own", m.Table, pos)
		return ms
	}
	if l.hook == "OUTPUT" || l.hook == "POSTROUTING" {
		// recent_mt adds one to the TTL of a packet going out without a
		// local socket; only --rttl ever compares it.
		if pos, ok := l.recentTTLUser(m.Table); ok {
			l.errorf(m.Pos, "recent table %q in %s, with --rttl at %s: the kernel adds one to the TTL it records for a packet without a local socket, which bpfwall cannot tell", m.Table, l.hook, pos)
			return ms
		}
	}
	t := l.recentTable(m.Table)
	if t.mask != m.Mask {
		// recent_mt uses the mask of the rule that created the table,
		// reachable or not, and ignores its own.
		l.errorf(m.Pos, "recent table %q has --mask %s here and %s at %s, the rule that creates it when the rule set loads", m.Table, m.Mask, t.mask, t.pos)
		return ms
	}
	if t.stamps > RecentStamps(RecentMaxStamps) {
		l.errorf(m.Pos, "recent table %q: --hitcount %d at %s gives every address of the table %d stamps; bpfwall keeps at most %d", m.Table, t.bigHitCount, t.bigPos, t.stamps, RecentMaxStamps)
		return ms
	}
	rm := Recent{
		Pos: m.Pos, Table: t.index, Name: m.Table, Slot: l.recentSlots, Command: m.Command, Invert: m.Invert,
		Seconds: m.Seconds, Reap: m.Reap, HitCount: m.HitCount, TTL: m.TTL, Dest: m.Dest, Mask: m.Mask,
	}
	l.recentSlots++
	return append(ms, rm)
}

// sizeRecentTables gives every recent match its table's ring size, the
// largest any of the table's rules asks for (recent_mt_check grows the
// table to it).
func (l *lowerer) sizeRecentTables() {
	if len(l.recentTables) == 0 {
		return
	}
	stamps := make(map[int]int)
	for _, t := range l.recentTables {
		stamps[t.index] = t.stamps
	}
	for ri := range l.prog.Rules {
		for mi, m := range l.prog.Rules[ri].Matches {
			if rm, ok := m.(Recent); ok {
				rm.Stamps = stamps[rm.Table]
				l.prog.Rules[ri].Matches[mi] = rm
			}
		}
	}
}

// sharedRule reports whether rule r is in a user chain that another
// builtin chain of the table reaches too, and which.
func (l *lowerer) sharedRule(r *rules.Rule) (chain, other string, ok bool) {
	l.sharedChains()
	for _, c := range l.table.Chains {
		if slices.Contains(c.Rules, r) {
			if other, ok := l.shared[c.Name]; ok {
				return c.Name, other, true
			}
		}
	}
	return "", "", false
}

// recentElsewhere returns where a recent match outside the program's
// chains names table name.
func (l *lowerer) recentElsewhere(name string) (rules.Pos, bool) {
	return l.matchElsewhere(func(m rules.Match) bool {
		rm, ok := m.(*rules.Recent)
		return ok && rm.Table == name
	})
}

// recentTTLUser returns where a recent match of the rule set with --rttl
// names table name.
func (l *lowerer) recentTTLUser(name string) (rules.Pos, bool) {
	for _, t := range l.rs.Tables {
		for _, c := range t.Chains {
			for _, r := range c.Rules {
				for _, m := range r.Matches {
					if rm, ok := m.(*rules.Recent); ok && rm.Table == name && rm.TTL {
						return rm.Pos, true
					}
				}
			}
		}
	}
	return rules.Pos{}, false
}
