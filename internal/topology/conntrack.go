package topology

import (
	"encoding/binary"
	"fmt"

	"golang.org/x/sys/unix"
)

// Conntrack netlink (linux/netfilter/nfnetlink.h, nfnetlink_conntrack.h).
const (
	nfnlSubsysCTNetlink = 1
	ipctnlMsgCTDelete   = 2
)

// FlushConntrack deletes every conntrack entry of network namespace ns,
// both families, as `conntrack -F` does: an IPCTNL_MSG_CT_DELETE without
// a tuple.
func FlushConntrack(ns string) error {
	return Do(ns, func() error {
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
