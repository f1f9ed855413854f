package loader

import (
	"errors"
	"fmt"
	"path/filepath"
	"strconv"

	"github.com/cilium/ebpf"

	"bpfwall/codegen"
	"bpfwall/codegen/abi"
)

// hashlimitPinPrefix + the table's index names a hashlimit table's pin in
// its filter's directory; pinHashGC is the program's abi.HashGCMap,
// the tables' next sweep times.
const (
	hashlimitPinPrefix = "hashlimit_"
	pinHashGC          = "hashlimit_gc"
)

func hashlimitPin(i int) string { return hashlimitPinPrefix + strconv.Itoa(i) }

// HashLimitMeta describes a pinned hashlimit table: its name and the
// configuration the kernel keeps with the table (hinfo->cfg), in
// ir.HashLimit's units.
type HashLimitMeta struct {
	Name       string `json:"name"`
	Mode       uint8  `json:"mode"`
	SrcMask    uint8  `json:"srcmask"`
	DstMask    uint8  `json:"dstmask"`
	Avg        uint64 `json:"avg"`
	Burst      uint64 `json:"burst"`
	Bytes      bool   `json:"bytes,omitempty"`
	Expire     uint64 `json:"expire"`      // jiffies
	GCInterval uint64 `json:"gc_interval"` // jiffies
	Max        uint32 `json:"max"`
}

func hashlimitMeta(t codegen.HashLimitTable) HashLimitMeta {
	c := t.Config
	return HashLimitMeta{
		Name: t.Name, Mode: c.Mode, SrcMask: c.SrcMask, DstMask: c.DstMask,
		Avg: c.Avg, Burst: c.Burst, Bytes: c.Bytes, Expire: c.Expire, GCInterval: c.GCInterval, Max: c.Max,
	}
}

// hashlimitMetas describes p's hashlimit tables for its Meta.
func hashlimitMetas(p *codegen.Program) []HashLimitMeta {
	var out []HashLimitMeta
	for _, t := range codegen.HashLimitTables(p) {
		out = append(out, hashlimitMeta(t))
	}
	return out
}

// openHashLimitPins opens the pinned hashlimit tables the Meta lists, and
// their sweep times.
func (a *Active) openHashLimitPins(dir string) error {
	tables := a.Meta.HashLimitMetas()
	if len(tables) == 0 {
		return nil
	}
	for i := range tables {
		m, err := ebpf.LoadPinnedMap(filepath.Join(dir, hashlimitPin(i)), nil)
		if err != nil {
			return err
		}
		a.maps[hashlimitPin(i)] = m
	}
	m, err := ebpf.LoadPinnedMap(filepath.Join(dir, pinHashGC), nil)
	if err != nil {
		return err
	}
	a.maps[pinHashGC] = m
	return nil
}

// hashlimitCarry is what a swap takes over from the running filter's
// hashlimit tables: the tables, by the new program's map names, and the
// next sweep time of each, by the new program's table index.
type hashlimitCarry struct {
	maps  map[string]*ebpf.Map
	sweep map[int]uint64
}

// carryHashLimit returns the running filter's hashlimit tables that the
// new program takes over. In the kernel a table is per network
// namespace, family and name; iptables-restore checks the new rules
// before it lets the old ones go, so a new rule naming a table finds it
// (hashlimit_mt_check_common: htable_find_get) and uses it with its
// entries, their buckets and its configuration (hinfo->cfg: mode, masks,
// rate, burst, expire, gcinterval, size, max), of which only upto/above
// comes from the new rule. A table whose configuration the new rules
// change would keep the old one in the kernel, for rules that say
// otherwise: bpfwall refuses the swap, at the new rule. A table no new
// rule names goes, and a new name starts empty, as in the kernel.
func carryHashLimit(p *codegen.Program, old *Active) (hashlimitCarry, error) {
	c := hashlimitCarry{maps: map[string]*ebpf.Map{}, sweep: map[int]uint64{}}
	if old == nil {
		return c, nil
	}
	olds := old.Meta.HashLimitMetas()
	for i, t := range codegen.HashLimitTables(p) {
		for j, o := range olds {
			if o.Name != t.Name {
				continue
			}
			n := hashlimitMeta(t)
			if n != o {
				return c, fmt.Errorf("%s: hashlimit table %q: the running filter's table has %s, and the kernel would keep that table, with its configuration, for these rules (iptables-restore finds it by name before the old rules let it go); unload the filter first, or give the table another --hashlimit-name, to start it anew", t.Pos, t.Name, hashlimitDiff(o, n))
			}
			m := old.maps[hashlimitPin(j)]
			if m == nil {
				return c, fmt.Errorf("hashlimit table %q of the running filter is not open", t.Name)
			}
			c.maps[t.Map] = m
			var next uint64
			if gc := old.maps[pinHashGC]; gc != nil {
				if err := gc.Lookup(uint32(j), &next); err != nil {
					return c, fmt.Errorf("read the sweep time of hashlimit table %q: %w", t.Name, err)
				}
			}
			c.sweep[i] = next
		}
	}
	return c, nil
}

