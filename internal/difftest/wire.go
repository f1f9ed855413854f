package difftest

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"net"
	"runtime"
	"sync/atomic"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"golang.org/x/sys/unix"
)

// ipPacket returns the IP packet in an Ethernet frame, VLAN tags skipped
// and link-layer padding trimmed, or nil when there is none.
func ipPacket(frame []byte) []byte {
	if len(frame) < 14 {
		return nil
	}
	off, etherType := 14, binary.BigEndian.Uint16(frame[12:])
	for (etherType == 0x8100 || etherType == 0x88a8) && len(frame) >= off+4 {
		etherType = binary.BigEndian.Uint16(frame[off+2:])
		off += 4
	}
	b := frame[off:]
	switch {
	case etherType == 0x0800 && len(b) >= 20:
		if n := int(binary.BigEndian.Uint16(b[2:])); n >= 20 && n <= len(b) {
			return b[:n]
		}
	case etherType == 0x86dd && len(b) >= 40:
		if n := 40 + int(binary.BigEndian.Uint16(b[4:])); n <= len(b) {
			return b[:n]
		}
	}
	return nil
}

// probeKey identifies a probe as it leaves the firewall: its IP packet
// with the TTL (hop limit) one less, as forwarding leaves it, and the IPv4
// header checksum, which forwarding rewrites, zeroed. Probes need no tag
// of their own, which could change what the rules match; probes with the
// same key go in different batches (see batches).
func probeKey(frame []byte) (string, bool) {
	return ipKey(frame, 1)
}

// arrivalKey is probeKey of a frame that reached the receiver.
func arrivalKey(frame []byte) (string, bool) {
	return ipKey(frame, 0)
}

func ipKey(frame []byte, hops uint8) (string, bool) {
	ip := ipPacket(frame)
	if ip == nil {
		return "", false
	}
	k := bytes.Clone(ip)
	if k[0]>>4 == 4 {
		k[8] -= hops
		k[10], k[11] = 0, 0
	} else {
		k[7] -= hops
	}
	return string(k), true
}

// batches splits the probes into batches of at most size probes in which
// no two probes have the same key; each batch maps keys to probe indexes.
// Probes without a key are left out: they are not IP, and never forwarded.
func batches(probes [][]byte, size int, key func([]byte) (string, bool)) []map[string]int {
	var out []map[string]int
	for i, f := range probes {
		k, ok := key(f)
		if !ok {
			continue // not an IP packet: it is never forwarded
		}
		placed := false
		for _, b := range out {
			if _, dup := b[k]; !dup && len(b) < size {
				b[k], placed = i, true
				break
			}
		}
		if !placed {
			out = append(out, map[string]int{k: i})
		}
	}
	return out
}

var sentinelSeq atomic.Uint32

// sentinel is an ARP request from the sender for the firewall's address,
// and the hardware address that marks its reply: the request claims a
// hardware address of its own, which the reply is sent to. ARP, not IP,
// so that no rule and no compiled program stops it.
func sentinel() (frame []byte, mark net.HardwareAddr) {
	seq := sentinelSeq.Add(1)
	mark = net.HardwareAddr{0x02, 0xb0, 0x0f, byte(seq >> 16), byte(seq >> 8), byte(seq)}
	eth := &layers.Ethernet{SrcMAC: senderMAC, DstMAC: fwInMAC, EthernetType: layers.EthernetTypeARP}
	arp := &layers.ARP{
		AddrType: layers.LinkTypeEthernet, Protocol: layers.EthernetTypeIPv4,
		HwAddressSize: 6, ProtAddressSize: 4, Operation: layers.ARPRequest,
		SourceHwAddress: mark, SourceProtAddress: senderAddr.AsSlice(),
		DstHwAddress: make([]byte, 6), DstProtAddress: fwAddr.AsSlice(),
	}
	buf := gopacket.NewSerializeBuffer()
	if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{}, eth, arp); err != nil {
		panic(err) // fixed layers always serialize
	}
	return buf.Bytes(), mark
}

