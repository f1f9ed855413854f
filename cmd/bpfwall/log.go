package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/syslog"
	"net"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"bpfwall/codegen"
	"bpfwall/codegen/abi"
	"bpfwall/loader"
	"bpfwall/nflog"
)

// logEvent is one event as `bpfwall log --json` prints it.
type logEvent struct {
	Time   time.Time `json:"time"`
	Hook   string    `json:"hook"`
	Rule   string    `json:"rule"` // file:line
	Chain  string    `json:"chain"`
	Level  uint8     `json:"level"`
	Prefix string    `json:"prefix"`
	In     string    `json:"in"`
	Out    string    `json:"out"`
	Len    uint32    `json:"frame_len"`
	Line   string    `json:"line"`
	// Error says why Line is incomplete (headers beyond the captured
	// bytes) or missing.
	Error string `json:"error,omitempty"`
}

// logPoll is how often a reader looks for events that did not wake it up,
// and checks whether its filter was swapped and whether events were lost.
const logPoll = abi.LogPoll

// runLog prints the events of the LOG rules of this namespace's filters
// as the kernel's LOG target prints them, until interrupted, --count
// events or --timeout.
func runLog(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("log", stdout, stderr)
	hook := fs.String("hook", "", "read only the filter at `HOOK`")
	asJSON := fs.Bool("json", false, "print one JSON object per event")
	count := fs.Int("count", 0, "exit after this many events (0: no limit)")
	timeout := fs.Duration("timeout", 0, "exit after this long (0: no limit)")
	sysl := fs.String("syslog", "", "write the lines to syslog instead of stdout, as the kernel's LOG writes them to its log: facility kern, the rule's --log-level; at the socket `ADDR` (default /dev/log, the journal's)")
	fs.Lookup("syslog").NoOptDefVal = "/dev/log"
	files, err := parseFlags(fs, args)
	if err != nil {
		return err
	}
	if len(files) != 0 || *count < 0 || *timeout < 0 {
		fmt.Fprintln(stderr, "usage: bpfwall log [--hook H] [--json] [--count N] [--timeout D]")
		return errUsage
	}
	ns, places, err := pinnedPlaces(stderr)
	if err != nil {
		return err
	}
	var readers []*logFollower
	for _, p := range places {
		if *hook != "" && p.Hook.String() != *hook {
			continue
		}
		f, err := openFollower(p)
		if errors.Is(err, loader.ErrNoLog) {
			continue
		}
		if err != nil {
			return privileged(err)
		}
		readers = append(readers, f)
	}
	if len(readers) == 0 {
		return fmt.Errorf("no filter with LOG rules loaded in network namespace %d", ns)
	}

	stop := make(chan struct{})
	var stopOnce sync.Once
	halt := func() { stopOnce.Do(func() { close(stop) }) }
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, unix.SIGTERM)
	defer signal.Stop(sig)
	go func() {
		select {
		case <-sig:
			halt()
		case <-stop:
		}
	}()
	if *timeout > 0 {
		t := time.AfterFunc(*timeout, halt)
		defer t.Stop()
	}

	events := make(chan logEvent)
	errs := make(chan error, len(readers))
	var wg sync.WaitGroup
	for _, f := range readers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer f.close()
			errs <- f.follow(events, stop, stderr)
		}()
	}
	go func() { wg.Wait(); close(events) }()

	var sink *syslog.Writer
	if *sysl != "" {
		if sink, err = syslog.Dial("unixgram", *sysl, syslog.LOG_KERN|syslog.LOG_WARNING, "bpfwall"); err != nil {
			halt()
			return fmt.Errorf("log --syslog: %w", err)
		}
		defer sink.Close()
	}
	enc := json.NewEncoder(stdout)
	enc.SetEscapeHTML(false)
	n := 0
	for ev := range events {
		if sink != nil {
			if err := writeSyslog(sink, ev); err != nil {
				halt()
				return fmt.Errorf("log --syslog: %w", err)
			}
		} else if *asJSON {
			if err := enc.Encode(ev); err != nil {
				halt()
				return err
			}
		} else {
			line := ev.Line
			if ev.Error != "" {
				line += "[bpfwall: " + ev.Error + "]"
			}
			fmt.Fprintf(stdout, "%s: %s\n", ev.Rule, line)
		}
		n++
		if *count > 0 && n >= *count {
			halt()
			break
		}
	}
	halt()
	for range readers {
		if err := <-errs; err != nil {
			return err
		}
	}
	return nil
}

