package rules

// Conntrack state bits of the model, shared by -m state and -m conntrack.
// They are bpfwall's own numbering: the kernel's two matches agree on the
// first four and number UNTRACKED, SNAT and DNAT differently.
const (
	CTInvalid     uint16 = 1 << 0
	CTEstablished uint16 = 1 << 1
	CTRelated     uint16 = 1 << 2
	CTNew         uint16 = 1 << 3
	CTUntracked   uint16 = 1 << 6
	CTSnat        uint16 = 1 << 7
	CTDnat        uint16 = 1 << 8
)

// Conntrack is "-m conntrack". Only the state test is interpreted by the
// compiler; every other option is kept in Other, in canonical order, so it
// prints back and makes lowering fail clearly.
type Conntrack struct {
	Located
	State    uint16 // CT* bits; 0: no state test
	StateNeg bool
	Other    []Option
}

// State is "-m state --state".
type State struct {
	Located
	State uint16 // CTInvalid, CTEstablished, CTRelated, CTNew, CTUntracked
	Neg   bool
}

func (m *Conntrack) Name() string { return "conntrack" }

func (m *State) Name() string { return "state" }

func appendCTStates(b []byte, mask uint16) []byte {
	b = append(b, ' ')
	first := true
	for _, s := range ctStates {
		if mask&s.bit == 0 {
			continue
		}
		if !first {
			b = append(b, ',')
		}
		b = append(b, s.name...)
		first = false
	}
	return b
}

func (m *Conntrack) appendSave(b []byte) []byte {
	if m.State != 0 || m.StateNeg {
		b = appendFlag(b, "ctstate", m.StateNeg)
		b = appendCTStates(b, m.State)
	}
	return appendRawOptions(b, m.Other)
}

func (m *State) appendSave(b []byte) []byte {
	b = appendFlag(b, "state", m.Neg)
	return appendCTStates(b, m.State)
}

// ctStates are the conntrack states in the order iptables prints them.
var ctStates = []struct {
	bit  uint16
	name string
}{
	{CTInvalid, "INVALID"}, {CTNew, "NEW"}, {CTRelated, "RELATED"}, {CTEstablished, "ESTABLISHED"},
	{CTUntracked, "UNTRACKED"}, {CTSnat, "SNAT"}, {CTDnat, "DNAT"},
}
