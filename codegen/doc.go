// Package codegen compiles an ir.Program into an eBPF collection spec for
// the XDP and tc hooks: a pure, deterministic description that the loader
// turns into kernel objects.
//
// # Levels
//
// Options' zero value compiles at -O1, what every command uses unless
// told -O0: forgetting a field never selects the plain program.
//
// -O0 is the plain program: every rule's matches in order, as ipt_do_table
// walks them.
//
// -O1 runs the ir passes, then splits each chain into units: classified
// segments, maximal runs of rules the classifier can decide, and plain
// rules between them. The codegen/classify package plans the segments
// and their tables; classify_emit.go emits the lookups. A segment answers "which is the
// earliest rule of the run that decides this packet?" with a few lookups
// whose number depends on the shapes of the rules, not their count:
//
//   - Each rule is normalized (ir.NormalizeResidual) into tuples, one
//     prefix per field of source, destination, protocol, ports and
//     devices (ranges, multiport lists and sets expand into prefixes; an
//     -i or -o pattern the program numbers, every exact name and every
//     prefix no device can match as well as another numbered pattern
//     (ir.Program.IfacePatterns), is its number, which the program
//     counts from the packet's interface pattern bits, ifaceNumber), and
//     its residual: the matches no tuple expresses (negations, other
//     interface prefixes, TCP flags, ICMP types, lengths, TTLs, marks,
//     MACs, fragments, ...).
//   - Tuples of one shape and guard go into one table: a hash keyed by the
//     packet's fields cut to the shape, an LPM trie when shapes differ in
//     one field's length, a port array, or a ranges table (a hash of
//     sorted runs, as many in each value as the table needs: 16 or 32).
//     A ranges table keyed by an IPv4 address's high 16 bits alone (and
//     a protocol its guard tests) is two arrays instead: an index of
//     65,536 block numbers, then the blocks of runs; the verifier inlines
//     both lookups, where a hash calls a helper that hashes the key.
//     Every other hash with a key of up to 32 bytes (plain, of
//     candidates, or of ranges) is a bucket array (classify.Buckets):
//     the program hashes the key itself and tests the two buckets of two
//     slots the key may be in (cuckoo hashing), array lookups the
//     verifier inlines too; only LPM tries call into the kernel. The
//     bucket arrays of one slot size share one map, each from its own
//     base (a pool: a program may have 64 maps, and a rule set of many
//     chains has more tables than that). A
//     table's value is the earliest rule with that key and what it does;
//     a trie stores at each prefix the earliest rule whose prefix covers
//     it.
//   - A table's guard is what must hold for its rules to apply: the
//     transport header they read (or, for the tables of hotdrop tuples,
//     the lack of it), and their residual, tested once before the lookup.
//     Rules with different residuals go into different tables, so a packet
//     the residual fails for skips a table none of whose rules it matches:
//     no candidate is lost. Only matches without effects may be residual
//     (pureMatch, the kind rows' pure); a rule with a stateful or hotdropping match beyond its
//     tuples stays plain.
//   - Hashes of one shape and guard that differ only in their residuals
//     become one table of candidates (mergeResiduals): each key lists its
//     rules earliest first, up to the first without a residual, each with
//     the residual bit it needs; the residuals are tested once before the
//     lookup and the first listed rule whose bit is set is the table's
//     hit. Service ACCEPTs with and without "! -i", TCP flags or a TTL
//     take one lookup, not one per residual.
//   - Tables are looked up in the order of their earliest rule, keeping
//     the earliest hit, and the lookups stop as soon as no later table can
//     hold an earlier rule.
//
// ACCEPT, DROP, REJECT, RETURN and TPROXY are the verdicts a segment
// decides: REJECT is a DROP whose reply main sends for the rule found (the
// netfilter stage, which cannot send it, counts it instead). So is a jump
// or goto to a chain that never returns (ir.Program.Terminating: no
// RETURN, and an unconditional verdict or such a jump last): the chain it
// calls decides, and the segment calls the chain of the rule found
// (dispatchJumps, a binary search over the segment's jumps). Rules with
// other targets (jumps to chains that may return, LOG, no target) and
// rules whose residual has effects (limits, recent, hashlimit, TCP
// options; the conntrack state where the program may not know it: xdp,
// tc-ingress, an accelerator) stand alone between segments as plain
// code: each costs what it costs at -O0, so a chain is as flat as its
// runs are long. A cost estimate keeps short runs plain, where a few
// compares beat a lookup.
//
// # Functions
//
// Chains are global functions, which the verifier checks once whatever
// their callers, and the parser's loops are bpf_loop callbacks. At xdp,
// tc and a chain's netfilter hook, main holds the parser's code instead of
// calling a parse function,
// and a small entry chain's code too (inlineEntry): where returns are
// mitigated (SRSO's safe RET on AMD) a BPF-to-BPF call and its return
// cost as much as the parser's work. Main's frame does not grow for it:
// parse's slots are at its top, the packet's fields below them, and the
// -O1 lookup keys share bytes with parse's slots (mainPkt). REJECT's
// functions keep their larger buffers in a per-CPU map (abi.RejectScratchMap)
// so that main, a reject function and its loop callback fit BPF's 512
// bytes. At a netfilter hook parse's slots reach down to its dynptr over
// the skb, which main overwrites once the packet is parsed (the verifier
// reads no slot of a dynptr as memory). The netfilter stage still calls
// parse, and so does a program whose call chains, with main's larger
// frame, would not fit BPF's 512 bytes of stack (stackDepth: the chains
// nest deep, a LOG at the bottom). Chains that nest too deep for the
// stack even then are refused at the jump to the deepest one, counted as
// the verifier counts a JITed program, so that restore can leave them to
// the kernel instead of failing at the load.
package codegen
