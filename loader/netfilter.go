package loader

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"

	"bpfwall/codegen"
	"bpfwall/codegen/abi"
	"bpfwall/rules"
)

// The netfilter stage of an xdp or tc-ingress filter that tests the
// conntrack state (codegen.Program.Netfilter) is loaded with the filter's
// program, sharing its maps, and attached with a netfilter link at
// PRE_ROUTING just after conntrack. Its link and maps are pinned beside
// the filter's.
//
// Netfilter links cannot change their program (BPF_LINK_UPDATE is
// EOPNOTSUPP for them, on 6.18 too), so a swap attaches the new stage
// before the filter's links switch programs and lets the old stage go
// after: there is no moment without a stage. In between, a packet the old
// program deferred may be evaluated by both stages (counted twice, its
// recent tables and hashlimit buckets, which the swap carries, charged
// twice, and dropped if either drops it); never by none. A swap to rules without
// state matches switches the links first, so that nothing is deferred
// any more, then removes the stage.
const (
	pinNFLink   = "netfilter_link"
	pinNFStage  = "netfilter_stage"
	pinNFIfaces = "netfilter_ifaces"
)

// bpfNetfilterIPDefrag is BPF_F_NETFILTER_IP_DEFRAG: the link holds
// defragmentation, so that the stage sees reassembled datagrams whatever
// else runs in the namespace. (cilium/ebpf's NetfilterIPDefrag is 0.)
const bpfNetfilterIPDefrag = 1

// loadNetfilter loads l's netfilter stage, if its program has one, with
// the maps of l.
func (l *Loaded) loadNetfilter(kernel func() (*ebpf.CollectionSpec, error)) error {
	spec, err := kernel()
	if err != nil {
		return err
	}
	repl := make(map[string]*ebpf.Map)
	for name := range spec.Maps {
		if m := l.coll.Maps[name]; m != nil {
			repl[name] = m
		}
	}
	// The stage's own classifier tables are as large as the ingress
	// program's: they are written in batches too.
	spec, contents := deferContents(spec, repl)
	coll, err := ebpf.NewCollectionWithOptions(spec, ebpf.CollectionOptions{MapReplacements: repl})
	if err == nil {
		if err = fillContents(coll, contents, l.Program.Netfilter.FlatContents); err != nil {
			coll.Close()
		}
	}
	if err != nil {
		return fmt.Errorf("load the netfilter stage: %w", err)
	}
	prog := coll.Programs[abi.ProgramName]
	if prog == nil {
		coll.Close()
		return fmt.Errorf("load the netfilter stage: collection has no program %q", abi.ProgramName)
	}
	l.nf, l.nfProg = coll, prog
	return nil
}

// NetfilterProgram is the loaded netfilter stage; nil without one.
func (l *Loaded) NetfilterProgram() *ebpf.Program { return l.nfProg }

// setNetfilterIface makes the stage evaluate the packets that come in on
// interface ifindex.
func (l *Loaded) setNetfilterIface(ifindex uint32) error {
	if l.nf == nil {
		return nil
	}
	if err := l.nf.Maps[abi.NetfilterIfacesMap].Put(ifindex, uint32(1)); err != nil {
		return fmt.Errorf("netfilter stage: interface %d: %w", ifindex, err)
	}
	return nil
}

// attachNetfilter attaches the stage at PRE_ROUTING of the calling
// thread's network namespace, at codegen.NetfilterPriority or the first
// priority after it that no other BPF program holds: netfilter refuses
// two BPF programs at one priority of a hook (EBUSY), and while a swap
// attaches the new stage the old one still holds its priority. Every
// priority before mangle's (NF_IP_PRI_MANGLE, -150) runs after conntrack
// and before any table but raw.
func (l *Loaded) attachNetfilter() (link.Link, error) {
	pf := link.NetfilterProtoIPv4
	if l.Program.IR.Family == rules.IPv6 {
		pf = link.NetfilterProtoIPv6
	}
	var err error
	for prio := int32(codegen.NetfilterPriority); prio < nfPriorityMangle; prio++ {
		var nl link.Link
		nl, err = link.AttachNetfilter(link.NetfilterOptions{
			Program:        l.nfProg,
			ProtocolFamily: pf,
			Hook:           link.NetfilterInetPreRouting,
			Priority:       prio,
			NetfilterFlags: bpfNetfilterIPDefrag,
		})
		if err == nil {
			return nl, nil
		}
		if !errors.Is(err, unix.EBUSY) {
			break
		}
	}
	return nil, fmt.Errorf("attach the netfilter stage: %w", err)
}

