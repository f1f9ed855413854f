package ir

import (
	"fmt"
	"net/netip"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"unsafe"

	"bpfwall/model"
	"bpfwall/rules"
)

// LowerOptions select the chain a Program is lowered from.
type LowerOptions struct {
	Table string // "filter" when empty
	Chain string // "INPUT" when empty; a builtin chain of Table
	// SharedState is set when the caller runs every chain of the rule
	// set with the state netfilter shares between hooks shared the same
	// way (restore at the netfilter hooks; loader.SwapAll): one map per
	// recent table name, and one array of token buckets per table. The
	// recent matches and limits that another hook reaches too then
	// lower, and the buckets are numbered across the table
	// (Program.TableBuckets). Without it they are errors: the program's
	// state would be its own.
	SharedState bool
	// NoText leaves the rules' Text empty, for a caller that gives them
	// from the rule set printed once for every chain (Program.Texts, as
	// loader.MetaSource.Texts sets it) before anything reads them: a
	// large restore printed each rule twice.
	NoText bool
}

// Lower lowers the builtin chain opts.Chain of table opts.Table, and every
// user chain reachable from it, into a Program.
//
// Everything the Program cannot express exactly is an error at the
// position of the match or target ("rules.v4:3:18: limit match is not
// supported"); errors are collected for all rules and returned as a sorted
// rules.ErrorList.
func Lower(rs *rules.Ruleset, opts LowerOptions) (*Program, error) {
	if opts.Table == "" {
		opts.Table = "filter"
	}
	if opts.Chain == "" {
		opts.Chain = "INPUT"
	}
	t := rs.Table(opts.Table)
	if t == nil {
		return nil, fmt.Errorf("lower %s %s: the rule set has no table %q", opts.Table, opts.Chain, opts.Table)
	}
	entry := t.Chain(opts.Chain)
	if entry == nil || !entry.Builtin {
		return nil, fmt.Errorf("lower %s %s: %q is not a builtin chain of table %s", opts.Table, opts.Chain, opts.Chain, opts.Table)
	}
	if entry.Policy != rules.PolicyAccept && entry.Policy != rules.PolicyDrop {
		return nil, fmt.Errorf("lower %s %s: chain has no ACCEPT or DROP policy", opts.Table, opts.Chain)
	}

	l := &lowerer{
		rs:          rs,
		fam:         rs.Family,
		sets:        rs.Sets,
		table:       t,
		hook:        entry.Name,
		byName:      make(map[string]*rules.Chain, len(t.Chains)),
		index:       make(map[string]int),
		prog:        &Program{Family: rs.Family, Table: t.Name},
		sharedState: opts.SharedState,
		noText:      opts.NoText,
	}
	for _, c := range t.Chains {
		l.byName[c.Name] = c
	}
	if opts.SharedState {
		l.numberTableBuckets()
	}
	l.collectChains(entry)
	l.checkLoops()
	l.prog.Reassembled = t.Name == "filter" && reassembles(rs.Family, entry.Name, l.usesConntrack(rs))
	l.prog.Forward = entry.Name == "FORWARD"
	for i, c := range l.chains {
		l.lowerChain(i, c)
	}
	l.sizeRecentTables()
	if err := l.errs.Err(); err != nil {
		return nil, err
	}
	return l.prog, nil
}

type lowerer struct {
	rs     *rules.Ruleset
	fam    rules.Family
	sets   map[string]*rules.IPSet
	table  *rules.Table
	hook   string // the entry chain's name
	byName map[string]*rules.Chain
	chains []*rules.Chain // reachable chains; chains[0] is the entry
	index  map[string]int // chain name -> index in chains
	edges  [][]chainEdge  // jumps and gotos out of each chain
	prog   *Program
	errs   rules.ErrorList
	// text is the block spec prints the rules' texts into; scratch is
	// where matches lowers a rule's matches, and matchBlock and ruleBlock
	// the blocks their final copies and the rules are taken from: a
	// slice and a struct per rule were each an allocation, rounded up to
	// a size class, and a rule's slice grew as its extensions lowered.
	text       []byte
	scratch    []Match
	matchBlock []Match
	ruleBlock  []Rule
	// ifaceBoxes and portBoxes hold the interface and one-range ports matches
	// lowered so far, each boxed once: many rules test the same ones
	// (bench's realistic 1M: 20 MB of boxes and ranges, one per rule,
	// live through the whole compile).
	ifaceBoxes map[Iface]Match
	portBoxes  map[portsKey]Match
	// buckets numbers the token buckets of Limit and RateLimit matches by
	// the source match: the rules one nft rule splits into share its one
	// limit expression.
	buckets map[rules.Match]int
	// sharedState is LowerOptions.SharedState, noText NoText.
	sharedState, noText bool
	// reported are the matches already reported as shared by both
	// families.
	reported map[rules.Match]bool
	// shared maps the user chains other builtin chains reach to one of
	// those; see ownBucket.
	shared map[string]string
	// hashTables numbers the hashlimit tables by name, with the first
	// match that uses each.
	hashTables map[string]hashTable
	// recentTables are the recent tables by name; recentSlots counts the
	// recent matches.
	recentTables map[string]*recentTableInfo
	recentSlots  int
	// elsewhere are the rules outside the program that another hook
	// runs; see matchElsewhere.
	elsewhere map[*rules.Rule]bool
}