// isReply reports whether frame is the firewall's ARP reply to the
// sentinel marked mark.
func isReply(frame []byte, mark net.HardwareAddr) bool {
	const arpOff = 14
	return len(frame) >= arpOff+28 &&
		binary.BigEndian.Uint16(frame[12:]) == 0x0806 &&
		binary.BigEndian.Uint16(frame[arpOff+6:]) == 2 && // ARPOP_REPLY
		bytes.Equal(frame[arpOff+18:arpOff+24], mark) // target hardware address
}

// sentinelTimeout bounds the wait for the firewall's reply. The reply
// comes within microseconds; the bound only has to outlast a machine
// busy with other tests (2 s did not, once, with several suites running).
const sentinelTimeout = 10 * time.Second

// sentinelResend is how long awaitReply waits before it sends the
// sentinel again.
const sentinelResend = 2 * time.Second

// sendBatch sends frames from the sender and returns the frames that
// reached the receiver.
//
// The end of a batch is marked by an ARP request to the firewall: every
// frame is sent from one CPU, so the veths queue them on that CPU's
// backlog, which the kernel processes in order; when the ARP reply is back
// at the sender, every earlier probe has been forwarded to the receiver's
// socket or dropped. No probe waits for a timeout.
func (topo *Topology) sendBatch(frames [][]byte) ([][]byte, error) {
	if err := topo.recv.drain(); err != nil {
		return nil, err
	}
	if err := topo.send.drain(); err != nil {
		return nil, err
	}
	if _, err := topo.recv.drops(); err != nil {
		return nil, err
	}
	end, mark := sentinel()
	if err := onOneCPU(func() error {
		for _, f := range frames {
			if err := topo.send.send(f); err != nil {
				return err
			}
		}
		return topo.send.send(end)
	}); err != nil {
		return nil, err
	}
	if err := topo.awaitReply(mark, end); err != nil {
		return nil, err
	}
	var got [][]byte
	buf := make([]byte, 1<<16)
	for {
		f, err := topo.recv.recv(buf, 0)
		if err != nil {
			return nil, err
		}
		if f == nil {
			break
		}
		got = append(got, bytes.Clone(f))
	}
	if n, err := topo.recv.drops(); err != nil || n > 0 {
		return nil, fmt.Errorf("receiver socket dropped %d frames (%v)", n, err)
	}
	return got, nil
}

// awaitReply waits for the firewall's reply to the sentinel end, marked
// mark. It sends end again every sentinelResend: a loaded machine's
// backlog can drop the request itself, after the probes it follows
// were processed.
func (topo *Topology) awaitReply(mark net.HardwareAddr, end []byte) error {
	buf := make([]byte, 1<<16)
	deadline := time.Now().Add(sentinelTimeout)
	resend := time.Now().Add(sentinelResend)
	for {
		f, err := topo.send.recv(buf, min(time.Until(deadline), time.Until(resend)))
		if err != nil {
			return err
		}
		if f == nil && time.Now().Before(deadline) {
			if err := topo.send.send(end); err != nil {
				return err
			}
			resend = time.Now().Add(sentinelResend)
			continue
		}
		if f == nil {
			return fmt.Errorf("no arp reply from the firewall %s within %v", fwAddr, sentinelTimeout)
		}
		if isReply(f, mark) {
			return nil
		}
	}
}

// onOneCPU runs f on a thread pinned to one CPU.
func onOneCPU(f func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		var saved, one unix.CPUSet
		if err := unix.SchedGetaffinity(0, &saved); err != nil {
			errc <- fmt.Errorf("get cpu affinity: %w", err)
			return
		}
		for cpu := 0; cpu < 1024; cpu++ {
			if saved.IsSet(cpu) {
				one.Set(cpu)
				break
			}
		}
		if err := unix.SchedSetaffinity(0, &one); err != nil {
			errc <- fmt.Errorf("pin to one cpu: %w", err)
			return
		}
		ferr := f()
		// A thread that cannot be unpinned dies with the goroutine.
		if unix.SchedSetaffinity(0, &saved) == nil {
			runtime.UnlockOSThread()
		}
		errc <- ferr
	}()
	return <-errc
}
