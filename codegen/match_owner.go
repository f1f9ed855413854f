package codegen

import (
	"github.com/cilium/ebpf/asm"

	"bpfwall/codegen/insn"
	"bpfwall/codegen/kernel"
	"bpfwall/codegen/pkt"
	"bpfwall/ir"
)

// -m owner, and nft's meta skuid and skgid. xt_owner registers for OUTPUT
// and POSTROUTING, which lowering keeps iptables' owner to. It compiles
// where packets carry their socket in skb->sk: at the chains' own
// netfilter hooks and at tc-egress. parse reads the socket once per packet
// (parseOwner) into the packet's pkt.Owner fields, and the match compares
// them as owner_mt does.
var ownerCode = &kind[ir.Owner]{
	emit: func(c *compiler, _ *ir.Rule, m ir.Owner, next, _ string) bool {
		c.owner(m, next)
		return false
	},
	hooks: func(c *compiler, _ ir.Owner) string {
		if c.hook != HookNetfilter && c.hook != HookTCEgress {
			return "owner match (only at tc-egress and at a chain's own netfilter hook)"
		}
		return ""
	},
	lookup:  refuse[ir.Owner]("owner match"),
	pure:    always[ir.Owner],
	collect: func(c *compiler, _ ir.Owner) { c.readsOwner = true },
}

// What parseOwner found, in pkt.Owner.
const (
	ownerNone   = 0 // no socket (or one of another namespace)
	ownerSocket = 1 // a socket without a file: the kernel's own
	ownerFile   = 2 // a process's socket: pkt.OwnerUID and pkt.OwnerGID hold its file's fsuid and fsgid
	// ownerListener is or'ed in when skb->sk is a request socket, whose
	// listener the owner match reads (skb_to_full_sk); LOG's
	// nf_log_dump_sk_uid_gid prints nothing for one.
	ownerListener = 0x80
	ownerKind     = 0x7f
)

// owner emits owner_mt over the fields parseOwner stored.
func (c *compiler) owner(m ir.Owner, next string) {
	b := c.b
	noSocket, done := b.Fresh("owner_nosocket"), b.Fresh("owner_done")
	b.Emit(
		insn.Ld(asm.R1, asm.R6, pkt.Owner, asm.Byte),
		asm.And.Imm(asm.R1, ownerKind),
		asm.JEq.Imm(asm.R1, ownerNone, noSocket),
	)
	if m.Socket && m.SocketNeg {
		// A socket, and "! --socket-exists".
		b.Emit(insn.Ja(next))
	} else {
		kernel := b.Fresh("owner_kernel")
		b.Emit(asm.JEq.Imm(asm.R1, ownerSocket, kernel))
		// A process's socket: its file's user and group.
		if m.UID != nil {
			c.inRanges([]int16{pkt.OwnerUID}, asm.Word, []valueRange{{m.UID.Min, m.UID.Max}}, 0xffffffff, m.UIDNeg, next)
		}
		if m.GID != nil {
			c.inRanges([]int16{pkt.OwnerGID}, asm.Word, []valueRange{{m.GID.Min, m.GID.Max}}, 0xffffffff, m.GIDNeg, next)
		}
		b.Emit(insn.Ja(done))
		// A kernel socket has no user or group: only their negations
		// hold.
		b.Mark(kernel)
		if m.UID != nil && !m.UIDNeg || m.GID != nil && !m.GIDNeg {
			b.Emit(insn.Ja(next))
		} else {
			b.Emit(insn.Ja(done))
		}
	}
	// No socket: only a rule whose every test is negated holds.
	b.Mark(noSocket)
	if m.UID != nil && !m.UIDNeg || m.GID != nil && !m.GIDNeg || m.Socket && !m.SocketNeg {
		b.Emit(insn.Ja(next))
	}
	b.Mark(done)
}

// Kernel fields parseOwner reads.
var (
	skbSk           = kernel.Field{Struct: "sk_buff", Field: "sk"}
	sockState       = kernel.Field{Struct: "sock", Field: "__sk_common.skc_state"}
	sockNet         = kernel.Field{Struct: "sock", Field: "__sk_common.skc_net.net"}
	sockSocket      = kernel.Field{Struct: "sock", Field: "sk_socket"}
	requestListener = kernel.Field{Struct: "request_sock", Field: "__req_common.skc_listener"} // rsk_listener
	socketFile      = kernel.Field{Struct: "socket", Field: "file"}
	fileCred        = kernel.Field{Struct: "file", Field: "f_cred"}
	credFsuid       = kernel.Field{Struct: "cred", Field: "fsuid"}
	credFsgid       = kernel.Field{Struct: "cred", Field: "fsgid"}
	nfHookStateNet  = kernel.Field{Struct: "nf_hook_state", Field: "net"}
)

// Socket states (include/net/tcp_states.h).
const (
	tcpTimeWait   = 6  // TCP_TIME_WAIT: no full socket
	tcpNewSynRecv = 12 // TCP_NEW_SYN_RECV: a request sock, which skb_to_full_sk turns into its listener
)

// parseOwner's slots, in parse's buffer, which holds nothing yet.
const (
	ownerSlot  = parseBuf      // u64: the address followed last
	ownerValue = parseBuf + 8  // the value read last
	ownerFlags = parseBuf + 16 // u64: ownerListener when skb->sk is a request socket
)

