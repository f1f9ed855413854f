package difftest

import (
	"encoding/binary"
	"fmt"

	"golang.org/x/sys/unix"

	"bpfwall/internal/topology"
)

// Conntrack netlink (linux/netfilter/nfnetlink.h, nfnetlink_conntrack.h).
const (
	nfnlSubsysCTNetlink = 1
	ipctnlMsgCTDelete   = 2
)

// flushConntrack deletes every conntrack entry in the firewall, as
// `conntrack -F` does: an IPCTNL_MSG_CT_DELETE without a tuple.
func (topo *Topology) flushConntrack() error {
	return topology.Do(topo.Firewall, func() error {
		fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_NETFILTER)
		if err != nil {
			return fmt.Errorf("netfilter netlink socket: %w", err)
		}
		defer unix.Close(fd)
		for seq, family := range []byte{unix.AF_INET, unix.AF_INET6} {
			msg := make([]byte, unix.NLMSG_HDRLEN+4)
			binary.NativeEndian.PutUint32(msg[0:], uint32(len(msg)))
			binary.NativeEndian.PutUint16(msg[4:], nfnlSubsysCTNetlink<<8|ipctnlMsgCTDelete)
			binary.NativeEndian.PutUint16(msg[6:], unix.NLM_F_REQUEST|unix.NLM_F_ACK)
			binary.NativeEndian.PutUint32(msg[8:], uint32(seq+1))
			msg[unix.NLMSG_HDRLEN] = family // struct nfgenmsg: family, version 0, res_id 0
			if err := unix.Sendto(fd, msg, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
				return fmt.Errorf("flush conntrack: %w", err)
			}
			buf := make([]byte, 4096)
			n, _, err := unix.Recvfrom(fd, buf, 0)
			if err != nil {
				return fmt.Errorf("flush conntrack: %w", err)
			}
			if n < unix.NLMSG_HDRLEN+4 || binary.NativeEndian.Uint16(buf[4:]) != unix.NLMSG_ERROR {
				return fmt.Errorf("flush conntrack: unexpected answer of %d bytes", n)
			}
			// struct nlmsgerr: 0 acknowledges; ENOENT says the table was empty.
			if errno := -int32(binary.NativeEndian.Uint32(buf[unix.NLMSG_HDRLEN:])); errno != 0 && unix.Errno(errno) != unix.ENOENT {
				return fmt.Errorf("flush conntrack: %w", unix.Errno(errno))
			}
		}
		return nil
	})
}

// flowKey names the connection a ConntrackNew probe starts, the same for
// both directions: two probes of one connection in a batch would make
// the second a reply (ESTABLISHED).
func flowKey(frame []byte) string {
	ip := ipPacket(frame)
	var src, dst []byte
	var proto uint8
	var l4 []byte
	if ip[0]>>4 == 4 {
		src, dst, proto, l4 = ip[12:16], ip[16:20], ip[9], ip[int(ip[0]&0x0f)*4:]
	} else {
		src, dst, proto, l4 = ip[8:24], ip[24:40], ip[6], ip[40:]
	}
	a, b := string(src)+string(l4[0:2]), string(dst)+string(l4[2:4])
	if proto == 1 || proto == 58 { // echo requests: the id is the "port"
		a, b = string(src)+string(l4[4:6]), string(dst)+string(l4[4:6])
	}
	if b < a {
		a, b = b, a
	}
	return string(proto) + a + b
}
