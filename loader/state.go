package loader

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
	"unsafe"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"

	"bpfwall/codegen"
	"bpfwall/codegen/abi"
	"bpfwall/ir"
	"bpfwall/rules"
)

// Meta is what bpfwall keeps beside a filter's program for status and
// save: the rule set it was compiled from and how it was loaded.
type Meta struct {
	Table string `json:"table"`
	Chain string `json:"chain"` // the entry chain
	File  string `json:"file"`  // where the rule set was read from
	// Source is the rule set as iptables-save -c prints it. The counters of
	// rules compiled into the program are the kernel's; the others keep
	// the counters they were read with. A meta a MetaSource makes holds
	// it as blocks (text), packed after MetaSource.Pack, which a swap
	// writes to the meta map as they are.
	Source string `json:"source"`
	// Lines holds the line in Source of each rule of the program, by rule
	// ID.
	Lines []int `json:"lines"`
	// Sets are the ipsets the rules may name, as ipset save prints them
	// (rules.SaveSets), for reading Source back.
	Sets string `json:"sets,omitempty"`
	// Origins holds where each rule of the program was written, by rule
	// ID, as FILE:LINE (empty in pins of older versions): what metrics
	// and traces name a rule by.
	Origins       []string  `json:"origins,omitempty"`
	LoadedAt      time.Time `json:"loaded_at"`
	VerifiedInsns int       `json:"verified_insns"`
	// Level is the optimization level the program was compiled at ("-O0"
	// or "-O1"; empty in pins of older versions), Instructions its size
	// as compiled.
	Level        string  `json:"level,omitempty"`
	Instructions int     `json:"instructions,omitempty"`
	Ifaces       []Iface `json:"ifaces"`
	// Family is the IP family the program filters ("ipv4" or "ipv6"); the
	// other family's packets pass it. Empty in pins of older versions.
	Family string `json:"family,omitempty"`
	// Pins are the names of the pins the swap that loaded the program made
	// (the links of interfaces attached before it stay too; empty in pins
	// of older versions): a swap removes the others (see dropOldPins).
	Pins []string `json:"pins,omitempty"`

	// text is Source, in a meta a MetaSource made (Source is empty
	// then).
	text *lineBlocks
	// features holds what each feature records of the program (its
	// LOG rules, recent and hashlimit tables, upper devices, conntrack),
	// as JSON by the feature's key (feature.key): the meta's JSON has
	// them beside the fields above. Each feature reads its own with an
	// accessor in its file (LogRules, RecentMetas, ...).
	features map[string]json.RawMessage
}

// featureMeta is what feature key recorded in m, decoded into a T; the
// zero T when it recorded nothing, or what it recorded does not decode
// (a pin of a version whose record had another type).
func featureMeta[T any](m *Meta, key string) T {
	var v T
	if raw, ok := m.features[key]; ok {
		if err := json.Unmarshal(raw, &v); err != nil {
			var zero T
			return zero
		}
	}
	return v
}

// setFeature records v, as JSON, under feature key in m; nil removes it.
// m's features are its own afterwards: a copy of the meta keeps its own.
func (m *Meta) setFeature(key string, v any) error {
	features := maps.Clone(m.features)
	if features == nil {
		features = make(map[string]json.RawMessage)
	}
	if v == nil {
		delete(features, key)
	} else {
		raw, err := json.Marshal(v)
		if err != nil {
			return err
		}
		features[key] = raw
	}
	m.features = features
	return nil
}

// RecentMeta describes a pinned recent table.
type RecentMeta struct {
	Name   string `json:"name"`
	Stamps int    `json:"stamps"`
	Mask   string `json:"mask"`
}

// Iface is an interface a filter is attached to.
type Iface struct {
	Index int    `json:"index"`
	Name  string `json:"name"`
	// Mode is how an XDP program is attached (native or generic); empty
	// for tcx.
	Mode string `json:"mode,omitempty"`
}

// NewMeta describes p, compiled from rs read from file, and returns the
// counters its rules start with: those rs holds for them.
func NewMeta(rs *rules.Ruleset, p *codegen.Program, file string) (Meta, []abi.Counter, error) {
	return NewMetaSource(rs).Meta(p, file)
}

