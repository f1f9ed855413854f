package rules

// MultiportDir says which ports a multiport match tests.
type MultiportDir uint8

const (
	MultiportSrc  MultiportDir = iota + 1 // --sports
	MultiportDst                          // --dports
	MultiportBoth                         // --ports: source or destination
)

// Multiport is "-m multiport" (xt_multiport revision 1): the packet's port(s)
// in any of Ports.
type Multiport struct {
	Located
	Dir   MultiportDir
	Ports []PortRange
	Neg   bool
}

func (m *Multiport) Name() string { return "multiport" }

func (m *Multiport) appendSave(b []byte) []byte {
	name := map[MultiportDir]string{MultiportSrc: "sports", MultiportDst: "dports", MultiportBoth: "ports"}[m.Dir]
	b = appendFlag(b, name, m.Neg)
	for i, r := range m.Ports {
		if i == 0 {
			b = append(b, ' ')
		} else {
			b = append(b, ',')
		}
		b = appendPortRange(b, r)
	}
	return b
}
