package rules

// TODO(ext): canonical printing of the typed extensions; placeholders until
// the extension work lands.

func (m *TCP) appendSave(b []byte) []byte       { return b }
func (m *UDP) appendSave(b []byte) []byte       { return b }
func (m *Multiport) appendSave(b []byte) []byte { return b }
func (m *IPRange) appendSave(b []byte) []byte   { return b }
func (m *ICMP) appendSave(b []byte) []byte      { return b }
func (m *Comment) appendSave(b []byte) []byte   { return b }
func (m *Conntrack) appendSave(b []byte) []byte { return b }
func (m *State) appendSave(b []byte) []byte     { return b }
func (m *Set) appendSave(b []byte) []byte       { return b }
func (m *Length) appendSave(b []byte) []byte    { return b }
func (m *TTL) appendSave(b []byte) []byte       { return b }
func (m *HL) appendSave(b []byte) []byte        { return b }
func (m *MAC) appendSave(b []byte) []byte       { return b }
func (m *Mark) appendSave(b []byte) []byte      { return b }
func (m *Limit) appendSave(b []byte) []byte     { return b }
func (m *PktType) appendSave(b []byte) []byte   { return b }
func (m *AddrType) appendSave(b []byte) []byte  { return b }
func (t *Reject) appendSave(b []byte) []byte    { return b }
func (t *Log) appendSave(b []byte) []byte       { return b }