// hashlimitDiff says how the running table's configuration o differs
// from the new rules' n, in the options that set it.
func hashlimitDiff(o, n HashLimitMeta) string {
	var d []string
	add := func(opt string, was, now any) {
		d = append(d, fmt.Sprintf("%s %v where these rules say %v", opt, was, now))
	}
	rate := func(m HashLimitMeta) string {
		if m.Bytes {
			return fmt.Sprintf("a byte rate of cost %d", m.Avg)
		}
		return fmt.Sprintf("a packet every %d µs", m.Avg)
	}
	if o.Bytes != n.Bytes || o.Avg != n.Avg {
		add("--hashlimit-upto/-above", rate(o), rate(n))
	}
	if o.Burst != n.Burst {
		add("--hashlimit-burst", o.Burst, n.Burst)
	}
	if o.Mode != n.Mode {
		add("--hashlimit-mode", fmt.Sprintf("%#x", o.Mode), fmt.Sprintf("%#x", n.Mode))
	}
	if o.SrcMask != n.SrcMask {
		add("--hashlimit-srcmask", o.SrcMask, n.SrcMask)
	}
	if o.DstMask != n.DstMask {
		add("--hashlimit-dstmask", o.DstMask, n.DstMask)
	}
	if o.Expire != n.Expire {
		add("--hashlimit-htable-expire (jiffies)", o.Expire, n.Expire)
	}
	if o.GCInterval != n.GCInterval {
		add("--hashlimit-htable-gcinterval (jiffies)", o.GCInterval, n.GCInterval)
	}
	if o.Max != n.Max {
		add("--hashlimit-htable-size/-max, entries:", o.Max, n.Max)
	}
	if len(d) == 0 {
		return "another configuration"
	}
	s := d[0]
	for _, x := range d[1:] {
		s += ", " + x
	}
	return s
}

// setSweeps gives the new program's tables the sweep times they carry:
// the kernel's collector keeps its schedule with the table.
func (l *Loaded) setSweeps(sweep map[int]uint64) error {
	if len(sweep) == 0 {
		return nil
	}
	gc := l.coll.Maps[abi.HashGCMap]
	if gc == nil {
		return errors.New("the program has no hashlimit sweep map")
	}
	for i, next := range sweep {
		if err := gc.Put(uint32(i), next); err != nil {
			return fmt.Errorf("hashlimit sweep time: %w", err)
		}
	}
	return nil
}

// checkHashLimitShared refuses a filter naming a hashlimit table that a
// filter of the same IP family on another hook of the namespace names
// too: the kernel has one table per namespace, family and name, and
// bpfwall one per filter.
func checkHashLimitShared(here Place, p *codegen.Program) error {
	tables := codegen.HashLimitTables(p)
	if len(tables) == 0 {
		return nil
	}
	others, err := otherFilters(here, "hashlimit tables")
	if err != nil {
		return err
	}
	fam := p.IR.Family.String()
	for _, o := range others {
		if o.meta.Family != fam {
			continue
		}
		theirs := o.meta.HashLimitMetas()
		for _, t := range tables {
			for _, h := range theirs {
				if h.Name == t.Name {
					return fmt.Errorf("%s: hashlimit table %q is also used by the %s filter (%s): netfilter has one table per network namespace, family and name, bpfwall one per filter", t.Pos, t.Name, o.hook, o.meta.File)
				}
			}
		}
	}
	return nil
}

// metaHashLimit is the meta's key of the program's hashlimit tables
// (feature "hashlimit").
const metaHashLimit = "hashlimit"

// HashLimitMetas are the hashlimit tables of the filter m describes, by
// index: each is pinned as hashlimitPin(index) (their sweep times as
// pinHashGC), and a swap hands it to the next program whose table of that
// name has the same configuration.
func (m *Meta) HashLimitMetas() []HashLimitMeta {
	return featureMeta[[]HashLimitMeta](m, metaHashLimit)
}
