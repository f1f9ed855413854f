package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/netip"
	"os"
	"strconv"
	"strings"

	"bpfwall/codegen"
	"bpfwall/codegen/abi"
	"bpfwall/internal/packets"
	"bpfwall/ir"
	"bpfwall/loader"
	"bpfwall/rules"
)

// The sk-lookup hook's parts of the commands: the sockets of TPROXY rules.

// reportSockets warns about the TPROXY targets a swap found no socket for:
// until one is registered or found by the next load, their rules drop
// what they match, as xt_TPROXY does.
func reportSockets(res *loader.Result, stderr io.Writer) error {
	for _, s := range res.Sockets {
		if s.Error != "" {
			fmt.Fprintf(stderr, "bpfwall: warning: %s: %s (a SOCKHASH takes no MPTCP socket: disable multipath on the listener)\n", s.Target, s.Error)
		}
		if s.Cookie == 0 {
			fmt.Fprintf(stderr, "bpfwall: warning: no socket for %s (rules %v): until one is registered, TPROXY rules drop what they match, nft tproxy statements do not match\n", s.Target, s.Rules)
		}
	}
	return nil
}

// socketStatus is what status says about a TPROXY target.
type socketStatus struct {
	Target string   `json:"target"`
	Rules  []string `json:"rules"` // the rules' lines of the active rule set
	Cookie uint64   `json:"cookie,omitempty"`
	PID    int      `json:"pid,omitempty"`
	FD     int      `json:"fd,omitempty"`
}

// lookupSockets describes the sockets of the TPROXY rules of the
// sk-lookup filter a.
func lookupSockets(a *loader.Active) ([]socketStatus, error) {
	states, err := a.SocketStates()
	if err != nil {
		return nil, err
	}
	source := strings.Split(a.Meta.Source, "\n")
	var out []socketStatus
	for _, s := range states {
		st := socketStatus{Target: s.Target, Cookie: s.Cookie}
		for _, id := range s.Rules {
			text := fmt.Sprintf("rule %d", id)
			if id < len(a.Meta.Lines) && a.Meta.Lines[id] > 0 && a.Meta.Lines[id] <= len(source) {
				text = source[a.Meta.Lines[id]-1]
			}
			st.Rules = append(st.Rules, text)
		}
		if s.Owner != nil {
			st.PID, st.FD = s.Owner.PID, s.Owner.FD
		}
		out = append(out, st)
	}
	return out, nil
}

func printSockets(w io.Writer, ss []socketStatus) {
	for _, s := range ss {
		switch {
		case s.Cookie == 0:
			fmt.Fprintf(w, "  socket %s: none\n", s.Target)
		case s.PID != 0:
			fmt.Fprintf(w, "  socket %s: cookie %d, pid %d fd %d\n", s.Target, s.Cookie, s.PID, s.FD)
		default:
			fmt.Fprintf(w, "  socket %s: cookie %d, held by no process found\n", s.Target, s.Cookie)
		}
		for _, r := range s.Rules {
			fmt.Fprintf(w, "    %s\n", r)
		}
	}
}

// runRegister hands sockets to the sk-lookup filter: those systemd passes
// (LISTEN_FDS), or descriptor --fd of process --pid.
func runRegister(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("register", stdout, stderr)
	pid := fs.Int("pid", 0, "take the socket from process `PID` (with --fd)")
	fd := fs.Int("fd", -1, "the socket's descriptor `N` in --pid")
	as := fs.String("target", "", "serve the TPROXY rules of `PROTO:ADDR:PORT` (default: the socket's own address; 0.0.0.0 or :: for rules without --on-ip)")
	var wait waitFlags
	wait.register(fs)
	files, err := parseFlags(fs, args)
	if err != nil {
		return err
	}
	if len(files) != 0 || (*pid == 0) != (*fd < 0) {
		fmt.Fprintln(stderr, "usage: bpfwall register [--target PROTO:ADDR:PORT] [--pid PID --fd N] [-w SECS]   (without --pid: the sockets of LISTEN_FDS)")
		return errUsage
	}
	var socks []*os.File
	if *pid != 0 {
		f, err := loader.ProcessSocket(*pid, *fd)
		if err != nil {
			return privileged(err)
		}
		socks = append(socks, f)
	} else {
		if socks, err = listenFDs(); err != nil {
			return err
		}
	}
	defer func() {
		for _, f := range socks {
			f.Close()
		}
	}()
	lock, err := acquireLock(wait, stderr)
	if err != nil {
		return err
	}
	defer lock.Release()
	place, err := loader.Here(pinRoot, codegen.HookSkLookup)
	if err != nil {
		return err
	}
	// Every socket's target is settled before the first goes in, so that
	// a bad one registers none.
	if *as != "" && len(socks) > 1 {
		return fmt.Errorf("%w: --target names one target, but LISTEN_FDS passed %d sockets; register them without --target, or one by one with --pid and --fd", errUsage, len(socks))
	}
	targets := make([]abi.SocketKey, len(socks))
	for i, f := range socks {
		own, err := loader.SocketTarget(f)
		if err != nil {
			return err
		}
		targets[i] = own
		if *as != "" {
			k, err := parseTarget(*as)
			if err != nil {
				return fmt.Errorf("%w: --target: %v", errUsage, err)
			}
			if err := loader.CanServe(f, own, k); err != nil {
				return fmt.Errorf("%w: --target: %v", errUsage, err)
			}
			targets[i] = k
		}
		for _, prev := range targets[:i] {
			if prev == targets[i] {
				return fmt.Errorf("%w: two sockets for %s", errUsage, prev)
			}
		}
	}
	for i, f := range socks {
		cookie, err := loader.Register(place, targets[i], f)
		if err != nil {
			return privileged(err)
		}
		fmt.Fprintf(stdout, "%s: socket cookie %d\n", targets[i], cookie)
	}
	return nil
}

