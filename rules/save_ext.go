package rules

import (
	"strconv"
)

// Canonical printing of the typed extensions, option for option as the
// save functions of iptables 1.8.11's extensions print them.

func appendUint(b []byte, v uint64) []byte { return strconv.AppendUint(b, v, 10) }

// appendFlag appends " [!] --name".
func appendFlag(b []byte, name string, neg bool) []byte {
	b = appendNeg(b, neg)
	b = append(b, " --"...)
	return append(b, name...)
}

// appendPorts prints a tcp or udp port option; the full range prints only
// when inverted.
func appendPorts(b []byte, name string, r PortRange, neg bool) []byte {
	if r == AnyPort && !neg {
		return b
	}
	b = appendFlag(b, name, neg)
	b = append(b, ' ')
	return appendPortRange(b, r)
}

func appendPortRange(b []byte, r PortRange) []byte {
	b = appendUint(b, uint64(r.Lo))
	if r.Lo != r.Hi {
		b = append(b, ':')
		b = appendUint(b, uint64(r.Hi))
	}
	return b
}

// appendRawOptions prints options whose arguments are canonical already
// (numbers, addresses, ranges), without quoting.
func appendRawOptions(b []byte, opts []Option) []byte {
	for _, o := range opts {
		b = appendFlag(b, o.Name, o.Neg)
		for _, a := range o.Args {
			b = append(b, ' ')
			b = append(b, a...)
		}
	}
	return b
}

func (t *Reject) appendSave(b []byte) []byte {
	b = appendJump(b, "REJECT")
	b = append(b, " --reject-with "...)
	return append(b, t.With...)
}

// appendSave prints every option, as libxt_TPROXY's save does: the
// unspecified address when --on-ip was not given.
func (t *TProxy) appendSave(b []byte) []byte {
	b = appendJump(b, "TPROXY")
	b = append(b, " --on-port "...)
	b = appendUint(b, uint64(t.Port))
	b = append(b, " --on-ip "...)
	switch {
	case t.Addr.IsValid():
		b = append(b, t.Addr.String()...)
	case t.Family == IPv6:
		b = append(b, "::"...)
	default:
		b = append(b, "0.0.0.0"...)
	}
	b = append(b, " --tproxy-mark 0x"...)
	b = strconv.AppendUint(b, uint64(t.Mark), 16)
	b = append(b, "/0x"...)
	return strconv.AppendUint(b, uint64(t.Mask), 16)
}

// logDefaultLevel is the level iptables-save leaves out (LOG_WARNING).
const logDefaultLevel = 4

func (t *Log) appendSave(b []byte) []byte {
	b = appendJump(b, "LOG")
	if t.Prefix != "" {
		b = append(b, " --log-prefix "...)
		b = append(b, Quote(t.Prefix)...)
	}
	if t.Level != logDefaultLevel {
		b = append(b, " --log-level "...)
		b = appendUint(b, uint64(t.Level))
	}
	for _, f := range []struct {
		bit  uint8
		name string
	}{
		{LogTCPSeq, "log-tcp-sequence"}, {LogTCPOpt, "log-tcp-options"}, {LogIPOpt, "log-ip-options"},
		{LogUID, "log-uid"}, {LogMACDecode, "log-macdecode"},
	} {
		if t.Flags&f.bit != 0 {
			b = append(b, " --"...)
			b = append(b, f.name...)
		}
	}
	return b
}
