package loader

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/cilium/ebpf"

	"bpfwall/codegen"
	"bpfwall/codegen/abi"
	"bpfwall/ir"
)

// recentParametersDir holds xt_recent's module parameters, when the module
// is loaded or built in.
const recentParametersDir = "/sys/module/xt_recent/parameters"

// checkRecentParameters refuses a kernel whose xt_recent remembers another
// number of addresses per table (ip_list_tot) or of packets per address
// (ip_pkt_list_tot) than the defaults bpfwall's recent tables are built
// for. Without the module there is nothing to differ from.
func checkRecentParameters(dir string) error {
	for _, p := range []struct {
		name string
		want int
	}{{"ip_list_tot", ir.RecentListTot}, {"ip_pkt_list_tot", ir.RecentPktListTot}} {
		b, err := os.ReadFile(filepath.Join(dir, p.name))
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return fmt.Errorf("read xt_recent's %s: %w", p.name, err)
		}
		v, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil {
			return fmt.Errorf("read xt_recent's %s: %q is not a number", p.name, b)
		}
		if v != p.want {
			return fmt.Errorf("xt_recent's %s is %d in this kernel, bpfwall's recent tables are built for %d", p.name, v, p.want)
		}
	}
	return nil
}

// modprobeDirs are where modprobe reads its configuration, a file of one
// name in an earlier directory hiding those of that name in later ones
// (modprobe.d(5)).
var modprobeDirs = []string{"/etc/modprobe.d", "/run/modprobe.d", "/usr/local/lib/modprobe.d", "/lib/modprobe.d", "/usr/lib/modprobe.d"}

// checkRecentConfig refuses what would give xt_recent other parameters
// than bpfwall's the next time the module loads (it is loaded on demand,
// by the first rule naming -m recent, and checkRecentParameters cannot
// see a module not yet loaded): an "options xt_recent" line of modprobe's
// configuration in dirs, or xt_recent.PARAM=VALUE on the kernel's command
// line (the file cmdline), with ip_list_tot or ip_pkt_list_tot other than
// the defaults.
func checkRecentConfig(dirs []string, cmdline string) error {
	check := func(where, param, value string) error {
		want := -1
		switch strings.ReplaceAll(param, "-", "_") {
		case "ip_list_tot":
			want = ir.RecentListTot
		case "ip_pkt_list_tot":
			want = ir.RecentPktListTot
		}
		if want < 0 {
			return nil
		}
		if v, err := strconv.Atoi(value); err != nil || v != want {
			return fmt.Errorf("%s sets xt_recent's %s to %s, bpfwall's recent tables are built for %d", where, param, value, want)
		}
		return nil
	}
	isRecent := func(module string) bool { return strings.ReplaceAll(module, "-", "_") == "xt_recent" }

	seen := make(map[string]bool)
	for _, dir := range dirs {
		files, err := filepath.Glob(filepath.Join(dir, "*.conf"))
		if err != nil {
			return err
		}
		for _, path := range files {
			if seen[filepath.Base(path)] {
				continue
			}
			seen[filepath.Base(path)] = true
			b, err := os.ReadFile(path)
			if err != nil {
				return fmt.Errorf("read modprobe configuration: %w", err)
			}
			// A line ending in a backslash goes on on the next.
			lines := strings.Split(string(b), "\n")
			for i := 0; i < len(lines); i++ {
				start, line := i+1, lines[i]
				for strings.HasSuffix(line, "\\") && i+1 < len(lines) {
					i++
					line = strings.TrimSuffix(line, "\\") + " " + lines[i]
				}
				f := strings.Fields(line)
				if len(f) < 3 || f[0] != "options" || !isRecent(f[1]) {
					continue
				}
				for _, opt := range f[2:] {
					param, value, _ := strings.Cut(opt, "=")
					if err := check(fmt.Sprintf("%s:%d", path, start), param, strings.Trim(value, `"`)); err != nil {
						return err
					}
				}
			}
		}
	}
	b, err := os.ReadFile(cmdline)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("read the kernel's command line: %w", err)
	}
	for _, arg := range strings.Fields(string(b)) {
		if arg == "--" {
			break // what follows is init's
		}
		name, value, _ := strings.Cut(arg, "=")
		module, param, ok := strings.Cut(name, ".")
		if !ok || !isRecent(module) {
			continue
		}
		if err := check("the kernel's command line", param, strings.Trim(value, `"`)); err != nil {
			return err
		}
	}
	return nil
}

// recentPinPrefix + the table's index names a recent table's pin in its
// filter's directory.
const recentPinPrefix = "recent_"

func recentPin(i int) string { return recentPinPrefix + strconv.Itoa(i) }

// recentMetas describes p's recent tables for its Meta.
func recentMetas(p *codegen.Program) []RecentMeta {
	var out []RecentMeta
	for _, t := range codegen.RecentTables(p) {
		out = append(out, RecentMeta{Name: t.Name, Stamps: t.Stamps, Mask: t.Mask.String()})
	}
	return out
}

// openRecentPins opens the pinned recent tables the Meta lists.
func (a *Active) openRecentPins(dir string) error {
	for i := range a.Meta.RecentMetas() {
		m, err := ebpf.LoadPinnedMap(filepath.Join(dir, recentPin(i)), nil)
		if err != nil {
			return err
		}
		a.maps[recentPin(i)] = m
	}
	return nil
}

