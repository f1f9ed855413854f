package ir

import (
	"fmt"

	"bpfwall/model"
	"bpfwall/rules"
)

// Owner is -m owner (owner_mt): the packet's socket, and the file system
// user and group of the file that holds it. Each of UID, GID and Socket
// is tested when set, negated by its Neg; --suppl-groups is refused when
// lowered.
type Owner struct {
	UID, GID          *rules.IDRange
	UIDNeg, GIDNeg    bool
	Socket, SocketNeg bool
}

// tested and inverted are owner_mt's info->match and info->invert.
func (m Owner) flags() (tested, inverted uint8) {
	const uid, gid, socket = 1, 2, 4
	if m.UID != nil {
		tested |= uid
		if m.UIDNeg {
			inverted |= uid
		}
	}
	if m.GID != nil {
		tested |= gid
		if m.GIDNeg {
			inverted |= gid
		}
	}
	if m.Socket {
		tested |= socket
		if m.SocketNeg {
			inverted |= socket
		}
	}
	return tested, inverted
}

func (m Owner) eval(p *Program, st *State, pkt *model.Packet) outcome {
	tested, inverted := m.flags()
	s := pkt.Socket
	if s == nil {
		// No socket: only a rule whose every test is negated holds.
		return is(tested^inverted == 0)
	}
	if m.Socket && m.SocketNeg {
		return is(false)
	}
	if !s.File {
		// A kernel socket: no user, no group.
		return is((tested^inverted)&3 == 0)
	}
	if m.UID != nil && (m.UID.Min <= s.UID && s.UID <= m.UID.Max) == m.UIDNeg {
		return is(false)
	}
	if m.GID != nil && (m.GID.Min <= s.GID && s.GID <= m.GID.Max) == m.GIDNeg {
		return is(false)
	}
	return is(true)
}

func (m Owner) appendTo(b []byte, fam rules.Family) []byte {
	b = append(b, "owner"...)
	if m.Socket {
		b = append(b, ' ')
		b = neg(b, m.SocketNeg)
		b = append(b, "socket"...)
	}
	if m.UID != nil {
		b = append(b, " uid "...)
		b = neg(b, m.UIDNeg)
		b = append(b, m.UID.String()...)
	}
	if m.GID != nil {
		b = append(b, " gid "...)
		b = neg(b, m.GIDNeg)
		b = append(b, m.GID.String()...)
	}
	return b
}

func (m Owner) verify(v *verifier, st *ruleState) error {
	if m.UID == nil && m.GID == nil && !m.Socket {
		return fmt.Errorf("owner match tests nothing")
	}
	for _, r := range []*rules.IDRange{m.UID, m.GID} {
		if r != nil && r.Min > r.Max {
			return fmt.Errorf("owner: empty range %s", r)
		}
	}
	return nil
}

func init() {
	lowers(func(l *lowerer, ms []Match, r *rules.Rule, m *rules.Owner, nft bool) []Match {
		return l.lowerOwner(ms, m, nft)
	})
}

// lowerOwner lowers -m owner, which xt_owner registers for OUTPUT and
// POSTROUTING only: the kernel refuses the table otherwise. nft's meta
// skuid and skgid (nft) are valid in every chain: they read skb->sk, which
// early demux sets for INPUT too.
func (l *lowerer) lowerOwner(ms []Match, m *rules.Owner, nft bool) []Match {
	if !nft && l.hook != "OUTPUT" && l.hook != "POSTROUTING" {
		l.errorf(m.Pos, "owner match is only valid in OUTPUT and POSTROUTING, not %s", l.hook)
		return ms
	}
	for _, r := range []*rules.IDRange{m.UID, m.GID} {
		if r != nil && r.Min > r.Max {
			l.errorf(m.Pos, "owner: range %d-%d is empty (the kernel refuses it)", r.Min, r.Max)
			return ms
		}
	}
	if m.SupplGroups {
		l.errorf(m.Pos, "owner --suppl-groups is not supported")
		return ms
	}
	return append(ms, Owner{UID: m.UID, GID: m.GID, UIDNeg: m.UIDNeg, GIDNeg: m.GIDNeg, Socket: m.Socket, SocketNeg: m.SocketNeg})
}
