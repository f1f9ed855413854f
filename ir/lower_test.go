package ir_test

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"bpfwall/ir"
	"bpfwall/rules"
)

// Rule sets built directly, for what the parser already refuses: lowering
// must still refuse it, since other front ends (nft, the kernel) fill the
// same model.

func at(line, col int) rules.Pos { return rules.Pos{File: "model", Line: line, Col: col} }

// ruleset returns an IPv4 filter table whose INPUT chain (DROP policy)
// holds input, plus the given user chains.
func ruleset(input []*rules.Rule, user ...*rules.Chain) *rules.Ruleset {
	t := rules.NewTable("filter", at(1, 1))
	in := t.Chain("INPUT")
	in.Policy = rules.PolicyDrop
	in.Rules = input
	t.Chains = append(t.Chains, user...)
	return &rules.Ruleset{Family: rules.IPv4, Tables: []*rules.Table{t}}
}

func userChain(name string, rs ...*rules.Rule) *rules.Chain {
	return &rules.Chain{Name: name, Rules: rs}
}

func jump(line int, chain string) *rules.Rule {
	return &rules.Rule{Pos: at(line, 1), Target: &rules.Jump{Located: rules.Located{Pos: at(line, 10)}, Chain: chain}}
}

func TestLowerErrorsOnModel(t *testing.T) {
	tcpMatch := func(line int) rules.Match {
		return &rules.TCP{Located: rules.Located{Pos: at(line, 5)}, SrcPorts: rules.AnyPort, DstPorts: rules.PortRange{Lo: 22, Hi: 22}}
	}
	for _, tc := range []struct {
		name string
		rs   *rules.Ruleset
		opts ir.LowerOptions
		want []string // the error lines, in order
	}{
		{
			name: "jump loop",
			rs: ruleset([]*rules.Rule{jump(2, "A")},
				userChain("A", jump(3, "B")),
				userChain("B", jump(4, "A"))),
			want: []string{`model:4:10: jump to "A" makes a loop: A -> B -> A`},
		},
		{
			name: "goto loop to itself",
			rs: ruleset([]*rules.Rule{jump(2, "A")},
				userChain("A", &rules.Rule{Pos: at(3, 1), Target: &rules.Goto{Located: rules.Located{Pos: at(3, 10)}, Chain: "A"}})),
			want: []string{`model:3:10: jump to "A" makes a loop: A -> A`},
		},
		{
			name: "missing and builtin jump targets",
			rs:   ruleset([]*rules.Rule{jump(3, "OUTPUT"), jump(2, "NOPE")}),
			want: []string{`model:2:10: chain "NOPE" does not exist`, `model:3:10: cannot jump to builtin chain "OUTPUT"`},
		},
		{
			name: "transport matches need their protocol",
			rs: ruleset([]*rules.Rule{
				{Pos: at(2, 1), Matches: []rules.Match{tcpMatch(2)}},
				{Pos: at(3, 1), Proto: 6, ProtoNeg: true, Matches: []rules.Match{tcpMatch(3)}},
				{Pos: at(4, 1), Proto: 6, Matches: []rules.Match{&rules.Multiport{Located: rules.Located{Pos: at(4, 5)}, Dir: rules.MultiportDst}}},
				{Pos: at(5, 1), Proto: 1, Matches: []rules.Match{&rules.ICMP{Located: rules.Located{Pos: at(5, 5)}, V6: true}}},
			}),
			want: []string{
				"model:2:5: tcp match requires -p tcp",
				"model:3:5: tcp match requires -p tcp",
				"model:4:5: multiport match without ports",
				"model:5:5: icmp6 match is not valid in ipv4 rule sets",
			},
		},
		{
			name: "family-specific matches",
			rs: ruleset([]*rules.Rule{
				{Pos: at(2, 1), Matches: []rules.Match{&rules.HL{Located: rules.Located{Pos: at(2, 5)}, Value: 1}}},
				{Pos: at(3, 1), Src: rules.NetFromPrefix(netip.MustParsePrefix("2001:db8::/32"))},
			}),
			want: []string{
				"model:2:5: hl match is only valid in ipv6 rule sets",
				"model:3:1: src address 2001:db8::/32 is not an ipv4 address",
			},
		},
		{
			name: "empty ranges",
			rs: ruleset([]*rules.Rule{
				{Pos: at(2, 1), Proto: 17, Matches: []rules.Match{&rules.UDP{Located: rules.Located{Pos: at(2, 5)}, SrcPorts: rules.PortRange{Lo: 9, Hi: 8}, DstPorts: rules.AnyPort}}},
				{Pos: at(3, 1), Matches: []rules.Match{&rules.Length{Located: rules.Located{Pos: at(3, 5)}, Min: 100, Max: 99}}},
				{Pos: at(4, 1), Matches: []rules.Match{&rules.IPRange{Located: rules.Located{Pos: at(4, 5)},
					Src: &rules.AddrRange{From: netip.MustParseAddr("10.0.0.9"), To: netip.MustParseAddr("10.0.0.1")}}}},
			}),
			want: []string{
				"model:2:5: port range 9:8 is empty",
				"model:3:5: length range 100:99 is empty",
				"model:4:5: address range 10.0.0.9-10.0.0.1 is empty",
			},
		},
		{
			name: "sets",
			rs: ruleset([]*rules.Rule{
				{Pos: at(2, 1), Matches: []rules.Match{&rules.Set{Located: rules.Located{Pos: at(2, 5)}, SetName: "nope", Dirs: []rules.SetDir{rules.SetSrc}}}},
			}),
			want: []string{`model:2:5: set "nope" is not defined`},
		},
		{
			name: "tcp-reset needs tcp",
			rs: ruleset([]*rules.Rule{
				{Pos: at(2, 1), Proto: 17, Target: &rules.Reject{Located: rules.Located{Pos: at(2, 9)}, With: "tcp-reset"}},
			}),
			want: []string{"model:2:9: REJECT --reject-with tcp-reset requires -p tcp"},
		},
		{
			name: "generic target",
			rs: ruleset([]*rules.Rule{
				{Pos: at(2, 1), Target: &rules.GenericTarget{Located: rules.Located{Pos: at(2, 4)}, Target: "TPROXY"}},
			}),
			want: []string{"model:2:4: TPROXY target is not supported"},
		},
		{
			name: "owner outside OUTPUT and POSTROUTING",
			rs: ruleset([]*rules.Rule{
				{Pos: at(2, 1), Matches: []rules.Match{&rules.Owner{Located: rules.Located{Pos: at(2, 5)}, Socket: true}}},
			}),
			want: []string{"model:2:5: owner match is only valid in OUTPUT and POSTROUTING, not INPUT"},
		},
		{
			name: "owner refusals",
			rs: func() *rules.Ruleset {
				rs := ruleset(nil)
				out := rs.Tables[0].Chain("OUTPUT")
				owner := func(line int, m rules.Owner) *rules.Rule {
					m.Pos = at(line, 5)
					return &rules.Rule{Pos: at(line, 1), Matches: []rules.Match{&m}}
				}
				out.Rules = []*rules.Rule{
					owner(2, rules.Owner{UID: &rules.IDRange{Min: 10, Max: 5}}),
					owner(3, rules.Owner{GID: &rules.IDRange{Min: 1, Max: 1}, SupplGroups: true}),
				}
				return rs
			}(),
			opts: ir.LowerOptions{Chain: "OUTPUT"},
			want: []string{
				"model:2:5: owner: range 10-5 is empty (the kernel refuses it)",
				"model:3:5: owner --suppl-groups is not supported",
			},
		},
		{
			name: "user chain as entry",
			rs:   ruleset(nil, userChain("A")),
			opts: ir.LowerOptions{Chain: "A"},
			want: []string{`lower filter A: "A" is not a builtin chain of table filter`},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := ir.Lower(tc.rs, tc.opts)
			if err == nil {
				t.Fatalf("no error; program:\n%s", p)
			}
			if got := strings.Split(err.Error(), "\n"); !slices.Equal(got, tc.want) {
				t.Errorf("errors:\n%s\nwant:\n%s", err, strings.Join(tc.want, "\n"))
			}
			var list rules.ErrorList
			if strings.HasPrefix(tc.want[0], "model:") && !errors.As(err, &list) {
				t.Errorf("error is %T, want rules.ErrorList", err)
			}
		})
	}
}

