package loader

import (
	"errors"
	"fmt"

	"github.com/cilium/ebpf"

	"bpfwall/codegen"
	"bpfwall/codegen/abi"
	"bpfwall/ir"
	"bpfwall/model"
	"bpfwall/rules"
)

// loopbackIfindex is the device BPF_PROG_TEST_RUN gives a packet when no
// context says otherwise.
const loopbackIfindex = 1

// Outcome is what the kernel did with one packet.
type Outcome struct {
	Verdict  ir.Verdict
	Decision abi.Decision
	// Reply is the frame a REJECT rule sent back: the packet as the
	// program left it when it transmitted it; nil otherwise.
	Reply []byte
	// Stage is set when the program deferred the packet (class U) and
	// its netfilter stage decided it, as after conntrack. A test run has
	// no conntrack: the stage sees the state INVALID.
	Stage bool
}

// Run passes one Ethernet frame through the loaded program with
// BPF_PROG_TEST_RUN, as if it arrived on (or, for tc-egress, left through)
// an interface called iface, and returns the verdict and the decision the
// program recorded. The program run is the one that would be attached.
func (l *Loaded) Run(frame []byte, iface string) (Outcome, error) {
	if err := l.SetIface(loopbackIfindex, iface); err != nil {
		return Outcome{}, err
	}
	if l.Program.Hook != codegen.HookXDP {
		frame = addressedToLoopback(frame)
	}
	// Room for an ICMP error that quotes all of a small packet.
	opts := &ebpf.RunOptions{Data: frame, DataOut: make([]byte, len(frame)+256), Repeat: 1}
	ret, err := l.prog.Run(opts)
	if err != nil {
		return Outcome{}, fmt.Errorf("test run: %w", err)
	}
	v, err := verdict(l.Program.Hook, ret)
	if err != nil {
		return Outcome{}, err
	}
	d, err := l.takeDecision()
	if err != nil {
		return Outcome{}, err
	}
	if d.Kind == abi.Deferred && l.nfProg != nil {
		return l.runNetfilter(frame, iface)
	}
	out := Outcome{Verdict: v, Decision: d}
	if v == ir.VerdictReject {
		out.Reply = opts.DataOut
	}
	// A REJECT rule that sends nothing (to an ICMP error, a fragment,
	// ...) still rejects.
	if v == ir.VerdictDrop && d.Kind == abi.DecidedByRule && int(d.Rule) < len(l.Program.IR.Rules) {
		if _, ok := l.Program.IR.Rules[d.Rule].Action.(ir.Reject); ok {
			out.Verdict = ir.VerdictReject
		}
	}
	return out, nil
}

// LoopbackOnly reports whether the IP layer takes frame on a loopback
// device and drops it on others, or the other way round: IPv6's ::1 and
// interface-local multicast. Run cannot show such a frame's fate on
// another interface than lo: the test run receives every frame on lo,
// whatever name the rules see, and the netfilter stage's run has no
// device.
func LoopbackOnly(frame []byte) bool {
	lo, err1 := model.Decode(frame, model.Meta{InIface: "lo"})
	other, err2 := model.Decode(frame, model.Meta{InIface: "eth0"})
	return err1 == nil && err2 == nil && lo.Invalid != other.Invalid
}