// nfPriorityMangle is NF_IP_PRI_MANGLE.
const nfPriorityMangle = -150

// netfilterPinners are the stage's objects to pin besides its link.
func (l *Loaded) netfilterPinners() map[string]pinner {
	if l.nf == nil {
		return nil
	}
	return map[string]pinner{
		pinNFStage:  l.coll.Maps[abi.StageMap],
		pinNFIfaces: l.nf.Maps[abi.NetfilterIfacesMap],
	}
}

// openNetfilterPins opens the stage's pins in dir, if any.
func (a *Active) openNetfilterPins(dir string) error {
	for _, name := range []string{pinNFStage, pinNFIfaces} {
		m, err := ebpf.LoadPinnedMap(filepath.Join(dir, name), nil)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return err
		}
		a.maps[name] = m
	}
	l, err := link.LoadPinnedLink(filepath.Join(dir, pinNFLink), nil)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	a.nfLink = l
	return nil
}

// NetfilterStage describes a filter's netfilter stage.
type NetfilterStage struct {
	Link     link.ID        `json:"link"`
	Program  ebpf.ProgramID `json:"program"`
	Priority int32          `json:"priority"`
	Hook     string         `json:"hook"`
	Ifaces   []int          `json:"ifaces"`
	// Uppers are the upper devices of the interfaces the stage evaluates
	// too, as found at the load; NotFollowed are upper devices that
	// appeared since, which it does not evaluate until the next swap.
	Uppers      []Iface         `json:"uppers,omitempty"`
	NotFollowed []Iface         `json:"not_followed,omitempty"`
	Counts      NetfilterCounts `json:"counts"`
	Family      string          `json:"family"`
	Info        *link.Info      `json:"-"`
}

// NetfilterCounts are what the stage and the filter's program count.
type NetfilterCounts struct {
	// Deferred packets: the program passed them to the stage.
	Deferred uint64 `json:"deferred"`
	// Evaluated packets: the stage ran the rules for them.
	Evaluated uint64 `json:"evaluated"`
	// RejectDropped packets: their verdict was a REJECT, which the stage
	// cannot answer; it dropped them.
	RejectDropped uint64 `json:"reject_dropped"`
}

// Netfilter describes the filter's netfilter stage; nil when it has none.
func (a *Active) Netfilter() (*NetfilterStage, error) {
	if a.nfLink == nil {
		return nil, nil
	}
	info, err := a.nfLink.Info()
	if err != nil {
		return nil, fmt.Errorf("netfilter stage: %w", err)
	}
	st := &NetfilterStage{Link: info.ID, Program: info.Program, Info: info, Hook: "unknown"}
	if nf := info.Netfilter(); nf != nil {
		st.Priority = nf.Priority
		if nf.Hook == link.NetfilterInetPreRouting {
			st.Hook = "prerouting"
		}
		st.Family = "ipv4"
		if nf.ProtocolFamily == link.NetfilterProtoIPv6 {
			st.Family = "ipv6"
		}
	}
	if m := a.maps[pinNFIfaces]; m != nil {
		var k, v uint32
		it := m.Iterate()
		for it.Next(&k, &v) {
			st.Ifaces = append(st.Ifaces, int(k))
		}
	}
	st.Uppers = a.Meta.UpperDevices()
	if links, err := listLinks(); err == nil {
		now, _ := uppersOf(links, a.ifindexes(), false)
		for _, u := range now {
			if !slices.ContainsFunc(st.Uppers, func(v Iface) bool { return v.Index == u.Index }) {
				st.NotFollowed = append(st.NotFollowed, u)
			}
		}
	}
	if m := a.maps[pinNFStage]; m != nil {
		var perCPU []uint64
		for i, to := range []*uint64{&st.Counts.Deferred, &st.Counts.Evaluated, &st.Counts.RejectDropped} {
			if err := m.Lookup(uint32(i), &perCPU); err != nil {
				return nil, fmt.Errorf("netfilter stage counters: %w", err)
			}
			for _, c := range perCPU {
				*to += c
			}
		}
	}
	return st, nil
}

// metaUppers is the meta's key of the upper devices the netfilter stage
// evaluates (feature "netfilter stage").
const metaUppers = "uppers"

// UpperDevices are the upper devices of the interfaces of the filter m
// describes, found at its load or swap, whose packets its netfilter stage
// evaluates too (see stageUppers); devices created afterwards are not
// followed.
func (m *Meta) UpperDevices() []Iface { return featureMeta[[]Iface](m, metaUppers) }
