package loader

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"time"
	"unsafe"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"

	"bpfwall/codegen"
	"bpfwall/codegen/abi"
	"bpfwall/ir"
	"bpfwall/rules"
)

// The sk-lookup filter of a network namespace is attached with one netns
// link, pinned as link_0 beside the filters' per-interface links. Its
// sockets live in a SOCKHASH pinned as "sockets" that every program
// swapped in shares, so a swap never loses a socket.

// netnsIndex stands for the network namespace where an ifindex names
// what a link is attached to.
const netnsIndex = 0

var netnsIface = Iface{Index: netnsIndex, Name: "netns"}

// attachNetNS attaches an sk_lookup program to the calling thread's
// network namespace.
func attachNetNS(prog *ebpf.Program) (link.Link, error) {
	f, err := os.Open("/proc/thread-self/ns/net")
	if err != nil {
		return nil, fmt.Errorf("attach sk-lookup program: %w", err)
	}
	defer f.Close()
	l, err := link.AttachNetNs(int(f.Fd()), prog)
	if err != nil {
		return nil, fmt.Errorf("attach sk-lookup program to the network namespace: %w", err)
	}
	return l, nil
}

// SocketState is a TPROXY rule's socket in a filter's SocketsMap.
type SocketState struct {
	Key abi.SocketKey `json:"-"`
	// Target is the key as people read it ("tcp 127.0.0.1:8080").
	Target string `json:"target"`
	Rules  []int  `json:"rules"` // the rules steering to it, by ID
	// Cookie is the socket's cookie; 0 when the map holds no socket.
	Cookie uint64 `json:"cookie,omitempty"`
	// Owner is the process holding the socket, when it could be found.
	Owner *Owner `json:"owner,omitempty"`
	// Error says why a socket found for the target is not in the map.
	Error string `json:"error,omitempty"`
}

// Owner is a process and one of its descriptors for a socket.
type Owner struct {
	PID int `json:"pid"`
	FD  int `json:"fd"`
}

// loadLookup loads an sk-lookup program with the filter's sockets, or a
// new SOCKHASH pinned by the commit, fills in its interfaces and finds the
// sockets its rules need.
func (b *build) loadLookup(p *codegen.Program) error {
	path := filepath.Join(b.dir, pinSockets)
	sockets, err := ebpf.LoadPinnedMap(path, nil)
	fresh := errors.Is(err, os.ErrNotExist)
	switch {
	case fresh:
		sockets = nil
	case err != nil:
		return fmt.Errorf("open sockets: %w", err)
	default:
		defer sockets.Close()
	}
	var opts Options
	if !fresh {
		opts.Maps = map[string]*ebpf.Map{abi.SocketsMap: sockets}
	}
	if b.loaded, err = Load(p, opts); err != nil {
		return err
	}
	if fresh {
		if err := pinNew(b.loaded.coll.Maps[abi.SocketsMap], path); err != nil {
			return err
		}
	}
	if err := b.loaded.SetIfaces(); err != nil {
		return err
	}
	b.sockets, err = b.loaded.FillSockets()
	if !fresh {
		for _, st := range b.sockets {
			if st.Owner != nil { // found and put in by FillSockets
				b.addedSockets = append(b.addedSockets, st.Key)
			}
		}
	}
	return err
}

// SetIfaces records, for the sk-lookup hook, which interface patterns
// every interface of the network namespace matches: a lookup may come
// from any of them. Interfaces created later match no pattern until the
// next load.
func (l *Loaded) SetIfaces() error {
	if len(l.Program.Ifaces) == 0 {
		return nil
	}
	ifis, err := net.Interfaces()
	if err != nil {
		return fmt.Errorf("list interfaces: %w", err)
	}
	for _, ifi := range ifis {
		if err := l.SetIface(uint32(ifi.Index), ifi.Name); err != nil {
			return err
		}
	}
	return nil
}

// Sockets returns the program's SocketsMap.
func (l *Loaded) Sockets() *ebpf.Map { return l.coll.Maps[abi.SocketsMap] }

