package loader

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"

	"bpfwall/codegen/abi"
)

// ErrNoSocket is returned, wrapped, when no socket in the network
// namespace fits a TPROXY target.
var ErrNoSocket = errors.New("no socket")

// FoundSocket is a socket found in the network namespace, with a
// descriptor for it in this process.
type FoundSocket struct {
	FD     *os.File
	Owner  Owner
	Cookie uint64
}

// diagSocket is one socket sock_diag reports.
type diagSocket struct {
	addr   netip.AddrPort
	inode  uint32
	cookie uint64
	ifidx  uint32
	v6only bool
}

// FindSocket finds the socket a TPROXY target steers to: the TCP socket
// listening on, or the unconnected UDP socket bound to, its address and
// port, as the kernel's listener lookup in xt_TPROXY would: a socket bound
// to the address itself before one bound to the unspecified address, and
// for IPv4 a dual-stack IPv6 socket on [::] last. A target without
// --on-ip takes a socket on the unspecified address. The descriptor is
// taken from the process that holds the socket with pidfd_getfd.
func FindSocket(k abi.SocketKey) (*FoundSocket, error) {
	var cands []diagSocket
	for _, fam := range []uint8{unix.AF_INET, unix.AF_INET6} {
		ss, err := diagDump(fam, k.Proto)
		if err != nil {
			return nil, err
		}
		cands = append(cands, ss...)
	}
	want := k.AddrPort()
	var unspec4, unspec6 netip.Addr = netip.IPv4Unspecified(), netip.IPv6Unspecified()
	var order []func(s diagSocket) bool
	if k.Family == 4 {
		if !want.Addr().IsUnspecified() {
			order = append(order, func(s diagSocket) bool { return s.addr.Addr() == want.Addr() })
		}
		order = append(order,
			func(s diagSocket) bool { return s.addr.Addr() == unspec4 },
			func(s diagSocket) bool { return s.addr.Addr() == unspec6 && !s.v6only })
	} else {
		if !want.Addr().IsUnspecified() {
			order = append(order, func(s diagSocket) bool { return s.addr.Addr() == want.Addr() })
		}
		order = append(order, func(s diagSocket) bool { return s.addr.Addr() == unspec6 })
	}
	for _, fits := range order {
		for _, s := range cands {
			if s.addr.Port() != k.Port || s.ifidx != 0 || !fits(s) {
				continue
			}
			owner, err := socketOwner(s.inode)
			if err != nil {
				continue // a socket no process holds (closing)
			}
			f, err := stealFD(owner)
			if err != nil {
				return nil, fmt.Errorf("socket for %s: %w", k, err)
			}
			return &FoundSocket{FD: f, Owner: owner, Cookie: s.cookie}, nil
		}
	}
	return nil, fmt.Errorf("socket for %s: %w", k, ErrNoSocket)
}

// Netlink sock_diag constants (linux/sock_diag.h, linux/inet_diag.h).
const (
	sockDiagByFamily = 20
	inetDiagSKV6Only = 11
	tcpListen        = 10
	tcpClose         = 7
	inetDiagMsgLen   = 72
)

