package kernel

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"

	"bpfwall/parser/nft"
	"bpfwall/rules"
)

// Read reads the nftables rule set of the calling thread's network
// namespace over netlink and returns the model nft.Parse gives for the same
// rule set as `nft list ruleset` prints it: the kernel's expressions are
// written back as nft text, and parsed. Rule positions are lines of that
// text ("kernel:N"); errors name the rule as kernel:FAMILY
// TABLE/CHAIN/handle N.
//
// Payload, meta (l4proto, nfproto, iifname, oifname, iif, oif, mark,
// pkttype) and ct state comparisons, lookups in anonymous and named sets
// and verdict maps (concatenations too), counter, log, limit, reject,
// tproxy and verdicts are written back; named sets and maps are declared
// in their table. Any other expression is an error: google/nftables
// leaves out expressions it does not decode, so the kernel's own list of
// a rule's expressions is read too, and nothing is skipped silently.
func Read(opts nft.Options) (*rules.Ruleset, error) {
	conn, err := nftables.New()
	if err != nil {
		return nil, fmt.Errorf("kernel: open netlink: %w", err)
	}
	defer conn.CloseLasting()
	xs := &xtListing{}
	text, where, err := kernelText(conn, xs)
	if err != nil {
		return nil, err
	}
	var ipsets map[string]*rules.IPSet
	if xs.setMatches && opts.IPSets != nil {
		if ipsets, err = opts.IPSets(); err != nil {
			return nil, err
		}
	}
	rs, err := nft.ParseListing("kernel", text, opts, ipsets)
	var list rules.ErrorList
	if errors.As(err, &list) {
		// Name the kernel's rule rather than a line of text no one saw.
		errs := make([]error, len(list))
		for i, e := range list {
			loc, ok := where[e.Pos.Line]
			if !ok {
				loc = e.Pos.String()
			}
			errs[i] = fmt.Errorf("%s: %s", loc, e.Msg)
		}
		return nil, errors.Join(errs...)
	}
	return rs, err
}

// Text lists the network namespace's rule set as nft text, as Read
// reads it: what "fmt --nft --from-kernel" prints.
func Text() ([]byte, error) {
	conn, err := nftables.New()
	if err != nil {
		return nil, fmt.Errorf("kernel: open netlink: %w", err)
	}
	defer conn.CloseLasting()
	text, _, err := kernelText(conn, &xtListing{})
	return text, err
}