// listenFDs returns the sockets systemd passed (sd_listen_fds): LISTEN_FDS
// descriptors from 3, when LISTEN_PID is this process.
func listenFDs() ([]*os.File, error) {
	if os.Getenv("LISTEN_PID") != strconv.Itoa(os.Getpid()) {
		return nil, fmt.Errorf("%w: no sockets: LISTEN_PID is not this process; use --pid and --fd", errUsage)
	}
	n, err := strconv.Atoi(os.Getenv("LISTEN_FDS"))
	if err != nil || n <= 0 {
		return nil, fmt.Errorf("%w: no sockets: LISTEN_FDS is %q", errUsage, os.Getenv("LISTEN_FDS"))
	}
	var out []*os.File
	for i := range n {
		out = append(out, os.NewFile(uintptr(3+i), "LISTEN_FDS "+strconv.Itoa(i)))
	}
	return out, nil
}

// parseTarget parses PROTO:ADDR:PORT (tcp:127.0.0.1:8080, udp:[::1]:53).
func parseTarget(s string) (abi.SocketKey, error) {
	proto, ap, ok := strings.Cut(s, ":")
	if !ok {
		return abi.SocketKey{}, fmt.Errorf("%q is not PROTO:ADDR:PORT", s)
	}
	a, err := netip.ParseAddrPort(ap)
	if err != nil {
		return abi.SocketKey{}, err
	}
	t := ir.TProxy{Port: a.Port()}
	switch proto {
	case "tcp":
		t.Proto = 6
	case "udp":
		t.Proto = 17
	default:
		return abi.SocketKey{}, fmt.Errorf("protocol %q: want tcp or udp", proto)
	}
	if !a.Addr().IsUnspecified() {
		t.Addr = a.Addr()
	}
	fam := familyOf(a.Addr())
	return abi.NewSocketKey(fam, t), nil
}

// traceLookups runs each packet description as a socket lookup through
// the sk-lookup program, with the sockets found in the network namespace.
func traceLookups(prog *codegen.Program, descs []packets.Desc, stdout io.Writer) error {
	l, err := loader.Load(prog, loader.Options{})
	if err != nil {
		return err
	}
	defer l.Close()
	if _, err := l.FillSockets(); err != nil {
		return privileged(err)
	}
	enc := json.NewEncoder(stdout)
	enc.SetEscapeHTML(false)
	for i, d := range descs {
		lk, err := lookupOf(d)
		if err != nil {
			return fmt.Errorf("packet %d: %w", i+1, err)
		}
		if err := l.LookupIface(d.Complete().Iface); err != nil {
			return err
		}
		out, err := l.RunLookup(lk)
		if err != nil {
			return err
		}
		line := lookupLine{traceLine: describe(prog, out.Outcome, false), Socket: out.Cookie}
		line.Packet = i + 1
		if frame, err := d.Frame(); err == nil {
			line.Summary = "lookup of " + packets.Summary(frame)
		}
		switch out.Decision.Kind {
		case abi.NoSocket:
			line.Reason = "the rule's socket does not exist"
		case abi.AssignFailed:
			line.Reason = "the rule's socket does not fit the lookup"
		}
		if line.Reason != "" {
			r := prog.IR.Rules[out.Decision.Rule]
			line.Rule = rules.Pos{File: r.Pos.File, Line: r.Pos.Line}.String()
			line.Chain = prog.IR.Chains[r.Chain].Name
		}
		if err := enc.Encode(line); err != nil {
			return err
		}
	}
	return nil
}

// lookupLine is one line of trace output at the sk-lookup hook.
type lookupLine struct {
	traceLine
	// Socket is the cookie of the socket a TPROXY rule assigned.
	Socket uint64 `json:"socket,omitempty"`
	// Reason says why a TPROXY rule dropped the lookup.
	Reason string `json:"reason,omitempty"`
}

func lookupOf(d packets.Desc) (loader.Lookup, error) {
	proto, err := d.ProtoNumber()
	if err != nil {
		return loader.Lookup{}, err
	}
	if proto != 6 && proto != 17 {
		return loader.Lookup{}, fmt.Errorf("proto %s: socket lookups are tcp or udp", d.Proto)
	}
	d = d.Complete()
	src, err := netip.ParseAddr(d.Src)
	if err != nil {
		return loader.Lookup{}, err
	}
	dst, err := netip.ParseAddr(d.Dst)
	if err != nil {
		return loader.Lookup{}, err
	}
	return loader.Lookup{Proto: proto, Src: src, Dst: dst, Sport: d.SPort, Dport: d.DPort}, nil
}

func familyOf(a netip.Addr) rules.Family {
	if a.Is4() {
		return rules.IPv4
	}
	return rules.IPv6
}
