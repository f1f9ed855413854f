package model_test

import (
	"encoding/hex"
	"testing"

	"bpfwall/model"
)

// TestAuthHeaderCutShort: ipv6_find_hdr stops at an authentication header
// (IP6_FH_F_AUTH) only after reading its first two bytes; one past the end
// of the packet is a failed walk, not an AH (difftest nft-ipv6-seed-170).
func TestAuthHeaderCutShort(t *testing.T) {
	frame, err := hex.DecodeString("02000000000202000000000186dd6000000000272bc2629813f507f8c6040c007fffffffffff7390a796c0947a9f7f95eb3b382a59df2c0000000000000000000001af87f62c3328000100000000000000000000000000000000000000")
	if err != nil {
		t.Fatal(err)
	}
	pkt, err := model.Decode(frame, model.Meta{InIface: "eth0"})
	if err != nil {
		t.Fatal(err)
	}
	if pkt.AuthHeader || !pkt.BadExtHeaders {
		t.Errorf("AuthHeader %v, BadExtHeaders %v; want false, true", pkt.AuthHeader, pkt.BadExtHeaders)
	}
}