// kernelText lists the rule set as nft text; where maps its rule lines
// to the rules' names. xs keeps what the xt matches need.
func kernelText(conn *nftables.Conn, xs *xtListing) (text []byte, where map[int]string, err error) {
	tables, err := conn.ListTables()
	if err != nil {
		return nil, nil, fmt.Errorf("kernel: list tables: %w", err)
	}
	chains, err := conn.ListChains()
	if err != nil {
		return nil, nil, fmt.Errorf("kernel: list chains: %w", err)
	}
	var b bytes.Buffer
	line := 1
	w := func(format string, args ...any) {
		fmt.Fprintf(&b, format+"\n", args...)
		line++
	}
	where = map[int]string{}
	var errs []error
	for _, t := range tables {
		fam, ok := tableFamilies[t.Family]
		if !ok {
			continue // arp, bridge: no IP hook
		}
		sets, err := kernelSets(conn, t)
		if err != nil {
			return nil, nil, err
		}
		// The chains first, to learn which named sets their rules use
		// and what keys they look up; the sets are declared above them.
		type ruleLine struct{ text, loc string }
		var body []ruleLine
		declared := map[string]string{}
		var setNames []string
		for _, c := range chains {
			if c.Table.Name != t.Name || c.Table.Family != t.Family {
				continue
			}
			body = append(body, ruleLine{text: fmt.Sprintf("\tchain %s {", c.Name)})
			if c.Hooknum != nil && c.Priority != nil {
				hook := hookNames[*c.Hooknum]
				if t.Family == nftables.TableFamilyNetdev && *c.Hooknum == *nftables.ChainHookIngress {
					hook = "ingress"
				}
				policy := "accept"
				if c.Policy != nil && *c.Policy == nftables.ChainPolicyDrop {
					policy = "drop"
				}
				dev := ""
				if c.Device != "" {
					dev = fmt.Sprintf(" device %q;", c.Device)
				}
				body = append(body, ruleLine{text: fmt.Sprintf("\t\ttype %s hook %s%s priority %d; policy %s;", c.Type, hook, dev, *c.Priority, policy)})
			}
			rs, err := conn.GetRules(t, c)
			if err != nil {
				return nil, nil, fmt.Errorf("kernel: list rules of %s %s/%s: %w", fam, t.Name, c.Name, err)
			}
			raw, err := rawRules(t, c.Name)
			if err != nil {
				return nil, nil, fmt.Errorf("kernel: %w", err)
			}
			for _, r := range rs {
				loc := fmt.Sprintf("kernel:%s %s/%s/handle %d", fam, t.Name, c.Name, r.Handle)
				exprs, err := completeExprs(r.Exprs, raw[r.Handle])
				if err != nil {
					errs = append(errs, fmt.Errorf("%s: %w", loc, err))
					continue
				}
				x := &exprReader{fam: fam, sets: sets, regs: map[uint32]load{}, declare: map[string]string{}, xt: xs}
				s, err := x.rule(exprs)
				if err != nil {
					errs = append(errs, fmt.Errorf("%s: %w", loc, err))
					continue
				}
				for name, decl := range x.declare {
					// A set looked up with two keys (ip saddr @s, ip daddr
					// @s) is declared with the first; its elements must
					// read the same for both.
					prev, ok := declared[name]
					if ok && elementsPart(prev) != elementsPart(decl) {
						errs = append(errs, fmt.Errorf("%s: set %s is looked up with keys that read its elements differently", loc, name))
						continue
					}
					if !ok {
						setNames = append(setNames, name)
						declared[name] = decl
					}
				}
				body = append(body, ruleLine{text: "\t\t" + s, loc: loc})
			}
			body = append(body, ruleLine{text: "\t}"})
		}
		w("table %s %s {", fam, t.Name)
		for _, name := range setNames {
			w("\t%s", declared[name])
		}
		for _, l := range body {
			if l.loc != "" {
				where[line] = l.loc
			}
			w("%s", l.text)
		}
		w("}")
	}
	if len(errs) > 0 {
		return nil, nil, errors.Join(errs...)
	}
	return b.Bytes(), where, nil
}

// elementsPart is the elements of a set declaration.
func elementsPart(decl string) string {
	_, elems, _ := strings.Cut(decl, " elements = ")
	return elems
}

var tableFamilies = map[nftables.TableFamily]string{
	nftables.TableFamilyIPv4:   "ip",
	nftables.TableFamilyIPv6:   "ip6",
	nftables.TableFamilyINet:   "inet",
	nftables.TableFamilyNetdev: "netdev",
}

var hookNames = map[nftables.ChainHook]string{
	*nftables.ChainHookPrerouting:  "prerouting",
	*nftables.ChainHookInput:       "input",
	*nftables.ChainHookForward:     "forward",
	*nftables.ChainHookOutput:      "output",
	*nftables.ChainHookPostrouting: "postrouting",
}

// kernelSet is a set's elements and what the rules need to know of it.
type kernelSet struct {
	set   *nftables.Set
	elems []nftables.SetElement
}

func kernelSets(conn *nftables.Conn, t *nftables.Table) (map[string]kernelSet, error) {
	sets, err := conn.GetSets(t)
	if err != nil {
		return nil, fmt.Errorf("kernel: list sets of %s: %w", t.Name, err)
	}
	out := map[string]kernelSet{}
	for _, s := range sets {
		elems, err := conn.GetSetElements(s)
		if err != nil {
			return nil, fmt.Errorf("kernel: list elements of set %s in %s: %w", s.Name, t.Name, err)
		}
		if s.IsMap {
			verdicts, err := mapVerdicts(t, s)
			if err != nil {
				return nil, fmt.Errorf("kernel: %w", err)
			}
			for i := range elems {
				if elems[i].VerdictData == nil {
					elems[i].VerdictData = verdicts[string(elems[i].Key)]
				}
			}
		}
		out[s.Name] = kernelSet{set: s, elems: elems}
	}
	return out, nil
}

