package rules

// Match is one extension match ("-m name ..."). The set of kinds is closed:
// the typed matches below, and Generic for every extension bpfwall reads but
// does not interpret.
type Match interface {
	// Name is the extension name as written after -m.
	Name() string
	// Position is where the match was loaded (its -m, or the option that
	// loaded it implicitly).
	Position() Pos
	// XT reports whether the match, in an nft rule, is an xtables
	// extension (iptables-nft installs them): the kernel runs it as
	// iptables does, not as the nft expression of the same name.
	XT() bool
	// appendSave appends the match's options as iptables-save prints them,
	// each preceded by a space.
	appendSave(b []byte) []byte
}

// Located carries the source position of a match or target, and whether
// the kernel runs it as an xtables extension in an nft rule.
type Located struct {
	Pos     Pos
	Xtables bool
}

// Position returns where the match or target was written.
func (l Located) Position() Pos { return l.Pos }

// XT reports whether it is an xtables extension in an nft rule.
func (l Located) XT() bool { return l.Xtables }

// MarkXT marks a match read from an xtables extension of an nft rule.
func (l *Located) MarkXT() { l.Xtables = true }

// PortRange is an inclusive port range. The full range 0:65535 matches every
// port.
type PortRange struct{ Lo, Hi uint16 }

// AnyPort is the range that matches every port.
var AnyPort = PortRange{0, 65535}

// Contains reports whether p is in r.
func (r PortRange) Contains(p uint16) bool { return r.Lo <= p && p <= r.Hi }

// Option is one option of an extension bpfwall keeps without interpreting.
type Option struct {
	Name string // without the leading "--"
	Neg  bool
	Args []string
}

// Generic is any other match extension, kept by name and options so that it
// prints back; the compiler rejects it with its position.
type Generic struct {
	Located
	Ext     string
	Options []Option
}

func (m *Generic) Name() string { return m.Ext }
