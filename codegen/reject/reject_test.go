package reject

import (
	"slices"
	"testing"
)

func TestValid(t *testing.T) {
	for _, tc := range []struct {
		with string
		ipv6 bool
		want bool
	}{
		{"icmp-port-unreachable", false, true},
		{"icmp-port-unreachable", true, false},
		{"icmp6-port-unreachable", true, true},
		{"icmp6-port-unreachable", false, false},
		{"tcp-reset", false, true},
		{"tcp-reset", true, true},
		{"icmp6", true, false},
		{"port-unreachable", false, false},
	} {
		if got := Valid(tc.with, tc.ipv6); got != tc.want {
			t.Errorf("Valid(%q, ipv6=%v) = %v, want %v", tc.with, tc.ipv6, got, tc.want)
		}
	}
}

// A chain's program at its netfilter hook and the socket filter of the
// kernel's REJECT rule after it name a --reject-with by its index in
// Names: the order must not depend on the map's.
func TestNames(t *testing.T) {
	names := Names()
	if len(names) != len(types) || !slices.IsSorted(names) {
		t.Fatalf("Names() = %q: want all %d types, sorted", names, len(types))
	}
	if !slices.Equal(names, Names()) {
		t.Fatal("Names() differs between calls")
	}
}