// FillSockets puts into the program's SocketsMap the socket of every
// TPROXY target it does not hold yet, found in the network namespace (see
// FindSocket), and returns the state of each target.
func (l *Loaded) FillSockets() ([]SocketState, error) {
	states := targetStates(l.Program)
	m := l.Sockets()
	for i := range states {
		st := &states[i]
		var cookie uint64
		if err := m.Lookup(st.Key, &cookie); err == nil {
			st.Cookie = cookie
			continue
		}
		s, err := FindSocket(st.Key)
		if errors.Is(err, ErrNoSocket) {
			continue
		}
		if err != nil {
			return states, err
		}
		err = putSocket(m, st.Key, s.FD)
		s.FD.Close()
		if err != nil {
			// An MPTCP listener, for one: the rules go on without it.
			st.Error = fmt.Sprintf("socket of pid %d fd %d refused by the %s map: %v", s.Owner.PID, s.Owner.FD, abi.SocketsMap, err)
			continue
		}
		st.Owner = &s.Owner
		if err := m.Lookup(st.Key, &cookie); err == nil {
			st.Cookie = cookie
		}
	}
	return states, nil
}

// targetStates lists the TPROXY targets of p, in the order of their first
// rule.
func targetStates(p *codegen.Program) []SocketState {
	var out []SocketState
	index := make(map[abi.SocketKey]int)
	targets := p.Targets()
	ids := make([]int, 0, len(targets))
	for id := range targets {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		k := targets[id]
		i, ok := index[k]
		if !ok {
			i = len(out)
			index[k] = i
			out = append(out, SocketState{Key: k, Target: k.String()})
		}
		out[i].Rules = append(out[i].Rules, id)
	}
	return out
}

// Lookup is a socket lookup as an sk_lookup program sees it (struct
// bpf_sk_lookup): the remote end is the source, the local end the
// destination of the packet that asks for a socket. A test run's
// ingress_ifindex is always 0 (the kernel refuses others): the interface
// patterns of ifindex 0 stand for the lookup's interface (see
// LookupIface).
type Lookup struct {
	Proto    uint8 // 6 or 17
	Src, Dst netip.Addr
	Sport    uint16
	Dport    uint16
}

// LookupIface makes the test runs' lookups come from an interface called
// name.
func (l *Loaded) LookupIface(name string) error { return l.SetIface(0, name) }

// bpfSkLookupSize is sizeof(struct bpf_sk_lookup).
const bpfSkLookupSize = 72

// context is the lookup as a struct bpf_sk_lookup for BPF_PROG_TEST_RUN.
func (lk Lookup) context() ([]byte, error) {
	b := make([]byte, bpfSkLookupSize)
	ne := binary.NativeEndian
	if lk.Src.Is4() != lk.Dst.Is4() || !lk.Src.IsValid() || !lk.Dst.IsValid() {
		return nil, fmt.Errorf("lookup from %s to %s: want two addresses of one family", lk.Src, lk.Dst)
	}
	if lk.Src.Is4() {
		ne.PutUint32(b[8:], unix.AF_INET)
		s, d := lk.Src.As4(), lk.Dst.As4()
		copy(b[16:], s[:])
		copy(b[40:], d[:])
	} else {
		ne.PutUint32(b[8:], unix.AF_INET6)
		s, d := lk.Src.As16(), lk.Dst.As16()
		copy(b[20:], s[:])
		copy(b[44:], d[:])
	}
	ne.PutUint32(b[12:], uint32(lk.Proto))
	binary.BigEndian.PutUint16(b[36:], lk.Sport)
	ne.PutUint32(b[60:], uint32(lk.Dport))
	return b, nil
}

// LookupOutcome is what the program did with a lookup.
type LookupOutcome struct {
	Outcome
	// Cookie is the cookie of the socket the program assigned, 0 for
	// none.
	Cookie uint64
}

// RunLookup runs one socket lookup through the loaded sk-lookup program
// with BPF_PROG_TEST_RUN. The verdict is TPROXY when a TPROXY rule
// assigned its socket.
func (l *Loaded) RunLookup(lk Lookup) (LookupOutcome, error) {
	if l.Program.Hook != codegen.HookSkLookup {
		return LookupOutcome{}, fmt.Errorf("run lookup: %s program", l.Program.Hook)
	}
	in, err := lk.context()
	if err != nil {
		return LookupOutcome{}, err
	}
	out := make([]byte, len(in))
	ret, err := l.prog.Run(&ebpf.RunOptions{Context: in, ContextOut: out, Repeat: 1})
	if err != nil {
		return LookupOutcome{}, fmt.Errorf("test run: %w", err)
	}
	v, err := verdict(l.Program.Hook, ret)
	if err != nil {
		return LookupOutcome{}, err
	}
	d, err := l.takeDecision()
	if err != nil {
		return LookupOutcome{}, err
	}
	res := LookupOutcome{Outcome: Outcome{Verdict: v, Decision: d}, Cookie: binary.NativeEndian.Uint64(out)}
	if v == ir.VerdictAccept && res.Cookie != 0 {
		res.Verdict = ir.VerdictTProxy // a TPROXY rule's or an nft tproxy statement's socket
	}
	return res, nil
}