// A MetaSource is what the metas of the programs compiled from a rule set
// take from it: the rule set as iptables-save prints it, where each rule
// is in that text, and the counters. A restore makes it once for all its
// chains, and need not keep the parsed rule set while it compiles.
type MetaSource struct {
	// text is the rule set as iptables-save prints it.
	text *lineBlocks
	sets string
	// all holds the rules in the order Source prints them, each with its
	// position; byPos orders them by position, stably, and is nil when
	// that is their order already (an input iptables-save wrote). A map
	// by position was 100 bytes a rule, a tenth of a million-rule
	// restore's memory. An nft statement that does not end its rule
	// (log) splits it into model rules at one position: they keep their
	// order in the saved rule set and in the program, and pair in that
	// order.
	all   []placed
	byPos []int32
	// counters are the rules' counters, by index in all; nil when every
	// rule's are zero, as they are in a rule set saved without -c (16
	// bytes a rule, which most inputs do not need).
	counters []rules.Counters
	// files numbers the files the positions name.
	files map[string]uint32
	// policies are the chains' own counters (their policies'), and
	// decls the lines that declare them, by table and chain.
	policies map[[2]string]rules.Counters
	decls    map[[2]string]int
}

// placeKey is a rules.Pos in 16 bytes: its file by number.
type placeKey struct {
	file, col uint32
	line      int64
}

// keyOf is the key of pos, in the file numbered file. (A column is a
// byte of a line.)
func keyOf(file uint32, pos rules.Pos) placeKey {
	return placeKey{file, uint32(pos.Col), int64(pos.Line)}
}

func (k placeKey) compare(o placeKey) int {
	if c := cmp.Compare(k.file, o.file); c != 0 {
		return c
	}
	if c := cmp.Compare(k.line, o.line); c != 0 {
		return c
	}
	return cmp.Compare(k.col, o.col)
}

type placed struct {
	pos placeKey
	// line is the rule's line in the saved rule set, from 1.
	line int32
}

// counter returns the counters of the i-th rule in all.
func (s *MetaSource) counter(i int) rules.Counters {
	if i < len(s.counters) {
		return s.counters[i]
	}
	return rules.Counters{}
}

// NewMetaSource reads what the metas of programs compiled from rs need.
func NewMetaSource(rs *rules.Ruleset) *MetaSource {
	n := rs.NumRules()
	saved := rs.Save(rules.SaveOptions{Counters: true})
	s := &MetaSource{
		all:      make([]placed, 0, n),
		files:    make(map[string]uint32),
		policies: make(map[[2]string]rules.Counters),
		decls:    make(map[[2]string]int),
	}
	if len(rs.Sets) > 0 {
		s.sets = string(rules.SaveSets(rs.Sets))
	}
	line := 0 // as rules.Ruleset.Save prints them
	sorted := true
	for _, t := range rs.Tables {
		chains := t.SaveOrder()
		for i, c := range chains {
			s.decls[[2]string{t.Name, c.Name}] = line + 2 + i
		}
		line += 1 + len(chains)
		for _, c := range chains {
			s.policies[[2]string{t.Name, c.Name}] = c.Counters
			for _, r := range c.Rules {
				line++
				file, ok := s.files[r.Pos.File]
				if !ok {
					file = uint32(len(s.files))
					s.files[r.Pos.File] = file
				}
				pl := placed{pos: keyOf(file, r.Pos), line: int32(line)}
				if r.Counters != (rules.Counters{}) {
					if s.counters == nil {
						s.counters = make([]rules.Counters, n)
					}
					s.counters[len(s.all)] = r.Counters
				}
				if k := len(s.all); k > 0 && s.all[k-1].pos.compare(pl.pos) > 0 {
					sorted = false
				}
				s.all = append(s.all, pl)
			}
		}
		line++ // COMMIT
	}
	if !sorted {
		s.byPos = make([]int32, len(s.all))
		for i := range s.byPos {
			s.byPos[i] = int32(i)
		}
		slices.SortStableFunc(s.byPos, func(a, b int32) int { return s.all[a].pos.compare(s.all[b].pos) })
	}
	s.text = newLineBlocks(saved)
	return s
}