type hashTable struct {
	index int
	first HashLimit
	pos   rules.Pos
}

// usesConntrack reports whether a rule of the rule set, in any table or
// chain, tests the conntrack state: conntrack, and with it nf_defrag, is
// then on in the namespace for every hook of the family (nf_ct_netns_get),
// and the loader keeps it on for a program that tests the state.
func (l *lowerer) usesConntrack(rs *rules.Ruleset) bool {
	for _, t := range rs.Tables {
		for _, c := range t.Chains {
			for _, r := range c.Rules {
				for _, m := range r.Matches {
					switch m.(type) {
					case *rules.Conntrack, *rules.State:
						return true
					}
				}
			}
		}
	}
	return false
}

// chainEdge is a jump or goto to another chain.
type chainEdge struct {
	to  int
	pos rules.Pos
}

func (l *lowerer) errorf(pos rules.Pos, format string, args ...any) {
	l.errs = append(l.errs, rules.Errorf(pos, format, args...))
}

// collectChains numbers the chains reachable from entry breadth first, so
// that a chain's index reflects how close to the hook it is.
func (l *lowerer) collectChains(entry *rules.Chain) {
	l.add(entry)
	for i := 0; i < len(l.chains); i++ {
		for _, r := range l.chains[i].Rules {
			name, pos, ok := targetChain(r.Target)
			if !ok {
				continue
			}
			c := l.byName[name]
			switch {
			case c == nil:
				l.errorf(pos, "chain %q does not exist", name)
				continue
			case c.Builtin:
				l.errorf(pos, "cannot jump to builtin chain %q", name)
				continue
			}
			to, seen := l.index[name]
			if !seen {
				to = l.add(c)
			}
			l.edges[i] = append(l.edges[i], chainEdge{to: to, pos: pos})
		}
	}
}

func (l *lowerer) add(c *rules.Chain) int {
	i := len(l.chains)
	l.chains = append(l.chains, c)
	l.edges = append(l.edges, nil)
	l.index[c.Name] = i
	return i
}

func targetChain(t rules.Target) (name string, pos rules.Pos, ok bool) {
	switch t := t.(type) {
	case *rules.Jump:
		return t.Chain, t.Pos, true
	case *rules.Goto:
		return t.Chain, t.Pos, true
	}
	return "", rules.Pos{}, false
}

// checkLoops reports every jump or goto that closes a cycle. The parser
// already rejects loops, as the kernel's mark_source_chains does; lowering
// checks again because Eval and code generation rely on it.
func (l *lowerer) checkLoops() {
	const (
		unvisited = iota
		onStack
		done
	)
	state := make([]uint8, len(l.chains))
	var path []int
	var visit func(i int)
	visit = func(i int) {
		state[i] = onStack
		path = append(path, i)
		for _, e := range l.edges[i] {
			switch state[e.to] {
			case unvisited:
				visit(e.to)
			case onStack:
				start := slices.Index(path, e.to)
				var names []string
				for _, j := range path[start:] {
					names = append(names, l.chains[j].Name)
				}
				names = append(names, l.chains[e.to].Name)
				l.errorf(e.pos, "jump to %q makes a loop: %s", l.chains[e.to].Name, strings.Join(names, " -> "))
			}
		}
		path = path[:len(path)-1]
		state[i] = done
	}
	visit(0)
}