// BenchmarkLookup runs a lookup repeat times through prog with
// BPF_PROG_TEST_RUN and returns the kernel's mean time per run. (The
// library's Benchmark takes packet data; sk_lookup takes a context only.)
func BenchmarkLookup(prog *ebpf.Program, lk Lookup, repeat int) (time.Duration, error) {
	in, err := lk.context()
	if err != nil {
		return 0, err
	}
	var attr [80]byte
	ne := binary.NativeEndian
	ne.PutUint32(attr[0:], uint32(prog.FD()))
	ne.PutUint32(attr[32:], uint32(repeat))
	ne.PutUint32(attr[40:], uint32(len(in)))
	ne.PutUint64(attr[48:], uint64(uintptr(unsafe.Pointer(&in[0]))))
	for {
		_, _, errno := unix.Syscall(unix.SYS_BPF, unix.BPF_PROG_TEST_RUN, uintptr(unsafe.Pointer(&attr[0])), uintptr(len(attr)))
		runtime.KeepAlive(in)
		if errno == unix.EINTR {
			continue
		}
		if errno != 0 {
			return 0, fmt.Errorf("benchmark sk-lookup program: %w", errno)
		}
		break
	}
	return time.Duration(ne.Uint32(attr[36:])), nil
}

// BenchmarkLookup is BenchmarkLookup on the loaded program.
func (l *Loaded) BenchmarkLookup(lk Lookup, repeat int) (time.Duration, error) {
	return BenchmarkLookup(l.prog, lk, repeat)
}

// SocketStates returns the state of every TPROXY target of the filter,
// read from its program's TargetsMap, in its pinned SocketsMap, with the
// process holding each socket when one can be found.
func (a *Active) SocketStates() ([]SocketState, error) {
	m, err := ebpf.LoadPinnedMap(filepath.Join(a.Place.Dir(), pinSockets), nil)
	if err != nil {
		return nil, fmt.Errorf("open sockets: %w", err)
	}
	defer m.Close()
	targets, err := a.programMap(abi.TargetsMap)
	if err != nil {
		return nil, err
	}
	defer targets.Close()
	var states []SocketState
	index := make(map[abi.SocketKey]int)
	value := make([]byte, targets.ValueSize())
	for id := range targets.MaxEntries() {
		if err := targets.Lookup(id, &value); err != nil {
			return nil, fmt.Errorf("read %s: %w", abi.TargetsMap, err)
		}
		var k abi.SocketKey
		if err := k.UnmarshalBinary(value[:len(value)-4]); err != nil {
			return nil, err
		}
		if k.Family == 0 {
			continue
		}
		i, ok := index[k]
		if !ok {
			i = len(states)
			index[k] = i
			states = append(states, SocketState{Key: k, Target: k.String()})
		}
		states[i].Rules = append(states[i].Rules, int(id))
	}
	var owners map[uint64]uint32 // cookie -> inode
	for i := range states {
		st := &states[i]
		var cookie uint64
		if m.Lookup(st.Key, &cookie) != nil {
			continue
		}
		st.Cookie = cookie
		if owners == nil {
			if owners, err = socketInodes(); err != nil {
				return states, err
			}
		}
		if ino, ok := owners[cookie]; ok {
			if o, err := socketOwner(ino); err == nil {
				st.Owner = &o
			}
		}
	}
	return states, nil
}

// programMap opens the map called name that the filter's program uses.
func (a *Active) programMap(name string) (*ebpf.Map, error) {
	info, err := a.Program.Info()
	if err != nil {
		return nil, fmt.Errorf("read %s program info: %w", a.Place.Hook, err)
	}
	ids, _ := info.MapIDs()
	for _, id := range ids {
		mp, err := ebpf.NewMapFromID(id)
		if err != nil {
			continue
		}
		if mi, err := mp.Info(); err == nil && mi.Name == name {
			return mp, nil
		}
		mp.Close()
	}
	return nil, fmt.Errorf("%s program has no map %s", a.Place.Hook, name)
}

