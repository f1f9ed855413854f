package codegen

import (
	"math/bits"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/btf"

	"bpfwall/codegen/abi"
	"bpfwall/codegen/insn"
	"bpfwall/codegen/pkt"
	"bpfwall/ir"
)

// -m limit, and nft's limit rate.
var limitCode = &kind[ir.Limit]{
	emit: func(c *compiler, _ *ir.Rule, m ir.Limit, next, _ string) bool {
		c.limit(m, next)
		return false
	},
	lookup:  refuse[ir.Limit](rateLimitAtLookup),
	jiffies: true,
}

// nft's limit rate in bytes.
var rateLimitCode = &kind[ir.RateLimit]{
	emit: func(c *compiler, _ *ir.Rule, m ir.RateLimit, next, _ string) bool {
		c.rateLimit(m, next)
		return false
	},
	lookup: refuse[ir.RateLimit](rateLimitAtLookup),
}

const rateLimitAtLookup = "rate limit match (it would count lookups, not packets)"

// btfBucket describes an abi.LimitsMap value to the verifier, which finds the
// spin lock by its type.
var btfBucket = &btf.Struct{
	Name: "bpfwall_bucket",
	Size: abi.BucketSize,
	Members: []btf.Member{
		{Name: "lock", Type: &btf.Struct{Name: "bpf_spin_lock", Size: 4, Members: []btf.Member{{Name: "val", Type: btfU32}}}, Offset: abi.BucketLock * 8},
		{Name: "started", Type: btfU32, Offset: abi.BucketStarted * 8},
		{Name: "prev", Type: btfU64, Offset: abi.BucketPrev * 8},
		{Name: "credit", Type: btfU64, Offset: abi.BucketCredit * 8},
	},
}

var btfU32 = &btf.Int{Name: "__u32", Size: 4}

// buckets returns the number of token buckets the rules use: the
// table's, when its chains share one array (ir.Program.TableBuckets).
func (c *compiler) buckets() int {
	n := 0
	for _, r := range c.p.Rules {
		for _, m := range r.Matches {
			if b, ok := ir.Bucket(m); ok {
				n = max(n, b+1)
			}
		}
	}
	if n > 0 {
		n = max(n, c.p.TableBuckets)
	}
	return n
}

// limitsMap is the abi.LimitsMap spec, nil when no rule limits.
func (c *compiler) limitsMap() *ebpf.MapSpec {
	n := c.buckets()
	if n == 0 {
		return nil
	}
	return &ebpf.MapSpec{
		Name:       abi.LimitsMap,
		Type:       ebpf.Array,
		KeySize:    4,
		ValueSize:  abi.BucketSize,
		MaxEntries: uint32(n),
		Key:        btfU32,
		Value:      btfBucket,
	}
}

// lockBucket looks bucket id up into r8 and takes its lock; r7 (the clock)
// and r9 survive. With no bucket, which cannot happen, the match fails.
func (c *compiler) lockBucket(id int, next string) {
	c.b.Emit(
		insn.StImm(asm.R10, chainKey, int32(id), asm.Word),
		insn.Movr(asm.R2, asm.R10),
		asm.Add.Imm(asm.R2, chainKey),
		insn.MapRef(asm.R1, abi.LimitsMap),
		asm.FnMapLookupElem.Call(),
		asm.JEq.Imm(asm.R0, 0, next),
		insn.Movr(asm.R8, asm.R0),
		insn.Movr(asm.R1, asm.R8),
		asm.FnSpinLock.Call(),
	)
}

// unlockBucket releases r8's lock and fails to next unless r9 is set.
func (c *compiler) unlockBucket(next string) {
	c.b.Emit(
		insn.Movr(asm.R1, asm.R8),
		asm.FnSpinUnlock.Call(),
		asm.JEq.Imm(asm.R9, 0, next),
	)
}

// startBucket fills r8's bucket on its first packet, as the kernel does
// when it creates the rule: the clock in r7 as the last time and a full
// credit, which fill loads into r1, stored as size. It goes on at started.
func (c *compiler) startBucket(started string, fill asm.Instruction, size asm.Size) {
	c.b.Emit(
		insn.Ld(asm.R1, asm.R8, abi.BucketStarted, asm.Word),
		asm.JNE.Imm(asm.R1, 0, started),
		insn.StImm(asm.R8, abi.BucketStarted, 1, asm.Word),
		insn.St(asm.R8, abi.BucketPrev, asm.R7, asm.DWord),
		fill,
		insn.St(asm.R8, abi.BucketCredit, asm.R1, size),
	)
	c.b.Mark(started)
}