// load is what a register holds: a payload or meta load, maybe masked.
type load struct {
	meta   bool
	key    expr.MetaKey
	ct     bool // ct state, or with status ct status (the ct keys read)
	status bool
	imm    []byte // an immediate value

	base       expr.PayloadBase
	off, n     uint32
	mask       []byte
	registered bool
	// hton: a meta value turned to network order, which nft does to
	// compare it by size (meta length < 80).
	hton bool
}

// exprReader writes one rule's expressions as nft text.
type exprReader struct {
	fam   string // the table's
	sets  map[string]kernelSet
	regs  map[uint32]load
	terms []string
	// l3 and l4 are the network family ("ip", "ip6") and the protocol
	// the rule has required so far, which the loads after them read.
	l3 string
	l4 uint8
	// dep is a protocol test not yet written: nft adds one before every
	// load that depends on it, and prints it only when nothing does.
	dep string
	// declare holds the declarations of the named sets the rule looks
	// up in, by name.
	declare map[string]string
	xt      *xtListing
}

func (x *exprReader) rule(es []expr.Any) (string, error) {
	for _, e := range es {
		if err := x.expr(e); err != nil {
			return "", err
		}
	}
	x.flush()
	if len(x.terms) == 0 {
		return "counter", nil // a rule needs a statement; this one does nothing
	}
	return strings.Join(mergeRanges(x.terms), " "), nil
}

// mergeRanges writes "K >= lo" followed by "K <= hi", the two comparisons
// nft compiles a range match "K lo-hi" to, as that range again.
func mergeRanges(terms []string) []string {
	var out []string
	for i := 0; i < len(terms); i++ {
		if i+1 < len(terms) {
			key, lo, ok1 := strings.Cut(terms[i], " >= ")
			key2, hi, ok2 := strings.Cut(terms[i+1], " <= ")
			if ok1 && ok2 && key == key2 && !strings.Contains(lo, " ") && !strings.Contains(hi, " ") {
				out = append(out, key+" "+lo+"-"+hi)
				i++
				continue
			}
		}
		out = append(out, terms[i])
	}
	return out
}

func (x *exprReader) flush() {
	if x.dep != "" {
		x.terms = append(x.terms, x.dep)
		x.dep = ""
	}
}

