package loader

import (
	"errors"
	"fmt"
	"maps"
	"os"
	"reflect"
	"runtime"
	"strconv"
	"strings"
	"unsafe"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/btf"
	"github.com/cilium/ebpf/ringbuf"
	"golang.org/x/sync/errgroup"
	"golang.org/x/sys/unix"

	"bpfwall/codegen"
	"bpfwall/codegen/abi"
	"bpfwall/internal/mapkv"
	"bpfwall/rules"
)

// Options control loading.
type Options struct {
	// VerifierLog keeps the verifier's complete log of a rejected program
	// (slower; the summary is always there).
	VerifierLog bool
	// Maps are maps to use instead of new ones, by the program's map
	// name: the state a swap keeps of the filter it replaces (see
	// feature.go), and the sk-lookup hook's SOCKHASH. None is nil.
	Maps map[string]*ebpf.Map
}

// Loaded is a compiled program loaded into the kernel, not attached.
type Loaded struct {
	Program *codegen.Program
	coll    *ebpf.Collection
	prog    *ebpf.Program
	// VerifiedInsns is the number of instructions the verifier processed.
	VerifiedInsns int
	logReader     *ringbuf.Reader // see Logged
	// nf and nfProg are the netfilter stage, when the program has one.
	nf     *ebpf.Collection
	nfProg *ebpf.Program
}

// verifierLimit is how many instructions the verifier processes before
// it gives up on a program (BPF_COMPLEXITY_LIMIT_INSNS).
const verifierLimit = 1_000_000

// ErrTooLarge is returned, wrapped, when the verifier gives up on a program
// because it is too large or too complex.
var ErrTooLarge = errors.New("program too large for the verifier")

// Load creates the maps and the program in the kernel; nothing is attached.
func Load(p *codegen.Program, opts Options) (*Loaded, error) {
	if err := preflight(p); err != nil {
		return nil, fmt.Errorf("load %s program: %w", p.Hook, err)
	}
	copts := ebpf.CollectionOptions{}
	if opts.VerifierLog {
		copts.Programs.LogLevel = ebpf.LogLevelBranch | ebpf.LogLevelStats
	}
	spec := p.Spec
	var kernel *btf.Spec
	if p.NeedsKernelBTF() {
		var err error
		if kernel, err = kernelBTF(); err != nil {
			return nil, fmt.Errorf("load %s program: it needs the kernel's BTF: %w", p.Hook, err)
		}
		if spec, err = p.KernelSpec(kernel); err != nil {
			return nil, fmt.Errorf("load %s program: %w", p.Hook, err)
		}
	}
	if len(opts.Maps) > 0 {
		copts.MapReplacements = opts.Maps
	}
	spec, contents := deferContents(spec, copts.MapReplacements)
	coll, err := ebpf.NewCollectionWithOptions(spec, copts)
	if err == nil {
		if err = fillContents(coll, contents, p.FlatContents); err != nil {
			coll.Close()
			return nil, fmt.Errorf("load %s program: %w", p.Hook, err)
		}
	}
	if err != nil {
		var verr *ebpf.VerifierError
		if errors.As(err, &verr) && tooLarge(verr) {
			if m, steps, total, ok := codegen.HeaviestRecent(p); ok && total > verifierLimit/4 {
				// The recent matches' loops are what the verifier
				// spent its steps on: name the costliest.
				return nil, fmt.Errorf("%s: recent match (a ring of %d stamps): load %s program: %w (%d rules): the program's recent matches cost the verifier about %d of its %d steps, this one about %d; use a lower --hitcount, or fewer recent rules with long rings: %w",
					m.Pos, m.Stamps, p.Hook, ErrTooLarge, len(p.IR.Rules), total, verifierLimit, steps, err)
			}
			return nil, fmt.Errorf("load %s program: %w (%d rules): %w", p.Hook, ErrTooLarge, len(p.IR.Rules), err)
		}
		return nil, fmt.Errorf("load %s program: %w", p.Hook, err)
	}
	l := &Loaded{Program: p, coll: coll, prog: coll.Programs[abi.ProgramName]}
	if l.prog == nil {
		coll.Close()
		return nil, fmt.Errorf("load %s program: collection has no program %q", p.Hook, abi.ProgramName)
	}
	if err := l.setRejectConfig(); err != nil {
		coll.Close()
		return nil, fmt.Errorf("load %s program: %w", p.Hook, err)
	}
	if p.Netfilter != nil {
		err := l.loadNetfilter(func() (*ebpf.CollectionSpec, error) { return p.Netfilter.KernelSpec(kernel) })
		if err != nil {
			coll.Close()
			return nil, fmt.Errorf("load %s program: %w", p.Hook, err)
		}
	}
	if info, err := l.prog.Info(); err == nil {
		if n, ok := info.VerifiedInstructions(); ok {
			l.VerifiedInsns = int(n)
		}
	}
	return l, nil
}

