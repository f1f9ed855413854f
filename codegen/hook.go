package codegen

import "fmt"

// Hook is where a compiled program runs.
type Hook uint8

const (
	// HookXDP is the XDP hook of an interface; the zero Hook, as xdp is the
	// default hook of the command line.
	HookXDP Hook = iota
	HookTCIngress
	HookTCEgress
)

var hookNames = []string{"xdp", "tc-ingress", "tc-egress"}

func (h Hook) String() string {
	if int(h) < len(hookNames) {
		return hookNames[h]
	}
	return fmt.Sprintf("Hook(%d)", uint8(h))
}

// ParseHook returns the hook called name.
func ParseHook(name string) (Hook, error) {
	for i, n := range hookNames {
		if n == name {
			return Hook(i), nil
		}
	}
	return 0, fmt.Errorf("unknown hook %q (want xdp, tc-ingress or tc-egress)", name)
}

// valid reports whether h is one of the hooks.
func (h Hook) valid() bool { return int(h) < len(hookNames) }

// tc reports whether h is a tc hook, whose context is a __sk_buff.
func (h Hook) tc() bool { return h == HookTCIngress || h == HookTCEgress }

// Return codes of the hooks.
const (
	xdpDrop   = 1 // XDP_DROP
	xdpPass   = 2 // XDP_PASS
	tcActOK   = 0 // TC_ACT_OK
	tcActShot = 2 // TC_ACT_SHOT
)

// pass and drop are the program's return codes for ACCEPT and DROP.
func (h Hook) pass() int32 {
	if h == HookXDP {
		return xdpPass
	}
	return tcActOK
}

func (h Hook) drop() int32 {
	if h == HookXDP {
		return xdpDrop
	}
	return tcActShot
}