// diagDump lists the listening TCP or unconnected UDP sockets of a family
// in the calling thread's network namespace.
func diagDump(family, proto uint8) ([]diagSocket, error) {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, unix.NETLINK_SOCK_DIAG)
	if err != nil {
		return nil, fmt.Errorf("sock_diag: %w", err)
	}
	defer unix.Close(fd)
	state := uint32(1 << tcpListen)
	if proto == unix.IPPROTO_UDP {
		state = 1 << tcpClose
	}
	req := make([]byte, 16+56)
	ne := binary.NativeEndian
	ne.PutUint32(req[0:], uint32(len(req)))
	ne.PutUint16(req[4:], sockDiagByFamily)
	ne.PutUint16(req[6:], unix.NLM_F_REQUEST|unix.NLM_F_DUMP)
	ne.PutUint32(req[8:], 1)
	req[16], req[17] = family, proto
	ne.PutUint32(req[20:], state)
	if err := unix.Sendto(fd, req, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return nil, fmt.Errorf("sock_diag: %w", err)
	}
	var out []diagSocket
	buf := make([]byte, 1<<16)
	for {
		n, _, err := unix.Recvfrom(fd, buf, 0)
		if err != nil {
			return nil, fmt.Errorf("sock_diag: %w", err)
		}
		msgs, err := syscall.ParseNetlinkMessage(buf[:n])
		if err != nil {
			return nil, fmt.Errorf("sock_diag: %w", err)
		}
		for _, m := range msgs {
			switch m.Header.Type {
			case unix.NLMSG_DONE:
				return out, nil
			case unix.NLMSG_ERROR:
				if len(m.Data) >= 4 {
					if e := int32(ne.Uint32(m.Data)); e != 0 {
						return nil, fmt.Errorf("sock_diag: %w", unix.Errno(-e))
					}
				}
				return out, nil
			}
			if s, ok := parseDiagMsg(m.Data); ok {
				out = append(out, s)
			}
		}
	}
}

func parseDiagMsg(b []byte) (diagSocket, bool) {
	if len(b) < inetDiagMsgLen {
		return diagSocket{}, false
	}
	ne := binary.NativeEndian
	port := binary.BigEndian.Uint16(b[4:])
	var a netip.Addr
	if b[0] == unix.AF_INET {
		a = netip.AddrFrom4([4]byte(b[8:12]))
	} else {
		a = netip.AddrFrom16([16]byte(b[8:24]))
	}
	s := diagSocket{
		addr:   netip.AddrPortFrom(a, port),
		ifidx:  ne.Uint32(b[40:]),
		cookie: uint64(ne.Uint32(b[44:])) | uint64(ne.Uint32(b[48:]))<<32,
		inode:  ne.Uint32(b[68:]),
	}
	for attrs := b[inetDiagMsgLen:]; len(attrs) >= 4; {
		l := int(ne.Uint16(attrs))
		if l < 4 || l > len(attrs) {
			break
		}
		if ne.Uint16(attrs[2:]) == inetDiagSKV6Only && l >= 5 {
			s.v6only = attrs[4] != 0
		}
		attrs = attrs[min((l+3)&^3, len(attrs)):]
	}
	return s, true
}

// socketOwner finds a process holding the socket with inode ino, and
// its descriptor, in /proc.
func socketOwner(ino uint32) (Owner, error) {
	want := "socket:[" + strconv.FormatUint(uint64(ino), 10) + "]"
	procs, err := os.ReadDir("/proc")
	if err != nil {
		return Owner{}, err
	}
	for _, p := range procs {
		pid, err := strconv.Atoi(p.Name())
		if err != nil {
			continue
		}
		dir := filepath.Join("/proc", p.Name(), "fd")
		fds, err := os.ReadDir(dir)
		if err != nil {
			continue
		}
		for _, f := range fds {
			if l, err := os.Readlink(filepath.Join(dir, f.Name())); err == nil && l == want {
				fd, _ := strconv.Atoi(f.Name())
				return Owner{PID: pid, FD: fd}, nil
			}
		}
	}
	return Owner{}, fmt.Errorf("no process holds socket inode %d", ino)
}

// ProcessSocket returns a descriptor for descriptor fd of process pid
// (pidfd_getfd), for Register.
func ProcessSocket(pid, fd int) (*os.File, error) { return stealFD(Owner{PID: pid, FD: fd}) }

// stealFD duplicates a descriptor of another process into this one.
func stealFD(o Owner) (*os.File, error) {
	pidfd, err := unix.PidfdOpen(o.PID, 0)
	if err != nil {
		return nil, fmt.Errorf("pidfd_open %d: %w", o.PID, err)
	}
	defer unix.Close(pidfd)
	fd, err := unix.PidfdGetfd(pidfd, o.FD, 0)
	if err != nil {
		return nil, fmt.Errorf("pidfd_getfd pid %d fd %d: %w", o.PID, o.FD, err)
	}
	return os.NewFile(uintptr(fd), fmt.Sprintf("socket of pid %d fd %d", o.PID, o.FD)), nil
}