// socketInodes maps the cookie of every listening TCP and unconnected UDP
// socket of the network namespace to its inode.
func socketInodes() (map[uint64]uint32, error) {
	out := make(map[uint64]uint32)
	for _, fam := range []uint8{unix.AF_INET, unix.AF_INET6} {
		for _, proto := range []uint8{unix.IPPROTO_TCP, unix.IPPROTO_UDP} {
			ss, err := diagDump(fam, proto)
			if err != nil {
				return nil, err
			}
			for _, s := range ss {
				out[s.cookie] = s.inode
			}
		}
	}
	return out, nil
}

// Register puts a socket handed over to bpfwall (systemd's LISTEN_FDS, or
// a descriptor of another process) into the pinned SocketsMap of the
// sk-lookup filter at place, as the socket of target: the TPROXY rules
// whose --on-ip and --on-port are target's take it. It returns the
// socket's cookie.
func Register(place Place, target abi.SocketKey, sock *os.File) (uint64, error) {
	m, err := ebpf.LoadPinnedMap(filepath.Join(place.Dir(), pinSockets), nil)
	if err != nil {
		return 0, fmt.Errorf("register socket for %s: open sockets of the sk-lookup filter: %w", target, err)
	}
	defer m.Close()
	if err := putSocket(m, target, sock); err != nil {
		return 0, fmt.Errorf("register socket for %s: %w", target, err)
	}
	var cookie uint64
	if err := m.Lookup(target, &cookie); err != nil {
		return 0, fmt.Errorf("register socket for %s: %w", target, err)
	}
	return cookie, nil
}

// SocketTarget returns the target a socket serves by its own address:
// its protocol, family, bound address and port.
func SocketTarget(sock *os.File) (abi.SocketKey, error) {
	var proto int
	var sa unix.Sockaddr
	err := withFD(sock, func(fd int) (err error) {
		if proto, err = unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_PROTOCOL); err != nil {
			return err
		}
		sa, err = unix.Getsockname(fd)
		return err
	})
	if err != nil {
		return abi.SocketKey{}, fmt.Errorf("socket %s: %w", sock.Name(), err)
	}
	k := abi.SocketKey{Proto: uint8(proto)}
	switch sa := sa.(type) {
	case *unix.SockaddrInet4:
		k.Family, k.Port = 4, uint16(sa.Port)
		copy(k.Addr[:], sa.Addr[:])
	case *unix.SockaddrInet6:
		k.Family, k.Port, k.Addr = 6, uint16(sa.Port), sa.Addr
	default:
		return abi.SocketKey{}, fmt.Errorf("socket %s is not an IP socket", sock.Name())
	}
	if k.Proto != unix.IPPROTO_TCP && k.Proto != unix.IPPROTO_UDP {
		return abi.SocketKey{}, fmt.Errorf("socket %s is neither TCP nor UDP (protocol %d)", sock.Name(), proto)
	}
	return k, nil
}

// CanServe says whether sock, whose own target is own, can take the
// lookups of target: bpf_sk_assign refuses a socket of another protocol,
// an IPv4 socket for an IPv6 lookup, and an IPV6_V6ONLY socket for an
// IPv4 one.
func CanServe(sock *os.File, own, target abi.SocketKey) error {
	if own.Proto != target.Proto {
		return fmt.Errorf("socket %s is %s, not %s", sock.Name(), rules.ProtoName(own.Proto), rules.ProtoName(target.Proto))
	}
	switch {
	case own.Family == target.Family:
		return nil
	case own.Family == 4:
		return fmt.Errorf("socket %s is IPv4 and cannot take IPv6 lookups", sock.Name())
	}
	var v6only int
	err := withFD(sock, func(fd int) (err error) {
		v6only, err = unix.GetsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_V6ONLY)
		return err
	})
	if err != nil {
		return fmt.Errorf("socket %s: %w", sock.Name(), err)
	}
	if v6only != 0 {
		return fmt.Errorf("socket %s is IPv6-only and cannot take IPv4 lookups", sock.Name())
	}
	return nil
}

// withFD calls f with f's descriptor without (*os.File).Fd, which would
// put the socket in blocking mode: a socket taken from another process
// shares that mode with the process's own descriptor, and a server whose
// listener blocks stops working.
func withFD(file *os.File, f func(fd int) error) error {
	rc, err := file.SyscallConn()
	if err != nil {
		return err
	}
	var ferr error
	if err := rc.Control(func(fd uintptr) { ferr = f(int(fd)) }); err != nil {
		return err
	}
	return ferr
}

// putSocket puts sock into the SOCKHASH m under key.
func putSocket(m *ebpf.Map, key abi.SocketKey, sock *os.File) error {
	return withFD(sock, func(fd int) error { return m.Update(key, uint64(fd), ebpf.UpdateAny) })
}
