package abi

import (
	"bytes"
	"encoding/binary"
	"net/netip"
	"testing"

	"bpfwall/ir"
	"bpfwall/rules"
)

func TestDecisionKindString(t *testing.T) {
	seen := map[string]DecisionKind{}
	for k := DecidedByRule; k <= TTLExpired; k++ {
		s := k.String()
		if s == "" || s == (DecisionKind(0)).String() {
			t.Errorf("kind %d has no name: %q", uint32(k), s)
		}
		if other, dup := seen[s]; dup {
			t.Errorf("kinds %d and %d are both %q", uint32(other), uint32(k), s)
		}
		seen[s] = k
	}
	if got := DecisionKind(99).String(); got != "DecisionKind(99)" {
		t.Errorf("unknown kind: %q", got)
	}
}

func TestSocketKeyRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		fam  rules.Family
		t    ir.TProxy
		want string
	}{
		{rules.IPv4, ir.TProxy{Proto: 6, Port: 8080, Addr: netip.MustParseAddr("10.0.0.1")}, "tcp 10.0.0.1:8080"},
		{rules.IPv4, ir.TProxy{Proto: 17, Port: 53}, "udp 0.0.0.0:53"},
		{rules.IPv6, ir.TProxy{Proto: 6, Port: 443, Addr: netip.MustParseAddr("2001:db8::1")}, "tcp [2001:db8::1]:443"},
	} {
		k := NewSocketKey(tc.fam, tc.t)
		if k.String() != tc.want {
			t.Errorf("%v: key %q, want %q", tc.t, k, tc.want)
		}
		b, err := k.MarshalBinary()
		if err != nil || len(b) != SocketKeySize {
			t.Fatalf("%v: marshal: %d bytes, %v", tc.t, len(b), err)
		}
		var back SocketKey
		if err := back.UnmarshalBinary(b); err != nil || back != k {
			t.Errorf("%v: round trip %+v, %v", tc.t, back, err)
		}
	}
	var k SocketKey
	if err := k.UnmarshalBinary(make([]byte, SocketKeySize-1)); err == nil {
		t.Error("a short key decodes")
	}
}

func TestParseLogRecord(t *testing.T) {
	frame := []byte{1, 2, 3, 4, 5}
	rec := make([]byte, LogUIDSize)
	he := binary.NativeEndian
	he.PutUint32(rec[LogRule:], 7)
	he.PutUint32(rec[LogIfindex:], 3)
	he.PutUint32(rec[LogMark:], 0x10)
	he.PutUint32(rec[LogLen:], 60)
	he.PutUint32(rec[LogCapLen:], uint32(len(frame)))
	he.PutUint32(rec[LogFlags:], LogNoMAC)
	he.PutUint64(rec[LogTime:], 12345)
	he.PutUint32(rec[LogOut:], 4)
	copy(rec[LogData:], frame)
	he.PutUint32(rec[LogUIDSet:], 1)
	he.PutUint32(rec[LogUIDVal:], 1000)
	he.PutUint32(rec[LogGIDVal:], 100)

	r, err := ParseLogRecord(rec)
	if err != nil {
		t.Fatal(err)
	}
	if r.Rule != 7 || r.Ifindex != 3 || r.Mark != 0x10 || r.Len != 60 || r.Flags != LogNoMAC || r.Time != 12345 || r.Out != 4 ||
		!bytes.Equal(r.Frame, frame) || !r.HasUID || r.UID != 1000 || r.GID != 100 {
		t.Errorf("decoded %+v", r)
	}
	// Without --log-uid the record ends after the frame's room.
	if r, err := ParseLogRecord(rec[:LogSize]); err != nil || r.HasUID {
		t.Errorf("record without IDs: %+v, %v", r, err)
	}
	if _, err := ParseLogRecord(rec[:LogData-1]); err == nil {
		t.Error("a record shorter than its header decodes")
	}
	he.PutUint32(rec[LogCapLen:], 61)
	if _, err := ParseLogRecord(rec); err == nil {
		t.Error("a record capturing more than the frame's length decodes")
	}
}
