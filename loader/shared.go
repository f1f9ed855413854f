package loader

import (
	"errors"
	"io/fs"

	"github.com/cilium/ebpf"

	"bpfwall/codegen"
	"bpfwall/codegen/abi"
)

// sharedState is the state the filters of one SwapAll share as
// netfilter shares it between hooks (ir.LowerOptions.SharedState): one
// map per recent table name, which a chain of any hook or table may
// name, and one array of token buckets per table, whose limits a user
// chain that two builtin chains reach runs from both hooks. The first
// program of the swaps that has such a map makes it (or takes it over
// from a running filter), and the later ones are loaded with it.
type sharedState struct {
	// maps are the shared maps so far, by their key in sharedMaps; each
	// is a clone, closed with the sharedState.
	maps map[string]*ebpf.Map
	// others are the running filters of the swaps' places, opened once,
	// where a recent table may be found that a program's own place did
	// not run.
	others []*Active
	places []Place
	opened bool
}

func newSharedState(swaps []*Swap) *sharedState {
	st := &sharedState{maps: make(map[string]*ebpf.Map)}
	for _, s := range swaps {
		st.places = append(st.places, s.Place)
	}
	return st
}

// sharedMaps returns the maps of p that the filters of a SwapAll share,
// by the program's map name: the key of each in sharedState.maps.
func sharedMaps(p *codegen.Program) map[string]string {
	out := make(map[string]string)
	for _, t := range codegen.RecentTables(p) {
		out[t.Map] = "recent " + t.Name
	}
	if ir := p.IR; ir.TableBuckets > 0 && p.Spec.Maps[abi.LimitsMap] != nil {
		out[abi.LimitsMap] = "limits " + ir.Family.String() + " " + ir.Table
	}
	return out
}

// use sets, in maps, the shared maps p is to be loaded with: those an
// earlier program made, and the recent tables that a running filter of
// another of the swaps' places holds when p's own place held none
// (carried: maps holds what carryAll took from p's place).
func (st *sharedState) use(p *codegen.Program, here Place, maps map[string]*ebpf.Map) error {
	for name, key := range sharedMaps(p) {
		if m := st.maps[key]; m != nil {
			maps[name] = m
		}
	}
	for _, t := range codegen.RecentTables(p) {
		if maps[t.Map] != nil {
			continue
		}
		if err := st.open(); err != nil {
			return err
		}
		for _, a := range st.others {
			if a.Place == here {
				continue
			}
			carried, err := recentCarry(p, a)
			if err != nil {
				return err
			}
			if m := carried[t.Map]; m != nil {
				maps[t.Map] = m
				break
			}
		}
	}
	return nil
}

// open opens the running filters of the swaps' places, once.
func (st *sharedState) open() error {
	if st.opened {
		return nil
	}
	st.opened = true
	for _, pl := range st.places {
		a, err := Open(pl)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return err
		}
		st.others = append(st.others, a)
	}
	return nil
}

// keep records the shared maps of l that no earlier program made.
func (st *sharedState) keep(l *Loaded) error {
	for name, key := range sharedMaps(l.Program) {
		if st.maps[key] != nil {
			continue
		}
		m, err := l.coll.Maps[name].Clone()
		if err != nil {
			return err
		}
		st.maps[key] = m
	}
	return nil
}

func (st *sharedState) close() {
	for _, m := range st.maps {
		m.Close()
	}
	for _, a := range st.others {
		a.Close()
	}
}