// setRejectConfig gives REJECT's replies the TTL and hop limit of the
// calling thread's network namespace: net.ipv4.ip_default_ttl, and
// net.ipv6.conf.default.hop_limit, which devices start with.
func (l *Loaded) setRejectConfig() error {
	m := l.coll.Maps[abi.RejectConfigMap]
	if m == nil {
		return nil
	}
	cfg := abi.DefaultRejectConfig
	path, to := "/proc/sys/net/ipv4/ip_default_ttl", &cfg.TTL
	if l.Program.IR.Family == rules.IPv6 {
		path, to = "/proc/sys/net/ipv6/conf/default/hop_limit", &cfg.HopLimit
	}
	for _, s := range []struct {
		path string
		to   *uint8
	}{{path, to}} {
		b, err := os.ReadFile(s.path)
		if err != nil {
			return fmt.Errorf("reject replies: %w", err)
		}
		v, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 8)
		if err != nil {
			return fmt.Errorf("reject replies: %s: %w", s.path, err)
		}
		*s.to = uint8(v)
	}
	if err := m.Put(uint32(0), cfg); err != nil {
		return fmt.Errorf("reject replies: %w", err)
	}
	return nil
}

// tooLarge reports whether the verifier rejected a program for its size.
func tooLarge(err *ebpf.VerifierError) bool {
	for _, line := range err.Log {
		if strings.Contains(line, "BPF program is too large") || strings.Contains(line, "too many states") {
			return true
		}
	}
	return errors.Is(err, errE2BIG)
}

// Close releases the program and its maps.
func (l *Loaded) Close() {
	if l.logReader != nil {
		l.logReader.Close()
	}
	if l.nf != nil {
		l.nf.Close()
	}
	l.coll.Close()
}

// Counters returns every rule's counters summed over CPUs, indexed by rule
// ID; the last entry counts the entry chain's policy.
func (l *Loaded) Counters() ([]abi.Counter, error) {
	return readCounters(l.coll.Maps[abi.CountersMap], len(l.Program.IR.Rules)+1)
}

// SetIface records which of the program's interface patterns the name of
// interface ifindex matches.
func (l *Loaded) SetIface(ifindex uint32, name string) error {
	if err := l.Program.PutIface(l.coll.Maps, ifindex, name); err != nil {
		return fmt.Errorf("set interface %s (%d): %w", name, ifindex, err)
	}
	return nil
}

// batchContents is the size from which a map's contents are written in
// batches after the collection is created, rather than one syscall per
// entry by cilium/ebpf: 100k classifier entries took half a second so.
const batchContents = 256

// deferContents returns spec without the contents of its large maps, and
// those contents, for fillContents. The program is not attached before
// they are in.
func deferContents(spec *ebpf.CollectionSpec, replaced map[string]*ebpf.Map) (*ebpf.CollectionSpec, map[string][]ebpf.MapKV) {
	var out map[string][]ebpf.MapKV
	for name, m := range spec.Maps {
		if replaced[name] != nil {
			continue // a map carried over keeps what it holds
		}
		// Read-only maps are frozen with their contents; per-CPU values
		// take another layout.
		if len(m.Contents) < batchContents || m.Flags&unix.BPF_F_RDONLY_PROG != 0 ||
			m.Type == ebpf.PerCPUArray || m.Type == ebpf.PerCPUHash || m.Type == ebpf.LRUCPUHash {
			continue
		}
		if !byteContents(m) {
			continue // cilium/ebpf marshals them
		}
		if out == nil {
			// A shallow copy: spec.Copy copied every map's contents and
			// the program's instructions (7 MB at 100k rules), where only
			// these maps change.
			cp := *spec
			cp.Maps = maps.Clone(spec.Maps)
			out, spec = make(map[string][]ebpf.MapKV), &cp
		}
		without := *m
		without.Contents = nil
		spec.Maps[name] = &without
		out[name] = m.Contents
	}
	return spec, out
}

// byteContents says whether every entry of m's contents is a key and a
// value of m's sizes as byte slices, what fillContents writes.
func byteContents(m *ebpf.MapSpec) bool {
	for _, kv := range m.Contents {
		k, ok1 := mapkv.Of(kv.Key)
		v, ok2 := mapkv.Of(kv.Value)
		if !ok1 || !ok2 || len(k) != int(m.KeySize) || len(v) != int(m.ValueSize) {
			return false
		}
	}
	return true
}

