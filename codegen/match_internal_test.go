package codegen

import (
	"testing"

	"bpfwall/ir"
)

// TestCodeOfAllocatesNothing: codeOf runs for every match of every rule,
// several times a compile; a row held as a value instead of a pointer is
// copied to the heap at each call (400k objects in a 100k-rule compile).
func TestCodeOfAllocatesNothing(t *testing.T) {
	for _, m := range []ir.Match{
		ir.Addr{}, ir.AddrRange{}, ir.AddrSet{}, ir.CTState{}, ir.DSCP{}, ir.Fragment{},
		ir.HashLimit{}, ir.ICMP{}, ir.Iface{}, ir.L4Header{}, ir.L4Proto{}, ir.Length{},
		ir.Limit{}, ir.Mark{}, ir.Owner{}, ir.PktType{}, ir.Ports{}, ir.Proto{},
		ir.RateLimit{}, ir.Recent{}, ir.Route{}, ir.SrcMAC{}, ir.TCPFlags{},
		ir.TCPOption{}, ir.TProxyTo{}, ir.TTL{}, ir.Transport{},
	} {
		if n := testing.AllocsPerRun(10, func() { codeOf(m).countsJiffies() }); n != 0 {
			t.Errorf("codeOf(%T) allocates %v times", m, n)
		}
	}
}
