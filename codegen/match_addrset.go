package codegen

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"slices"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"

	"bpfwall/codegen/insn"
	"bpfwall/codegen/uapi"
	"bpfwall/internal/mapkv"
	"bpfwall/ir"
)

// -m set over an address set, and nft's address sets.
var addrSetCode = &kind[ir.AddrSet]{
	emit: func(c *compiler, _ *ir.Rule, m ir.AddrSet, next, _ string) bool {
		c.addrSet(m, next)
		return false
	},
	pure: always[ir.AddrSet],
}

// addrSet emits -m set over an address set: an LPM trie of its entries
// whose value says whether the entry is a nomatch one, so that the
// longest entry containing the address decides, as in the kernel's hash
// types.
func (c *compiler) addrSet(m ir.AddrSet, next string) {
	b := c.b
	if len(m.Entries) == 0 {
		c.constant(m.Neg, next)
		return
	}
	name := c.setMap(m)
	words := c.p.Family.Bits() / 32
	b.Emit(insn.StImm(asm.R10, chainSetKey, int32(c.p.Family.Bits()), asm.Word))
	for i := range words {
		b.Emit(
			insn.Ld(asm.R1, asm.R6, addrOff(m.Dir)+int16(4*i), asm.Word),
			insn.Ntoh(asm.R1, asm.Word),
			insn.St(asm.R10, chainSetKey+4+int16(4*i), asm.R1, asm.Word),
		)
	}
	b.Emit(
		insn.MapRef(asm.R1, name),
		insn.Movr(asm.R2, asm.R10),
		asm.Add.Imm(asm.R2, chainSetKey),
		asm.FnMapLookupElem.Call(),
	)
	if !m.Neg {
		b.Emit(
			asm.JEq.Imm(asm.R0, 0, next),
			insn.Ld(asm.R1, asm.R0, 0, asm.Word),
			asm.JEq.Imm(asm.R1, 0, next),
		)
		return
	}
	holds := b.Fresh("not_in_set")
	b.Emit(
		asm.JEq.Imm(asm.R0, 0, holds),
		insn.Ld(asm.R1, asm.R0, 0, asm.Word),
		asm.JNE.Imm(asm.R1, 0, next),
	)
	b.Mark(holds)
}

// setMap returns the name of the LPM trie of m's set, made on first use:
// a u32 prefix length and the address, to a u32 that is 0 for nomatch
// entries.
func (c *compiler) setMap(m ir.AddrSet) string {
	for i, s := range c.sets {
		if s == m.Set {
			return fmt.Sprintf("set%d", i)
		}
	}
	name := fmt.Sprintf("set%d", len(c.sets))
	c.sets = append(c.sets, m.Set)
	width := c.p.Family.Bits() / 8
	var kvs []ebpf.MapKV
	for _, e := range m.Entries {
		k := make([]byte, 4+width)
		binary.NativeEndian.PutUint32(k, uint32(e.Prefix.Bits()))
		copy(k[4:], e.Prefix.Addr().AsSlice())
		v := make([]byte, 4)
		if !e.NoMatch {
			binary.NativeEndian.PutUint32(v, 1)
		}
		kvs = append(kvs, mapkv.KV(k, v))
	}
	slices.SortFunc(kvs, func(a, b ebpf.MapKV) int { return bytes.Compare(mapkv.MustOf(a.Key), mapkv.MustOf(b.Key)) })
	c.maps = append(c.maps, &ebpf.MapSpec{
		Name:       name,
		Type:       ebpf.LPMTrie,
		Flags:      uapi.MapNoPrealloc,
		KeySize:    uint32(4 + width),
		ValueSize:  4,
		MaxEntries: uint32(len(kvs)),
		Contents:   kvs,
	})
	return name
}
