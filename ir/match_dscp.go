package ir

import (
	"fmt"

	"bpfwall/model"
	"bpfwall/rules"
)

// DSCP is -m dscp (dscp_mt, dscp_mt6): the six high bits of the IPv4 TOS
// byte or of the IPv6 traffic class equal Value.
type DSCP struct {
	Value uint8
	Neg   bool
}

func (m DSCP) eval(p *Program, st *State, pkt *model.Packet) outcome {
	return is((pkt.DSCP == m.Value) != m.Neg)
}

func (m DSCP) appendTo(b []byte, fam rules.Family) []byte {
	b = append(b, "dscp "...)
	b = neg(b, m.Neg)
	return fmt.Appendf(b, "0x%02x", m.Value)
}

func (m DSCP) verify(v *verifier, st *ruleState) error {
	if m.Value > 63 {
		return fmt.Errorf("dscp %d is beyond 63", m.Value)
	}
	return nil
}

func init() {
	lowers(func(l *lowerer, ms []Match, r *rules.Rule, m *rules.DSCP, nft bool) []Match {
		return l.lowerDSCP(ms, m)
	})
}

// lowerDSCP lowers -m dscp.
func (l *lowerer) lowerDSCP(ms []Match, m *rules.DSCP) []Match {
	return append(ms, DSCP{Value: m.Value, Neg: m.Neg})
}
