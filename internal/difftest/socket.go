package difftest

import (
	"errors"
	"fmt"
	"net"
	"time"

	"golang.org/x/sys/unix"

	"bpfwall/internal/topology"
)

// packetSocket is an AF_PACKET socket bound to one interface, seeing
// frames of every protocol.
type packetSocket struct {
	fd      int
	ifindex int
	iface   string
}

const ethPAll = 0x0003 // ETH_P_ALL

func htons(v uint16) uint16 { return v<<8 | v>>8 }

// openPacketSocket opens a packet socket on iface in namespace ns.
func openPacketSocket(ns, iface string) (*packetSocket, error) {
	s := &packetSocket{fd: -1, iface: iface}
	err := topology.Do(ns, func() error {
		ifi, err := net.InterfaceByName(iface)
		if err != nil {
			return err
		}
		s.ifindex = ifi.Index
		fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, int(htons(ethPAll)))
		if err != nil {
			return fmt.Errorf("packet socket: %w", err)
		}
		s.fd = fd
		if err := unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: htons(ethPAll), Ifindex: ifi.Index}); err != nil {
			return fmt.Errorf("bind packet socket: %w", err)
		}
		// Room for thousands of small frames: a batch is read only once
		// the sentinel is back.
		return unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, 16<<20)
	})
	if err != nil {
		if s.fd >= 0 {
			unix.Close(s.fd)
		}
		return nil, fmt.Errorf("open packet socket on %s in %s: %w", iface, ns, err)
	}
	return s, nil
}

func (s *packetSocket) Close() error { return unix.Close(s.fd) }

// send transmits one frame as it is.
func (s *packetSocket) send(frame []byte) error {
	if err := unix.Sendto(s.fd, frame, 0, &unix.SockaddrLinklayer{Ifindex: s.ifindex, Halen: 6}); err != nil {
		return fmt.Errorf("send %d-byte frame on %s: %w", len(frame), s.iface, err)
	}
	return nil
}

// recv returns the next frame that arrived on the interface (not one sent
// from it), waiting up to timeout; it returns nil when none came. A zero
// timeout does not wait.
func (s *packetSocket) recv(buf []byte, timeout time.Duration) ([]byte, error) {
	deadline := time.Now().Add(timeout)
	for {
		n, from, err := unix.Recvfrom(s.fd, buf, unix.MSG_DONTWAIT|unix.MSG_TRUNC)
		switch {
		case errors.Is(err, unix.EAGAIN):
			left := time.Until(deadline)
			if left <= 0 {
				return nil, nil
			}
			fds := []unix.PollFd{{Fd: int32(s.fd), Events: unix.POLLIN}}
			if _, err := unix.Poll(fds, int(left.Milliseconds())+1); err != nil && !errors.Is(err, unix.EINTR) {
				return nil, fmt.Errorf("poll on %s: %w", s.iface, err)
			}
			continue
		case errors.Is(err, unix.EINTR):
			continue
		case err != nil:
			return nil, fmt.Errorf("receive on %s: %w", s.iface, err)
		}
		if ll, ok := from.(*unix.SockaddrLinklayer); ok && ll.Pkttype == unix.PACKET_OUTGOING {
			continue
		}
		if n > len(buf) {
			return nil, fmt.Errorf("receive on %s: %d-byte frame truncated to %d", s.iface, n, len(buf))
		}
		return buf[:n], nil
	}
}

// drain discards every frame queued on the socket.
func (s *packetSocket) drain() error {
	buf := make([]byte, 1<<16)
	for {
		f, err := s.recv(buf, 0)
		if f == nil || err != nil {
			return err
		}
	}
}

// drops returns how many frames the socket dropped for want of buffer
// since the last call (PACKET_STATISTICS resets them).
func (s *packetSocket) drops() (uint32, error) {
	st, err := unix.GetsockoptTpacketStats(s.fd, unix.SOL_PACKET, unix.PACKET_STATISTICS)
	if err != nil {
		return 0, fmt.Errorf("packet statistics on %s: %w", s.iface, err)
	}
	return st.Drops, nil
}
