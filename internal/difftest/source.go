package difftest

import (
	"fmt"
	"strings"

	"bpfwall/internal/topology"
	"bpfwall/ir"
	"bpfwall/model"
	"bpfwall/rules"
)

// Case is one rule set and the probes sent through it.
type Case struct {
	Name   string
	Family rules.Family
	// Rules is the iptables-save text loaded into the firewall: a filter
	// table whose FORWARD chain holds the rules under test. With NFT it
	// is the nft -f script loaded instead, whose forward hook's base
	// chains are under test.
	Rules   []byte
	NFT     bool
	Ruleset *rules.Ruleset // Rules, parsed
	Program *ir.Program    // FORWARD of Rules, lowered
	// InIface and OutIface are the firewall's interfaces the probes cross.
	InIface, OutIface string
	// CTState is the conntrack state the probes have when the rules test
	// it; zero when they do not, and conntrack is then not running.
	CTState model.ConnState
	// Probes are Ethernet frames as sent to the firewall's InIface.
	Probes [][]byte
}

// Meta is what the firewall knows of every probe besides its bytes.
func (c *Case) Meta() model.Meta {
	return model.Meta{InIface: c.InIface, OutIface: c.OutIface, CTState: c.CTState}
}

// Outcome is what a source says the firewall does with one probe.
type Outcome struct {
	Delivered bool   // the probe reaches the receiver
	Why       string // the deciding rule, or what stopped the probe
	// Skip says that the source does not judge the probe: Why says why.
	Skip bool
}

func (o Outcome) String() string {
	v := "dropped"
	switch {
	case o.Skip:
		v = "not judged"
	case o.Delivered:
		v = "delivered"
	}
	if o.Why == "" {
		return v
	}
	return v + ": " + o.Why
}

// A Source says, for each probe of a case, whether the firewall delivers
// it: the kernel's netfilter (the reference), ir.Eval, and later the
// compiled program run by BPF_PROG_TEST_RUN or attached to the firewall.
type Source interface {
	Name() string
	Outcomes(c *Case) ([]Outcome, error)
}

// Netfilter is the reference: the rules loaded into the firewall of a
// topology with iptables-legacy-restore (nft -f for nft cases), the probes
// sent across it. A topology takes cases of one format only: neither
// loader removes the other's rules.
type Netfilter struct {
	Topo *Topology
	// IptablesNFT loads iptables rules with iptables-nft-restore, into
	// nf_tables, instead.
	IptablesNFT bool
}

func (n Netfilter) Name() string {
	if n.IptablesNFT {
		return "netfilter (iptables-nft)"
	}
	return "netfilter"
}

// batchSize keeps a batch well within the receiver's socket buffer.
const batchSize = 1000

func (n Netfilter) Outcomes(c *Case) ([]Outcome, error) {
	if err := n.Topo.fits(c); err != nil {
		return nil, err
	}
	load := n.Topo.Load
	switch {
	case c.NFT:
		load = n.Topo.LoadNFT
	case n.IptablesNFT:
		load = n.Topo.LoadIptablesNFT
	}
	if err := load(c.Family, c.Rules); err != nil {
		return nil, err
	}
	return n.Topo.deliveries(c)
}

// fits reports an error when c wants other interfaces than topo has.
func (topo *Topology) fits(c *Case) error {
	if c.InIface != topo.InIface || c.OutIface != topo.OutIface {
		return fmt.Errorf("case %s wants interfaces %s and %s, the topology has %s and %s", c.Name, c.InIface, c.OutIface, topo.InIface, topo.OutIface)
	}
	return nil
}

