package abi

// Names of the program and its maps in Spec.
const (
	// ProgramName is the program's name in a collection's Programs.
	ProgramName = "bpfwall"
	// CountersMap is a PERCPU_ARRAY of CounterBlocks: rule ID id counts
	// in entry CounterKey(id), at CounterIndex(id), and the counter after
	// the last rule's, ID len(IR.Rules), counts the entry chain's policy.
	CountersMap = "counters"
	// DecisionMap is a PERCPU_ARRAY with one entry (key 0), a Decision: the
	// program stores there how it decided each packet. It is
	// instrumentation for `bpfwall trace` and never changes a verdict.
	DecisionMap = "decision"
	// IfacesMap is a HASH from a uint32 ifindex to a uint64 bitmask over
	// Program.Ifaces, filled by the loader; a missing ifindex means that no
	// pattern matches.
	IfacesMap = "ifaces"
	// IfaceSlotsMap is an ARRAY of IfaceSlots IfaceSlot entries, at the
	// ifindex modulo IfaceSlots: the first interface set there, and its
	// IfacesMap value. The program reads a packet's interface bits from
	// its slot, a lookup the verifier inlines, and from IfacesMap only
	// when the slot holds another interface. Only programs that test
	// interfaces where the packet arrives have it.
	IfaceSlotsMap = "iface_slots"
	// ScratchMap is a PERCPU_ARRAY with one entry that the program uses as
	// working memory while it parses IPv6 extension headers and TCP
	// options; it holds nothing between packets.
	ScratchMap = "scratch"
)

// IfaceSlots is how many entries abi.IfaceSlotsMap has: a power of two.
const IfaceSlots = 1024

// IfaceSlot is an abi.IfaceSlotsMap value; Ifindex 0 is an empty slot.
type IfaceSlot struct {
	Ifindex uint32
	_       uint32
	Mask    uint64
}

// Counter is a rule's packet and byte count, as iptables counts them: the
// bytes of the IP datagram.
type Counter struct{ Packets, Bytes uint64 }

// CountersPerBlock is how many rules' Counters one CountersMap entry
// holds, 1<<CounterKeyShift. The kernel allocates each entry of a
// per-CPU array on its own: with an entry per rule, creating the map
// took it 60 ms per 100k rules.
const (
	CounterKeyShift  = 8
	CountersPerBlock = 1 << CounterKeyShift
)

// CounterBlock is a CountersMap value, of CounterBlockSize bytes.
type CounterBlock [CountersPerBlock]Counter

// CounterBlockSize is the size of a CounterBlock.
const CounterBlockSize = 16 * CountersPerBlock

// CounterKey is the CountersMap key of rule id's counter, CounterIndex
// its place in that entry's block.
func CounterKey(id int) uint32 { return uint32(id / CountersPerBlock) }

// CounterIndex is the place of rule id's counter in its CounterBlock.
func CounterIndex(id int) int { return id % CountersPerBlock }

// CounterBlocks is how many CountersMap entries n counters take.
func CounterBlocks(n int) int { return (n + CountersPerBlock - 1) / CountersPerBlock }

// Maps of the netfilter stage.
const (
	// StageMap is a PERCPU_ARRAY of u64 counters, shared by the ingress
	// program and its netfilter stage; see the Stage* indexes.
	StageMap = "nf_stage"
	// NetfilterIfacesMap is a HASH from a u32 ifindex to a u32, filled by
	// the loader with the interfaces the ingress program is attached to
	// and their upper devices (VLAN, macvlan, ...), on which netfilter
	// sees their packets: the stage evaluates the packets that came in on
	// them.
	NetfilterIfacesMap = "nf_ifaces"
)

// Counters of StageMap.
const (
	// StageDeferred counts the packets the ingress program passed to the
	// netfilter stage.
	StageDeferred = 0
	// StageEvaluated counts the packets the netfilter stage evaluated.
	StageEvaluated = 1
	// StageRejectDropped counts the packets whose verdict in the
	// netfilter stage was a REJECT, dropped without a reply.
	StageRejectDropped = 2
	// StageCounters is how many counters StageMap has.
	StageCounters = 4
)

// RejectPendingMap is a PERCPU_ARRAY of one pendingReject record,
// shared by a chain's programs and its answers (reject.Answer),
// which codegen builds both.
const RejectPendingMap = "reject_pending"

// Names of the maps a program with REJECT rules has.
const (
	// RejectRulesMap is an ARRAY from a uint32 rule ID to a uint32: 0 for
	// a rule that does not reject, k+1 for one that calls reject function
	// k.
	RejectRulesMap = "reject_rules"
	// RejectScratchMap is a PERCPU_ARRAY with one entry: the REJECT
	// reply builder's checksum loop state and a chunk of packet.
	RejectScratchMap = "reject_scratch"
	// RejectConfigMap is an ARRAY with one RejectConfig, which the loader
	// may fill with the namespace's settings.
	RejectConfigMap = "reject_config"
)

// RejectConfig is what a reply takes from the namespace: the TTL of IPv4
// replies (net.ipv4.ip_default_ttl) and the hop limit of IPv6 replies
// (net.ipv6.conf.IFACE.hop_limit). DefaultRejectConfig is the kernel's
// default.
type RejectConfig struct {
	TTL, HopLimit uint8
	_             [2]uint8
}

// DefaultRejectConfig is the kernel's default TTL and hop limit, 64.
var DefaultRejectConfig = RejectConfig{TTL: 64, HopLimit: 64}
