package codegen

import (
	"github.com/cilium/ebpf/asm"

	"bpfwall/codegen/abi"
	"bpfwall/codegen/insn"
	"bpfwall/codegen/sklookup"
	"bpfwall/ir"
)

// nft's tproxy statement, the last match of its rule: at sk-lookup only.
var tproxyToCode = &kind[ir.TProxyTo]{
	emit: func(c *compiler, r *ir.Rule, _ ir.TProxyTo, next, _ string) bool {
		c.tproxyStatement(r, next)
		return false
	},
	hooks: refuseAt[ir.TProxyTo]("nft tproxy statement (only at sk-lookup)"),
}

// tproxyStatement emits nft's tproxy statement, the last match of rule r:
// it fails, going to next, when the rule's socket does not exist, and
// otherwise records the rule in sklookup.PktSteer. main assigns the socket if the
// verdict accepts the lookup.
func (c *compiler) tproxyStatement(r *ir.Rule, next string) {
	c.b.Emit(
		insn.StImm(asm.R10, chainKey, int32(r.ID), asm.Word),
		insn.Movr(asm.R2, asm.R10),
		asm.Add.Imm(asm.R2, chainKey),
		insn.MapRef(asm.R1, abi.TargetsMap),
		asm.FnMapLookupElem.Call(),
		asm.JEq.Imm(asm.R0, 0, next),
		insn.Movr(asm.R2, asm.R0),
		insn.MapRef(asm.R1, abi.SocketsMap),
		asm.FnMapLookupElem.Call(),
		asm.JEq.Imm(asm.R0, 0, next),
		insn.Movr(asm.R1, asm.R0),
		asm.FnSkRelease.Call(),
		insn.StImm(asm.R6, sklookup.PktSteer, int32(r.ID)+1, asm.Word),
	)
}
