package bench

import (
	"fmt"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
)

// XDP return codes.
const (
	xdpDrop = 1
	xdpPass = 2
	xdpTx   = 3
)

// bareXDP loads an XDP program that returns ret and does nothing else:
// XDP_PASS is the floor of the test runs, XDP_DROP the floor of the end
// to end runs.
func bareXDP(ret int32) (*ebpf.Program, error) {
	p, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Name:         "bench_floor",
		Type:         ebpf.XDP,
		License:      "GPL",
		Instructions: asm.Instructions{asm.Mov.Imm(asm.R0, ret), asm.Return()},
	})
	if err != nil {
		return nil, fmt.Errorf("load bare xdp program: %w", err)
	}
	return p, nil
}