func TestLowerNumbersRulesAndChains(t *testing.T) {
	rs := ruleset([]*rules.Rule{
		jump(2, "B"),
		jump(3, "A"),
		{Pos: at(4, 1), Target: &rules.Accept{}},
	},
		userChain("A", &rules.Rule{Pos: at(5, 1), Target: &rules.Return{}}),
		userChain("B", jump(6, "A"), &rules.Rule{Pos: at(7, 1)}),
		userChain("UNREACHED", &rules.Rule{Pos: at(8, 1), Target: &rules.GenericTarget{Target: "MASQUERADE"}}),
	)
	p, err := ir.Lower(rs, ir.LowerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := ir.Verify(p); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, c := range p.Chains {
		names = append(names, c.Name)
	}
	if want := []string{"INPUT", "B", "A"}; !slices.Equal(names, want) {
		t.Errorf("chains %v, want %v (breadth first, unreachable chains left out)", names, want)
	}
	if len(p.Rules) != 6 {
		t.Fatalf("%d rules, want 6", len(p.Rules))
	}
	for id, r := range p.Rules {
		if r.ID != id {
			t.Errorf("Rules[%d].ID = %d", id, r.ID)
		}
	}
	if got, want := p.Rules[0].Action, (ir.Jump{Chain: 1}); got != want {
		t.Errorf("r0 action %#v, want %#v", got, want)
	}
	// Rule IDs follow the chain order: INPUT r0-r2, B r3-r4, A r5.
	if got, want := p.Rules[3].Action, (ir.Jump{Chain: 2}); got != want {
		t.Errorf("r3 (B's jump to A) action %#v, want %#v", got, want)
	}
	if p.Rules[4].Action != (ir.None{}) || p.Rules[4].Chain != 1 {
		t.Errorf("r4: action %#v in chain %d, want None in chain 1", p.Rules[4].Action, p.Rules[4].Chain)
	}
	if p.Rules[5].Action != (ir.Return{}) || p.Rules[5].Chain != 2 {
		t.Errorf("r5: action %#v in chain %d, want Return in chain 2", p.Rules[5].Action, p.Rules[5].Chain)
	}
	if got := p.Rules[0].Text; got != "-j B" {
		t.Errorf("r0 text %q, want %q", got, "-j B")
	}
	if p.Chains[0].Policy != rules.PolicyDrop || p.Chains[1].Policy != rules.PolicyNone {
		t.Errorf("policies %s, %s; want DROP on the entry chain only", p.Chains[0].Policy, p.Chains[1].Policy)
	}
}

// generateRuleset returns an IPv4 filter table with n INPUT rules of the
// shapes real rule sets have.
func generateRuleset(n int) *rules.Ruleset {
	rs := make([]*rules.Rule, n)
	for i := range rs {
		addr := netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)})
		r := &rules.Rule{Pos: at(i+2, 1), Src: rules.NetFromPrefix(netip.PrefixFrom(addr, 24+i%9))}
		switch i % 4 {
		case 0:
			r.Proto = 6
			r.Matches = []rules.Match{&rules.TCP{SrcPorts: rules.AnyPort, DstPorts: rules.PortRange{Lo: uint16(i), Hi: uint16(i)}}}
		case 1:
			r.Proto = 17
			r.Matches = []rules.Match{&rules.Multiport{Dir: rules.MultiportDst, Ports: []rules.PortRange{{Lo: 53, Hi: 53}, {Lo: 1000, Hi: 2000}}}}
		case 2:
			r.InIface = fmt.Sprintf("eth%d", i%8)
			r.Matches = []rules.Match{&rules.Conntrack{State: rules.CTNew}, &rules.Comment{Text: "generated"}}
		}
		if i%2 == 0 {
			r.Target = &rules.Accept{}
		} else {
			r.Target = &rules.Drop{}
		}
		rs[i] = r
	}
	return ruleset(rs)
}

func TestLowerLargeRuleset(t *testing.T) {
	const n = 100_000
	p, err := ir.Lower(generateRuleset(n), ir.LowerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := ir.Verify(p); err != nil {
		t.Fatal(err)
	}
	if len(p.Rules) != n || len(p.Chains[0].Rules) != n {
		t.Fatalf("lowered %d rules (%d in INPUT), want %d", len(p.Rules), len(p.Chains[0].Rules), n)
	}
}

func BenchmarkLower100k(b *testing.B) {
	rs := generateRuleset(100_000)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := ir.Lower(rs, ir.LowerOptions{}); err != nil {
			b.Fatal(err)
		}
	}
}