// fillContents writes contents into coll's maps, in batches of byte keys
// and values (what codegen's map contents are), a batch per CPU at once:
// the kernel's side of it, a hash or trie insert per entry, is most of
// the time a large rule set takes to load. A map whose contents view the
// arrays flat returns for it (codegen.Program.FlatContents) is written
// straight from them; any other's batches are each copied into arrays of
// their own when they start, so that no more than a batch per CPU is held
// twice (a copy of every map's contents at once was 61 MB of a 1M-rule
// load).
func fillContents(coll *ebpf.Collection, contents map[string][]ebpf.MapKV, flat func(name string) []mapkv.Flat) error {
	var g errgroup.Group
	g.SetLimit(runtime.GOMAXPROCS(0))
	// The batches already started finish before an error returns: the
	// caller closes the maps, whose descriptors could be another's.
	fail := func(err error) error {
		g.Wait()
		return err
	}
	for name, kvs := range contents {
		m := coll.Maps[name]
		if m == nil {
			return fail(fmt.Errorf("map %s: not in the collection", name))
		}
		ks, vs := int(m.KeySize()), int(m.ValueSize())
		// cilium/ebpf counts a batch by its slices' elements: keys and
		// values are slices of byte arrays of the map's sizes.
		keyType := reflect.ArrayOf(ks, reflect.TypeFor[byte]())
		valType := reflect.ArrayOf(vs, reflect.TypeFor[byte]())
		write := func(keys, vals []byte) error {
			n := len(keys) / ks
			err := batchUpdate(m,
				reflect.SliceAt(keyType, unsafe.Pointer(unsafe.SliceData(keys)), n).Interface(),
				reflect.SliceAt(valType, unsafe.Pointer(unsafe.SliceData(vals)), n).Interface(),
				func(i int) error { return m.Put(keys[i*ks:(i+1)*ks], vals[i*vs:(i+1)*vs]) })
			if err != nil {
				return fmt.Errorf("map %s: %w", name, err)
			}
			return nil
		}
		if flats := flat(name); viewsOf(flats, kvs, ks, vs) {
			for _, f := range flats {
				for off := 0; off < f.Len(); off += counterBatch {
					n := min(counterBatch, f.Len()-off)
					g.Go(func() error { return write(f.Keys[off*ks:(off+n)*ks], f.Values[off*vs:(off+n)*vs]) })
				}
			}
			continue
		}
		for _, kv := range kvs {
			k, ok1 := mapkv.Of(kv.Key)
			v, ok2 := mapkv.Of(kv.Value)
			if !ok1 || !ok2 || len(k) != ks || len(v) != vs {
				return fail(fmt.Errorf("map %s: contents are not %d- and %d-byte slices", name, ks, vs))
			}
		}
		// Every entry has its own key: the batches are independent.
		for off := 0; off < len(kvs); off += counterBatch {
			batch := kvs[off:min(off+counterBatch, len(kvs))]
			g.Go(func() error {
				keys := make([]byte, len(batch)*ks)
				vals := make([]byte, len(batch)*vs)
				for i, kv := range batch {
					copy(keys[i*ks:], mapkv.MustOf(kv.Key))
					copy(vals[i*vs:], mapkv.MustOf(kv.Value))
				}
				return write(keys, vals)
			})
		}
	}
	return g.Wait()
}

// viewsOf reports whether flats, in turn, are what kvs view, with keys
// and values of ks and vs bytes.
func viewsOf(flats []mapkv.Flat, kvs []ebpf.MapKV, ks, vs int) bool {
	if len(flats) == 0 {
		return false
	}
	off := 0
	for _, f := range flats {
		n := f.Len()
		if f.KeySize != ks || f.ValueSize != vs || off+n > len(kvs) || !f.Views(kvs[off:off+n]) {
			return false
		}
		off += n
	}
	return off == len(kvs)
}

// batchUpdate writes keys and values, slices of byte arrays, into m in one
// batch, or with put entry by entry where the kernel has no batches.
func batchUpdate(m *ebpf.Map, keys, vals any, put func(i int) error) error {
	_, err := m.BatchUpdate(keys, vals, nil)
	if errors.Is(err, ebpf.ErrNotSupported) {
		for i := range reflect.ValueOf(keys).Len() {
			if err := put(i); err != nil {
				return err
			}
		}
		return nil
	}
	return err
}