// Pack packs the rule set s holds, for a caller that keeps s while it
// compiles, as a restore does: at bench's realistic 1M it is 76 MB of
// text and 12 MB packed, and packing it takes about 0.4 s (a restore
// spends them on its other CPU while the chains lower); the meta map
// stores the packed blocks. Pack must return before s is used.
func (s *MetaSource) Pack() { s.text.pack() }

// at returns the rules at pos, in the order Source prints them: the
// indexes of all from byPos[lo] to byPos[hi-1] (or all[lo:hi]).
func (s *MetaSource) at(pos rules.Pos) (lo, hi int) {
	file, ok := s.files[pos.File]
	if !ok {
		return 0, 0
	}
	key := keyOf(file, pos)
	keyAt := func(i int) placeKey { return s.all[s.index(i)].pos }
	lo = sort.Search(len(s.all), func(i int) bool { return keyAt(i).compare(key) >= 0 })
	hi = lo
	for hi < len(s.all) && keyAt(hi) == key {
		hi++
	}
	return lo, hi
}

// index is the index in all of the i-th rule by position.
func (s *MetaSource) index(i int) int {
	if s.byPos == nil {
		return i
	}
	return int(s.byPos[i])
}

// Meta describes p, compiled from the rule set read from file, and
// returns the counters its rules start with: those the rule set holds
// for them.
func (s *MetaSource) Meta(p *codegen.Program, file string) (Meta, []abi.Counter, error) {
	m := s.program(p, file)
	counters := make([]abi.Counter, len(p.IR.Rules)+1)
	placedAt, err := s.pair(p.IR)
	if err != nil {
		return Meta{}, nil, err
	}
	// The origins, FILE:LINE, are views of one buffer, made its size at
	// once: grown by appends and then copied into a string, it left
	// three times its size in garbage (80 MB at 1M rules).
	size := 0
	for _, r := range p.IR.Rules {
		size += len(r.Pos.File) + 1 + decimalLen(r.Pos.Line)
	}
	origins := make([]byte, 0, size)
	for _, r := range p.IR.Rules {
		pl := s.all[placedAt[r.ID]]
		c := s.counter(int(placedAt[r.ID]))
		m.Lines[r.ID] = int(pl.line)
		start := len(origins)
		origins = append(origins, r.Pos.File...)
		origins = append(origins, ':')
		origins = strconv.AppendInt(origins, int64(r.Pos.Line), 10)
		// Nothing writes to the buffer's bytes again, and they stay
		// where they are (an append past its size would move the rest,
		// not these).
		m.Origins[r.ID] = unsafe.String(unsafe.SliceData(origins[start:]), len(origins)-start)
		counters[r.ID] = abi.Counter{Packets: c.Packets, Bytes: c.Bytes}
	}
	if c, ok := s.policies[[2]string{m.Table, m.Chain}]; ok {
		counters[len(p.IR.Rules)] = abi.Counter{Packets: c.Packets, Bytes: c.Bytes}
	}
	return m, counters, nil
}

// decimalLen is how many characters strconv.Itoa(n) has.
func decimalLen(n int) int {
	l := 1
	if n < 0 {
		l, n = 2, -n
	}
	for ; n >= 10; n /= 10 {
		l++
	}
	return l
}

// pair returns, by rule ID, the index in all of each rule of p: the
// first rule at its position not paired yet.
func (s *MetaSource) pair(p *ir.Program) ([]int32, error) {
	out := make([]int32, len(p.Rules))
	paired := make([]bool, len(s.all))
	for _, r := range p.Rules {
		i := -1
		for lo, hi := s.at(r.Pos); lo < hi && i < 0; lo++ {
			if !paired[s.index(lo)] {
				i = s.index(lo)
			}
		}
		if i < 0 {
			return nil, fmt.Errorf("describe rule set: cannot place rule %d (%s) in the saved rule set", r.ID, r.Pos)
		}
		paired[i] = true
		out[r.ID] = int32(i)
	}
	return out, nil
}

