package rules

// CompareOp is the comparison of a ttl or hl match.
type CompareOp uint8

const (
	OpEq CompareOp = iota
	OpNe
	OpLt
	OpGt
)

// TTL is "-m ttl" (IPv4).
type TTL struct {
	Located
	Op    CompareOp
	Value uint8
}

// HL is "-m hl" (IPv6 hop limit).
type HL struct {
	Located
	Op    CompareOp
	Value uint8
}

func (m *TTL) Name() string { return "ttl" }

func (m *HL) Name() string { return "hl" }

func appendCompare(b []byte, prefix string, op CompareOp, v uint8) []byte {
	switch op {
	case OpEq, OpNe:
		b = appendFlag(b, prefix+"-eq", op == OpNe)
	case OpLt:
		b = appendFlag(b, prefix+"-lt", false)
	case OpGt:
		b = appendFlag(b, prefix+"-gt", false)
	}
	b = append(b, ' ')
	return appendUint(b, uint64(v))
}

func (m *TTL) appendSave(b []byte) []byte { return appendCompare(b, "ttl", m.Op, m.Value) }

func (m *HL) appendSave(b []byte) []byte { return appendCompare(b, "hl", m.Op, m.Value) }
