package rules

import "strconv"

// Mark is "-m mark": (skb mark & Mask) == Value.
type Mark struct {
	Located
	Value, Mask uint32
	Neg         bool
}

func (m *Mark) Name() string { return "mark" }

func (m *Mark) appendSave(b []byte) []byte {
	b = appendFlag(b, "mark", m.Neg)
	b = append(b, " 0x"...)
	b = strconv.AppendUint(b, uint64(m.Value), 16)
	if m.Mask != 0xffffffff {
		b = append(b, "/0x"...)
		b = strconv.AppendUint(b, uint64(m.Mask), 16)
	}
	return b
}