// writeSyslog writes ev's line at its rule's level, as the kernel's LOG
// target writes it with printk: the prefix, then the packet's fields.
func writeSyslog(w *syslog.Writer, ev logEvent) error {
	line := ev.Line
	if ev.Error != "" {
		line += "[bpfwall: " + ev.Error + "]"
	}
	write := []func(string) error{w.Emerg, w.Alert, w.Crit, w.Err, w.Warning, w.Notice, w.Info, w.Debug}
	return write[min(int(ev.Level), len(write)-1)](line)
}

// logFollower reads one filter's events, and follows the filter across
// swaps: when the pinned program changes, it drains the old ring buffer
// and opens the new one.
type logFollower struct {
	place  loader.Place
	reader *os.File // holds the filter's reader lock
	rd     *loader.LogReader
	logs   []loader.LogRule // rd's LOG rules
	lost   uint64
	ifaces map[uint32]ifaceInfo
}

type ifaceInfo struct {
	name  string
	ether bool
}

func openFollower(p loader.Place) (*logFollower, error) {
	reader, err := lockReader(p)
	if err != nil {
		return nil, err
	}
	rd, err := openLog(p, logOpenWait)
	if err != nil {
		reader.Close()
		return nil, err
	}
	f := &logFollower{place: p, reader: reader, rd: rd, logs: rd.Meta.LogRules(), ifaces: make(map[uint32]ifaceInfo)}
	f.lost, _ = rd.Lost()
	return f, nil
}

// logOpenWait is how long log waits for a command that changes a filter
// before it opens the filter's ring buffer.
const logOpenWait = 5 * time.Second

// openLog opens the ring buffer of the filter at p with the meta of the
// same program: under the readers' lock, as a swap replaces the pins one
// by one.
func openLog(p loader.Place, wait time.Duration) (*loader.LogReader, error) {
	lock, err := loader.AcquireShared(lockFile, wait)
	if err != nil {
		return nil, err
	}
	defer lock.Release()
	a, err := loader.Open(p)
	if err != nil {
		return nil, err
	}
	defer a.Close()
	return a.OpenLog()
}

func (f *logFollower) close() {
	if f.rd != nil {
		f.rd.Close()
	}
	f.reader.Close()
}

// lockReader takes the reader lock of the filter at p's events, beside
// bpfwall's lock file, and writes this process's ID into it. A ring
// buffer hands each event to one reader: a second bpfwall log would get
// some of the events and take the others from the first, so it is
// refused, naming the reader that has them.
func lockReader(p loader.Place) (*os.File, error) {
	path := fmt.Sprintf("%s.log-%d-%s", lockFile, p.NetNS, p.ID())
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("log reader lock: %w", err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		owner, _ := io.ReadAll(f)
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, fmt.Errorf("another bpfwall log (pid %s) reads the %s filter's events, and each event goes to one reader: stop it, or read its output", strings.TrimSpace(string(owner)), p.Name())
		}
		return nil, fmt.Errorf("log reader lock: %w", err)
	}
	if err := f.Truncate(0); err == nil {
		f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	return f, nil
}

func (f *logFollower) follow(out chan<- logEvent, stop <-chan struct{}, stderr io.Writer) error {
	for {
		select {
		case <-stop:
			return nil
		default:
		}
		rec, err := f.rd.Read(time.Now().Add(logPoll))
		switch {
		case errors.Is(err, os.ErrDeadlineExceeded):
			f.reportLost(stderr)
			if err := f.reopenIfSwapped(); err != nil {
				return err
			}
			continue
		case err != nil:
			return err
		}
		select {
		case out <- f.event(rec):
		case <-stop:
			return nil
		}
	}
}

