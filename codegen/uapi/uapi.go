package uapi

// Ether types (if_ether.h).
const (
	EtherTypeIPv4 = 0x0800
	EtherTypeIPv6 = 0x86dd
	EtherTypeVLAN = 0x8100 // 802.1Q
	EtherTypeQinQ = 0x88a8 // 802.1ad
)

// IP protocol numbers (in.h).
const (
	ProtoICMP    = 1
	ProtoTCP     = 6
	ProtoUDP     = 17
	ProtoDCCP    = 33
	ProtoICMPv6  = 58
	ProtoSCTP    = 132
	ProtoUDPLite = 136
)

// Address families (socket.h).
const (
	AFInet  = 2
	AFInet6 = 10
)

// Packet types (if_packet.h).
const (
	PacketOtherHost = 3 // PACKET_OTHERHOST
	PacketLoopback  = 5 // PACKET_LOOPBACK
)

// LoopbackIfindex is the index of every network namespace's lo.
const LoopbackIfindex = 1

// Offsets in the program contexts (bpf.h).
const (
	XDPData           = 0  // xdp_md.data
	XDPDataEnd        = 4  // xdp_md.data_end
	XDPIngressIfindex = 12 // xdp_md.ingress_ifindex
	SkbLen            = 0  // __sk_buff.len
	SkbPktType        = 4  // __sk_buff.pkt_type
	SkbMark           = 8  // __sk_buff.mark
	SkbVLANPresent    = 20 // __sk_buff.vlan_present
	SkbIfindex        = 40 // __sk_buff.ifindex
	SkbData           = 76 // __sk_buff.data
	SkbDataEnd        = 80 // __sk_buff.data_end
)

// Return codes of the hooks.
const (
	XDPDrop       = 1 // XDP_DROP
	XDPPass       = 2 // XDP_PASS
	XDPTx         = 3 // XDP_TX
	TCActOK       = 0 // TC_ACT_OK
	TCActShot     = 2 // TC_ACT_SHOT
	TCActRedirect = 7 // TC_ACT_REDIRECT
	SkDrop        = 0 // SK_DROP
	SkPass        = 1 // SK_PASS
	NFDrop        = 0 // NF_DROP
	NFAccept      = 1 // NF_ACCEPT
)

// struct bpf_fib_lookup.
const (
	FibFamily  = 0
	FibProto   = 1
	FibMTU     = 6 // tot_len in, mtu_result out
	FibIfindex = 8
	FibSrc     = 16
	FibDst     = 32
	FibSMAC    = 52
	FibDMAC    = 58
	FibSize    = 64

	FibLookupSrc     = 1 << 4 // BPF_FIB_LOOKUP_SRC
	FibLookupSuccess = 0
)

// MapNoPrealloc is BPF_F_NO_PREALLOC (bpf.h), a map flag that LPM tries
// require.
const MapNoPrealloc = 1