func (l *lowerer) lowerChain(i int, c *rules.Chain) {
	out := &Chain{Name: c.Name, Rules: make([]*Rule, 0, len(c.Rules))}
	if i == 0 {
		out.Policy = c.Policy
	}
	for _, r := range c.Rules {
		if len(l.ruleBlock) == 0 {
			l.ruleBlock = make([]Rule, min(max(len(c.Rules), 16), 1024))
		}
		lr := &l.ruleBlock[0]
		l.ruleBlock = l.ruleBlock[1:]
		*lr = Rule{
			ID:    len(l.prog.Rules),
			Chain: i,
			Pos:   r.Pos,
			Text:  l.spec(r),
		}
		lr.Matches = l.matches(r)
		lr.Action = l.action(r)
		out.Rules = append(out.Rules, lr)
		l.prog.Rules = append(l.prog.Rules, lr)
	}
	l.prog.Chains = append(l.prog.Chains, out)
}

// hold returns a copy of ms from l's match block, its capacity its
// length: a pass that changes a rule's matches copies them (own).
func (l *lowerer) hold(ms []Match) []Match {
	if len(ms) == 0 {
		return []Match{}
	}
	if len(ms) > cap(l.matchBlock)-len(l.matchBlock) {
		l.matchBlock = make([]Match, 0, max(len(ms), 4096))
	}
	start := len(l.matchBlock)
	l.matchBlock = append(l.matchBlock, ms...)
	return l.matchBlock[start:len(l.matchBlock):len(l.matchBlock)]
}

// spec is r.Spec(). The texts are printed one after the other into
// blocks they share, which are never written again: a string per rule
// was an allocation per rule.
func (l *lowerer) spec(r *rules.Rule) string {
	if l.noText {
		return ""
	}
	if cap(l.text)-len(l.text) < 1024 {
		l.text = make([]byte, 0, 64<<10)
	}
	start := len(l.text)
	l.text = r.AppendSpec(l.text)
	if start >= len(l.text) {
		return ""
	}
	return unsafe.String(&l.text[start], len(l.text)-start)
}

// matches lowers the rule's standard matches in ip_packet_match's order,
// then its extension matches in the order they were loaded.
func (l *lowerer) matches(r *rules.Rule) []Match {
	ms := l.scratch[:0]
	ms = l.addr(ms, Src, r.Src, r.SrcNeg, r.Pos)
	ms = l.addr(ms, Dst, r.Dst, r.DstNeg, r.Pos)
	ms = l.iface(ms, IfaceIn, r.InIface, r.InNeg)
	ms = l.iface(ms, IfaceOut, r.OutIface, r.OutNeg)
	// Protocol 0 ("-p all") is not tested by ip_packet_match. In IPv6 an
	// explicit -p, even "-p all", sets IP6T_F_PROTO, so ip6_packet_match
	// walks the extension headers and drops packets where that fails.
	switch {
	case r.NFT && r.Proto != 0 && l.fam == rules.IPv6:
		// meta l4proto: no match, rather than a drop, where the
		// extension headers cannot be walked.
		ms = append(ms, L4Proto{Proto: r.Proto, Neg: r.ProtoNeg})
	case r.NFT && r.Proto == 0:
	case r.Proto != 0 || (l.fam == rules.IPv6 && r.ProtoGiven):
		ms = append(ms, Proto{Proto: r.Proto, Neg: r.ProtoNeg})
	}
	if r.Fragment {
		if l.fam != rules.IPv4 {
			l.errorf(r.Pos, "-f is only valid in ipv4 rule sets")
		} else {
			ms = append(ms, Fragment{Neg: r.FragmentNeg})
		}
	}
	for _, m := range r.Matches {
		ms = l.extension(ms, r, m)
	}
	l.scratch = ms
	return l.hold(ms)
}

func (l *lowerer) addr(ms []Match, dir Dir, n rules.Net, neg bool, pos rules.Pos) []Match {
	if n.IsAny() {
		if !neg {
			return ms
		}
		zero := netip.IPv4Unspecified()
		if l.fam == rules.IPv6 {
			zero = netip.IPv6Unspecified()
		}
		return append(ms, Addr{Dir: dir, Addr: zero, Mask: zero, Neg: true})
	}
	if n.Addr.BitLen() != l.fam.Bits() || n.Mask.BitLen() != l.fam.Bits() {
		l.errorf(pos, "%s address %s is not an %s address", dir, n, l.fam)
		return ms
	}
	return append(ms, Addr{Dir: dir, Addr: maskAddr(n.Addr, n.Mask), Mask: n.Mask, Neg: neg})
}