func (x *exprReader) expr(e expr.Any) error {
	switch e := e.(type) {
	case *expr.Payload:
		if e.OperationType != expr.PayloadLoad {
			return fmt.Errorf("payload write is not supported")
		}
		// The load the pending protocol test guards takes it over.
		switch {
		case e.Base == expr.PayloadBaseTransportHeader && strings.HasPrefix(x.dep, "meta l4proto"),
			e.Base == expr.PayloadBaseTransportHeader && strings.HasPrefix(x.dep, "ip protocol"),
			e.Base == expr.PayloadBaseNetworkHeader && strings.HasPrefix(x.dep, "meta nfproto"),
			e.Base == expr.PayloadBaseLLHeader && x.dep == "meta iiftype":
			x.dep = ""
		}
		x.flush()
		x.regs[e.DestRegister] = load{base: e.Base, off: e.Offset, n: e.Len, registered: true}
	case *expr.Meta:
		if e.SourceRegister {
			// "meta mark set N", which bpfwall keeps without compiling
			// it, as it keeps it from a file.
			l, ok := x.regs[e.Register]
			if !ok || l.imm == nil || e.Key != expr.MetaKeyMARK || len(l.imm) != 4 {
				return fmt.Errorf("meta set is not supported")
			}
			x.flush()
			x.terms = append(x.terms, fmt.Sprintf("meta mark set %#x", binary.NativeEndian.Uint32(l.imm)))
			return nil
		}
		x.flush()
		x.regs[e.Register] = load{meta: true, key: e.Key, registered: true}
	case *expr.Ct:
		if e.SourceRegister || e.Key != expr.CtKeySTATE && e.Key != expr.CtKeySTATUS {
			return fmt.Errorf("ct key %d is not supported", e.Key)
		}
		x.flush()
		x.regs[e.Register] = load{ct: true, status: e.Key == expr.CtKeySTATUS, registered: true}
	case *expr.Log:
		x.flush()
		s, err := logText(e)
		if err != nil {
			return err
		}
		x.terms = append(x.terms, s)
	case *expr.Limit:
		x.flush()
		x.terms = append(x.terms, limitText(e))
	case *expr.Reject:
		x.flush()
		s, err := x.rejectText(e)
		if err != nil {
			return err
		}
		x.terms = append(x.terms, s)
	case *expr.TProxy:
		x.flush()
		s, err := x.tproxyText(e)
		if err != nil {
			return err
		}
		x.terms = append(x.terms, s)
	case *expr.Bitwise:
		l, ok := x.regs[e.SourceRegister]
		if !ok || l.imm != nil || len(e.Mask) != int(e.Len) || slices.ContainsFunc(e.Xor, func(b byte) bool { return b != 0 }) {
			return fmt.Errorf("bitwise other than a mask is not supported")
		}
		l.mask = e.Mask
		x.regs[e.DestRegister] = l
	case *expr.Byteorder:
		l, ok := x.regs[e.SourceRegister]
		if !ok || !l.meta || metaNumber[l.key] == "" || e.Op != expr.ByteorderHton || e.Size != 4 || e.Len != 4 {
			return fmt.Errorf("byteorder other than of meta length, skuid or skgid is not supported")
		}
		l.hton = true
		x.regs[e.DestRegister] = l
	case *expr.Cmp:
		return x.cmp(e)
	case *expr.Range:
		l, ok := x.regs[e.Register]
		if !ok {
			return fmt.Errorf("range on an unset register")
		}
		if l.meta && metaNumber[l.key] != "" {
			lo, err1 := metaLength(l, e.FromData)
			hi, err2 := metaLength(l, e.ToData)
			if err := cmp.Or(err1, err2); err != nil {
				return err
			}
			op := ""
			if e.Op == expr.CmpOpNeq {
				op = "!= "
			}
			x.flush()
			x.terms = append(x.terms, fmt.Sprintf("%s %s%d-%d", metaNumber[l.key], op, lo, hi))
			return nil
		}
		f, err := x.field(l, 0)
		if err != nil {
			return err
		}
		op := ""
		if e.Op == expr.CmpOpNeq {
			op = "!= "
		}
		x.flush()
		x.terms = append(x.terms, fmt.Sprintf("%s %s%s-%s", f.key, op, f.value(e.FromData), f.value(e.ToData)))
	case *expr.Lookup:
		return x.lookup(e)
	case *expr.Verdict:
		x.flush()
		v, err := verdictText(e)
		if err != nil {
			return err
		}
		x.terms = append(x.terms, v)
	case *expr.Immediate:
		if e.Register == 0 {
			return fmt.Errorf("immediate verdict data is not supported")
		}
		x.regs[e.Register] = load{imm: e.Data, registered: true}
	case *expr.Counter:
		// Not after a pending dependency: nft may put a counter between
		// "meta iiftype" and the link-layer load it guards.
		x.terms = append(x.terms, fmt.Sprintf("counter packets %d bytes %d", e.Packets, e.Bytes))
	case *expr.Match:
		return x.xtTerm("match", e.Name, e.Rev, e.Info)
	case *expr.Target:
		return x.xtTerm("target", e.Name, e.Rev, e.Info)
	default:
		return fmt.Errorf("expression %T is not supported", e)
	}
	return nil
}

