package packets

import (
	"encoding/binary"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
)

// extHeaders returns 1 to 4 IPv6 extension headers: hop-by-hop options
// (first only), destination options, routing, fragment and
// authentication headers. next is where the last one keeps its
// next-header field.
func (g *Generator) extHeaders(first *layers.IPProtocol) ([]gopacket.SerializableLayer, *layers.IPProtocol) {
	var out []gopacket.SerializableLayer
	next := first
	for i := range 1 + g.rng.IntN(4) {
		switch k := g.rng.IntN(6); {
		case k == 0 && i == 0:
			*next = layers.IPProtocolIPv6HopByHop
			h := &layers.IPv6HopByHop{Options: g.tlvOptions()}
			out, next = append(out, h), &h.NextHeader
		case k <= 1:
			*next = layers.IPProtocolIPv6Destination
			h := &layers.IPv6Destination{}
			for _, o := range g.tlvOptions() {
				h.Options = append(h.Options, (*layers.IPv6DestinationOption)(o))
			}
			out, next = append(out, h), &h.NextHeader
		case k == 2:
			// Type 0 (deprecated) or 4 (segment routing), no segment
			// left.
			*next = layers.IPProtocolIPv6Routing
			h := &layers.IPv6Routing{RoutingType: oneOf(g, []uint8{0, 4}), Reserved: make([]byte, 4), Data: make([]byte, 8*g.rng.IntN(3))}
			out, next = append(out, h), &h.NextHeader
		case k == 3:
			*next = layers.IPProtocolIPv6Fragment
			h := &layers.IPv6Fragment{MoreFragments: g.chance(0.5), Identification: g.rng.Uint32()}
			if g.chance(0.4) {
				h.FragmentOffset = oneOf(g, []uint16{1, 8, 185})
			}
			out, next = append(out, h), &h.NextHeader
		default:
			// An authentication header: next, length in 4-byte units
			// minus 2.
			ah := &rawExt{data: make([]byte, 12+4*g.rng.IntN(3))}
			*next = layers.IPProtocolAH
			ah.data[1] = byte(len(ah.data)/4 - 2)
			out, next = append(out, ah), &ah.next
		}
	}
	return out, next
}

// rawExt is an extension header gopacket cannot serialize.
type rawExt struct {
	next layers.IPProtocol
	data []byte
}

func (r *rawExt) LayerType() gopacket.LayerType { return gopacket.LayerTypePayload }

func (r *rawExt) SerializeTo(b gopacket.SerializeBuffer, _ gopacket.SerializeOptions) error {
	out, err := b.PrependBytes(len(r.data))
	if err != nil {
		return err
	}
	copy(out, r.data)
	out[0] = byte(r.next)
	return nil
}

// tlvOptions returns the options of a hop-by-hop or destination options
// header, padded to a multiple of 8 bytes (gopacket's padding is wrong).
func (g *Generator) tlvOptions() []*layers.IPv6HopByHopOption {
	var out []*layers.IPv6HopByHopOption
	size := 2
	n := g.rng.IntN(5)
	if g.chance(0.2) {
		n = 7 + g.rng.IntN(4) // around the kernel's limit of 8 options
	}
	for range n {
		o := g.tlvOption()
		out = append(out, o)
		if o.OptionType == 0 {
			size++
		} else {
			size += 2 + len(o.OptionData)
		}
	}
	switch pad := (8 - size%8) % 8; pad {
	case 0:
	case 1:
		out = append(out, &layers.IPv6HopByHopOption{OptionType: 0})
	default:
		out = append(out, &layers.IPv6HopByHopOption{OptionType: 1, OptionData: make([]byte, pad-2)})
	}
	return out
}

// tlvOption returns a hop-by-hop or destination option: padding, router
// alert, jumbo, IOAM, CALIPSO or an unknown type with each action.
func (g *Generator) tlvOption() *layers.IPv6HopByHopOption {
	switch g.rng.IntN(9) {
	case 0:
		return &layers.IPv6HopByHopOption{OptionType: 0}
	case 1:
		d := make([]byte, g.rng.IntN(7))
		if len(d) > 0 && g.chance(0.2) {
			d[len(d)-1] = 1
		}
		return &layers.IPv6HopByHopOption{OptionType: 1, OptionData: d}
	case 2:
		return &layers.IPv6HopByHopOption{OptionType: 5, OptionData: make([]byte, 2+g.rng.IntN(2))}
	case 3:
		d := make([]byte, 4)
		binary.BigEndian.PutUint32(d, oneOf(g, []uint32{0, 100, 0x10000, 0x7fffffff}))
		return &layers.IPv6HopByHopOption{OptionType: 0xc2, OptionData: d}
	case 4:
		return &layers.IPv6HopByHopOption{OptionType: 49, OptionData: make([]byte, 2+g.rng.IntN(6))}
	case 5:
		return &layers.IPv6HopByHopOption{OptionType: 7, OptionData: make([]byte, 8)}
	default:
		t := oneOf(g, []uint8{0x1e, 0x3e, 0x5e, 0x9e, 0xde})
		return &layers.IPv6HopByHopOption{OptionType: t, OptionData: make([]byte, g.rng.IntN(5))}
	}
}