// maskAddr returns a & mask; both are of one family.
func maskAddr(a, mask netip.Addr) netip.Addr {
	if a.Is4() {
		x, m := a.As4(), mask.As4()
		for i := range x {
			x[i] &= m[i]
		}
		return netip.AddrFrom4(x)
	}
	x, m := a.As16(), mask.As16()
	for i := range x {
		x[i] &= m[i]
	}
	return netip.AddrFrom16(x)
}

func (l *lowerer) iface(ms []Match, dir IfaceDir, name string, neg bool) []Match {
	if name == "" || (name == "+" && !neg) {
		return ms
	}
	prefix := strings.HasSuffix(name, "+")
	m := Iface{Dir: dir, Name: strings.TrimSuffix(name, "+"), Prefix: prefix, Neg: neg}
	boxed, ok := l.ifaceBoxes[m]
	if !ok {
		if l.ifaceBoxes == nil {
			l.ifaceBoxes = make(map[Iface]Match)
		}
		boxed = m
		l.ifaceBoxes[m] = boxed
	}
	return append(ms, boxed)
}

// needProto reports whether the rule tests for one of protos, as the
// kernel's xt_check_match (or multiport's own check) requires of matches
// that read the transport header.
func (l *lowerer) needProto(r *rules.Rule, m rules.Match, what string, protos ...uint8) bool {
	if !r.ProtoNeg && slices.Contains(protos, r.Proto) {
		return true
	}
	l.errorf(m.Position(), "%s match requires -p %s", m.Name(), what)
	return false
}

// l4Header appends the transport-header guard unless an earlier guard of
// the rule already ensures at least as many bytes.
func l4Header(ms []Match, n int, tinyFragDrop bool) []Match {
	for _, m := range ms {
		if h, ok := m.(L4Header); ok && h.Len >= n {
			return ms
		}
	}
	if n < len(l4Headers) {
		tiny := 0
		if tinyFragDrop {
			tiny = 1
		}
		return append(ms, l4Headers[n][tiny])
	}
	return append(ms, L4Header{Len: n, TinyFragDrop: tinyFragDrop})
}

// l4Headers are the L4Header matches of short lengths, each boxed once
// for every rule: a box of its own was 16 bytes a rule (8 MB of a
// 1M-rule program). A match is a value, which no one changes in its box.
var l4Headers = func() (t [64][2]Match) {
	for n := range t {
		t[n] = [2]Match{L4Header{Len: n}, L4Header{Len: n, TinyFragDrop: true}}
	}
	return t
}()

// transport appends nft's transport-header guard unless an earlier one
// ensures at least n bytes.
func transport(ms []Match, n int) []Match {
	for i, m := range ms {
		if t, ok := m.(Transport); ok {
			ms[i] = Transport{Len: max(t.Len, n)}
			return ms
		}
	}
	return append(ms, Transport{Len: n})
}

// lowerings lower each kind of rules.Match the IR takes. The file of the
// IR match that a kind becomes registers it with lowers.
var lowerings = map[reflect.Type]func(l *lowerer, ms []Match, r *rules.Rule, m rules.Match, nft bool) []Match{}

// lowers registers f as the lowering of the rules match type M.
func lowers[M rules.Match](f func(l *lowerer, ms []Match, r *rules.Rule, m M, nft bool) []Match) {
	lowerings[reflect.TypeFor[M]()] = func(l *lowerer, ms []Match, r *rules.Rule, m rules.Match, nft bool) []Match {
		return f(l, ms, r, m.(M), nft)
	}
}

func (l *lowerer) extension(ms []Match, r *rules.Rule, m rules.Match) []Match {
	// An xtables extension of an nft rule runs as in iptables.
	nft := r.NFT && !m.XT()
	if lower, ok := lowerings[reflect.TypeOf(m)]; ok {
		return lower(l, ms, r, m, nft)
	}
	switch m := m.(type) {
	case *rules.Comment:
		// Matches every packet; the rule's Text keeps it.
	case *rules.Generic:
		if m.Ext == "tproxy" && r.NFT {
			return l.tproxyStatement(ms, r, m)
		}
		l.errorf(m.Position(), "%s match is not supported", m.Name())
	default:
		// addrtype and every generic extension.
		l.errorf(m.Position(), "%s match is not supported", m.Name())
	}
	return ms
}

