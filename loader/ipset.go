package loader

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

// The kernel's ipsets, read over netlink (nfnetlink's ipset subsystem) as
// `ipset save` reads them, for rules that name a set when no --ipset file
// is given, as iptables finds its sets in the kernel. The compiled
// program holds the sets as they are at the load: a later `ipset add`
// reaches it at the next restore.

// ipset's netlink protocol (include/uapi/linux/netfilter/ipset/ip_set.h).
const (
	nfnlSubsysIPSet  = 6
	ipsetCmdList     = 7
	ipsetProtocol    = 7
	ipsetAttrProto   = 1
	ipsetAttrSetName = 2
	ipsetAttrType    = 3
	ipsetAttrFamily  = 5
	ipsetAttrData    = 7
	ipsetAttrADT     = 8

	// In the data of a set and of an entry.
	ipsetAttrIP         = 1
	ipsetAttrCIDR       = 3
	ipsetAttrTimeout    = 6
	ipsetAttrCadtFlags  = 8
	ipsetAttrBitmask    = 12
	ipsetAttrInitval    = 17
	ipsetAttrHashSize   = 18
	ipsetAttrMaxElem    = 19
	ipsetAttrNetmask    = 20
	ipsetAttrBucketSize = 21
	ipsetAttrBytes      = 24
	ipsetAttrPackets    = 25

	ipsetAttrIPv4 = 1
	ipsetAttrIPv6 = 2

	ipsetFlagNoMatch      = 1 << 2
	ipsetFlagWithCounters = 1 << 3
	ipsetFlagWithComment  = 1 << 4
	ipsetFlagWithForceAdd = 1 << 5
	ipsetFlagWithSkbInfo  = 1 << 6
)

// kernelSet is one set as the kernel lists it.
type kernelSet struct {
	name, typ string
	family    uint8
	options   []string
	entries   []string
	// partial: entries of this type are not read (only hash:ip and
	// hash:net are compiled; the lowering refuses the others by type).
	partial bool
}

// SaveKernelSets returns the ipsets of the calling thread's network
// namespace as `ipset save` prints them (the entries of hash:ip and
// hash:net sets; the create line only of the others, which bpfwall does
// not compile). Without the ip_set module there are no sets.
func SaveKernelSets() ([]byte, error) {
	conn, err := netlink.Dial(unix.NETLINK_NETFILTER, nil)
	if err != nil {
		return nil, fmt.Errorf("read the kernel's ipsets: %w", err)
	}
	defer conn.Close()
	ae := netlink.NewAttributeEncoder()
	ae.Uint8(ipsetAttrProto, ipsetProtocol)
	attrs, err := ae.Encode()
	if err != nil {
		return nil, err
	}
	// nfgenmsg: family AF_UNSPEC, version NFNETLINK_V0, resource 0.
	req := netlink.Message{
		Header: netlink.Header{Type: netlink.HeaderType(nfnlSubsysIPSet<<8 | ipsetCmdList), Flags: netlink.Request | netlink.Dump},
		Data:   append([]byte{unix.AF_UNSPEC, unix.NFNETLINK_V0, 0, 0}, attrs...),
	}
	msgs, err := conn.Execute(req)
	if err != nil {
		var oe *netlink.OpError
		if errors.As(err, &oe) && (errors.Is(oe.Err, unix.ENOENT) || errors.Is(oe.Err, unix.EPROTONOSUPPORT) || errors.Is(oe.Err, unix.EOPNOTSUPP)) {
			return nil, nil // no ip_set module: no sets
		}
		return nil, fmt.Errorf("read the kernel's ipsets: %w", err)
	}
	var order []string
	sets := make(map[string]*kernelSet)
	for _, m := range msgs {
		if len(m.Data) < 4 {
			continue
		}
		if err := decodeSetMessage(m.Data[4:], sets, &order); err != nil {
			return nil, fmt.Errorf("read the kernel's ipsets: %w", err)
		}
	}
	var b strings.Builder
	for _, name := range order {
		s := sets[name]
		family := "inet"
		if s.family == unix.NFPROTO_IPV6 {
			family = "inet6"
		}
		fmt.Fprintf(&b, "create %s %s family %s", s.name, s.typ, family)
		for _, o := range s.options {
			b.WriteString(" " + o)
		}
		b.WriteByte('\n')
		for _, e := range s.entries {
			fmt.Fprintf(&b, "add %s %s\n", s.name, e)
		}
	}
	return []byte(b.String()), nil
}

// decodeSetMessage adds what one message of the dump says (a set's
// header, some of its entries, or both) to sets.
func decodeSetMessage(data []byte, sets map[string]*kernelSet, order *[]string) error {
	ad, err := netlink.NewAttributeDecoder(data)
	if err != nil {
		return err
	}
	var s kernelSet
	var createData, adt []byte
	for ad.Next() {
		switch ad.Type() {
		case ipsetAttrSetName:
			s.name = ad.String()
		case ipsetAttrType:
			s.typ = ad.String()
		case ipsetAttrFamily:
			s.family = ad.Uint8()
		case ipsetAttrData:
			createData = ad.Bytes()
		case ipsetAttrADT:
			adt = ad.Bytes()
		}
	}
	if err := ad.Err(); err != nil {
		return err
	}
	if s.name == "" {
		return errors.New("a set without a name")
	}
	set := sets[s.name]
	if set == nil {
		set = &s
		set.partial = s.typ != "hash:ip" && s.typ != "hash:net"
		sets[s.name] = set
		*order = append(*order, s.name)
	}
	if createData != nil {
		if set.options, err = setOptions(createData); err != nil {
			return fmt.Errorf("set %s: %w", s.name, err)
		}
	}
	if adt == nil || set.partial {
		return nil
	}
	ad, err = netlink.NewAttributeDecoder(adt)
	if err != nil {
		return err
	}
	for ad.Next() {
		if ad.Type() != ipsetAttrData {
			continue
		}
		e, err := setEntry(ad.Bytes(), set.typ == "hash:net")
		if err != nil {
			return fmt.Errorf("set %s: %w", s.name, err)
		}
		set.entries = append(set.entries, e)
	}
	return ad.Err()
}