// recentCarry returns the running filter's recent tables that the new
// program takes over, by the new program's map names: xt_recent's table
// survives iptables-restore when a new rule names it (recent_mt_check
// finds it before the old rules let it go), with its entries, unless a
// new rule needs a longer ring, for which the kernel flushes it. Where
// the kernel would keep a table whose mask or ring the new program does
// not have, the swap is refused.
func recentCarry(p *codegen.Program, old *Active) (map[string]*ebpf.Map, error) {
	if old == nil {
		return nil, nil
	}
	out := make(map[string]*ebpf.Map)
	olds := old.Meta.RecentMetas()
	for _, t := range codegen.RecentTables(p) {
		for j, o := range olds {
			if o.Name != t.Name {
				continue
			}
			switch {
			case o.Stamps == t.Stamps && o.Mask == t.Mask.String():
				out[t.Map] = old.maps[recentPin(j)]
			case o.Mask != t.Mask.String():
				return nil, fmt.Errorf("recent table %q: the running filter's table has --mask %s, which the kernel keeps for the new rules' --mask %s; unload the filter first to start the table anew", t.Name, o.Mask, t.Mask)
			case o.Stamps > t.Stamps:
				return nil, fmt.Errorf("recent table %q: the running filter's table keeps %d stamps per address, which the kernel keeps for the new rules (%d); unload the filter first to start the table anew", t.Name, o.Stamps, t.Stamps)
			}
			// A longer ring: the kernel flushes the table.
		}
	}
	return out, nil
}

// checkRecentShared refuses a filter naming a recent table that a filter
// of another hook of the namespace names too: the kernel has one table
// per namespace and name, for every hook and both IP families, and
// bpfwall one per filter.
func checkRecentShared(here Place, p *codegen.Program) error {
	tables := codegen.RecentTables(p)
	if len(tables) == 0 {
		return nil
	}
	others, err := otherFilters(here, "recent tables")
	if err != nil {
		return err
	}
	for _, o := range others {
		theirs := o.meta.RecentMetas()
		for _, t := range tables {
			for _, r := range theirs {
				if r.Name == t.Name {
					return fmt.Errorf("recent table %q is also used by the %s filter (%s, %s): netfilter has one table per network namespace and name, bpfwall one per filter", t.Name, o.hook, o.meta.File, o.meta.Family)
				}
			}
		}
	}
	return nil
}

// otherFilter is another filter of a namespace: where it runs, and its
// Meta.
type otherFilter struct {
	hook codegen.Hook
	meta Meta
}

// otherFilters returns the other filters of here's namespace, for a check
// of what (the tables two filters may not share). A filter whose pins
// cannot be read may still run and name the same tables: an error; one
// unloaded meanwhile is passed over.
func otherFilters(here Place, what string) ([]otherFilter, error) {
	places, err := Places(here.Root, here.NetNS)
	if err != nil {
		return nil, err
	}
	var out []otherFilter
	for _, pl := range places {
		// The chains of one family at their netfilter hooks are swapped
		// as one, with the state netfilter shares between them shared
		// (SwapAll); the other family's are other filters.
		if pl.Hook == here.Hook && (pl.Hook != codegen.HookNetfilter || pl.Family == here.Family) {
			continue
		}
		a, err := Open(pl)
		if err != nil {
			if _, serr := os.Stat(filepath.Join(pl.Dir(), pinProgram)); errors.Is(serr, fs.ErrNotExist) {
				continue // unloaded meanwhile: nothing to share
			}
			return nil, fmt.Errorf("%s: the %s filter of the namespace cannot be read, and may name the same tables: %w; unload it first", what, pl.Hook, err)
		}
		out = append(out, otherFilter{pl.Hook, a.Meta})
		a.Close()
	}
	return out, nil
}

// RecentTableState is what status says about a filter's recent table.
type RecentTableState struct {
	Name    string `json:"name"`
	Entries int    `json:"entries"` // addresses listed, at most ir.RecentListTot
}

// RecentTables reads the filter's recent tables.
func (a *Active) RecentTables() ([]RecentTableState, error) {
	var out []RecentTableState
	for i, t := range a.Meta.RecentMetas() {
		m := a.maps[recentPin(i)]
		value := make([]byte, m.ValueSize())
		if err := m.Lookup(uint32(0), &value); err != nil {
			return nil, fmt.Errorf("read recent table %q: %w", t.Name, err)
		}
		out = append(out, RecentTableState{Name: t.Name, Entries: len(abi.RecentSlots(value, t.Stamps))})
	}
	return out, nil
}

// RecentEntries reads the addresses the filter's recent table name lists,
// least recently updated first.
func (a *Active) RecentEntries(name string) ([]abi.RecentSlot, error) {
	for i, t := range a.Meta.RecentMetas() {
		if t.Name != name {
			continue
		}
		m := a.maps[recentPin(i)]
		value := make([]byte, m.ValueSize())
		if err := m.Lookup(uint32(0), &value); err != nil {
			return nil, fmt.Errorf("read recent table %q: %w", t.Name, err)
		}
		return abi.RecentSlots(value, t.Stamps), nil
	}
	return nil, fmt.Errorf("no recent table %q", name)
}

// metaRecent is the meta's key of the program's recent tables (feature
// "recent").
const metaRecent = "recent"

// RecentMetas are the recent tables of the filter m describes, by index:
// each is pinned as recentPin(index), and a swap hands it to the next
// program whose table of that name has the same ring and mask.
func (m *Meta) RecentMetas() []RecentMeta { return featureMeta[[]RecentMeta](m, metaRecent) }
