package difftest

import (
	"fmt"
	"strings"

	"bpfwall/internal/topology"
	"bpfwall/ir"
	"bpfwall/parser/nft"
	"bpfwall/parser/nft/kernel"
	"bpfwall/rules"
)

// FromKernel loads a case's rules into the firewall of Topo (nft -f for
// nft cases, iptables-nft-restore for iptables ones), reads them back as
// --from-kernel does (kernel.Read in the firewall's namespace), and has
// Inner judge the probes by the model read: what an operator gets who
// compiles what nft or iptables-nft loaded.
type FromKernel struct {
	Topo  *Topology
	Inner Source
}

func (s FromKernel) Name() string { return "from-kernel " + s.Inner.Name() }

func (s FromKernel) Outcomes(c *Case) ([]Outcome, error) {
	load := s.Topo.LoadIptablesNFT
	if c.NFT {
		load = s.Topo.LoadNFT
	}
	if err := load(c.Family, c.Rules); err != nil {
		return nil, err
	}
	var rs *rules.Ruleset
	err := topology.Do(s.Topo.Firewall, func() (err error) {
		rs, err = kernel.Read(nft.Options{Family: c.Family})
		return err
	})
	if err != nil && strings.Contains(err.Error(), "is not supported") {
		// Refused by name, naming the kernel's rule.
		return nil, &Unsupported{Reason: "--from-kernel: " + firstLineOf(err)}
	}
	if err != nil {
		return nil, fmt.Errorf("case %s: read the kernel's rule set: %w", c.Name, err)
	}
	prog, err := ir.Lower(rs, ir.LowerOptions{Chain: "FORWARD"})
	if err != nil {
		// The text's model lowers (the case exists): the kernel's must.
		return nil, fmt.Errorf("case %s: lower the kernel's rule set: %w", c.Name, err)
	}
	kc := *c
	kc.Ruleset, kc.Program = rs, prog
	return s.Inner.Outcomes(&kc)
}

// firstLineOf is the first line of err's text, without the rule's name.
func firstLineOf(err error) string {
	s, _, _ := strings.Cut(err.Error(), "\n")
	if _, msg, ok := strings.Cut(s, ": "); ok {
		return msg
	}
	return s
}
