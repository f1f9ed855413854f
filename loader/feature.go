package loader

import (
	"fmt"

	"github.com/cilium/ebpf"

	"bpfwall/codegen"
	"bpfwall/codegen/abi"
	"bpfwall/ir"
)

// A feature is what the loader does for one kind of state or output a
// program may have, beyond its counters: checking the host before it
// loads, keeping the running filter's state across a swap, and pinning
// its objects. Load and Swap loop over features; a new stateful match
// adds one here, not a field to Options or a step to Swap.
type feature struct {
	name string
	// preflight checks that the host runs p's use of the feature as
	// the kernel would; nil when there is nothing to check.
	preflight func(p *codegen.Program) error
	// shared refuses p at place here when it would share state with a
	// filter at another place, which the kernel shares and bpfwall
	// cannot.
	shared func(here Place, p *codegen.Program) error
	// carry returns what a swap to p keeps of the running filter old
	// (nil for a first load), whose pins are in dir.
	carry func(p *codegen.Program, old *Active, dir string) (carried, error)
	// pins returns the objects of the loaded program to pin, by name.
	pins func(l *Loaded) map[string]pinner
	// record returns what the feature records in the meta of p, swapped
	// in by b, under the meta's JSON key key (see Meta.features); nil
	// for nothing.
	key    string
	record func(p *codegen.Program, b *build) any
}

// carried is what a swap keeps of the running filter for one feature.
type carried struct {
	// maps are the running filter's maps that the new program uses
	// instead of new ones, by the new program's map name.
	maps map[string]*ebpf.Map
	// loaded, when set, runs once the new program is loaded.
	loaded func(l *Loaded) error
	// close, when set, releases what carry opened.
	close func()
}

// features are the loader's features, in the order they run.
var features = []feature{
	{
		name: "jiffies",
		preflight: func(p *codegen.Program) error {
			if !codegen.CountsJiffies(p) {
				return nil
			}
			// xt_limit's arithmetic, and so the program's, depends on HZ.
			hz, err := kernelHZ()
			if err != nil {
				return err
			}
			if hz != ir.DefaultHZ {
				return fmt.Errorf("-m limit, hashlimit and recent are compiled for a kernel ticking at HZ %d, this one ticks at %d", ir.DefaultHZ, hz)
			}
			return nil
		},
	},
	{
		name: "recent",
		preflight: func(p *codegen.Program) error {
			if !codegen.UsesRecent(p) {
				return nil
			}
			if err := checkRecentParameters(recentParametersDir); err != nil {
				return err
			}
			return checkRecentConfig(modprobeDirs, "/proc/cmdline")
		},
		shared: checkRecentShared,
		key:    metaRecent,
		record: func(p *codegen.Program, _ *build) any { return recorded(recentMetas(p)) },
		carry: func(p *codegen.Program, old *Active, _ string) (carried, error) {
			m, err := recentCarry(p, old)
			return carried{maps: m}, err
		},
		pins: func(l *Loaded) map[string]pinner {
			out := make(map[string]pinner)
			for i, t := range codegen.RecentTables(l.Program) {
				out[recentPin(i)] = l.coll.Maps[t.Map]
			}
			return out
		},
	},
	{
		name: "hashlimit",
		preflight: func(p *codegen.Program) error {
			if !codegen.SizedByMemory(p) {
				return nil
			}
			// A hashlimit table without --hashlimit-htable-size holds as
			// many keys as the kernel's default size says.
			large, err := largeMemory()
			if err != nil {
				return err
			}
			if !large {
				return fmt.Errorf("a hashlimit table without --hashlimit-htable-size is sized by memory, and this machine has less than the 1 GiB bpfwall's size is for")
			}
			return nil
		},
		shared: checkHashLimitShared,
		key:    metaHashLimit,
		record: func(p *codegen.Program, _ *build) any { return recorded(hashlimitMetas(p)) },
		carry: func(p *codegen.Program, old *Active, _ string) (carried, error) {
			c, err := carryHashLimit(p, old)
			return carried{maps: c.maps, loaded: func(l *Loaded) error { return l.setSweeps(c.sweep) }}, err
		},
		pins: func(l *Loaded) map[string]pinner {
			tables := codegen.HashLimitTables(l.Program)
			if len(tables) == 0 {
				return nil
			}
			out := map[string]pinner{pinHashGC: l.coll.Maps[abi.HashGCMap]}
			for i, t := range tables {
				out[hashlimitPin(i)] = l.coll.Maps[t.Map]
			}
			return out
		},
	},
	{
		// REJECT at a chain's netfilter hook: the record the kernel's
		// REJECT rules read stays pinned across swaps (EnsureAnswers).
		name: "reject",
		carry: func(p *codegen.Program, _ *Active, dir string) (carried, error) {
			m, err := openPending(dir, p)
			if err != nil || m == nil {
				return carried{}, err
			}
			return carried{maps: map[string]*ebpf.Map{abi.RejectPendingMap: m}, close: func() { m.Close() }}, nil
		},
	},
	{
		name:   "log",
		pins:   (*Loaded).logPinners,
		key:    metaLogs,
		record: func(p *codegen.Program, _ *build) any { return recorded(logRules(p)) },
	},
	{
		name:   "netfilter stage",
		pins:   (*Loaded).netfilterPinners,
		key:    metaUppers,
		record: func(_ *codegen.Program, b *build) any { return recorded(b.uppers) },
	},
	{
		// A program that tests the conntrack state keeps conntrack on in
		// its namespace (HoldConntrack, in the swap).
		name: "conntrack",
		key:  metaConntrack,
		record: func(p *codegen.Program, _ *build) any {
			if p.UsesConntrack() {
				return true
			}
			return nil
		},
	},
}