var cmpOps = map[expr.CmpOp]string{
	expr.CmpOpEq: "", expr.CmpOpNeq: "!= ", expr.CmpOpLt: "< ", expr.CmpOpLte: "<= ", expr.CmpOpGt: "> ", expr.CmpOpGte: ">= ",
}

func (x *exprReader) cmp(e *expr.Cmp) error {
	l, ok := x.regs[e.Register]
	if !ok {
		return fmt.Errorf("cmp on an unset register")
	}
	op := cmpOps[e.Op]
	if l.meta {
		return x.metaCmp(l, op, e)
	}
	if l.ct && l.status {
		return x.ctStatusCmp(l, e)
	}
	if l.ct {
		return x.ctCmp(l, e)
	}
	if l.imm != nil {
		return fmt.Errorf("cmp on an immediate value")
	}
	// nft merges adjacent equality tests into one load: split it.
	var parts []string
	etherDep := ""
	for at := uint32(0); at < l.n; {
		f, err := x.field(l, at)
		if err != nil {
			return err
		}
		// nft merges adjacent "!=" of single values too, into NOT of the
		// conjunction: written as adjacent "!=" again, Parse merges them
		// the same way (merge.go).
		whole := f.n == f.width && l.mask == nil
		if op != "" && (f.n != l.n || at != 0) && (op != "!= " || !whole) {
			return fmt.Errorf("%s over several fields is not supported", strings.TrimSpace(op))
		}
		data := e.Data[at : at+f.n]
		if f.key == "ether type" && op == "" && l.mask == nil {
			// The dependency of an ip or ip6 load in an inet table
			// that nft puts after an ether saddr test, and merges
			// with it; nft's listing leaves it out.
			fam, ok := map[uint16]string{0x0800: "ipv4", 0x86dd: "ipv6"}[uint16(data[0])<<8|uint16(data[1])]
			if !ok {
				return fmt.Errorf("ether type %#x is not supported", data)
			}
			x.l3 = map[string]string{"ipv4": "ip", "ipv6": "ip6"}[fam]
			etherDep = "meta nfproto " + fam
			at += f.n
			continue
		}
		parts = append(parts, f.text(op, data))
		if f.key == "ip protocol" && op == "" && len(l.mask) == 0 {
			x.l4 = data[0]
			x.dep = f.text(op, data)
			at += f.n
			continue
		}
		at += f.n
	}
	if etherDep != "" {
		x.flush()
		x.terms = append(x.terms, parts...)
		x.dep = etherDep // written unless a load takes it
		return nil
	}
	if x.dep != "" && len(parts) == 1 {
		return nil // the ip protocol dependency, written unless a load takes it
	}
	x.dep = ""
	x.flush()
	x.terms = append(x.terms, parts...)
	return nil
}

