package bench

import (
	"errors"
	"fmt"
	"net"
	"runtime"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"bpfwall/internal/topology"
)

// sender floods one interface with copies of a frame from a packet
// socket, a batch per sendmmsg.
type sender struct {
	fd    int
	iface string
}

// sendBatch is how many frames one sendmmsg sends.
const sendBatch = 256

// openSender opens a packet socket on iface in namespace ns. Its protocol
// is 0, so it receives nothing: the kernel does not copy the frames it
// sends back to it, and they skip the qdisc (PACKET_QDISC_BYPASS).
func openSender(ns, iface string) (*sender, error) {
	s := &sender{fd: -1, iface: iface}
	err := topology.Do(ns, func() error {
		ifindex, err := netInterface(iface)
		if err != nil {
			return err
		}
		fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("packet socket: %w", err)
		}
		s.fd = fd
		if err := unix.Bind(fd, &unix.SockaddrLinklayer{Ifindex: ifindex}); err != nil {
			return fmt.Errorf("bind packet socket: %w", err)
		}
		return unix.SetsockoptInt(fd, unix.SOL_PACKET, unix.PACKET_QDISC_BYPASS, 1)
	})
	if err != nil {
		if s.fd >= 0 {
			unix.Close(s.fd)
		}
		return nil, fmt.Errorf("open sender on %s in %s: %w", iface, ns, err)
	}
	return s, nil
}

// netInterface returns the index of the interface called name in the
// calling thread's network namespace.
func netInterface(name string) (int, error) {
	ifi, err := net.InterfaceByName(name)
	if err != nil {
		return 0, err
	}
	return ifi.Index, nil
}

func (s *sender) Close() error { return unix.Close(s.fd) }

// mmsghdr is struct mmsghdr.
type mmsghdr struct {
	hdr unix.Msghdr
	len uint32
	_   [4]byte
}

// flood sends frame for about d from a thread pinned to cpu and returns
// how many frames the kernel took, and in how long. The veth hands each one to the firewall's
// namespace on the same CPU, so the firewall's work slows the sender
// down: the rate sent is the rate the firewall keeps up with.
func (s *sender) flood(frame []byte, d time.Duration, cpu int) (uint64, time.Duration, error) {
	type result struct {
		sent uint64
		took time.Duration
		err  error
	}
	done := make(chan result, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread's affinity changed
		var set unix.CPUSet
		set.Set(cpu)
		if err := unix.SchedSetaffinity(0, &set); err != nil {
			done <- result{err: fmt.Errorf("pin sender to cpu %d: %w", cpu, err)}
			return
		}
		iov := unix.Iovec{Base: &frame[0]}
		iov.SetLen(len(frame))
		msgs := make([]mmsghdr, sendBatch)
		for i := range msgs {
			msgs[i].hdr.Iov = &iov
			msgs[i].hdr.SetIovlen(1)
		}
		var sent uint64
		start := time.Now()
		deadline := start.Add(d)
		for i := 0; ; i++ {
			if i%16 == 0 && time.Now().After(deadline) {
				break
			}
			n, _, errno := unix.Syscall6(unix.SYS_SENDMMSG, uintptr(s.fd), uintptr(unsafe.Pointer(&msgs[0])), sendBatch, 0, 0, 0)
			switch {
			case errno == 0:
				sent += uint64(n)
			case errors.Is(errno, unix.ENOBUFS), errors.Is(errno, unix.EAGAIN), errors.Is(errno, unix.EINTR):
				// The receiving queue is full: the frame is lost, as on a wire.
			default:
				done <- result{err: fmt.Errorf("sendmmsg on %s: %w", s.iface, errno)}
				return
			}
		}
		took := time.Since(start)
		runtime.KeepAlive(frame)
		runtime.KeepAlive(msgs)
		done <- result{sent: sent, took: took}
	}()
	r := <-done
	return r.sent, r.took, r.err
}
