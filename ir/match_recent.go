package ir

import (
	"fmt"
	"net/netip"

	"bpfwall/model"
	"bpfwall/rules"
)

func (m Recent) eval(p *Program, st *State, pkt *model.Packet) outcome {
	return st.recent(m, pkt)
}

func (m Recent) appendTo(b []byte, fam rules.Family) []byte {
	return append(b, m.String()...)
}

func (Recent) clocked() {}

func (m Recent) verify(v *verifier, st *ruleState) error {
	if m.Table < 0 || m.Slot < 0 || m.Stamps < 1 || m.Stamps > RecentMaxStamps || m.Stamps&(m.Stamps-1) != 0 || m.HitCount > uint32(m.Stamps) || !m.Mask.IsValid() {
		return fmt.Errorf("recent table %d slot %d with %d stamps, hitcount %d, mask %s", m.Table, m.Slot, m.Stamps, m.HitCount, m.Mask)
	}
	return nil
}

// Recent is -m recent (xt_recent's recent_mt): a table of recently seen
// addresses shared by every match naming it. An entry holds an address
// (masked with the table's Mask), the TTL it was last set or updated with,
// and a ring of the last Stamps times (jiffies) it was set or updated; the
// table holds at most RecentListTot entries, and a new address evicts the
// least recently updated one. Command says what the match does:
//
//   - RecentSet adds the address or stamps its entry again, and holds;
//   - RecentCheck holds when the address is in the table, seen HitCount
//     times (at least once when 0) within the last Seconds (ever when 0);
//     with TTL only an entry whose TTL is the packet's (or either is 0)
//     counts; Reap then removes the least recently updated entry when its
//     last stamp is older than Seconds;
//   - RecentUpdate is RecentCheck, and when the match holds (with Invert:
//     when it fails, as the kernel's ret includes the inversion) it stamps
//     the entry again;
//   - RecentRemove holds when the address is in the table, and removes it.
//
// Invert inverts the outcome. The TTL is the packet's as it arrived: in
// FORWARD the kernel adds one to the TTL ip_forward decremented.
type Recent struct {
	Pos     rules.Pos
	Table   int    // the program's table index, one per --name
	Name    string // the --name
	Slot    int    // the match's number among the program's recent matches
	Command rules.RecentCommand
	Invert  bool
	Seconds uint32
	Reap    bool
	// HitCount is --hitcount; 0 counts any stamp.
	HitCount uint32
	TTL      bool // --rttl
	Dest     bool // --rdest: the destination address
	// Mask and Stamps describe the table: the mask of its addresses and
	// the length of each entry's ring of stamps (nstamps_max_mask + 1).
	Mask   netip.Addr
	Stamps int
}

func (m Recent) String() string {
	s := fmt.Sprintf("recent table %d %q ", m.Table, m.Name)
	if m.Invert {
		s += "! "
	}
	s += m.Command.String()
	if m.Seconds != 0 {
		s += fmt.Sprintf(" seconds %d", m.Seconds)
	}
	if m.Reap {
		s += " reap"
	}
	if m.HitCount != 0 {
		s += fmt.Sprintf(" hitcount %d", m.HitCount)
	}
	if m.TTL {
		s += " rttl"
	}
	side := "src"
	if m.Dest {
		side = "dst"
	}
	return s + fmt.Sprintf(" %s mask %s stamps %d", side, m.Mask, m.Stamps)
}