// ctStateBits maps the rules model's state bits to ConnState.
var ctStateBits = []struct {
	from uint16
	to   model.ConnState
}{
	{rules.CTInvalid, model.ConnInvalid},
	{rules.CTEstablished, model.ConnEstablished},
	{rules.CTRelated, model.ConnRelated},
	{rules.CTNew, model.ConnNew},
	{rules.CTUntracked, model.ConnUntracked},
	{rules.CTSnat, model.ConnSNAT},
	{rules.CTDnat, model.ConnDNAT},
}

// forwardTTL appends a TTL match of the FORWARD hook. ip_forward and
// ip6_forward decrement the TTL (hop limit) before the hook, so the rule
// sees one less than the packet arrived with; the match is rewritten to
// test the TTL as it arrives, which is what Decode reports. Against 255,
// where one more does not fit, the comparison is constant: "== 255" and
// "> 255" never hold, "!= 255" and "< 255" always do.
func forwardTTL(ms []Match, cmp CompareOp, v uint8) []Match {
	if v == 255 {
		if cmp == CmpNe || cmp == CmpLt {
			return ms
		}
		return append(ms, TTL{Op: CmpGt, Value: 255})
	}
	return append(ms, TTL{Op: cmp, Value: v + 1})
}

func (l *lowerer) action(r *rules.Rule) Action {
	switch t := r.Target.(type) {
	case nil:
		return None{}
	case *rules.Accept:
		return Accept{}
	case *rules.Drop:
		return Drop{}
	case *rules.Return:
		return Return{}
	case *rules.Jump:
		return Jump{Chain: l.index[t.Chain]}
	case *rules.Goto:
		return Goto{Chain: l.index[t.Chain]}
	case *rules.Log:
		return Log{Level: t.Level, Prefix: t.Prefix, Flags: t.Flags}
	case *rules.Reject:
		// ipt_REJECT and ip6t_REJECT register for these only.
		if l.table.Name != "filter" || !slices.Contains([]string{"INPUT", "FORWARD", "OUTPUT"}, l.hook) {
			l.errorf(t.Pos, "REJECT target is only valid in the filter table's INPUT, FORWARD and OUTPUT chains")
			return None{}
		}
		with := t.With
		switch {
		case with == "" && l.fam == rules.IPv6:
			with = "icmp6-port-unreachable"
		case with == "":
			with = "icmp-port-unreachable"
		case with == "tcp-reset" && (r.Proto != model.ProtoTCP || r.ProtoNeg):
			l.errorf(t.Pos, "REJECT --reject-with tcp-reset requires -p tcp")
			return None{}
		}
		return Reject{With: with}
	case *rules.TProxy:
		return l.tproxy(r, t)
	}
	l.errorf(r.Target.Position(), "%s target is not supported", r.Target.Name())
	return None{}
}

// bucket returns the token bucket of source match m.
func (l *lowerer) bucket(m rules.Match) int {
	if l.buckets == nil {
		l.buckets = make(map[rules.Match]int)
	}
	b, ok := l.buckets[m]
	if !ok {
		b = len(l.buckets)
		l.buckets[m] = b
	}
	return b
}

// numberTableBuckets numbers the token buckets of every limit of the
// table, in the order of its chains and rules, for LowerOptions.SharedState:
// each chain's program then finds a bucket at the same index of the
// table's one array.
func (l *lowerer) numberTableBuckets() {
	for _, c := range l.table.Chains {
		for _, r := range c.Rules {
			for _, m := range r.Matches {
				switch m.(type) {
				case *rules.Limit, *rules.RateLimit:
					l.bucket(m)
				}
			}
		}
	}
	l.prog.TableBuckets = len(l.buckets)
}

// sharedBucket reports whether limit match m of rule r can have its
// token bucket: the program's own, or with LowerOptions.SharedState the
// table's, which every hook that reaches r shares.
func (l *lowerer) sharedBucket(r *rules.Rule, m rules.Match) bool {
	return l.sharedState || l.ownBucket(r, m)
}

// sharedChains fills l.shared, once.
func (l *lowerer) sharedChains() {
	if l.shared == nil {
		l.shared = make(map[string]string)
		var walk func(c *rules.Chain, root string)
		walk = func(c *rules.Chain, root string) {
			for _, r := range c.Rules {
				name, _, ok := targetChain(r.Target)
				if to := l.byName[name]; ok && to != nil && !to.Builtin {
					if _, seen := l.shared[name]; !seen {
						l.shared[name] = root
						walk(to, root)
					}
				}
			}
		}
		for _, c := range l.table.Chains {
			if c.Builtin && c.Name != l.hook {
				walk(c, c.Name)
			}
		}
	}
}