// deliveries sends c's probes across topo and returns, for each, whether
// it reached the receiver.
func (topo *Topology) deliveries(c *Case) ([]Outcome, error) {
	out := make([]Outcome, len(c.Probes))
	key := probeKey
	if c.CTState != 0 {
		key = func(f []byte) (string, bool) { return flowKey(f), true }
	}
	for _, batch := range batches(c.Probes, batchSize, key) {
		// Every probe must find conntrack empty of its connection.
		if c.CTState != 0 {
			if err := topo.flushConntrack(); err != nil {
				return nil, err
			}
		}
		frames := make([][]byte, 0, len(batch))
		byKey := make(map[string]int, len(batch))
		for _, i := range batch {
			frames = append(frames, c.Probes[i])
			k, _ := probeKey(c.Probes[i])
			byKey[k] = i
		}
		got, err := topo.sendBatch(frames)
		if err != nil {
			return nil, fmt.Errorf("case %s: %w", c.Name, err)
		}
		for _, f := range got {
			k, _ := arrivalKey(f)
			if i, ok := byKey[k]; ok {
				out[i].Delivered = true
			}
		}
	}
	return out, nil
}

// Load replaces the firewall's rules of family fam with the
// iptables-save text rules.
func (topo *Topology) Load(fam rules.Family, text []byte) error {
	if err := topology.RunInput(text, "ip", "netns", "exec", topo.Firewall, restoreCommand(fam)); err != nil {
		return fmt.Errorf("load rules into the firewall: %w", err)
	}
	return nil
}

// Check reports whether the kernel accepts text. It loads it: restore
// --test leaves out the kernel's own checks (REJECT's checkentry refuses
// tcp-reset without -p tcp, which the iptables command accepts).
func (topo *Topology) Check(fam rules.Family, text []byte) error {
	return topo.Load(fam, text)
}

// LoadNFT replaces the firewall's nftables rule set with the nft -f
// script text. fam is not used: an nft script says its families.
func (topo *Topology) LoadNFT(fam rules.Family, text []byte) error {
	script := append([]byte("flush ruleset\n"), text...)
	if err := topology.RunInput(script, "ip", "netns", "exec", topo.Firewall, "nft", "-f", "-"); err != nil {
		return fmt.Errorf("load nft rules into the firewall: %w", err)
	}
	return nil
}

// LoadIptablesNFT replaces the firewall's rules of family fam with the
// iptables-save text rules, through iptables-nft-restore: nf_tables
// tables holding native expressions and xtables extensions.
func (topo *Topology) LoadIptablesNFT(fam rules.Family, text []byte) error {
	tool := "iptables-nft-restore"
	if fam == rules.IPv6 {
		tool = "ip6tables-nft-restore"
	}
	if err := topology.RunInput(text, "ip", "netns", "exec", topo.Firewall, tool); err != nil {
		return fmt.Errorf("load rules into the firewall: %w", err)
	}
	return nil
}

func restoreCommand(fam rules.Family) string {
	if fam == rules.IPv6 {
		return "ip6tables-legacy-restore"
	}
	return "iptables-legacy-restore"
}

// Eval is ir.Eval on the FORWARD chain, behind a model of the firewall's
// routing (see Forwarded).
type Eval struct{}

func (Eval) Name() string { return "ir.Eval" }

func (Eval) Outcomes(c *Case) ([]Outcome, error) {
	out := make([]Outcome, len(c.Probes))
	for i, f := range c.Probes {
		pkt, err := decode(c, f)
		if err != nil {
			return nil, err
		}
		if why := Forwarded(pkt, f); why != "" {
			out[i] = Outcome{Why: why, Skip: strings.HasPrefix(why, unmodeled)}
			continue
		}
		r := c.Program.Eval(pkt)
		out[i] = Outcome{Delivered: r.Verdict == ir.VerdictAccept, Why: r.String()}
	}
	return out, nil
}

// decode is model.Decode with the case's meta and the link layer's view of
// VLAN tags: the firewall has no VLAN devices, so a frame tagged with a
// VLAN id is for another host (__netif_receive_skb_core), while priority
// tags (id 0) are stripped.
func decode(c *Case, frame []byte) (*model.Packet, error) {
	meta := c.Meta()
	if vlanTagged(frame) {
		meta.PktType = model.PacketOtherHost
	}
	return model.Decode(frame, meta)
}
