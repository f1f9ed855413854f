package codegen

import (
	"strings"
	"testing"

	"bpfwall/codegen/abi"
	"bpfwall/codegen/kernel"
	"bpfwall/ir"
	"bpfwall/parser/iptables"
	"bpfwall/rules"
)

// TestCTEntryReadOnce: ct_state reads each field of a TCP entry the
// replay depends on once, into its frame, and the replay reads only the
// copies, so that an entry changed meanwhile (another CPU's packet of the
// connection) cannot give a mix of values no entry ever held.
// (nf_conn.ct_net.net, read for each sysctl, never changes in an entry's
// life; status is also read once on the UDP path.)
func TestCTEntryReadOnce(t *testing.T) {
	text := "*filter\n:INPUT ACCEPT [0:0]\n:FORWARD ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n" +
		"-A INPUT -m conntrack --ctstate INVALID -j DROP\n-A INPUT -m conntrack --ctstate ESTABLISHED -j ACCEPT\nCOMMIT\n"
	for _, fam := range []rules.Family{rules.IPv4, rules.IPv6} {
		rs, err := iptables.Parse("ct.rules", []byte(text), iptables.Options{Family: fam, ForceFamily: true})
		if err != nil {
			t.Fatal(err)
		}
		prog, err := ir.Lower(rs, ir.LowerOptions{Chain: "INPUT"})
		if err != nil {
			t.Fatal(err)
		}
		for _, hook := range []Hook{HookXDP, HookTCIngress} {
			for _, level := range Levels {
				p, err := Compile(prog, Options{Trace: true, Hook: hook, Level: level})
				if err != nil {
					t.Fatal(err)
				}
				reads := map[string]int{}
				for _, ins := range p.Spec.Programs[abi.ProgramName].Instructions {
					if path := kernel.Fields(ins); len(path) == 1 && path[0].Struct == "nf_conn" {
						reads[path[0].Field]++
					}
				}
				for _, f := range []string{"proto.tcp.state", "proto.tcp.last_dir", "proto.tcp.last_index", "proto.tcp.last_end",
					"proto.tcp.last_ack", "proto.tcp.last_win", "proto.tcp.last_wscale", "proto.tcp.last_flags",
					"proto.tcp.seen[0].td_end", "proto.tcp.seen[1].td_maxack"} {
					if reads[f] == 0 {
						t.Errorf("%s %s %v: the replay does not read nf_conn.%s", fam, hook, level, f)
					}
				}
				for f, n := range reads {
					limit := 1
					switch {
					case f == "ct_net.net":
						continue
					case f == "status":
						limit = 2
					case strings.HasPrefix(f, "proto.tcp.seen["):
						// seen[0] and seen[1] are copied on each
						// direction's path: once on either.
						limit = 2
					}
					if n > limit {
						t.Errorf("%s %s %v: nf_conn.%s is read %d times, at most %d", fam, hook, level, f, n, limit)
					}
				}
			}
		}
	}
}
