package iptables

// Argument syntax the extensions share: numbers, ports and ranges as
// libxtables reads them, and name prefixes.

import (
	"cmp"
	"strconv"
	"strings"

	"bpfwall/rules"
)

// parseUint parses s as libxtables' xtables_strtoul does: C strtoumax with
// base 0 (0x... hexadecimal, 0... octal, else decimal), an optional '+',
// no '-', the whole string consumed, and the value at most max.
func parseUint(s string, max uint64) (uint64, bool) {
	s = strings.TrimPrefix(s, "+")
	base := 10
	switch {
	case len(s) > 2 && (s[:2] == "0x" || s[:2] == "0X"):
		s, base = s[2:], 16
	case len(s) > 1 && s[0] == '0':
		s, base = s[1:], 8
	}
	if s == "" || s[0] == '+' || s[0] == '-' {
		return 0, false
	}
	v, err := strconv.ParseUint(s, base, 64)
	if err != nil || v > max {
		return 0, false
	}
	return v, true
}

// servicePorts are the ports a service name stands for, per protocol; 0
// means none.
type servicePorts struct{ tcp, udp, sctp uint16 }

// parsePort parses a port as xtables_parse_port does (libxt_tcp,
// libxt_multiport): a number up to 65535 in C syntax (so 010 is 8) or a
// service name known for the protocol ("tcp", "udp", "sctp", ...).
func parsePort(s, proto string) (uint16, bool) {
	if v, ok := parseUint(s, 65535); ok {
		return uint16(v), true
	}
	var p uint16
	switch sp := serviceByName[s]; proto {
	case "tcp":
		p = sp.tcp
	case "udp":
		p = sp.udp
	case "sctp":
		p = sp.sctp
	}
	return p, p != 0
}

// parseServicePort parses a port as libxtables' port option types do
// (libxt_udp, libxt_conntrack), through getaddrinfo(3): a decimal number
// or a service name of any protocol, tried in getaddrinfo's order. Unlike
// glibc, which truncates, numbers above 65535 are rejected, as iptables'
// own tests say they should be.
func parseServicePort(s string) (uint16, bool) {
	if d := strings.TrimPrefix(s, "+"); d != "" && strings.Trim(d, "0123456789") == "" {
		v, err := strconv.ParseUint(d, 10, 16)
		if err != nil {
			return 0, false
		}
		return uint16(v), true
	}
	sp := serviceByName[s]
	p := cmp.Or(sp.tcp, sp.udp, sp.sctp)
	return p, p != 0
}

// parsePortRange parses "port", "lo:hi", "lo:" (up to 65535), ":hi" (from
// 0) or ":" (every port), each port parsed by port. A range whose low end
// is above its high end is an error, as in libxt_tcp.
func parsePortRange(o *opt, port func(string) (uint16, bool)) (rules.PortRange, error) {
	lo, hi, isRange := strings.Cut(o.Arg, ":")
	parse := func(s string, def uint16) (uint16, error) {
		if isRange && s == "" {
			return def, nil
		}
		p, ok := port(s)
		if !ok {
			return 0, o.errorf("--%s: invalid port %q", o.Name, s)
		}
		return p, nil
	}
	l, err := parse(lo, 0)
	if err != nil {
		return rules.PortRange{}, err
	}
	if !isRange {
		return rules.PortRange{Lo: l, Hi: l}, nil
	}
	h, err := parse(hi, 65535)
	if err != nil {
		return rules.PortRange{}, err
	}
	if l > h {
		return rules.PortRange{}, o.errorf("--%s: invalid port range %q (min > max)", o.Name, o.Arg)
	}
	return rules.PortRange{Lo: l, Hi: h}, nil
}

// tcpPort parses a port of libxt_tcp.
func tcpPort(s string) (uint16, bool) { return parsePort(s, "tcp") }

// parseUintRange parses "n", "lo:hi", "lo:", ":hi" or ":" as libxtables'
// range option types (XTTYPE_UINT16RC, XTTYPE_UINT32RC) do; a missing end
// is 0 or max. A reversed range is an error.
func parseUintRange(o *opt, max uint64) (lo, hi uint64, err error) {
	l, h, isRange := strings.Cut(o.Arg, ":")
	num := func(s string, def uint64) (uint64, error) {
		if isRange && s == "" {
			return def, nil
		}
		v, ok := parseUint(s, max)
		if !ok {
			return 0, o.errorf("--%s: invalid value %q (0-%d)", o.Name, s, max)
		}
		return v, nil
	}
	if lo, err = num(l, 0); err != nil {
		return 0, 0, err
	}
	if !isRange {
		return lo, lo, nil
	}
	if hi, err = num(h, max); err != nil {
		return 0, 0, err
	}
	if lo > hi {
		return 0, 0, o.errorf("--%s: invalid range %q (min > max)", o.Name, o.Arg)
	}
	return lo, hi, nil
}

// prefixOf reports whether s is a non-empty prefix of name, ignoring case,
// as the strncasecmp(name, s, strlen(s)) lookups of libxtables accept.
func prefixOf(s, name string) bool {
	return s != "" && len(s) <= len(name) && strings.EqualFold(s, name[:len(s)])
}
