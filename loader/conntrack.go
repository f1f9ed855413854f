package loader

import (
	"errors"
	"fmt"
	"os"
	"sync"

	"github.com/cilium/ebpf/btf"
	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"
)

// Conntrack tracks connections in a network namespace only while some
// netfilter user holds it there (nf_ct_netns_get): a program whose rules
// test the conntrack state would otherwise find an empty table. The
// loader holds it with a small nftables table whose one rule loads the
// conntrack state (nft_ct_get_init takes the reference) and does nothing
// else: the chain has no hook, so no packet ever runs it.
const (
	// ConntrackTable is the inet table that keeps conntrack on.
	ConntrackTable = "bpfwall_conntrack"
	conntrackChain = "hold"
)

// nftConn opens a netlink connection to nftables in the calling thread's
// network namespace: the library's own sockets would otherwise live on
// whatever thread it runs them, in whatever namespace that thread is.
func nftConn() (*nftables.Conn, func(), error) {
	fd, err := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("open network namespace: %w", err)
	}
	c, err := nftables.New(nftables.WithNetNSFd(fd), nftables.AsLasting())
	if err != nil {
		unix.Close(fd)
		return nil, nil, fmt.Errorf("nftables: %w", err)
	}
	return c, func() { c.CloseLasting(); unix.Close(fd) }, nil
}

// ConntrackHeld reports whether the namespace of the calling thread has
// bpfwall's conntrack table.
func ConntrackHeld() (bool, error) {
	c, done, err := nftConn()
	if err != nil {
		return false, err
	}
	defer done()
	tables, err := c.ListTablesOfFamily(nftables.TableFamilyINet)
	if err != nil {
		return false, fmt.Errorf("list nftables tables: %w", err)
	}
	for _, t := range tables {
		if t.Name == ConntrackTable {
			return true, nil
		}
	}
	return false, nil
}

// HoldConntrack makes conntrack track connections of both IP families in
// the calling thread's namespace, by creating bpfwall's conntrack table
// if it is not there; created says it was not.
func HoldConntrack() (created bool, err error) {
	held, err := ConntrackHeld()
	if err != nil || held {
		return false, err
	}
	c, done, err := nftConn()
	if err != nil {
		return false, err
	}
	defer done()
	t := c.AddTable(&nftables.Table{Name: ConntrackTable, Family: nftables.TableFamilyINet})
	ch := c.AddChain(&nftables.Chain{Name: conntrackChain, Table: t})
	c.AddRule(&nftables.Rule{Table: t, Chain: ch, Exprs: []expr.Any{
		&expr.Ct{Register: 1, Key: expr.CtKeySTATE},
	}})
	if err := c.Flush(); err != nil {
		return false, fmt.Errorf("create nftables table inet %s to keep conntrack on: %w", ConntrackTable, err)
	}
	return true, nil
}

// ReleaseConntrack removes bpfwall's conntrack table from the calling
// thread's namespace unless a filter at one of places still tests the
// conntrack state.
func ReleaseConntrack(places []Place) error {
	for _, p := range places {
		a, err := Open(p)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return err
		}
		needs := a.Meta.HoldsConntrack()
		a.Close()
		if needs {
			return nil
		}
	}
	held, err := ConntrackHeld()
	if err != nil || !held {
		return err
	}
	return dropConntrackTable()
}

// dropConntrackTable deletes bpfwall's conntrack table.
func dropConntrackTable() error {
	c, done, err := nftConn()
	if err != nil {
		return err
	}
	defer done()
	c.DelTable(&nftables.Table{Name: ConntrackTable, Family: nftables.TableFamilyINet})
	if err := c.Flush(); err != nil {
		return fmt.Errorf("delete nftables table inet %s: %w", ConntrackTable, err)
	}
	return nil
}

// releaseConntrackAt releases conntrack unless another filter of p's
// namespace tests the state.
func releaseConntrackAt(p Place) error {
	places, err := Places(p.Root, p.NetNS)
	if err != nil {
		return err
	}
	return ReleaseConntrack(places)
}

var kernelBTF = sync.OnceValues(btf.LoadKernelSpec)

// metaConntrack is the meta's key of the program's use of conntrack
// (feature "conntrack").
const metaConntrack = "conntrack"

// HoldsConntrack says the program m describes tests the conntrack state:
// the loader keeps conntrack on in the namespace (HoldConntrack).
func (m *Meta) HoldsConntrack() bool { return featureMeta[bool](m, metaConntrack) }
