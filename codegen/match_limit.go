package codegen

import (
	"math/bits"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/btf"

	"bpfwall/codegen/insn"
	"bpfwall/codegen/pkt"
	"bpfwall/ir"
)

// -m limit, and nft's limit rate.
var limitCode = kind[ir.Limit]{
	emit: func(c *compiler, _ *ir.Rule, m ir.Limit, next, _ string) bool {
		c.limit(m, next)
		return false
	},
	lookup:  refuse[ir.Limit](rateLimitAtLookup),
	jiffies: true,
}

// nft's limit rate in bytes.
var rateLimitCode = kind[ir.RateLimit]{
	emit: func(c *compiler, _ *ir.Rule, m ir.RateLimit, next, _ string) bool {
		c.rateLimit(m, next)
		return false
	},
	lookup: refuse[ir.RateLimit](rateLimitAtLookup),
}

const rateLimitAtLookup = "rate limit match (it would count lookups, not packets)"

// LimitsMap is an ARRAY of token buckets, one per ir.Limit and
// ir.RateLimit match (indexed by its Bucket), shared by every CPU as the
// kernel's xt_limit_priv and nft_limit are. Each value is a Bucket behind
// a bpf_spin_lock: the refill, the test and the payment of one packet
// happen as one step, which is one of the orders the kernel's own
// xchg/cmpxchg loop (xt_limit) or spinlock (nft_limit) allows. A new
// program has new, empty buckets, as iptables-restore and nft -f give
// every rule fresh state.
const LimitsMap = "limits"

// Offsets in a bucket. A bucket starts at the first packet that reaches
// it: the kernel starts it at load time, full, and a full bucket stays
// full until a packet spends from it, so the two only differ when the
// first packet comes so late that the kernel's u32 refill wraps (2^32
// credits: 2^25 jiffies, 37 hours at HZ 250, for xt_limit; never for
// nft's u64 nanoseconds).
const (
	bucketLock    = 0  // struct bpf_spin_lock
	bucketStarted = 4  // u32: 1 once the first packet has filled it
	bucketPrev    = 8  // u64: jiffies (xt_limit) or nanoseconds (nft) of the last update
	bucketCredit  = 16 // u32 credits (xt_limit) or u64 tokens (nft)
	bucketSize    = 24
)

// Bucket is a LimitsMap value as the program leaves it.
type Bucket struct {
	Lock, Started uint32
	Prev, Credit  uint64
}

// btfBucket describes a LimitsMap value to the verifier, which finds the
// spin lock by its type.
var btfBucket = &btf.Struct{
	Name: "bpfwall_bucket",
	Size: bucketSize,
	Members: []btf.Member{
		{Name: "lock", Type: &btf.Struct{Name: "bpf_spin_lock", Size: 4, Members: []btf.Member{{Name: "val", Type: btfU32}}}, Offset: bucketLock * 8},
		{Name: "started", Type: btfU32, Offset: bucketStarted * 8},
		{Name: "prev", Type: btfU64, Offset: bucketPrev * 8},
		{Name: "credit", Type: btfU64, Offset: bucketCredit * 8},
	},
}

var btfU32 = &btf.Int{Name: "__u32", Size: 4}

// buckets returns the number of token buckets the rules use.
func (c *compiler) buckets() int {
	n := 0
	for _, r := range c.p.Rules {
		for _, m := range r.Matches {
			if b, ok := ir.Bucket(m); ok {
				n = max(n, b+1)
			}
		}
	}
	return n
}

// limitsMap is the LimitsMap spec, nil when no rule limits.
func (c *compiler) limitsMap() *ebpf.MapSpec {
	n := c.buckets()
	if n == 0 {
		return nil
	}
	return &ebpf.MapSpec{
		Name:       LimitsMap,
		Type:       ebpf.Array,
		KeySize:    4,
		ValueSize:  bucketSize,
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
		insn.MapRef(asm.R1, LimitsMap),
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
		insn.Ld(asm.R1, asm.R8, bucketStarted, asm.Word),
		asm.JNE.Imm(asm.R1, 0, started),
		insn.StImm(asm.R8, bucketStarted, 1, asm.Word),
		insn.St(asm.R8, bucketPrev, asm.R7, asm.DWord),
		fill,
		insn.St(asm.R8, bucketCredit, asm.R1, size),
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
		insn.Ld(asm.R1, asm.R8, bucketPrev, asm.DWord),
		insn.St(asm.R8, bucketPrev, asm.R7, asm.DWord),
		asm.Sub.Reg(asm.R7, asm.R1),
		asm.LSh.Imm(asm.R7, int32(bits.TrailingZeros32(cpj))), // CREDITS_PER_JIFFY is a power of two
		asm.Mov.Reg32(asm.R7, asm.R7),
		insn.Ld(asm.R1, asm.R8, bucketCredit, asm.Word),
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
	b.Emit(insn.St(asm.R8, bucketCredit, asm.R1, asm.Word))
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
		insn.Ld(asm.R1, asm.R8, bucketCredit, asm.DWord),
		asm.Add.Reg(asm.R1, asm.R7),
		insn.Ld(asm.R2, asm.R8, bucketPrev, asm.DWord),
		asm.Sub.Reg(asm.R1, asm.R2),
		asm.LoadImm(asm.R2, int64(tokensMax), asm.DWord),
		asm.JLE.Reg(asm.R1, asm.R2, capped),
		insn.Movr(asm.R1, asm.R2),
	)
	b.Mark(capped)
	b.Emit(
		insn.St(asm.R8, bucketPrev, asm.R7, asm.DWord),
		insn.Movr(asm.R2, asm.R1),
		asm.Sub.Reg(asm.R2, asm.R9),
		asm.JSLT.Imm(asm.R2, 0, short),
		insn.St(asm.R8, bucketCredit, asm.R2, asm.DWord),
		insn.Mov(asm.R9, goesOn),
		insn.Ja(done),
	)
	b.Mark(short)
	b.Emit(
		insn.St(asm.R8, bucketCredit, asm.R1, asm.DWord),
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