func (f *logFollower) reportLost(stderr io.Writer) {
	n, err := f.rd.Lost()
	if err == nil && n > f.lost {
		fmt.Fprintf(stderr, "bpfwall: log: %d events of the %s filter lost: the ring buffer was full\n", n-f.lost, f.place.Name())
		f.lost = n
	}
}

// reopenIfSwapped switches to the ring buffer of a new program, once the
// old one has no events left.
func (f *logFollower) reopenIfSwapped() error {
	id, err := loader.ProgramAt(f.place)
	if errors.Is(err, os.ErrNotExist) {
		if f.rd.Pending() > 0 {
			return nil // the old ring buffer still has events
		}
		return fmt.Errorf("the %s filter was unloaded", f.place.Name())
	}
	if err != nil {
		return err
	}
	if id == f.rd.Program || f.rd.Pending() > 0 {
		return nil
	}
	rd, err := openLog(f.place, 0)
	if errors.Is(err, loader.ErrLocked) {
		return nil // a command is changing the filter: next poll
	}
	if err != nil {
		return err
	}
	f.rd.Close()
	f.rd, f.logs = rd, rd.Meta.LogRules()
	f.lost, _ = rd.Lost()
	return nil
}

func (f *logFollower) iface(index uint32) ifaceInfo {
	if ifc, ok := f.ifaces[index]; ok {
		return ifc
	}
	ifc := ifaceInfo{name: fmt.Sprintf("if%d", index), ether: true}
	if ni, err := net.InterfaceByIndex(int(index)); err == nil {
		ifc.name = ni.Name
		// ARPHRD_ETHER is 1.
		if b, err := os.ReadFile("/sys/class/net/" + ni.Name + "/type"); err == nil {
			ifc.ether = strings.TrimSpace(string(b)) == "1"
		}
	}
	f.ifaces[index] = ifc
	return ifc
}

// event formats a record with its rule.
func (f *logFollower) event(rec abi.LogRecord) logEvent {
	m := &f.rd.Meta
	ev := logEvent{Time: monotonicToWall(rec.Time), Hook: f.place.Hook.String(), Len: rec.Len, Chain: m.Chain}
	var rule *loader.LogRule
	for i := range f.logs {
		if f.logs[i].ID == int(rec.Rule) {
			rule = &f.logs[i]
		}
	}
	if rule == nil {
		ev.Rule = fmt.Sprintf("rule %d", rec.Rule)
		ev.Error = fmt.Sprintf("rule %d is not a LOG rule of the program", rec.Rule)
		return ev
	}
	ev.Rule, ev.Chain, ev.Level, ev.Prefix = rule.Pos, rule.Chain, rule.Level, rule.Prefix
	ifc := f.iface(rec.Ifindex)
	p := nflog.Packet{Frame: rec.Frame, Len: int(rec.Len), Mark: rec.Mark, NotEther: !ifc.ether, NoMAC: rec.Flags&abi.LogNoMAC != 0}
	if rec.HasUID {
		p.Owner = &nflog.Owner{UID: rec.UID, GID: rec.GID}
	}
	switch {
	case f.place.Hook == codegen.HookNetfilter:
		// The devices netfilter gives the chain; 0 for none.
		if rec.Ifindex != 0 {
			p.In = ifc.name
		}
		if rec.Out != 0 {
			p.Out = f.iface(rec.Out).name
		}
	case f.place.Hook == codegen.HookTCEgress:
		p.Out = ifc.name
	default:
		p.In = ifc.name
	}
	ev.In, ev.Out = p.In, p.Out
	line, err := nflog.Line(p, nflog.Rule{Prefix: rule.Prefix, Level: rule.Level, Flags: rule.Flags})
	ev.Line = line
	if err != nil {
		ev.Error = err.Error()
	} else if rec.Flags&abi.LogMACOther != 0 {
		ev.Error = "the MAC= the kernel prints is the device's hard_header_len bytes at its MAC header, not a 14-byte Ethernet header; the netfilter stage did not record it"
	}
	return ev
}

// monotonicToWall converts a CLOCK_MONOTONIC time in ns to wall time.
func monotonicToWall(ns uint64) time.Time {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		return time.Now().UTC()
	}
	return time.Now().UTC().Add(-time.Duration(uint64(ts.Nano()) - ns))
}
