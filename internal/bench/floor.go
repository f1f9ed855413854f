package bench

import (
	"fmt"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"

	"bpfwall/codegen"
)

// XDP return codes.
const (
	xdpDrop = 1
	xdpPass = 2
	xdpTx   = 3
)

// Netfilter verdicts.
const (
	nfDrop   = 0
	nfAccept = 1
)

// bareProgram loads the floor of the test runs at hook: a program that
// passes every packet and does nothing else.
func bareProgram(hook codegen.Hook) (*ebpf.Program, error) {
	if hook == codegen.HookNetfilter {
		return bare(ebpf.Netfilter, ebpf.AttachNetfilter, nfAccept)
	}
	return bareXDP(xdpPass)
}

// bareXDP loads an XDP program that returns ret and does nothing else:
// XDP_PASS is the floor of the test runs, XDP_DROP the floor of the end
// to end runs.
func bareXDP(ret int32) (*ebpf.Program, error) { return bare(ebpf.XDP, ebpf.AttachNone, ret) }

// bare loads a program of type typ that returns ret.
func bare(typ ebpf.ProgramType, attach ebpf.AttachType, ret int32) (*ebpf.Program, error) {
	p, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Name:         "bench_floor",
		Type:         typ,
		AttachType:   attach,
		License:      "GPL",
		Instructions: asm.Instructions{asm.Mov.Imm(asm.R0, ret), asm.Return()},
	})
	if err != nil {
		return nil, fmt.Errorf("load bare %s program: %w", typ, err)
	}
	return p, nil
}