// Texts gives p, lowered with ir.LowerOptions NoText, the texts of its
// rules (ir.Program.Texts): a rule's line in the saved rule set, as
// rules.Rule.Spec would print it, unpacked when it is asked for. Few are
// in a large restore (the notes of the rules compiled as code, and the
// rules a swap pairs by text), and the rule set stays packed (Pack).
func (s *MetaSource) Texts(p *ir.Program) error {
	placedAt, err := s.pair(p)
	if err != nil {
		return err
	}
	lines := make([]int32, len(placedAt))
	for id, i := range placedAt {
		lines[id] = s.all[i].line
	}
	p.Texts = func(id int) string {
		line, ok, err := s.text.line(int(lines[id]))
		if err != nil || !ok {
			// The lines were counted in the text packed here.
			panic(fmt.Sprintf("loader: rule %d: line %d of the saved rule set: %v", id, lines[id], err))
		}
		// A copy: a view would keep the line's block unpacked.
		return strings.Clone(parseRuleLine(line).text)
	}
	return nil
}

// program is the Meta of p, read from file, without its rules' lines and
// origins and its stateful features.
func (s *MetaSource) program(p *codegen.Program, file string) Meta {
	return Meta{
		Table:        p.IR.Table,
		Chain:        p.IR.Chains[0].Name,
		File:         file,
		text:         s.text,
		Sets:         s.sets,
		Lines:        make([]int, len(p.IR.Rules)),
		Origins:      make([]string, len(p.IR.Rules)),
		Family:       p.IR.Family.String(),
		Level:        p.Level.String(),
		Instructions: p.Size(),
	}
}

// AcceleratorMeta describes p, an accelerator compiled from the rule set
// (codegen.Accelerator). A rule has the line and origin of the rule it
// was made from (a user chain's rules as often as the accelerator copies
// the chain), a chain's policy the line that declares the chain (and no
// origin), and the other rules the accelerator adds none (0, ""). Its
// counters count what it dropped, from zero: what the chains would have
// counted of it.
func (s *MetaSource) AcceleratorMeta(p *codegen.Program, file string) Meta {
	m := s.program(p, file)
	for _, r := range p.IR.Rules {
		if chain, ok := codegen.AcceleratorPolicy(p.IR, r); ok {
			m.Lines[r.ID] = s.decls[[2]string{p.IR.Table, chain}]
		} else if lo, hi := s.at(r.Pos); lo < hi && r.Pos != (rules.Pos{}) {
			m.Lines[r.ID] = int(s.all[s.index(lo)].line)
			m.Origins[r.ID] = r.Pos.File + ":" + strconv.Itoa(r.Pos.Line)
		}
	}
	return m
}

// ruleKey identifies a rule across rule sets: its chain and its text.
type ruleKey struct{ chain, text string }

// keys returns the key of each rule of the program, by rule ID, read from
// its line in Source.
func (m *Meta) keys() []ruleKey {
	lines := strings.Split(m.Source, "\n")
	out := make([]ruleKey, len(m.Lines))
	for id, n := range m.Lines {
		if n < 1 || n > len(lines) {
			continue
		}
		out[id] = parseRuleLine(lines[n-1])
	}
	return out
}

// parseRuleLine splits "[p:b] -A CHAIN spec" into its chain and spec.
func parseRuleLine(s string) ruleKey {
	if strings.HasPrefix(s, "[") {
		if i := strings.Index(s, "] "); i >= 0 {
			s = s[i+2:]
		}
	}
	s = strings.TrimPrefix(s, "-A ")
	chain, text, _ := strings.Cut(s, " ")
	return ruleKey{chain, text}
}

// programKeys returns the key of each rule of p, by rule ID.
func programKeys(p *codegen.Program) []ruleKey {
	out := make([]ruleKey, len(p.IR.Rules))
	for _, r := range p.IR.Rules {
		out[r.ID] = ruleKey{p.IR.Chains[r.Chain].Name, p.IR.TextOf(r)}
	}
	return out
}