// runNetfilter passes one frame through the netfilter stage with
// BPF_PROG_TEST_RUN (bpf_prog_test_run_nf), as PRE_ROUTING would.
func (l *Loaded) runNetfilter(frame []byte, iface string) (Outcome, error) {
	// The test run's hook state has no input device: its ifindex reads 0.
	if err := l.SetIface(0, iface); err != nil {
		return Outcome{}, err
	}
	if err := l.setNetfilterIface(0); err != nil {
		return Outcome{}, err
	}
	pf := byte(nfprotoIPv4)
	if l.Program.IR.Family == rules.IPv6 {
		pf = nfprotoIPv6
	}
	// struct nf_hook_state: hook, pf.
	opts := &ebpf.RunOptions{Data: addressedToLoopback(frame), Context: []byte{nfInetPreRouting, pf}, Repeat: 1}
	ret, err := l.nfProg.Run(opts)
	if err != nil {
		return Outcome{}, fmt.Errorf("test run of the netfilter stage: %w", err)
	}
	d, err := l.takeDecision()
	if err != nil {
		return Outcome{}, err
	}
	out := Outcome{Decision: d, Stage: true}
	switch ret {
	case nfAccept:
		out.Verdict = ir.VerdictAccept
	case nfDrop:
		out.Verdict = ir.VerdictDrop
		if d.Kind == abi.DecidedByRule && int(d.Rule) < len(l.Program.IR.Rules) {
			if _, ok := l.Program.IR.Rules[d.Rule].Action.(ir.Reject); ok {
				out.Verdict = ir.VerdictReject // dropped without a reply
			}
		}
	default:
		return Outcome{}, fmt.Errorf("test run of the netfilter stage: unexpected return code %d", ret)
	}
	return out, nil
}

// NFPROTO_IPV4, NFPROTO_IPV6, NF_INET_PRE_ROUTING, NF_DROP, NF_ACCEPT.
const (
	nfprotoIPv4      = 2
	nfprotoIPv6      = 10
	nfInetPreRouting = 0
	nfDrop           = 0
	nfAccept         = 1
)

// takeDecision reads the decision of the last test run and clears it.
func (l *Loaded) takeDecision() (abi.Decision, error) {
	m := l.coll.Maps[abi.DecisionMap]
	if m == nil {
		return abi.Decision{}, errors.New("read decision: the program records none: compile it with codegen.Options.Trace")
	}
	var perCPU []abi.Decision
	if err := m.Lookup(uint32(0), &perCPU); err != nil {
		return abi.Decision{}, fmt.Errorf("read decision: %w", err)
	}
	// The test run happens on this CPU; the other slots hold older
	// decisions, so the run's is found by clearing them first.
	var out abi.Decision
	for _, d := range perCPU {
		if d.Kind != 0 {
			out = d
		}
	}
	zero := make([]abi.Decision, len(perCPU))
	if err := m.Put(uint32(0), zero); err != nil {
		return abi.Decision{}, fmt.Errorf("clear decision: %w", err)
	}
	return out, nil
}

// addressedToLoopback returns frame with a unicast destination MAC replaced
// by the loopback device's (all zeros). A tc test run receives the frame on
// lo, and eth_type_trans would otherwise mark it PACKET_OTHERHOST, which the
// IP layer drops; the frame stands for one addressed to the interface it
// arrives on. Broadcast and multicast destinations stay as they are.
func addressedToLoopback(frame []byte) []byte {
	if len(frame) < 6 || frame[0]&1 != 0 {
		return frame
	}
	out := append([]byte(nil), frame...)
	clear(out[:6])
	return out
}

// Return codes of the hooks.
const (
	xdpDrop       = 1
	xdpPass       = 2
	xdpTx         = 3
	tcActOK       = 0
	tcActShot     = 2
	tcActRedirect = 7
	skDrop        = 0
	skPass        = 1
)

func verdict(h codegen.Hook, ret uint32) (ir.Verdict, error) {
	switch {
	case h == codegen.HookSkLookup && ret == skPass:
		return ir.VerdictAccept, nil
	case h == codegen.HookSkLookup && ret == skDrop:
		return ir.VerdictDrop, nil
	case h == codegen.HookSkLookup:
	case h == codegen.HookXDP && ret == xdpPass, h != codegen.HookXDP && ret == tcActOK:
		return ir.VerdictAccept, nil
	case h == codegen.HookXDP && ret == xdpDrop, h != codegen.HookXDP && ret == tcActShot:
		return ir.VerdictDrop, nil
	case h == codegen.HookXDP && ret == xdpTx, h != codegen.HookXDP && ret == tcActRedirect:
		return ir.VerdictReject, nil // only REJECT transmits
	}
	return 0, fmt.Errorf("test run: unexpected %s return code %d", h, ret)
}