// recorded is what a feature records of a list: nothing for an empty one.
func recorded[T any](list []T) any {
	if len(list) == 0 {
		return nil
	}
	return list
}

// recordFeatures sets what every feature records of p, swapped in by b,
// in m.
func recordFeatures(m *Meta, p *codegen.Program, b *build) error {
	m.features = nil
	for _, f := range features {
		if f.record == nil {
			continue
		}
		if v := f.record(p, b); v != nil {
			if err := m.setFeature(f.key, v); err != nil {
				return fmt.Errorf("%s: %w", f.name, err)
			}
		}
	}
	return nil
}

// preflight runs every feature's check of the host for p.
func preflight(p *codegen.Program) error {
	for _, f := range features {
		if f.preflight == nil {
			continue
		}
		if err := f.preflight(p); err != nil {
			return err
		}
	}
	return nil
}

// checkShared runs every feature's check of what p at place here would
// share with the filters at other places.
func checkShared(here Place, p *codegen.Program) error {
	for _, f := range features {
		if f.shared == nil {
			continue
		}
		if err := f.shared(here, p); err != nil {
			return err
		}
	}
	return nil
}

// carryAll collects what a swap to p keeps of old for every feature; the
// returned function releases it.
func carryAll(p *codegen.Program, old *Active, dir string) ([]carried, func(), error) {
	var out []carried
	release := func() {
		for _, c := range out {
			if c.close != nil {
				c.close()
			}
		}
	}
	for _, f := range features {
		if f.carry == nil {
			continue
		}
		c, err := f.carry(p, old, dir)
		if err != nil {
			release()
			return nil, nil, err
		}
		out = append(out, c)
	}
	return out, release, nil
}

// featurePins returns every feature's objects of l to pin, by name.
func featurePins(l *Loaded) map[string]pinner {
	out := make(map[string]pinner)
	for _, f := range features {
		if f.pins == nil {
			continue
		}
		for name, obj := range f.pins(l) {
			out[name] = obj
		}
	}
	return out
}