// pairRules pairs each rule of the new program with the old rule it
// continues, or -1: a rule continues the old rule of the same chain with
// the same text; when a chain has several such rules, they pair in order.
// The policy entry (the last) pairs when the entry chain is the same.
// This is how a counter follows its rule when rules are inserted,
// deleted or moved around it.
func pairRules(old *Meta, p *codegen.Program) []int {
	byKey := make(map[ruleKey][]int)
	for id, k := range old.keys() {
		byKey[k] = append(byKey[k], id)
	}
	keys := programKeys(p)
	out := make([]int, len(keys)+1)
	for id, k := range keys {
		out[id] = -1
		if ids := byKey[k]; len(ids) > 0 {
			out[id], byKey[k] = ids[0], ids[1:]
		}
	}
	out[len(keys)] = -1
	if old.Table == p.IR.Table && old.Chain == p.IR.Chains[0].Name {
		out[len(keys)] = len(old.Lines)
	}
	return out
}

// Active is a filter found in bpffs: the program attached at one hook of
// a network namespace, with its maps, links and Meta.
type Active struct {
	Place   Place
	Meta    Meta
	Program *ebpf.Program
	// Links are the pinned links, by ifindex.
	Links    map[int]link.Link
	counters *ebpf.Map
	base     *ebpf.Map
	// maps are all the pinned maps, by pin name, kept open so that a swap
	// can put their pins back if it fails after replacing some.
	maps map[string]*ebpf.Map
	// nfLink is the netfilter stage's link, if the filter has one.
	nfLink link.Link
	// dispatcher is the program a chain's netfilter link runs, and
	// maps[pinDispatch] its slot (nfchain.go); nil at other hooks.
	dispatcher *ebpf.Program
}

// Open opens the filter pinned at p. The error wraps os.ErrNotExist when
// there is none.
func Open(p Place) (*Active, error) { return open(p, false) }

// openToReplace is Open for a swap, which reads only the head of the
// filter's meta: not its rule set, lines and origins (readMetaHead). The
// Active it returns cannot be snapshotted or have its meta written back.
func openToReplace(p Place) (*Active, error) { return open(p, true) }

func open(p Place, head bool) (*Active, error) {
	dir := p.Dir()
	a := &Active{Place: p, Links: make(map[int]link.Link), maps: make(map[string]*ebpf.Map)}
	var err error
	if a.Program, err = ebpf.LoadPinnedProgram(filepath.Join(dir, pinProgram), nil); err != nil {
		return nil, fmt.Errorf("open %s filter: %w", p.Hook, err)
	}
	if err := a.open(dir, head); err != nil {
		a.Close()
		return nil, fmt.Errorf("open %s filter: %w", p.Hook, err)
	}
	return a, nil
}

func (a *Active) open(dir string, head bool) error {
	for _, name := range mapPins {
		m, err := ebpf.LoadPinnedMap(filepath.Join(dir, name), nil)
		if err != nil {
			return err
		}
		a.maps[name] = m
	}
	if err := a.openLogPins(dir); err != nil {
		return err
	}
	if err := a.openNetfilterPins(dir); err != nil {
		return err
	}
	if err := a.openDispatchPins(dir); err != nil {
		return err
	}
	a.counters, a.base = a.maps[pinCounters], a.maps[pinBase]
	var err error
	read := readMeta
	if head {
		read = readMetaHead
	}
	if a.Meta, err = read(a.maps[pinMeta]); err != nil {
		return err
	}
	if err := a.openRecentPins(dir); err != nil {
		return err
	}
	if err := a.openHashLimitPins(dir); err != nil {
		return err
	}
	idxs, err := linkPins(dir)
	if err != nil {
		return err
	}
	for _, i := range idxs {
		l, err := link.LoadPinnedLink(linkPin(dir, i), nil)
		if err != nil {
			return err
		}
		a.Links[i] = l
	}
	return nil
}

// Close releases the file descriptors; the pinned filter stays.
func (a *Active) Close() error {
	for _, l := range a.Links {
		l.Close()
	}
	if a.nfLink != nil {
		a.nfLink.Close()
	}
	if a.dispatcher != nil {
		a.dispatcher.Close()
	}
	if a.Program != nil {
		a.Program.Close()
	}
	for _, m := range a.maps {
		m.Close()
	}
	return nil
}

