package rules

import (
	"os/user"
	"strconv"
)

// Owner is "-m owner" (libxt_owner, xt_owner.c): the socket of a locally
// generated packet and the file system user and group of the file that
// holds it. Each of UID, GID and Socket is tested when set, negated by
// its Neg. User and group names are read as their numbers, as
// iptables-save prints them.
type Owner struct {
	Located
	UID, GID       *IDRange
	UIDNeg, GIDNeg bool
	// Socket: --socket-exists.
	Socket, SocketNeg bool
	// SupplGroups: --suppl-groups, the GID range also matches the
	// process's supplementary groups.
	SupplGroups bool
}

// IDRange is an inclusive range of user or group IDs.
type IDRange struct{ Min, Max uint32 }

func (r IDRange) String() string {
	if r.Min == r.Max {
		return strconv.FormatUint(uint64(r.Min), 10)
	}
	return strconv.FormatUint(uint64(r.Min), 10) + "-" + strconv.FormatUint(uint64(r.Max), 10)
}

func (m *Owner) Name() string { return "owner" }

// appendSave prints the options in libxt_owner's order.
func (m *Owner) appendSave(b []byte) []byte {
	if m.Socket {
		b = appendFlag(b, "socket-exists", m.SocketNeg)
	}
	if m.UID != nil {
		b = appendFlag(b, "uid-owner", m.UIDNeg)
		b = append(b, ' ')
		b = append(b, m.UID.String()...)
	}
	if m.GID != nil {
		b = appendFlag(b, "gid-owner", m.GIDNeg)
		b = append(b, ' ')
		b = append(b, m.GID.String()...)
	}
	if m.SupplGroups {
		b = appendFlag(b, "suppl-groups", false)
	}
	return b
}

// LookupID finds the ID of a user, or of a group, by name, as getpwnam
// and getgrnam do for libxt_owner and nft.
func LookupID(name string, group bool) (uint32, bool) {
	var id string
	if group {
		g, err := user.LookupGroup(name)
		if err != nil {
			return 0, false
		}
		id = g.Gid
	} else {
		u, err := user.Lookup(name)
		if err != nil {
			return 0, false
		}
		id = u.Uid
	}
	v, err := strconv.ParseUint(id, 10, 32)
	return uint32(v), err == nil
}