// setOptions returns a set's create options as ipset save writes them,
// in its order.
func setOptions(data []byte) ([]string, error) {
	ad, err := netlink.NewAttributeDecoder(data)
	if err != nil {
		return nil, err
	}
	opt := make(map[uint16]string)
	var flags uint32
	for ad.Next() {
		b := ad.Bytes()
		switch t := ad.Type(); t {
		case ipsetAttrHashSize, ipsetAttrMaxElem, ipsetAttrTimeout:
			opt[t] = strconv.FormatUint(uint64(be32(b)), 10)
		case ipsetAttrNetmask, ipsetAttrBucketSize:
			if len(b) > 0 {
				opt[t] = strconv.Itoa(int(b[0]))
			}
		case ipsetAttrInitval:
			opt[t] = fmt.Sprintf("0x%08x", be32(b))
		case ipsetAttrBitmask:
			mask, err := setAddr(b)
			if err != nil {
				return nil, err
			}
			opt[t] = mask.String()
		case ipsetAttrCadtFlags:
			flags = be32(b)
		}
	}
	var out []string
	for _, o := range []struct {
		attr uint16
		flag uint32
		word string
	}{
		{attr: ipsetAttrHashSize, word: "hashsize"},
		{attr: ipsetAttrMaxElem, word: "maxelem"},
		{attr: ipsetAttrNetmask, word: "netmask"},
		{attr: ipsetAttrBitmask, word: "bitmask"},
		{attr: ipsetAttrTimeout, word: "timeout"},
		{flag: ipsetFlagWithCounters, word: "counters"},
		{flag: ipsetFlagWithComment, word: "comment"},
		{flag: ipsetFlagWithSkbInfo, word: "skbinfo"},
		{flag: ipsetFlagWithForceAdd, word: "forceadd"},
		{attr: ipsetAttrBucketSize, word: "bucketsize"},
		{attr: ipsetAttrInitval, word: "initval"},
	} {
		if v, ok := opt[o.attr]; ok && o.attr != 0 {
			out = append(out, o.word, v)
		} else if o.flag != 0 && flags&o.flag != 0 {
			out = append(out, o.word)
		}
	}
	return out, ad.Err()
}

// setEntry returns an entry of a hash:ip or hash:net set as ipset save
// writes it: the address (with its prefix length in a hash:net set),
// then its timeout, counters and nomatch.
func setEntry(data []byte, net bool) (string, error) {
	ad, err := netlink.NewAttributeDecoder(data)
	if err != nil {
		return "", err
	}
	var addr netip.Addr
	cidr := -1
	var timeout, packets, bytes []string
	nomatch := false
	for ad.Next() {
		b := ad.Bytes()
		switch ad.Type() {
		case ipsetAttrIP:
			if addr, err = setAddr(b); err != nil {
				return "", err
			}
		case ipsetAttrCIDR:
			if len(b) > 0 {
				cidr = int(b[0])
			}
		case ipsetAttrTimeout:
			timeout = []string{"timeout", strconv.FormatUint(uint64(be32(b)), 10)}
		case ipsetAttrPackets:
			packets = []string{"packets", strconv.FormatUint(be64(b), 10)}
		case ipsetAttrBytes:
			bytes = []string{"bytes", strconv.FormatUint(be64(b), 10)}
		case ipsetAttrCadtFlags:
			nomatch = be32(b)&ipsetFlagNoMatch != 0
		}
	}
	opts := slices.Concat(timeout, packets, bytes)
	if err := ad.Err(); err != nil {
		return "", err
	}
	if !addr.IsValid() {
		return "", errors.New("an entry without an address")
	}
	elem := addr.String()
	if net && cidr >= 0 && cidr < addr.BitLen() {
		elem = netip.PrefixFrom(addr, cidr).String()
	}
	if nomatch {
		opts = append(opts, "nomatch")
	}
	return strings.Join(slices.Concat([]string{elem}, opts), " "), nil
}

// setAddr decodes an IPSET_ATTR_IP: a nested IPv4 or IPv6 address.
func setAddr(data []byte) (netip.Addr, error) {
	ad, err := netlink.NewAttributeDecoder(data)
	if err != nil {
		return netip.Addr{}, err
	}
	var a netip.Addr
	for ad.Next() {
		switch ad.Type() {
		case ipsetAttrIPv4, ipsetAttrIPv6:
			var ok bool
			if a, ok = netip.AddrFromSlice(ad.Bytes()); !ok {
				return netip.Addr{}, fmt.Errorf("bad address of %d bytes", len(ad.Bytes()))
			}
		}
	}
	return a, ad.Err()
}

func be32(b []byte) uint32 {
	if len(b) < 4 {
		return 0
	}
	return binary.BigEndian.Uint32(b)
}

func be64(b []byte) uint64 {
	if len(b) < 8 {
		return 0
	}
	return binary.BigEndian.Uint64(b)
}