// Counters returns every rule's counters, by rule ID, summed over CPUs
// and added to those carried over from earlier programs; the last entry
// counts the entry chain's policy.
func (a *Active) Counters() ([]abi.Counter, error) {
	// The two maps are read at once: at 100k rules each read is 30 ms
	// of the kernel copying entries out, on the path to a swap.
	var base []abi.Counter
	var baseErr error
	done := make(chan struct{})
	go func() {
		defer close(done)
		base, baseErr = readBase(a.base)
	}()
	live, err := readCounters(a.counters, int(a.base.MaxEntries()))
	<-done
	if err != nil {
		return nil, err
	}
	if baseErr != nil {
		return nil, baseErr
	}
	if len(base) != len(live) {
		return nil, fmt.Errorf("read counters: %d carried over for %d rules", len(base), len(live))
	}
	for i := range live {
		live[i].Packets += base[i].Packets
		live[i].Bytes += base[i].Bytes
	}
	return live, nil
}

// Snapshot is a filter's counters at one moment, with what they count.
type Snapshot struct {
	Program  ebpf.ProgramID
	Meta     Meta
	Counters []abi.Counter
}

// Snapshot reads the filter's counters.
func (a *Active) Snapshot() (*Snapshot, error) {
	info, err := a.Program.Info()
	if err != nil {
		return nil, fmt.Errorf("snapshot %s filter: %w", a.Place.Hook, err)
	}
	id, _ := info.ID()
	c, err := a.Counters()
	if err != nil {
		return nil, fmt.Errorf("snapshot %s filter: %w", a.Place.Hook, err)
	}
	return &Snapshot{Program: id, Meta: a.Meta, Counters: c}, nil
}

// Apply sets the counters of the compiled rules and of the entry chain's
// policy in rs, a parse of s.Meta.Source, to the snapshot's.
func (s *Snapshot) Apply(rs *rules.Ruleset) error {
	t := rs.Table(s.Meta.Table)
	if t == nil {
		return fmt.Errorf("apply counters: no table %s in the saved rule set", s.Meta.Table)
	}
	byLine := make(map[int]int, len(s.Meta.Lines))
	for id, line := range s.Meta.Lines {
		byLine[line] = id
	}
	found := 0
	for _, c := range t.Chains {
		for i, r := range c.Rules {
			id, ok := byLine[r.Pos.Line]
			if !ok {
				continue
			}
			nr := *r
			nr.Counters = rules.Counters{Packets: s.Counters[id].Packets, Bytes: s.Counters[id].Bytes}
			c.Rules[i] = &nr
			found++
		}
	}
	if found != len(s.Meta.Lines) {
		return fmt.Errorf("apply counters: found %d of the %d compiled rules in the saved rule set", found, len(s.Meta.Lines))
	}
	if c := t.Chain(s.Meta.Chain); c != nil {
		p := s.Counters[len(s.Counters)-1]
		c.Counters = rules.Counters{Packets: p.Packets, Bytes: p.Bytes}
	}
	return nil
}

// Carry returns counters for p that continue the snapshot's: each rule
// paired with an old one (same chain and text, see pairRules) starts
// with its counters, the others at zero.
func (s *Snapshot) Carry(p *codegen.Program) []abi.Counter {
	out := make([]abi.Counter, len(p.IR.Rules)+1)
	for id, old := range pairRules(&s.Meta, p) {
		if old >= 0 {
			out[id] = s.Counters[old]
		}
	}
	return out
}

// metaChunk is the value size of the meta map: Meta as JSON, in chunks.
const metaChunk = 64 << 10

// newMetaMap creates a map holding m.
func newMetaMap(m *Meta) (*ebpf.Map, error) {
	var mp *ebpf.Map
	var created error
	err := writeMeta(m, func(n int) {
		mp, created = ebpf.NewMap(chunkMapSpec("bpfwall_meta", n))
	}, func(i uint32, chunk []byte) error {
		if created != nil {
			return fmt.Errorf("meta map: create: %w", created)
		}
		if err := mp.Put(i, chunk); err != nil {
			return fmt.Errorf("meta map: write: %w", err)
		}
		return nil
	})
	if err != nil {
		if mp != nil {
			mp.Close()
		}
		return nil, err
	}
	return mp, nil
}

