package rules

// Comment is "-m comment"; it matches every packet.
type Comment struct {
	Located
	Text string
}

func (m *Comment) Name() string { return "comment" }

func (m *Comment) appendSave(b []byte) []byte {
	b = append(b, " --comment "...)
	return append(b, Quote(m.Text)...)
}
