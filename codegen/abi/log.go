package abi

import (
	"encoding/binary"
	"fmt"
	"time"
)

// LOG rules: a matching packet is copied, with what the kernel's LOG line
// needs besides its bytes, into a ring buffer that `bpfwall log` reads and
// formats as nf_log_syslog would; the chain goes on.
const (
	// LogMap is the RINGBUF of LogRecords; present only when the program
	// has LOG rules.
	LogMap = "log"
	// LogLostMap is a PERCPU_ARRAY with one u64: the events the ring
	// buffer had no room for.
	LogLostMap = "log_lost"
	// LogCapture is how many bytes of each frame, from its first (the
	// Ethernet header), a LogRecord holds at most.
	LogCapture = 512
	// LogPoll is how often a reader should look for events that did not
	// wake it up.
	LogPoll = 100 * time.Millisecond
)

// Layout of a LogRecord in the ring buffer, host byte order.
const (
	LogRule    = 0  // u32 rule ID
	LogIfindex = 4  // u32 the device the program runs on
	LogMark    = 8  // u32 skb->mark (tc), 0 (xdp)
	LogLen     = 12 // u32 the frame's length
	LogCapLen  = 16 // u32 bytes of frame in the record
	LogFlags   = 20 // u32 LogNoMAC, LogMACOther (the netfilter stage)
	LogTime    = 24 // u64 bpf_ktime_get_ns
	LogOut     = 32 // u32 the output device, at a chain's netfilter hook; 0 elsewhere
	LogData    = 40 // the first CapLen bytes of the frame
	LogSize    = LogData + LogCapture
	// A program with --log-uid rules has records of LogUIDSize bytes:
	// after the frame, a u32 that is 1 when the socket's fsuid and fsgid
	// follow as u32s.
	LogUIDSet  = LogSize
	LogUIDVal  = LogSize + 4
	LogGIDVal  = LogSize + 8
	LogUIDSize = LogSize + 16
)

// LogRecord is one event of a LOG rule.
type LogRecord struct {
	Rule uint32 // rule ID
	// Ifindex is the device the program runs on; at a chain's netfilter
	// hook the input device (0: none), Out the output device (0: none).
	Ifindex uint32
	Out     uint32
	Mark    uint32
	Len     uint32 // the frame's length
	Time    uint64 // CLOCK_MONOTONIC, ns
	Frame   []byte // the frame's first bytes, from the Ethernet header
	// Flags are LogNoMAC and LogMACOther, which only the netfilter
	// stage sets: Frame's first 14 bytes are then not the MAC header.
	Flags uint32
	// HasUID is set for a --log-uid rule's packet whose socket has a
	// file, whose fsuid and fsgid UID and GID are (nf_log_dump_sk_uid_gid).
	HasUID   bool
	UID, GID uint32
}

// Flags of a LogRecord.
const (
	// LogNoMAC: the device has no MAC header for the packet (its
	// hard_header_len is 0, or skb->mac_header is unset or equal to the
	// network header): netfilter prints "MAC= ".
	LogNoMAC = 1
	// LogMACOther: the MAC header netfilter prints is not a 14-byte
	// Ethernet header just before the network header; not recorded.
	LogMACOther = 2
)

// ParseLogRecord decodes a record read from LogMap.
func ParseLogRecord(b []byte) (LogRecord, error) {
	if len(b) < LogData {
		return LogRecord{}, fmt.Errorf("log record of %d bytes, want at least %d", len(b), LogData)
	}
	he := binary.NativeEndian
	r := LogRecord{
		Rule:    he.Uint32(b[LogRule:]),
		Ifindex: he.Uint32(b[LogIfindex:]),
		Mark:    he.Uint32(b[LogMark:]),
		Len:     he.Uint32(b[LogLen:]),
		Time:    he.Uint64(b[LogTime:]),
		Flags:   he.Uint32(b[LogFlags:]),
		Out:     he.Uint32(b[LogOut:]),
	}
	n := he.Uint32(b[LogCapLen:])
	if n > LogCapture || int(n) > len(b)-LogData || n > r.Len {
		return LogRecord{}, fmt.Errorf("log record claims %d captured bytes of %d", n, r.Len)
	}
	r.Frame = b[LogData : LogData+n]
	if len(b) >= LogUIDSize && he.Uint32(b[LogUIDSet:]) == 1 {
		r.HasUID, r.UID, r.GID = true, he.Uint32(b[LogUIDVal:]), he.Uint32(b[LogGIDVal:])
	}
	return r, nil
}