// chunkMapSpec is the array map of n chunks named name.
func chunkMapSpec(name string, n int) *ebpf.MapSpec {
	return &ebpf.MapSpec{Name: name, Type: ebpf.Array, KeySize: 4, ValueSize: metaChunk, MaxEntries: uint32(max(n, 1))}
}

// newChunkMap creates an array map named name holding b in chunks of
// metaChunk bytes, the last one zero-padded: how a pin holds bytes.
func newChunkMap(name string, b []byte) (*ebpf.Map, error) {
	n := (len(b) + metaChunk - 1) / metaChunk
	if len(b) < n*metaChunk {
		b = append(b, make([]byte, n*metaChunk-len(b))...)
	}
	mp, err := ebpf.NewMap(chunkMapSpec(name, n))
	if err != nil {
		return nil, fmt.Errorf("create: %w", err)
	}
	for i := range n {
		if err := mp.Put(uint32(i), b[i*metaChunk:(i+1)*metaChunk]); err != nil {
			mp.Close()
			return nil, fmt.Errorf("write: %w", err)
		}
	}
	return mp, nil
}

// readMeta reads the meta map.
func readMeta(mp *ebpf.Map) (Meta, error) {
	b, err := readChunks(mp)
	if err != nil {
		return Meta{}, fmt.Errorf("read meta: %w", err)
	}
	return decodeMeta(b)
}

// readMetaHead reads the meta in mp as far as its JSON section, a chunk
// at a time (a meta of the first encoding whole): a swap reads no more of
// the filter it replaces, whose rule set, lines and origins were, at 1M
// rules, 85 MB read and 103 MB decoded on the way to the swap.
func readMetaHead(mp *ebpf.Map) (Meta, error) {
	size := int(mp.ValueSize())
	var b []byte
	for i := range mp.MaxEntries() {
		b = append(b, make([]byte, size)...)
		if err := mp.Lookup(i, b[len(b)-size:]); err != nil {
			return Meta{}, fmt.Errorf("read meta: %w", err)
		}
		m, ok, err := decodeMetaHead(b)
		if err != nil {
			return Meta{}, err
		}
		if ok {
			return m, nil
		}
		if !sectioned(b) {
			break // the first encoding
		}
	}
	return readMeta(mp)
}

// readChunks reads the chunks of a map newChunkMap made straight into one
// buffer.
func readChunks(mp *ebpf.Map) ([]byte, error) {
	size := int(mp.ValueSize())
	b := make([]byte, int(mp.MaxEntries())*size)
	for i := range mp.MaxEntries() {
		at := int(i) * size
		if err := mp.Lookup(i, b[at:at+size]); err != nil {
			return nil, err
		}
	}
	return b, nil
}

// newBaseMap creates the map of counters carried over, holding c.
func newBaseMap(c []abi.Counter) (*ebpf.Map, error) {
	mp, err := ebpf.NewMap(&ebpf.MapSpec{Name: "bpfwall_base", Type: ebpf.Array, KeySize: 4, ValueSize: 16, MaxEntries: uint32(len(c))})
	if err != nil {
		return nil, fmt.Errorf("create base map: %w", err)
	}
	if err := writeBase(mp, c); err != nil {
		mp.Close()
		return nil, err
	}
	return mp, nil
}

// writeBase writes the non-zero entries of c; the map starts zeroed.
func writeBase(mp *ebpf.Map, c []abi.Counter) error {
	var keys []uint32
	var vals []abi.Counter
	for i, v := range c {
		if v != (abi.Counter{}) {
			keys, vals = append(keys, uint32(i)), append(vals, v)
		}
	}
	for len(keys) > 0 {
		n := min(len(keys), counterBatch)
		if _, err := mp.BatchUpdate(keys[:n], vals[:n], nil); errors.Is(err, ebpf.ErrNotSupported) {
			for i := range keys {
				if err := mp.Put(keys[i], vals[i]); err != nil {
					return fmt.Errorf("write base counters: %w", err)
				}
			}
			return nil
		} else if err != nil {
			return fmt.Errorf("write base counters: %w", err)
		}
		keys, vals = keys[n:], vals[n:]
	}
	return nil
}