// ownBucket reports whether the token bucket of limit match m of rule r
// is the program's alone. A user chain that another builtin chain of the
// table also reaches shares its rules, and their buckets, with that
// chain's hook in netfilter, while bpfwall compiles each hook's chain into
// a program with maps of its own.
func (l *lowerer) ownBucket(r *rules.Rule, m rules.Match) bool {
	l.sharedChains()
	for _, c := range l.table.Chains {
		if !slices.Contains(c.Rules, r) {
			continue
		}
		if other, ok := l.shared[c.Name]; ok {
			l.errorf(m.Position(), "%s match in chain %s, which chain %s also reaches: netfilter shares one bucket between the two hooks, and bpfwall compiles each hook on its own", m.Name(), c.Name, other)
			return false
		}
	}
	return true
}

// tproxy lowers -j TPROXY, with xt_TPROXY's checks: the mangle table's
// PREROUTING hook, -p tcp or -p udp. A port of 0 (the packet's own) has no
// single socket to steer to.
func (l *lowerer) tproxy(r *rules.Rule, t *rules.TProxy) Action {
	switch {
	case l.table.Name != "mangle" || l.hook != "PREROUTING":
		l.errorf(t.Pos, "TPROXY target is only valid in the mangle table's PREROUTING chain")
	case r.ProtoNeg || r.Proto != model.ProtoTCP && r.Proto != model.ProtoUDP:
		l.errorf(t.Pos, "TPROXY target requires -p tcp or -p udp")
	case t.Port == 0:
		l.errorf(t.Pos, "TPROXY --on-port 0 (the packet's own port) is not supported: bpfwall steers to one socket per rule")
	case t.Addr.IsValid() && (t.Addr.Is4() != (l.fam == rules.IPv4)):
		l.errorf(t.Pos, "TPROXY --on-ip %s is not an %s address", t.Addr, l.fam)
	default:
		return TProxy{Proto: r.Proto, Addr: t.Addr, Port: t.Port}
	}
	return None{}
}

// tproxyStatement lowers nft's tproxy statement, which the nft front end
// keeps as its text ("[ip|ip6] to [ADDR][:PORT]"), with nft's checks: the
// prerouting hook, a transport protocol. It must end the rule's matches,
// since the socket it assigns stays assigned when a later statement
// breaks the rule.
func (l *lowerer) tproxyStatement(ms []Match, r *rules.Rule, m *rules.Generic) []Match {
	bad := func(format string, args ...any) []Match {
		l.errorf(m.Pos, "tproxy: "+format, args...)
		return ms
	}
	if len(m.Options) != 1 || len(m.Options[0].Args) != 1 {
		return bad("malformed statement")
	}
	text := m.Options[0].Args[0]
	for _, after := range r.Matches[slices.Index(r.Matches, rules.Match(m))+1:] {
		if _, ok := after.(*rules.Comment); !ok {
			return bad("statements between tproxy and the verdict are not supported")
		}
	}
	switch {
	case l.table.Name != "mangle" || l.hook != "PREROUTING":
		return bad("only valid in a prerouting chain")
	case r.ProtoNeg || r.Proto != model.ProtoTCP && r.Proto != model.ProtoUDP:
		return bad("the rule must test meta l4proto tcp or udp")
	}
	_, to, ok := strings.Cut(text, "to ")
	if !ok {
		return bad("malformed statement %q", text)
	}
	t := TProxyTo{Proto: r.Proto}
	host, port := to, ""
	if i := strings.LastIndex(to, ":"); i >= 0 && !strings.HasSuffix(to, "]") && (strings.HasPrefix(to, "[") || strings.Count(to, ":") == 1) {
		host, port = to[:i], to[i+1:]
	}
	host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	if host != "" {
		a, err := netip.ParseAddr(host)
		if err != nil || a.Is4() != (l.fam == rules.IPv4) {
			return bad("address %q is not an %s address", host, l.fam)
		}
		t.Addr = a
	}
	p, err := strconv.ParseUint(port, 10, 16)
	if err != nil || p == 0 {
		return bad("to %s: bpfwall needs the port to steer to (without one, nft keeps the packet's own)", to)
	}
	t.Port = uint16(p)
	return append(ms, t)
}
