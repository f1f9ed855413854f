package rules

import "net/netip"

// RecentCommand is what "-m recent" does with its table: exactly one of
// --set, --rcheck, --update and --remove.
type RecentCommand uint8

// The commands, as xt_recent's check_set bits name them.
const (
	RecentSet    RecentCommand = iota + 1 // XT_RECENT_SET
	RecentCheck                           // XT_RECENT_CHECK (--rcheck)
	RecentUpdate                          // XT_RECENT_UPDATE
	RecentRemove                          // XT_RECENT_REMOVE
)

func (c RecentCommand) String() string {
	switch c {
	case RecentSet:
		return "set"
	case RecentCheck:
		return "rcheck"
	case RecentUpdate:
		return "update"
	case RecentRemove:
		return "remove"
	}
	return "none"
}

// RecentNameLen is XT_RECENT_NAME_LEN: a table name is shorter.
const RecentNameLen = 200

// Recent is "-m recent" (xt_recent revision 1): a table of recently seen
// addresses, one per network namespace and Table name. Fields are as
// libxt_recent fills struct xt_recent_mtinfo_v1.
type Recent struct {
	Located
	Command RecentCommand
	Invert  bool   // "! --set" and so on
	Seconds uint32 // 0: no --seconds
	Reap    bool
	// HitCount is --hitcount; 0 when not given.
	HitCount uint32
	TTL      bool   // --rttl
	Table    string // --name; "DEFAULT" when not given
	// Mask is --mask, all ones when not given; an address of the rule
	// set's family.
	Mask netip.Addr
	Dest bool // --rdest (XT_RECENT_DEST); --rsource otherwise
}

func (m *Recent) Name() string { return "recent" }

// appendSave prints the match as libxt_recent's recent_save does.
func (m *Recent) appendSave(b []byte) []byte {
	b = appendNeg(b, m.Invert)
	b = append(b, " --"...)
	b = append(b, m.Command.String()...)
	if m.Seconds != 0 {
		b = append(b, " --seconds "...)
		b = appendUint(b, uint64(m.Seconds))
	}
	if m.Reap {
		b = append(b, " --reap"...)
	}
	if m.HitCount != 0 {
		b = append(b, " --hitcount "...)
		b = appendUint(b, uint64(m.HitCount))
	}
	if m.TTL {
		b = append(b, " --rttl"...)
	}
	b = append(b, " --name "...)
	b = append(b, quoteIfNeeded(m.Table)...)
	if m.Mask.IsValid() {
		b = append(b, " --mask "...)
		b = append(b, m.Mask.String()...)
	}
	if m.Dest {
		return append(b, " --rdest"...)
	}
	return append(b, " --rsource"...)
}