// counterBatch is how many entries one batch syscall reads or writes: a
// syscall per rule made reading 100k counters take half a second.
const counterBatch = 8192

func readBase(mp *ebpf.Map) ([]abi.Counter, error) {
	out := make([]abi.Counter, mp.MaxEntries())
	err := readBatches(mp, 1, func(key uint32, vals []abi.Counter) { out[key] = vals[0] })
	if errors.Is(err, ebpf.ErrNotSupported) {
		for i := range out {
			if err := mp.Lookup(uint32(i), &out[i]); err != nil {
				return nil, fmt.Errorf("read base counters: %w", err)
			}
		}
		return out, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read base counters: %w", err)
	}
	return out, nil
}

// readCounters sums a per-CPU counters map over CPUs: its first n
// counters. A map of abi.CounterBlocks holds many counters an entry; one
// that a version of bpfwall before them pinned holds one.
func readCounters(mp *ebpf.Map, n int) ([]abi.Counter, error) {
	cpus, err := ebpf.PossibleCPU()
	if err != nil {
		return nil, fmt.Errorf("read counters: %w", err)
	}
	switch mp.ValueSize() {
	case abi.CounterBlockSize:
		return sumCounters(mp, n, cpus, func(b *abi.CounterBlock) []abi.Counter { return b[:] })
	case 16:
		return sumCounters(mp, n, cpus, func(c *abi.Counter) []abi.Counter { return unsafe.Slice(c, 1) })
	}
	return nil, fmt.Errorf("read counters: values of %d bytes", mp.ValueSize())
}

// sumCounters is readCounters for a map of V values, each holding the
// counters that counters returns.
func sumCounters[V any](mp *ebpf.Map, n, cpus int, counters func(*V) []abi.Counter) ([]abi.Counter, error) {
	per := len(counters(new(V)))
	if want := (n + per - 1) / per; int(mp.MaxEntries()) != want {
		return nil, fmt.Errorf("read counters: %d entries for %d counters", mp.MaxEntries(), n)
	}
	out := make([]abi.Counter, int(mp.MaxEntries())*per)
	add := func(key uint32, vals []V) { // one per CPU
		at := out[int(key)*per : int(key+1)*per]
		for i := range vals {
			for j, c := range counters(&vals[i]) {
				at[j].Packets += c.Packets
				at[j].Bytes += c.Bytes
			}
		}
	}
	err := readBatches(mp, cpus, add)
	if errors.Is(err, ebpf.ErrNotSupported) {
		for key := range mp.MaxEntries() {
			var perCPU []V
			if err := mp.Lookup(key, &perCPU); err != nil {
				return nil, fmt.Errorf("read counters: %w", err)
			}
			add(key, perCPU)
		}
		return out[:n], nil
	}
	if err != nil {
		return nil, fmt.Errorf("read counters: %w", err)
	}
	return out[:n], nil
}

// readBatches reads every entry of the array mp, a batch at a time, and
// hands each key's values (one per CPU of a per-CPU map) to each. A
// batch is counterBatch counters' worth of values.
func readBatches[V any](mp *ebpf.Map, cpus int, each func(key uint32, vals []V)) error {
	n := int(mp.MaxEntries())
	keys := make([]uint32, min(n, max(1, counterBatch*16/int(mp.ValueSize()))))
	vals := make([]V, len(keys)*cpus)
	var cursor ebpf.MapBatchCursor
	for read := 0; read < n; {
		got, err := mp.BatchLookup(&cursor, keys, vals, nil)
		for i := range got {
			each(keys[i], vals[i*cpus:(i+1)*cpus])
		}
		read += got
		if errors.Is(err, ebpf.ErrKeyNotExist) {
			break
		}
		if err != nil {
			return err
		}
		if got == 0 {
			return errors.New("batch lookup read nothing")
		}
	}
	return nil
}

// ifindexes returns the interfaces the filter is attached to, sorted.
func (a *Active) ifindexes() []int {
	var out []int
	for i := range a.Links {
		out = append(out, i)
	}
	slices.Sort(out)
	return out
}

// ErrNoFilter is returned, wrapped, when no filter is loaded at a place.
var ErrNoFilter = errors.New("no filter loaded")
