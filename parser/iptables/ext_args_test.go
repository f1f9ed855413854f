package iptables

import (
	"testing"

	"bpfwall/rules"
)

func TestParseUint(t *testing.T) {
	tests := []struct {
		in   string
		max  uint64
		want uint64
		ok   bool
	}{
		{"0", 255, 0, true},
		{"255", 255, 255, true},
		{"256", 255, 0, false},
		{"0x1F", 255, 31, true},
		{"0X1f", 255, 31, true},
		{"017", 255, 15, true},
		{"08", 255, 0, false},
		{"+7", 255, 7, true},
		{"-1", 255, 0, false},
		{"", 255, 0, false},
		{"0x", 255, 0, false},
		{"1_0", 255, 0, false},
		{"12a", 255, 0, false},
		{"18446744073709551615", 1<<64 - 1, 1<<64 - 1, true},
		{"18446744073709551616", 1<<64 - 1, 0, false},
	}
	for _, tt := range tests {
		got, ok := parseUint(tt.in, tt.max)
		if got != tt.want || ok != tt.ok {
			t.Errorf("parseUint(%q, %d) = %d, %v; want %d, %v", tt.in, tt.max, got, ok, tt.want, tt.ok)
		}
	}
}

func TestParseServicePort(t *testing.T) {
	tests := []struct {
		in   string
		want uint16
		ok   bool
	}{
		{"22", 22, true},
		{"+22", 22, true},
		{"010", 10, true},
		{"0x10", 0, false},
		{"65535", 65535, true},
		{"65536", 0, false},
		{"ssh", 22, true},
		{"bootps", 67, true}, // udp only
		{"nosuchservice", 0, false},
		{"", 0, false},
	}
	for _, tt := range tests {
		got, ok := parseServicePort(tt.in)
		if got != tt.want || ok != tt.ok {
			t.Errorf("parseServicePort(%q) = %d, %v; want %d, %v", tt.in, got, ok, tt.want, tt.ok)
		}
	}
}

func TestParseHost(t *testing.T) {
	tests := []struct {
		in   string
		fam  rules.Family
		want string // "" when invalid
	}{
		{"10.1.2.3", rules.IPv4, "10.1.2.3"},
		{"10.1", rules.IPv4, "10.0.0.1"},
		{"10.1.2", rules.IPv4, "10.1.0.2"},
		{"167772161", rules.IPv4, "10.0.0.1"},
		{"0x0a.010.0.1", rules.IPv4, "10.8.0.1"},
		{"10.256.0.1", rules.IPv4, ""},
		{"10.1.70000", rules.IPv4, ""},
		{"1.2.3.4.5", rules.IPv4, ""},
		{"10..1", rules.IPv4, ""},
		{"2001:db8::1", rules.IPv6, "2001:db8::1"},
		{"fe80::1%eth0", rules.IPv6, ""},
		{"10.0.0.1", rules.IPv6, ""},
	}
	for _, tt := range tests {
		a, ok := parseHost(tt.in, tt.fam)
		got := ""
		if ok {
			got = a.String()
		}
		if got != tt.want {
			t.Errorf("parseHost(%q, %s) = %q, want %q", tt.in, tt.fam, got, tt.want)
		}
	}
}

func TestLimitCredits(t *testing.T) {
	// What the kernel answered for 1/day: its 32-bit credit arithmetic
	// wraps for some bursts and not for others.
	tests := []struct {
		avg, burst uint32
		overflow   bool
	}{
		{864000000, 1, false},
		{864000000, 2, true},
		{864000000, 3, false},
		{864000000, 4, true},
		{864000000, 5, true},
		{10000, 10000, false},
		{36000, 10000, false},
	}
	for _, tt := range tests {
		got := limitCredits(tt.avg*tt.burst) < limitCredits(tt.avg)
		if got != tt.overflow {
			t.Errorf("avg %d burst %d: overflow = %v, want %v", tt.avg, tt.burst, got, tt.overflow)
		}
	}
}