func (x *exprReader) metaCmp(l load, op string, e *expr.Cmp) error {
	x.flush()
	switch l.key {
	case expr.MetaKeyL4PROTO:
		if len(e.Data) != 1 || l.mask != nil {
			return fmt.Errorf("meta l4proto of %d bytes", len(e.Data))
		}
		s := fmt.Sprintf("meta l4proto %s%d", op, e.Data[0])
		if op == "" {
			x.l4, x.dep = e.Data[0], s
			return nil
		}
		x.terms = append(x.terms, s)
	case expr.MetaKeyNFPROTO:
		name, ok := map[byte]string{2: "ipv4", 10: "ipv6"}[e.Data[0]]
		if !ok || (op != "" && op != "!= ") {
			return fmt.Errorf("meta nfproto %s%d is not supported", op, e.Data[0])
		}
		s := fmt.Sprintf("meta nfproto %s%s", op, name)
		if op == "" {
			x.l3, x.dep = map[string]string{"ipv4": "ip", "ipv6": "ip6"}[name], s
			return nil
		}
		x.terms = append(x.terms, s)
	case expr.MetaKeyIIFTYPE:
		// The dependency of a link-layer load: ether.
		if op != "" || !bytes.Equal(e.Data, []byte{1, 0}) {
			return fmt.Errorf("meta iiftype is not supported")
		}
		x.dep = "meta iiftype"
	case expr.MetaKeyIIFNAME, expr.MetaKeyOIFNAME:
		key := "iifname"
		if l.key == expr.MetaKeyOIFNAME {
			key = "oifname"
		}
		if op != "" && op != "!= " {
			return fmt.Errorf("%s %s is not supported", key, op)
		}
		// A wildcard compares the prefix only, without the NUL.
		name := bytes.TrimRight(e.Data, "\x00")
		exact := bytes.IndexByte(e.Data, 0) >= 0
		s := string(name)
		if !exact {
			s += "*"
		}
		x.terms = append(x.terms, fmt.Sprintf("%s %s%q", key, op, s))
	case expr.MetaKeyIIF, expr.MetaKeyOIF:
		key := "iif"
		if l.key == expr.MetaKeyOIF {
			key = "oif"
		}
		if (op != "" && op != "!= ") || l.mask != nil || len(e.Data) != 4 {
			return fmt.Errorf("%s %s is not supported", key, op)
		}
		name, err := ifaceName(e.Data)
		if err != nil {
			return fmt.Errorf("%s: %w", key, err)
		}
		x.terms = append(x.terms, fmt.Sprintf("%s %s%q", key, op, name))
	case expr.MetaKeyMARK:
		if len(e.Data) != 4 {
			return fmt.Errorf("meta mark of %d bytes", len(e.Data))
		}
		v := binary.NativeEndian.Uint32(e.Data)
		if l.mask != nil {
			if op != "" && op != "!= " {
				return fmt.Errorf("meta mark & %s is not supported", op)
			}
			x.terms = append(x.terms, fmt.Sprintf("meta mark & %#x %s %#x", binary.NativeEndian.Uint32(l.mask), cmp.Or(strings.TrimSpace(op), "=="), v))
			return nil
		}
		x.terms = append(x.terms, fmt.Sprintf("meta mark %s%#x", op, v))
	case expr.MetaKeyLEN, expr.MetaKeySKUID, expr.MetaKeySKGID:
		v, err := metaLength(l, e.Data)
		if err != nil {
			return err
		}
		x.terms = append(x.terms, fmt.Sprintf("%s %s%d", metaNumber[l.key], op, v))
	case expr.MetaKeyPKTTYPE:
		name, ok := map[byte]string{0: "host", 1: "broadcast", 2: "multicast", 3: "other"}[e.Data[0]]
		if !ok {
			return fmt.Errorf("meta pkttype %d is not supported", e.Data[0])
		}
		x.terms = append(x.terms, fmt.Sprintf("meta pkttype %s%s", op, name))
	default:
		return fmt.Errorf("meta key %d is not supported", l.key)
	}
	return nil
}

// metaNumber names the meta keys of a u32 in the host's order, which nft
// turns to network order (byteorder) for ranges and comparisons.
var metaNumber = map[expr.MetaKey]string{expr.MetaKeyLEN: "meta length", expr.MetaKeySKUID: "meta skuid", expr.MetaKeySKGID: "meta skgid"}

// metaLength reads a value compared with meta length, skuid or skgid: 4
// bytes, in network order after a byteorder expression, else in the
// host's.
func metaLength(l load, data []byte) (uint32, error) {
	if len(data) != 4 || l.mask != nil {
		return 0, fmt.Errorf("meta length compared with %d bytes", len(data))
	}
	if l.hton {
		return binary.BigEndian.Uint32(data), nil
	}
	return binary.NativeEndian.Uint32(data), nil
}

// prev is the big-endian number before b.
func prev(b []byte) []byte {
	out := slices.Clone(b)
	for i := len(out) - 1; i >= 0; i-- {
		out[i]--
		if out[i] != 0xff {
			break
		}
	}
	return out
}