// parseOwner stores what owner_mt reads of the packet's socket in
// pkt.Owner, pkt.OwnerUID and pkt.OwnerGID: skb_to_full_sk(skb) (a request
// sock's listener), its sk_socket in the chain's namespace, and the
// fsuid and fsgid of that socket's file's credentials. The pointers are
// numbers to the verifier: each is read with bpf_probe_read_kernel, and
// a read that fails is taken as no socket. A TIME_WAIT socket, which the
// TCP stack replies from, has no sk_socket and counts as none. The
// context is in r6 and the packet in r7; r1-r5 are clobbered.
func (c *compiler) parseOwner() {
	b := c.b
	b.Note("owner: the socket of skb_to_full_sk(skb), its file's fsuid and fsgid")
	b.Emit(
		insn.StImm(asm.R7, pkt.Owner, ownerNone, asm.Byte),
		insn.StImm(asm.R10, ownerFlags, 0, asm.DWord),
	)
	if c.hook == HookNetfilter {
		c.emitSkb(asm.R3, asm.R6)
	} else {
		b.Emit(insn.Movr(asm.R1, asm.R6), kernel.Call(kernel.CastToKernCtx), insn.Movr(asm.R3, asm.R0))
	}
	// read reads size bytes at the address in r3 plus f's offset into
	// ownerValue, or goes to parse_owner_done.
	read := func(f kernel.Field, size int32) {
		add := kernel.AddOffset(asm.R3, f)
		b.Emit(
			add,
			insn.Movr(asm.R1, asm.R10),
			asm.Add.Imm(asm.R1, ownerValue),
			insn.Mov(asm.R2, size),
			asm.FnProbeReadKernel.Call(),
			asm.JNE.Imm(asm.R0, 0, "parse_owner_done"),
		)
	}
	// follow reads the pointer at f of the address in ownerSlot into
	// ownerSlot and r3, or goes to parse_owner_done when it is NULL.
	follow := func(f kernel.Field) {
		b.Emit(insn.Ld(asm.R3, asm.R10, ownerSlot, asm.DWord))
		read(f, 8)
		b.Emit(
			insn.Ld(asm.R3, asm.R10, ownerValue, asm.DWord),
			asm.JEq.Imm(asm.R3, 0, "parse_owner_done"),
			insn.St(asm.R10, ownerSlot, asm.R3, asm.DWord),
		)
	}
	read(skbSk, 8)
	b.Emit(
		insn.Ld(asm.R3, asm.R10, ownerValue, asm.DWord),
		asm.JEq.Imm(asm.R3, 0, "parse_owner_done"),
		insn.St(asm.R10, ownerSlot, asm.R3, asm.DWord),
	)
	read(sockState, 1)
	b.Emit(
		insn.Ld(asm.R1, asm.R10, ownerValue, asm.Byte),
		asm.JEq.Imm(asm.R1, tcpTimeWait, "parse_owner_done"),
		asm.JNE.Imm(asm.R1, tcpNewSynRecv, "parse_owner_full"),
	)
	follow(requestListener)
	b.Emit(insn.StImm(asm.R10, ownerFlags, ownerListener, asm.DWord))
	b.Mark("parse_owner_full")
	if c.hook == HookNetfilter {
		// net_eq(xt_net(par), sock_net(sk)).
		b.Emit(insn.Ld(asm.R3, asm.R10, ownerSlot, asm.DWord))
		read(sockNet, 8)
		b.Emit(
			kernel.Load(asm.R1, asm.R6, asm.DWord, nfCtxState),
			kernel.Load(asm.R1, asm.R1, asm.DWord, nfHookStateNet),
			insn.Ld(asm.R2, asm.R10, ownerValue, asm.DWord),
			asm.JNE.Reg(asm.R1, asm.R2, "parse_owner_done"),
		)
	}
	follow(sockSocket)
	found := func(kind int32) {
		b.Emit(
			insn.Ld(asm.R1, asm.R10, ownerFlags, asm.DWord),
			asm.Or.Imm(asm.R1, kind),
			insn.St(asm.R7, pkt.Owner, asm.R1, asm.Byte),
		)
	}
	found(ownerSocket)
	follow(socketFile)
	follow(fileCred)
	b.Emit(insn.Ld(asm.R3, asm.R10, ownerSlot, asm.DWord))
	read(credFsuid, 4)
	b.Emit(
		insn.Ld(asm.R1, asm.R10, ownerValue, asm.Word),
		insn.St(asm.R7, pkt.OwnerUID, asm.R1, asm.Word),
		insn.Ld(asm.R3, asm.R10, ownerSlot, asm.DWord),
	)
	read(credFsgid, 4)
	b.Emit(
		insn.Ld(asm.R1, asm.R10, ownerValue, asm.Word),
		insn.St(asm.R7, pkt.OwnerGID, asm.R1, asm.Word),
	)
	found(ownerFile)
	b.Mark("parse_owner_done")
}

// testsOwner reports whether p reads the packets' sockets, whose fields'
// offsets come from the kernel's BTF: for an owner match, or a LOG rule
// with --log-uid.
func (p *Program) testsOwner() bool {
	for _, r := range p.IR.Rules {
		if a, ok := r.Action.(ir.Log); ok && a.Flags&logUID != 0 {
			return true
		}
		for _, m := range r.Matches {
			if _, ok := m.(ir.Owner); ok {
				return true
			}
		}
	}
	return false
}