// limit emits xt_limit's limit_mt with the kernel's u32 arithmetic:
//
//	credit_increase = (now - prev) * CREDITS_PER_JIFFY   (u32)
//	prev = now
//	credit = min(credit + credit_increase, credit_cap)   (u32 add)
//	match if credit >= cost, then credit -= cost
//
// In a plain rule r7-r9 are free: r7 the clock, r8 the bucket, r9 the
// outcome.
func (c *compiler) limit(m ir.Limit, next string) {
	b := c.b
	capacity, cost := m.Credits(ir.DefaultHZ)
	cpj := ir.CreditsPerJiffy(ir.DefaultHZ)
	started, capped, short := b.Fresh("limit_started"), b.Fresh("limit_capped"), b.Fresh("limit_short")
	b.Emit(
		asm.FnJiffies64.Call(),
		insn.Movr(asm.R7, asm.R0),
	)
	c.lockBucket(m.Bucket, next)
	c.startBucket(started, asm.Mov.Imm32(asm.R1, insn.U32(capacity)), asm.Word)
	b.Emit(
		insn.Ld(asm.R1, asm.R8, abi.BucketPrev, asm.DWord),
		insn.St(asm.R8, abi.BucketPrev, asm.R7, asm.DWord),
		asm.Sub.Reg(asm.R7, asm.R1),
		asm.LSh.Imm(asm.R7, int32(bits.TrailingZeros32(cpj))), // CREDITS_PER_JIFFY is a power of two
		asm.Mov.Reg32(asm.R7, asm.R7),
		insn.Ld(asm.R1, asm.R8, abi.BucketCredit, asm.Word),
		asm.Add.Reg32(asm.R1, asm.R7),
		asm.JLE.Imm32(asm.R1, insn.U32(capacity), capped),
		asm.Mov.Imm32(asm.R1, insn.U32(capacity)),
	)
	b.Mark(capped)
	b.Emit(
		insn.Mov(asm.R9, 0),
		asm.JLT.Imm32(asm.R1, insn.U32(cost), short),
		asm.Sub.Imm32(asm.R1, insn.U32(cost)),
		insn.Mov(asm.R9, 1),
	)
	b.Mark(short)
	b.Emit(insn.St(asm.R8, abi.BucketCredit, asm.R1, asm.Word))
	c.unlockBucket(next)
}

// rateLimit emits nft_limit_eval in u64 nanoseconds:
//
//	tokens = min(tokens + now - last, tokens_max)
//	last = now
//	if tokens - cost >= 0 (s64): tokens -= cost, the rule goes on unless Over
//	else: the rule goes on only with Over
//
// r7 is the clock, r8 the bucket, r9 the cost and then the outcome.
func (c *compiler) rateLimit(m ir.RateLimit, next string) {
	b := c.b
	tokensMax, _ := m.TokensMax()
	started, capped, short, done := b.Fresh("limit_started"), b.Fresh("limit_capped"), b.Fresh("limit_short"), b.Fresh("limit_done")
	if m.Bytes {
		// nsecs * skb->len / rate, the product wrapping in u64.
		b.Emit(
			insn.Ld(asm.R9, asm.R6, pkt.Length, asm.Word),
			asm.LoadImm(asm.R1, int64(m.Nsecs), asm.DWord),
			asm.Mul.Reg(asm.R9, asm.R1),
			asm.LoadImm(asm.R1, int64(m.Rate), asm.DWord),
			asm.Div.Reg(asm.R9, asm.R1),
		)
	} else {
		b.Emit(asm.LoadImm(asm.R9, int64(m.Cost(0)), asm.DWord))
	}
	b.Emit(
		asm.FnKtimeGetNs.Call(),
		insn.Movr(asm.R7, asm.R0),
	)
	c.lockBucket(m.Bucket, next)
	c.startBucket(started, asm.LoadImm(asm.R1, int64(tokensMax), asm.DWord), asm.DWord)
	goesOn, stops := int32(1), int32(0)
	if m.Over {
		goesOn, stops = 0, 1
	}
	b.Emit(
		insn.Ld(asm.R1, asm.R8, abi.BucketCredit, asm.DWord),
		asm.Add.Reg(asm.R1, asm.R7),
		insn.Ld(asm.R2, asm.R8, abi.BucketPrev, asm.DWord),
		asm.Sub.Reg(asm.R1, asm.R2),
		asm.LoadImm(asm.R2, int64(tokensMax), asm.DWord),
		asm.JLE.Reg(asm.R1, asm.R2, capped),
		insn.Movr(asm.R1, asm.R2),
	)
	b.Mark(capped)
	b.Emit(
		insn.St(asm.R8, abi.BucketPrev, asm.R7, asm.DWord),
		insn.Movr(asm.R2, asm.R1),
		asm.Sub.Reg(asm.R2, asm.R9),
		asm.JSLT.Imm(asm.R2, 0, short),
		insn.St(asm.R8, abi.BucketCredit, asm.R2, asm.DWord),
		insn.Mov(asm.R9, goesOn),
		insn.Ja(done),
	)
	b.Mark(short)
	b.Emit(
		insn.St(asm.R8, abi.BucketCredit, asm.R1, asm.DWord),
		insn.Mov(asm.R9, stops),
	)
	b.Mark(done)
	c.unlockBucket(next)
}

// CountsJiffies reports whether p has xt_limit or xt_hashlimit buckets or
// xt_recent windows, whose arithmetic is for a kernel ticking at
// ir.DefaultHZ: the loader checks the kernel's.
func CountsJiffies(p *Program) bool {
	for _, r := range p.IR.Rules {
		for _, m := range r.Matches {
			if codeOf(m).countsJiffies() {
				return true
			}
		}
	}
	return false
}
