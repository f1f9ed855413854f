package rules

// SetDir is one dimension of an ipset lookup.
type SetDir uint8

const (
	SetSrc SetDir = iota + 1
	SetDst
)

// Set is "-m set --match-set NAME src,dst". Other options of the set match
// (counters, --return-nomatch, ...) are kept in Other.
type Set struct {
	Located
	SetName string
	Dirs    []SetDir
	Neg     bool
	Other   []Option
}

func (m *Set) Name() string { return "set" }

func (m *Set) appendSave(b []byte) []byte {
	b = appendFlag(b, "match-set", m.Neg)
	b = append(b, ' ')
	b = append(b, m.SetName...)
	for i, d := range m.Dirs {
		if i == 0 {
			b = append(b, ' ')
		} else {
			b = append(b, ',')
		}
		if d == SetSrc {
			b = append(b, "src"...)
		} else {
			b = append(b, "dst"...)
		}
	}
	return appendRawOptions(b, m.Other)
}
