package codegen

import (
	"fmt"

	"bpfwall/codegen/uapi"
)

// Hook is where a compiled program runs.
type Hook uint8

const (
	// HookXDP is the XDP hook of an interface; the zero Hook, as xdp is the
	// default hook of the command line.
	HookXDP Hook = iota
	HookTCIngress
	HookTCEgress
	// HookSkLookup is the socket lookup of a network namespace
	// (BPF_PROG_TYPE_SK_LOOKUP): the program sees a lookup, not a packet.
	HookSkLookup
	// HookNetfilter is a chain's own netfilter hook: a
	// BPF_PROG_TYPE_NETFILTER program that runs the entry chain of its
	// table where netfilter runs it (NetfilterPoint), at the table's
	// priority, for every packet of the family that reaches the hook.
	HookNetfilter
	// HookStage is the netfilter stage of an xdp or tc-ingress program
	// that tests the conntrack state (Program.Netfilter): a
	// BPF_PROG_TYPE_NETFILTER program at PRE_ROUTING, just after conntrack.
	// It is internal: no command line names it.
	HookStage
)

var hookNames = []string{"xdp", "tc-ingress", "tc-egress", "sk-lookup", "netfilter", "netfilter-stage"}

func (h Hook) String() string {
	if int(h) < len(hookNames) {
		return hookNames[h]
	}
	return fmt.Sprintf("Hook(%d)", uint8(h))
}

// ParseHook returns the hook called name.
func ParseHook(name string) (Hook, error) {
	for i, n := range hookNames[:HookStage] {
		if n == name {
			return Hook(i), nil
		}
	}
	return 0, fmt.Errorf("unknown hook %q (want xdp, tc-ingress, tc-egress, sk-lookup or netfilter)", name)
}

// valid reports whether h is one of the hooks.
func (h Hook) valid() bool { return int(h) < len(hookNames) }

// tc reports whether h is a tc hook, whose context is a __sk_buff.
func (h Hook) tc() bool { return h == HookTCIngress || h == HookTCEgress }

// nf reports whether h is a netfilter hook, whose context is a
// bpf_nf_ctx: a chain's own hook or the stage.
func (h Hook) nf() bool { return h == HookNetfilter || h == HookStage }

// pass and drop are the program's return codes for ACCEPT and DROP.
func (h Hook) pass() int32 {
	switch h {
	case HookXDP:
		return uapi.XDPPass
	case HookSkLookup:
		return uapi.SkPass
	case HookNetfilter, HookStage:
		return uapi.NFAccept
	}
	return uapi.TCActOK
}

func (h Hook) drop() int32 {
	switch h {
	case HookXDP:
		return uapi.XDPDrop
	case HookSkLookup:
		return uapi.SkDrop
	case HookNetfilter, HookStage:
		return uapi.NFDrop
	}
	return uapi.TCActShot
}
