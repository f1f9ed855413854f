package kernel

import (
	"encoding/binary"
	"fmt"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

// dumpNftables sends an nf_tables dump request of type msg and returns
// the attributes of each reply, after its nfgenmsg header; what names the
// request in the error when the kernel refuses it.
func dumpNftables(family nftables.TableFamily, msg int, attrs []netlink.Attribute, what string) ([][]byte, error) {
	conn, err := netlink.Dial(unix.NETLINK_NETFILTER, nil)
	if err != nil {
		return nil, fmt.Errorf("open netlink: %w", err)
	}
	defer conn.Close()
	data, err := netlink.MarshalAttributes(attrs)
	if err != nil {
		return nil, err
	}
	msgs, err := conn.Execute(netlink.Message{
		Header: netlink.Header{
			Type:  netlink.HeaderType(unix.NFNL_SUBSYS_NFTABLES<<8 | msg),
			Flags: netlink.Request | netlink.Dump,
		},
		// struct nfgenmsg: family, version, resource id.
		Data: append([]byte{byte(family), unix.NFNETLINK_V0, 0, 0}, data...),
	})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	var replies [][]byte
	for _, m := range msgs {
		if len(m.Data) >= 4 {
			replies = append(replies, m.Data[4:])
		}
	}
	return replies, nil
}

// nftSetElemCatchAll is NFT_SET_ELEM_CATCHALL: the element "*".
const nftSetElemCatchAll = 0x2

// mapVerdicts reads the verdicts of a verdict map's elements, by key:
// google/nftables v0.3.0 drops an element's verdict data when it lists
// elements (it keeps only NFTA_DATA_VALUE), so they are asked for here.
func mapVerdicts(t *nftables.Table, s *nftables.Set) (map[string]*expr.Verdict, error) {
	replies, err := dumpNftables(t.Family, unix.NFT_MSG_GETSETELEM, []netlink.Attribute{
		{Type: unix.NFTA_SET_ELEM_LIST_TABLE, Data: []byte(t.Name + "\x00")},
		{Type: unix.NFTA_SET_ELEM_LIST_SET, Data: []byte(s.Name + "\x00")},
	}, "list elements of map "+s.Name)
	if err != nil {
		return nil, err
	}
	out := map[string]*expr.Verdict{}
	for _, attrs := range replies {
		ad, err := netlink.NewAttributeDecoder(attrs)
		if err != nil {
			return nil, err
		}
		for ad.Next() {
			if ad.Type() != unix.NFTA_SET_ELEM_LIST_ELEMENTS {
				continue
			}
			ad.Nested(func(list *netlink.AttributeDecoder) error {
				for list.Next() {
					list.Nested(func(el *netlink.AttributeDecoder) error {
						var key []byte
						var v *expr.Verdict
						for el.Next() {
							switch el.Type() {
							case unix.NFTA_SET_ELEM_FLAGS:
								// nf_tables' attributes are big-endian.
								if b := el.Bytes(); len(b) == 4 && binary.BigEndian.Uint32(b)&nftSetElemCatchAll != 0 {
									key = []byte{} // it has no key
								}
							case unix.NFTA_SET_ELEM_KEY:
								el.Nested(func(d *netlink.AttributeDecoder) error {
									for d.Next() {
										if d.Type() == unix.NFTA_DATA_VALUE {
											key = d.Bytes()
										}
									}
									return nil
								})
							case unix.NFTA_SET_ELEM_DATA:
								el.Nested(func(d *netlink.AttributeDecoder) error {
									for d.Next() {
										if d.Type() == unix.NFTA_DATA_VERDICT {
											v = decodeVerdict(d.Bytes())
										}
									}
									return nil
								})
							}
						}
						if key != nil && v != nil {
							out[string(key)] = v
						}
						return nil
					})
				}
				return nil
			})
		}
		if err := ad.Err(); err != nil {
			return nil, fmt.Errorf("list elements of map %s: %w", s.Name, err)
		}
	}
	return out, nil
}

// decodeVerdict reads a nested NFTA_DATA_VERDICT.
func decodeVerdict(b []byte) *expr.Verdict {
	ad, err := netlink.NewAttributeDecoder(b)
	if err != nil {
		return nil
	}
	v := &expr.Verdict{}
	for ad.Next() {
		switch ad.Type() {
		case unix.NFTA_VERDICT_CODE:
			v.Kind = expr.VerdictKind(int32(binary.BigEndian.Uint32(ad.Bytes())))
		case unix.NFTA_VERDICT_CHAIN:
			v.Chain = string(trimNUL(ad.Bytes()))
		}
	}
	if ad.Err() != nil {
		return nil
	}
	return v
}

func trimNUL(b []byte) []byte {
	for len(b) > 0 && b[len(b)-1] == 0 {
		b = b[:len(b)-1]
	}
	return b
}

// libraryExprs are the expressions google/nftables v0.3.0 decodes; it
// leaves out every other one without a word (expr.exprFromName), which
// would read "socket transparent 1 accept" as "accept".
var libraryExprs = map[string]bool{
	"ct": true, "range": true, "meta": true, "cmp": true, "counter": true, "objref": true, "payload": true,
	"lookup": true, "immediate": true, "bitwise": true, "redir": true, "nat": true, "limit": true, "quota": true,
	"dynset": true, "log": true, "exthdr": true, "match": true, "target": true, "connlimit": true, "queue": true,
	"flow_offload": true, "reject": true, "masq": true, "hash": true, "cthelper": true, "synproxy": true,
	"ctexpect": true, "secmark": true, "cttimeout": true, "fib": true, "numgen": true, "notrack": true,
}

// rawExpr is an expression of a rule as the kernel lists it.
type rawExpr struct {
	name string
	data []byte
}

// rawRules lists the expressions of a chain's rules by rule handle.
func rawRules(t *nftables.Table, chain string) (map[uint64][]rawExpr, error) {
	replies, err := dumpNftables(t.Family, unix.NFT_MSG_GETRULE, []netlink.Attribute{
		{Type: unix.NFTA_RULE_TABLE, Data: []byte(t.Name + "\x00")},
		{Type: unix.NFTA_RULE_CHAIN, Data: []byte(chain + "\x00")},
	}, fmt.Sprintf("list rules of %s/%s", t.Name, chain))
	if err != nil {
		return nil, err
	}
	out := map[uint64][]rawExpr{}
	for _, attrs := range replies {
		ad, err := netlink.NewAttributeDecoder(attrs)
		if err != nil {
			return nil, err
		}
		var handle uint64
		var exprs []rawExpr
		for ad.Next() {
			switch ad.Type() {
			case unix.NFTA_RULE_HANDLE:
				handle = binary.BigEndian.Uint64(ad.Bytes())
			case unix.NFTA_RULE_EXPRESSIONS:
				ad.Nested(func(list *netlink.AttributeDecoder) error {
					for list.Next() {
						list.Nested(func(e *netlink.AttributeDecoder) error {
							var x rawExpr
							for e.Next() {
								switch e.Type() {
								case unix.NFTA_EXPR_NAME:
									x.name = string(trimNUL(e.Bytes()))
								case unix.NFTA_EXPR_DATA:
									x.data = e.Bytes()
								}
							}
							exprs = append(exprs, x)
							return nil
						})
					}
					return nil
				})
			}
		}
		if err := ad.Err(); err != nil {
			return nil, fmt.Errorf("list rules of %s/%s: %w", t.Name, chain, err)
		}
		out[handle] = exprs
	}
	return out, nil
}

// completeExprs puts back the expressions the library left out of a rule:
// tproxy, decoded here, and an error for any other. Matches and targets
// are decoded here too (xtRaw).
func completeExprs(lib []expr.Any, raw []rawExpr) ([]expr.Any, error) {
	var out []expr.Any
	j := 0
	for _, r := range raw {
		switch {
		case r.name == "match" || r.name == "target":
			// Decoded here, from the info bytes the kernel lists.
			if j >= len(lib) {
				return nil, fmt.Errorf("the rule's expressions do not line up with the kernel's list")
			}
			j++
			e, err := xtRaw(r.data, r.name == "target")
			if err != nil {
				return nil, fmt.Errorf("%s: %w", r.name, err)
			}
			out = append(out, e)
		case libraryExprs[r.name]:
			if j >= len(lib) {
				return nil, fmt.Errorf("the rule's expressions do not line up with the kernel's list")
			}
			out = append(out, lib[j])
			j++
		case r.name == "byteorder":
			bo, err := decodeByteorder(r.data)
			if err != nil {
				return nil, err
			}
			out = append(out, bo)
		case r.name == "tproxy":
			tp, err := decodeTProxy(r.data)
			if err != nil {
				return nil, err
			}
			out = append(out, tp)
		default:
			return nil, fmt.Errorf("expression %s is not supported", r.name)
		}
	}
	if j != len(lib) {
		return nil, fmt.Errorf("the rule's expressions do not line up with the kernel's list")
	}
	return out, nil
}

// decodeByteorder reads the NFTA_BYTEORDER_* attributes (sreg, dreg, op,
// len, size: 1 to 5) of a byteorder expression, which google/nftables
// v0.3.0 does not decode.
func decodeByteorder(b []byte) (*expr.Byteorder, error) {
	ad, err := netlink.NewAttributeDecoder(b)
	if err != nil {
		return nil, err
	}
	ad.ByteOrder = binary.BigEndian
	bo := &expr.Byteorder{}
	for ad.Next() {
		switch ad.Type() {
		case 1:
			bo.SourceRegister = ad.Uint32()
		case 2:
			bo.DestRegister = ad.Uint32()
		case 3:
			bo.Op = expr.ByteorderOp(ad.Uint32())
		case 4:
			bo.Len = ad.Uint32()
		case 5:
			bo.Size = ad.Uint32()
		}
	}
	return bo, ad.Err()
}

// The attributes of a tproxy expression (linux/netfilter/nf_tables.h).
const (
	nftaTproxyFamily  = 1
	nftaTproxyRegAddr = 2
	nftaTproxyRegPort = 3
)

// decodeTProxy reads the NFTA_TPROXY_* attributes of a tproxy expression.
func decodeTProxy(b []byte) (*expr.TProxy, error) {
	ad, err := netlink.NewAttributeDecoder(b)
	if err != nil {
		return nil, err
	}
	tp := &expr.TProxy{}
	for ad.Next() {
		switch ad.Type() {
		case nftaTproxyFamily:
			tp.Family = byte(binary.BigEndian.Uint32(ad.Bytes()))
		case nftaTproxyRegAddr:
			tp.RegAddr = binary.BigEndian.Uint32(ad.Bytes())
		case nftaTproxyRegPort:
			tp.RegPort = binary.BigEndian.Uint32(ad.Bytes())
		}
	}
	return tp, ad.Err()
}