func verdictText(v *expr.Verdict) (string, error) {
	switch v.Kind {
	case expr.VerdictAccept:
		return "accept", nil
	case expr.VerdictDrop:
		return "drop", nil
	case expr.VerdictReturn:
		return "return", nil
	case expr.VerdictContinue:
		return "continue", nil
	case expr.VerdictJump:
		return "jump " + v.Chain, nil
	case expr.VerdictGoto:
		return "goto " + v.Chain, nil
	}
	return "", fmt.Errorf("verdict %d is not supported", v.Kind)
}

// field is a header field a payload load reads: its key in nft text,
// and how many of its bytes the load takes.
type field struct {
	key   string
	n     uint32
	width uint32 // the whole field's
	kind  fieldKind
	mask  []byte
}

type fieldKind uint8

const (
	fieldNumber fieldKind = iota
	fieldAddr
	fieldMAC
	fieldFlags
	fieldMasked // a number compared under a mask
	fieldDSCP   // the DSCP bits under their mask: ip dscp, ip6 dscp
)

type fieldDef struct {
	off, width uint32
	key        string
	kind       fieldKind
}

var (
	ipFields  = []fieldDef{{1, 1, "ip dscp", fieldDSCP}, {2, 2, "ip length", fieldNumber}, {6, 2, "ip frag-off", fieldMasked}, {8, 1, "ip ttl", fieldNumber}, {9, 1, "ip protocol", fieldNumber}, {12, 4, "ip saddr", fieldAddr}, {16, 4, "ip daddr", fieldAddr}}
	ip6Fields = []fieldDef{{0, 2, "ip6 dscp", fieldDSCP}, {4, 2, "ip6 length", fieldNumber}, {7, 1, "ip6 hoplimit", fieldNumber}, {8, 16, "ip6 saddr", fieldAddr}, {24, 16, "ip6 daddr", fieldAddr}}
	llFields  = []fieldDef{{6, 6, "ether saddr", fieldMAC}, {12, 2, "ether type", fieldNumber}}
)

func transportFields(proto uint8) []fieldDef {
	switch proto {
	case 6, 17, 132:
		name := map[uint8]string{6: "tcp", 17: "udp", 132: "sctp"}[proto]
		fs := []fieldDef{{0, 2, name + " sport", fieldNumber}, {2, 2, name + " dport", fieldNumber}}
		if proto == 6 {
			fs = append(fs, fieldDef{13, 1, "tcp flags", fieldFlags})
		}
		return fs
	case 1:
		return []fieldDef{{0, 1, "icmp type", fieldNumber}, {1, 1, "icmp code", fieldNumber}}
	case 58:
		return []fieldDef{{0, 1, "icmpv6 type", fieldNumber}, {1, 1, "icmpv6 code", fieldNumber}}
	}
	// No one protocol (meta l4proto { tcp, udp }, or none): nft's th,
	// the transport header's first two 16-bit words.
	return []fieldDef{{0, 2, "th sport", fieldNumber}, {2, 2, "th dport", fieldNumber}}
}

// field finds the field a load reads at byte at of its register.
func (x *exprReader) field(l load, at uint32) (field, error) {
	var defs []fieldDef
	var where string
	switch l.base {
	case expr.PayloadBaseNetworkHeader:
		l3 := x.l3
		if x.fam == "ip" || x.fam == "ip6" {
			l3 = x.fam
		}
		switch l3 {
		case "ip":
			defs = ipFields
		case "ip6":
			defs = ip6Fields
		}
		where = "network header"
	case expr.PayloadBaseTransportHeader:
		defs = transportFields(x.l4)
		where = fmt.Sprintf("transport header of protocol %d", x.l4)
	case expr.PayloadBaseLLHeader:
		defs = llFields
		where = "link-layer header"
	}
	off, rest := l.off+at, l.n-at
	for _, d := range defs {
		if d.off != off {
			continue
		}
		n := min(d.width, rest)
		f := field{key: d.key, n: n, width: d.width, kind: d.kind}
		if l.mask != nil {
			f.mask = l.mask[at : at+n]
		}
		if n < d.width && d.kind != fieldAddr {
			break // part of a field: only an address prefix
		}
		if f.mask != nil && d.kind != fieldAddr && d.kind != fieldFlags && d.kind != fieldMasked && d.kind != fieldDSCP {
			return field{}, fmt.Errorf("a mask on %s is not supported", d.key)
		}
		if d.kind == fieldDSCP && !bytes.Equal(f.mask, dscpMask[d.width]) {
			return field{}, fmt.Errorf("payload load of %d bytes at %d of the %s with mask %x is not supported", rest, off, where, f.mask)
		}
		return f, nil
	}
	return field{}, fmt.Errorf("payload load of %d bytes at %d of the %s is not supported", rest, off, where)
}

