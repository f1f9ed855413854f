package loader

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/ringbuf"

	"bpfwall/codegen"
	"bpfwall/codegen/abi"
	"bpfwall/ir"
)

// Pins of the LOG rules' maps, present when the program has LOG rules.
const (
	pinLog     = "log"
	pinLogLost = "log_lost"
)

// logPins are the optional pins, in the order a swap replaces them.
var logPins = []string{pinLog, pinLogLost}

// LogRule describes a LOG rule of a filter, for `bpfwall log`.
type LogRule struct {
	ID     int    `json:"id"`
	Pos    string `json:"pos"` // file:line of the rule
	Chain  string `json:"chain"`
	Prefix string `json:"prefix,omitempty"`
	Level  uint8  `json:"level"`
	Flags  uint8  `json:"flags,omitempty"`
}

// logRules lists the LOG rules of p.
func logRules(p *codegen.Program) []LogRule {
	var out []LogRule
	for _, r := range p.IR.Rules {
		if a, ok := r.Action.(ir.Log); ok {
			file := r.Pos.File
			if file == "" {
				file = "-"
			}
			out = append(out, LogRule{
				ID: r.ID, Pos: fmt.Sprintf("%s:%d", file, r.Pos.Line), Chain: p.IR.Chains[r.Chain].Name,
				Prefix: a.Prefix, Level: a.Level, Flags: a.Flags,
			})
		}
	}
	return out
}

// ErrNoLog is returned, wrapped, by OpenLog for a filter without LOG rules.
var ErrNoLog = errors.New("filter has no LOG rules")

// LogReader reads the events of a filter's LOG rules from its pinned ring
// buffer.
type LogReader struct {
	// Meta describes the program whose events these are.
	Meta    Meta
	Program ebpf.ProgramID
	rd      *ringbuf.Reader
	ring    *ebpf.Map
	lost    *ebpf.Map
}

// OpenLog opens the ring buffer of the filter's LOG rules.
func (a *Active) OpenLog() (*LogReader, error) {
	ring, lost := a.maps[pinLog], a.maps[pinLogLost]
	if ring == nil || lost == nil {
		return nil, fmt.Errorf("read %s log: %w", a.Place.Hook, ErrNoLog)
	}
	ring, err := ring.Clone()
	if err != nil {
		return nil, fmt.Errorf("read %s log: %w", a.Place.Hook, err)
	}
	if lost, err = lost.Clone(); err != nil {
		ring.Close()
		return nil, fmt.Errorf("read %s log: %w", a.Place.Hook, err)
	}
	rd, err := ringbuf.NewReader(ring)
	if err != nil {
		ring.Close()
		lost.Close()
		return nil, fmt.Errorf("read %s log: %w", a.Place.Hook, err)
	}
	return &LogReader{Meta: a.Meta, Program: programID(a.Program), rd: rd, ring: ring, lost: lost}, nil
}

// ErrLogTimeout is returned, wrapped, by Read when the deadline passes
// with no event.
var ErrLogTimeout = os.ErrDeadlineExceeded

// Read returns the next event, waiting until deadline at most (forever if
// zero).
func (r *LogReader) Read(deadline time.Time) (abi.LogRecord, error) {
	r.rd.SetDeadline(deadline)
	rec, err := r.rd.Read()
	if err != nil {
		return abi.LogRecord{}, fmt.Errorf("read log: %w", err)
	}
	return abi.ParseLogRecord(rec.RawSample)
}

// Pending is how many bytes of events wait in the ring buffer.
func (r *LogReader) Pending() int { return r.rd.AvailableBytes() }

// Lost returns how many events found the ring buffer full, over all CPUs.
func (r *LogReader) Lost() (uint64, error) { return readLost(r.lost) }

// LogLost returns how many events of the filter's LOG rules found the ring
// buffer full; the error wraps ErrNoLog when it has no LOG rules.
func (a *Active) LogLost() (uint64, error) {
	m := a.maps[pinLogLost]
	if m == nil {
		return 0, fmt.Errorf("read %s log: %w", a.Place.Hook, ErrNoLog)
	}
	return readLost(m)
}

func readLost(m *ebpf.Map) (uint64, error) {
	var perCPU []uint64
	if err := m.Lookup(uint32(0), &perCPU); err != nil {
		return 0, fmt.Errorf("read lost log events: %w", err)
	}
	var n uint64
	for _, v := range perCPU {
		n += v
	}
	return n, nil
}

// Close releases the reader.
func (r *LogReader) Close() error {
	r.rd.Close()
	r.ring.Close()
	return r.lost.Close()
}

// openLogPins opens the LOG maps pinned in dir, if any.
func (a *Active) openLogPins(dir string) error {
	for _, name := range logPins {
		m, err := ebpf.LoadPinnedMap(filepath.Join(dir, name), nil)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return err
		}
		a.maps[name] = m
	}
	return nil
}

// logPinners are the LOG maps of a loaded program to pin, by pin name;
// none when it has no LOG rules.
func (l *Loaded) logPinners() map[string]pinner {
	out := make(map[string]pinner)
	if m := l.coll.Maps[abi.LogMap]; m != nil {
		out[pinLog] = m
	}
	if m := l.coll.Maps[abi.LogLostMap]; m != nil {
		out[pinLogLost] = m
	}
	return out
}

// ProgramAt returns the ID of the program pinned at p: a swap changes it.
func ProgramAt(p Place) (ebpf.ProgramID, error) {
	prog, err := ebpf.LoadPinnedProgram(filepath.Join(p.Dir(), pinProgram), nil)
	if err != nil {
		return 0, fmt.Errorf("open %s filter: %w", p.Hook, err)
	}
	defer prog.Close()
	return programID(prog), nil
}

// Logged returns the events of the program's LOG rules since the last
// call, for test runs; none when it has no LOG rules.
func (l *Loaded) Logged() ([]abi.LogRecord, error) {
	ring := l.coll.Maps[abi.LogMap]
	if ring == nil {
		return nil, nil
	}
	if l.logReader == nil {
		rd, err := ringbuf.NewReader(ring)
		if err != nil {
			return nil, fmt.Errorf("read log: %w", err)
		}
		l.logReader = rd
	}
	var out []abi.LogRecord
	l.logReader.SetDeadline(time.Now())
	for {
		rec, err := l.logReader.Read()
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("read log: %w", err)
		}
		r, err := abi.ParseLogRecord(rec.RawSample)
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
}

// metaLogs is the meta's key of the program's LOG rules (feature "log").
const metaLogs = "logs"

// LogRules are the LOG rules of the filter m describes, for `bpfwall log`.
func (m *Meta) LogRules() []LogRule { return featureMeta[[]LogRule](m, metaLogs) }