// dscpMask is the mask nft loads the DSCP under: of the IPv4 TOS byte,
// or of the IPv6 header's first two bytes, by the load's width.
var dscpMask = map[uint32][]byte{1: {0xfc}, 2: {0x0f, 0xc0}}

// value formats data, the field's bytes, as nft text.
func (f field) value(data []byte) string {
	switch f.kind {
	case fieldAddr:
		full := make([]byte, f.width)
		copy(full, data)
		a, _ := netip.AddrFromSlice(full)
		return a.String()
	case fieldMAC:
		return net.HardwareAddr(data).String()
	case fieldDSCP:
		if len(data) == 1 {
			return fmt.Sprint(data[0] >> 2)
		}
		return fmt.Sprint((data[0]&0x0f)<<2 | data[1]>>6)
	}
	var v uint64
	for _, c := range data {
		v = v<<8 | uint64(c)
	}
	return fmt.Sprint(v)
}

// text is the relation "key op data", with the field's mask.
func (f field) text(op string, data []byte) string {
	switch {
	case f.kind == fieldAddr && f.mask != nil && !isPrefixMask(f.mask):
		// iptables-nft's -s ADDR/MASK with a mask that is no prefix.
		return fmt.Sprintf("%s & %s %s %s", f.key, f.value(f.mask), cmp.Or(strings.TrimSpace(op), "=="), f.value(data))
	case f.kind == fieldAddr && (f.n < f.width || f.mask != nil):
		bits := 8 * int(f.n)
		if f.mask != nil {
			bits = 0
			for _, c := range f.mask {
				bits += onesPrefix(c)
				if c != 0xff {
					break
				}
			}
		}
		return fmt.Sprintf("%s %s%s/%d", f.key, op, f.value(data), bits)
	case f.kind == fieldMasked && f.mask != nil:
		var m uint64
		for _, c := range f.mask {
			m = m<<8 | uint64(c)
		}
		return fmt.Sprintf("%s & %#x %s %s", f.key, m, cmp.Or(strings.TrimSpace(op), "=="), f.value(data))
	case f.kind == fieldFlags && f.mask != nil:
		return fmt.Sprintf("%s & %#x %s %#x", f.key, f.mask[0], cmp.Or(strings.TrimSpace(op), "=="), data[0])
	case f.kind == fieldFlags:
		// "tcp flags syn" would be "any of"; the kernel compares them all.
		return fmt.Sprintf("%s %s %#x", f.key, cmp.Or(strings.TrimSpace(op), "=="), data[0])
	}
	return fmt.Sprintf("%s %s%s", f.key, op, f.value(data))
}

// isPrefixMask reports whether mask is ones followed by zeros.
func isPrefixMask(mask []byte) bool {
	zeros := false
	for _, c := range mask {
		n := onesPrefix(c)
		if zeros && c != 0 || n < 8 && c != byte(0xff<<(8-n)) {
			return false
		}
		if n < 8 {
			zeros = true
		}
	}
	return true
}

func onesPrefix(c byte) int {
	n := 0
	for c&0x80 != 0 {
		n++
		c <<= 1
	}
	return n
}
