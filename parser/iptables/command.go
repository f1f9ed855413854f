package iptables

import (
	"slices"
	"strconv"
	"strings"

	"bpfwall/rules"
)

// cmdKind is the command of a restore line (-A, -I, ...).
type cmdKind uint8

const (
	cmdNone cmdKind = iota
	cmdAppend
	cmdCheck
	cmdDelete
	cmdInsert
	cmdReplace
	cmdList
	cmdFlush
	cmdZero
	cmdNewChain
	cmdDeleteChain
	cmdRename
	cmdPolicy
)

var cmdFlags = [...]string{"", "-A", "-C", "-D", "-I", "-R", "-L", "-F", "-Z", "-N", "-X", "-E", "-P"}

func (k cmdKind) String() string { return cmdFlags[k] }

// command is one parsed restore line.
type command struct {
	kind     cmdKind
	pos      rules.Pos // of the command option
	chain    string
	chainPos rules.Pos
	num      int // rule number; 0 when not given
	numPos   rules.Pos
	arg      string // -E new name, -P policy
	argPos   rules.Pos
	// spec holds the rule specification, expanded over -s/-d lists.
	spec    []*rules.Rule
	hasSpec bool
	// skip is set for -6 lines in IPv4 input and -4 lines in IPv6 input,
	// which iptables-restore ignores.
	skip bool
}

// standard option names, long form → short letter, as getopt_long sees them.
var longOptions = map[string]byte{
	"append": 'A', "check": 'C', "delete": 'D', "insert": 'I', "replace": 'R',
	"list": 'L', "list-rules": 'S', "flush": 'F', "zero": 'Z', "new-chain": 'N',
	"delete-chain": 'X', "rename-chain": 'E', "policy": 'P', "help": 'h', "version": 'V',
	"source": 's', "src": 's', "destination": 'd', "dst": 'd', "protocol": 'p',
	"in-interface": 'i', "out-interface": 'o', "jump": 'j', "goto": 'g', "match": 'm',
	"fragment": 'f', "set-counters": 'c', "verbose": 'v', "numeric": 'n', "exact": 'x',
	"table": 't', "wait": 'w', "wait-interval": 'W', "ipv4": '4', "ipv6": '6',
	"line-numbers": '0', "modprobe": 'M',
}

// shortArg says which standard options take an argument: 1 required,
// 2 optional (next token when it does not start with '-' or '!').
// Others are -1. (An array: it is read for every option of every line.)
var shortArg = func() (a [256]int8) {
	for i := range a {
		a[i] = -1
	}
	for c, kind := range map[byte]int8{
		'A': 1, 'C': 1, 'D': 1, 'I': 1, 'R': 1, 'N': 1, 'E': 1, 'P': 1,
		's': 1, 'd': 1, 'p': 1, 'i': 1, 'o': 1, 'j': 1, 'g': 1, 'm': 1, 'c': 1, 't': 1, 'M': 1,
		'L': 2, 'S': 2, 'F': 2, 'Z': 2, 'X': 2, 'h': 2, 'w': 2, 'W': 2,
		'f': 0, 'v': 0, 'n': 0, 'x': 0, '4': 0, '6': 0, 'V': 0, '0': 0,
	} {
		a[c] = kind
	}
	return a
}()

// shortFlags are the short options as written, "-s".
var shortFlags = func() (a [256]string) {
	for c := range a {
		a[c] = "-" + string(rune(c))
	}
	return a
}()

var cmdKinds = map[byte]cmdKind{'A': cmdAppend, 'C': cmdCheck, 'D': cmdDelete, 'I': cmdInsert,
	'R': cmdReplace, 'L': cmdList, 'S': cmdList, 'F': cmdFlush, 'Z': cmdZero,
	'N': cmdNewChain, 'X': cmdDeleteChain, 'E': cmdRename, 'P': cmdPolicy}

// standardTargets are the verdicts every chain may use.
var standardTargets = map[string]bool{"ACCEPT": true, "DROP": true, "RETURN": true, "QUEUE": true}

// knownTargets are target extensions of iptables and xtables-addons that
// bpfwall keeps generically; any other -j name must be a chain.
var knownTargets = map[string]bool{
	"AUDIT": true, "CHECKSUM": true, "CLASSIFY": true, "CLUSTERIP": true, "CONNMARK": true,
	"CONNSECMARK": true, "CT": true, "DNAT": true, "DNPT": true, "DSCP": true, "ECN": true,
	"HL": true, "HMARK": true, "IDLETIMER": true, "LED": true, "MARK": true,
	"MASQUERADE": true, "MIRROR": true, "NETMAP": true, "NFLOG": true, "NFQUEUE": true,
	"NOTRACK": true, "RATEEST": true, "REDIRECT": true, "SAME": true, "SECMARK": true,
	"SET": true, "SNAT": true, "SNPT": true, "SYNPROXY": true, "TCPMSS": true,
	"TCPOPTSTRIP": true, "TEE": true, "TOS": true, "TPROXY": true, "TRACE": true,
	"TTL": true, "ULOG": true, "TARPIT": true, "DELUDE": true, "CHAOS": true,
	"IPMARK": true, "LOGMARK": true, "SYSRQ": true, "DHCPMAC": true, "ECHO": true,
}

// knownMatches are the match extensions of iptables and xtables-addons that
// bpfwall keeps generically; any other -m name is an error, as iptables
// cannot load it.
var knownMatches = map[string]bool{
	"ah": true, "bpf": true, "cgroup": true, "cluster": true, "connbytes": true,
	"connlabel": true, "connlimit": true, "connmark": true, "cpu": true, "dccp": true,
	"devgroup": true, "dst": true, "ecn": true, "esp": true, "eui64": true,
	"frag": true, "hbh": true, "helper": true, "ipcomp": true,
	"ipv6header": true, "ipvs": true, "mh": true, "nfacct": true, "osf": true,
	"physdev": true, "policy": true, "quota": true, "rateest": true,
	"realm": true, "recent": true, "rpfilter": true, "rt": true, "sctp": true,
	"socket": true, "srh": true, "statistic": true, "string": true, "tcpmss": true,
	"time": true, "tos": true, "u32": true, "udplite": true,
	// xtables-addons
	"account": true, "condition": true, "dhcpmac": true, "fuzzy": true, "geoip": true,
	"gradm": true, "iface": true, "ipp2p": true, "ipv4options": true, "length2": true,
	"lscan": true, "pknock": true, "psd": true, "quota2": true,
}

// loadedMatch is a match extension loaded on the current line.
type loadedMatch struct {
	name   string
	pos    rules.Pos
	ext    *matchExt // nil: generic
	parser matchParser
	seen   optsSeen
}

// loadedTarget is the target extension of the current line.
type loadedTarget struct {
	name   string
	pos    rules.Pos
	ext    *targetExt // nil: generic
	parser targetParser
	seen   optsSeen
}

// lineParser turns the arguments of one restore line into a command, as
// iptables' do_parse does.
type lineParser struct {
	p    *parser
	toks []token
	i    int
	line int

	cmd       command
	invert    bool
	invertPos rules.Pos
	seen      [256]bool // standard options given

	rule       rules.Rule
	srcs, dsts []rules.Net // of -s and -d, each address of a list
	srcPos     rules.Pos
	dstPos     rules.Pos
	protoSet   bool
	matches    []*loadedMatch
	target     *loadedTarget
	// srcBuf, dstBuf and loaded are the arrays of srcs, dsts and the
	// loaded matches, which the next line reuses (parseCommand): none of
	// them outlives its line, and they were allocations on every line.
	srcBuf, dstBuf []rules.Net
	loaded         []loadedMatch
	ctx            ruleCtx // finish's
	// targetAfter is the number of matches loaded before the target.
	targetAfter int
	jump        string
	jumpPos     rules.Pos
	isGoto      bool
	isChainJmp  bool
}

func (lp *lineParser) pos(col int) rules.Pos {
	return rules.Pos{File: lp.p.name, Line: lp.line, Col: col}
}

func (lp *lineParser) errorf(col int, format string, args ...any) error {
	return rules.Errorf(lp.pos(col), format, args...)
}

// parseCommand parses the tokens of a command line. The command is valid
// until the next call.
func (p *parser) parseCommand(toks []token, line int) (*command, error) {
	lp := &p.lp
	// The arrays of the last line's lists, matches and rules, for this
	// one: the command's rules are applied before the next line.
	srcBuf, dstBuf, matches, loaded, spec := lp.srcBuf[:0], lp.dstBuf[:0], lp.matches[:0], lp.loaded[:0], lp.cmd.spec[:0]
	*lp = lineParser{p: p, toks: toks, line: line}
	lp.srcBuf, lp.dstBuf, lp.matches, lp.loaded, lp.cmd.spec = srcBuf, dstBuf, matches, loaded, spec
	if err := lp.run(); err != nil {
		return nil, err
	}
	return &lp.cmd, nil
}

func (lp *lineParser) run() error {
	for lp.i < len(lp.toks) {
		t := lp.toks[lp.i]
		lp.i++
		switch {
		case t.text == "!":
			if lp.invert {
				return lp.errorf(t.col, "multiple consecutive ! not allowed")
			}
			lp.invert, lp.invertPos = true, lp.pos(t.col)
			continue
		case strings.HasPrefix(t.text, "--") && len(t.text) > 2:
			if err := lp.longOption(t); err != nil {
				return err
			}
		case strings.HasPrefix(t.text, "-") && len(t.text) > 1:
			if err := lp.shortOptions(t); err != nil {
				return err
			}
		default:
			return lp.errorf(t.col, "bad argument %q", t.text)
		}
		if lp.cmd.skip {
			return nil
		}
	}
	if lp.invert {
		return rules.Errorf(lp.invertPos, "! is not followed by an option")
	}
	return lp.finish()
}

// nextArg returns the next token as a required argument.
func (lp *lineParser) nextArg(flag string, col int) (token, error) {
	if lp.i >= len(lp.toks) {
		return token{}, lp.errorf(col, "option %q requires an argument", flag)
	}
	t := lp.toks[lp.i]
	lp.i++
	return t, nil
}

// optionalArg returns the next token if it does not look like an option.
func (lp *lineParser) optionalArg() (token, bool) {
	if lp.i < len(lp.toks) {
		t := lp.toks[lp.i]
		if t.text == "" || (t.text[0] != '-' && t.text[0] != '!') {
			lp.i++
			return t, true
		}
	}
	return token{}, false
}

func (lp *lineParser) shortOptions(t token) error {
	for j := 1; j < len(t.text); j++ {
		c := t.text[j]
		kind := shortArg[c]
		if kind < 0 {
			return lp.errorf(t.col+j, "unknown option \"-%c\"", c)
		}
		flag := shortFlags[c]
		var arg *token
		switch {
		case kind == 1 && j+1 < len(t.text):
			arg = &token{text: t.text[j+1:], col: t.col + j + 1}
		case kind == 1:
			a, err := lp.nextArg(flag, t.col+j)
			if err != nil {
				return err
			}
			arg = &a
		case kind == 2 && j+1 < len(t.text):
			arg = &token{text: t.text[j+1:], col: t.col + j + 1}
		}
		if err := lp.standard(c, flag, t.col+j, arg); err != nil {
			return err
		}
		if arg != nil || lp.cmd.skip {
			return nil
		}
	}
	return nil
}

func (lp *lineParser) longOption(t token) error {
	name, value, hasValue := strings.Cut(t.text[2:], "=")
	col := t.col
	var valueTok *token
	if hasValue {
		valueTok = &token{text: value, col: t.col + 3 + len(name)}
	}
	// An exact standard option first, then an exact option of a loaded
	// extension, then a unique abbreviation of either, as getopt_long
	// resolves them; only an option nobody owns loads the protocol's match.
	if c, ok := longOptions[name]; ok {
		return lp.standardLong(c, "--"+name, col, valueTok)
	}
	if h, ok := lp.findExtOption(name, true, false); ok {
		return lp.extOption(h, t, valueTok)
	}
	// An extension bpfwall keeps generically has options we do not know, so
	// it gets every option that is not exactly someone else's; only then are
	// abbreviations tried.
	if g, ok := lp.genericOwner(name); ok {
		return lp.extOption(g, t, valueTok)
	}
	var cands []string
	for n := range longOptions {
		if strings.HasPrefix(n, name) {
			cands = append(cands, n)
		}
	}
	ext, isExt := lp.findExtOption(name, false, false)
	if isExt {
		cands = append(cands, ext.spec.name)
	}
	if len(cands) > 1 {
		slices.Sort(cands)
		// getopt accepts an abbreviation shared by aliases of one option.
		if c := longOptions[cands[0]]; !isExt && !slices.ContainsFunc(cands, func(n string) bool { return longOptions[n] != c }) {
			return lp.standardLong(c, "--"+cands[0], col, valueTok)
		}
		return lp.errorf(col, "option \"--%s\" is ambiguous (%s)", name, strings.Join(cands, ", "))
	}
	if len(cands) == 1 && !isExt {
		return lp.standardLong(longOptions[cands[0]], "--"+cands[0], col, valueTok)
	}
	if isExt {
		return lp.extOption(ext, t, valueTok)
	}
	if h, ok := lp.findExtOption(name, false, true); ok {
		return lp.extOption(h, t, valueTok)
	}
	return lp.errorf(col, "unknown option %q", "--"+name)
}

func (lp *lineParser) standardLong(c byte, flag string, col int, value *token) error {
	kind := shortArg[c]
	switch {
	case kind == 0 && value != nil:
		return lp.errorf(col, "option %q doesn't allow an argument", flag)
	case kind == 1 && value == nil:
		a, err := lp.nextArg(flag, col)
		if err != nil {
			return err
		}
		value = &a
	}
	return lp.standard(c, flag, col, value)
}

// standard handles a standard option. arg is its argument (nil when absent).
func (lp *lineParser) standard(c byte, flag string, col int, arg *token) error {
	inv := lp.invert
	lp.invert = false
	switch c {
	case 'A', 'C', 'D', 'I', 'R', 'L', 'S', 'F', 'Z', 'N', 'X', 'E', 'P':
		if inv {
			return lp.errorf(col, "cannot have ! before %s", flag)
		}
		return lp.command(c, flag, col, arg)
	case '4', '6':
		if (c == '6') == (lp.p.family == rules.IPv6) {
			return nil
		}
		// iptables-restore ignores the rest of a line meant for the other family.
		lp.cmd.skip = true
		return nil
	case 't':
		return lp.errorf(col, "the -t option cannot be used in iptables-restore")
	case 'w', 'W':
		return lp.errorf(col, "the %s option cannot be used in iptables-restore", flag)
	case 'v', 'n', 'x', '0', 'h', 'V', 'M':
		return nil
	}
	if lp.seen[c] && c != 'm' {
		return lp.errorf(col, "multiple %s flags not allowed", stdFlagName(c))
	}
	lp.seen[c] = true
	lp.cmd.hasSpec = true
	if arg != nil && arg.text == "!" && strings.ContainsRune("sdpio", rune(c)) {
		// iptables before 1.4.3 wrote "-d ! addr"; 1.8 takes "!" as the
		// address and fails on the next word ("Bad argument").
		modern := "! " + flag
		if lp.i < len(lp.toks) {
			modern += " " + lp.toks[lp.i].text
		}
		return lp.errorf(arg.col, "intrapositioned negation is not accepted by iptables 1.8: write %q", modern)
	}
	switch c {
	case 's', 'd':
		list := lp.srcBuf[:0]
		if c == 'd' {
			list = lp.dstBuf[:0]
		}
		for a, rest, more := arg.text, "", true; more; a = rest {
			a, rest, more = strings.Cut(a, ",")
			n, err := parseNet(a, lp.p.family)
			if err != nil {
				return lp.errorf(arg.col, "%s", err)
			}
			list = append(list, n)
		}
		if inv && len(list) > 1 {
			return lp.errorf(col, "! not allowed with multiple source or destination IP addresses")
		}
		if c == 's' {
			lp.srcs, lp.srcBuf, lp.srcPos, lp.rule.SrcNeg = list, list, lp.pos(arg.col), inv
		} else {
			lp.dsts, lp.dstBuf, lp.dstPos, lp.rule.DstNeg = list, list, lp.pos(arg.col), inv
		}
	case 'p':
		proto, err := parseProto(arg.text)
		if err != nil {
			return lp.errorf(arg.col, "%s", err)
		}
		if proto == 0 && inv {
			return lp.errorf(col, "rule would never match protocol")
		}
		lp.rule.Proto, lp.rule.ProtoNeg, lp.rule.ProtoGiven, lp.protoSet = proto, inv, true, true
	case 'i', 'o':
		if err := checkIface(arg.text); err != nil {
			return lp.errorf(arg.col, "%s", err)
		}
		if c == 'i' {
			lp.rule.InIface, lp.rule.InNeg = arg.text, inv
		} else {
			lp.rule.OutIface, lp.rule.OutNeg = arg.text, inv
		}
	case 'f':
		if lp.p.family == rules.IPv6 {
			return lp.errorf(col, "unknown option %q", flag)
		}
		lp.rule.Fragment, lp.rule.FragmentNeg = true, inv
	case 'j', 'g':
		if inv {
			return lp.errorf(col, "cannot have ! before %s", flag)
		}
		if lp.seen['j'] && lp.seen['g'] {
			return lp.errorf(col, "cannot use -j and -g together")
		}
		return lp.setTarget(arg, c == 'g')
	case 'm':
		if inv {
			return lp.errorf(col, "unexpected ! flag before --match")
		}
		_, err := lp.loadMatch(arg.text, lp.pos(col))
		return err
	case 'c':
		return lp.setCounters(arg, col)
	}
	return nil
}

func stdFlagName(c byte) string {
	switch c {
	case 's':
		return "-s"
	case 'd':
		return "-d"
	case 'p':
		return "-p"
	case 'i':
		return "-i"
	case 'o':
		return "-o"
	case 'f':
		return "-f"
	case 'j', 'g':
		return "-j"
	case 'c':
		return "-c"
	}
	return "-" + string(c)
}

// command records the command option and its chain and number arguments.
func (lp *lineParser) command(c byte, flag string, col int, arg *token) error {
	if lp.cmd.kind != cmdNone {
		return lp.errorf(col, "cannot use %s with %s", flag, lp.cmd.kind)
	}
	lp.cmd.kind, lp.cmd.pos = cmdKinds[c], lp.pos(col)
	if arg == nil {
		if a, ok := lp.optionalArg(); ok {
			arg = &a
		}
	}
	if arg != nil {
		lp.cmd.chain, lp.cmd.chainPos = arg.text, lp.pos(arg.col)
	}
	number := func(required bool) error {
		t, ok := lp.optionalArg()
		if !ok {
			if required {
				return lp.errorf(col, "%s requires a rule number", flag)
			}
			return nil
		}
		n, err := strconv.Atoi(t.text)
		if err != nil || n < 1 {
			return lp.errorf(t.col, "invalid rule number %q", t.text)
		}
		lp.cmd.num, lp.cmd.numPos = n, lp.pos(t.col)
		return nil
	}
	switch lp.cmd.kind {
	case cmdInsert, cmdDelete:
		return number(false)
	case cmdReplace:
		return number(true)
	case cmdZero:
		if arg != nil {
			return number(false)
		}
	case cmdRename, cmdPolicy:
		t, ok := lp.optionalArg()
		if !ok {
			if lp.cmd.kind == cmdRename {
				return lp.errorf(col, "-E requires old-chain-name and new-chain-name")
			}
			return lp.errorf(col, "-P requires a chain and a policy")
		}
		lp.cmd.arg, lp.cmd.argPos = t.text, lp.pos(t.col)
	}
	return nil
}

// setCounters handles "-c packets bytes" and iptables 1.8.11's
// "-c packets,bytes".
func (lp *lineParser) setCounters(arg *token, col int) error {
	ps, bs, comma := strings.Cut(arg.text, ",")
	if !comma {
		t, err := lp.nextArg("-c", col)
		if err != nil {
			return lp.errorf(col, "-c requires packet and byte counter")
		}
		bs = t.text
	}
	pkts, err1 := strconv.ParseUint(ps, 10, 64)
	bytes, err2 := strconv.ParseUint(bs, 10, 64)
	switch {
	case err1 != nil:
		return lp.errorf(arg.col, "-c packet counter not numeric")
	case err2 != nil:
		return lp.errorf(arg.col, "-c byte counter not numeric")
	}
	if lp.p.opts.Counters {
		lp.rule.Counters = rules.Counters{Packets: pkts, Bytes: bytes}
	}
	return nil
}

// setTarget handles -j and -g. A name that is neither a standard verdict nor
// a target extension is a chain; whether it exists is checked when the
// command is applied.
func (lp *lineParser) setTarget(arg *token, isGoto bool) error {
	if lp.jump != "" {
		return lp.errorf(arg.col, "multiple -j flags not allowed")
	}
	name := arg.text
	if name == "" {
		return lp.errorf(arg.col, "empty target name")
	}
	lp.jump, lp.jumpPos, lp.isGoto = name, lp.pos(arg.col), isGoto
	if isGoto || standardTargets[name] {
		lp.isChainJmp = isGoto
		return nil
	}
	if t := lp.p.table; t != nil && t.Chain(name) != nil {
		lp.isChainJmp = true
		return nil
	}
	if e, ok := targetExts[name]; ok && (e.family == nil || *e.family == lp.p.family) {
		lp.target = &loadedTarget{name: name, pos: lp.jumpPos, ext: e, parser: e.new()}
		lp.targetAfter = len(lp.matches)
		return nil
	}
	if knownTargets[name] {
		lp.target = &loadedTarget{name: name, pos: lp.jumpPos, parser: newGenericTarget(name)}
		lp.targetAfter = len(lp.matches)
		return nil
	}
	lp.isChainJmp = true
	return nil
}

// loadMatch loads a match extension; an extension of the other family or
// one bpfwall does not interpret is kept generically.
func (lp *lineParser) loadMatch(name string, pos rules.Pos) (*loadedMatch, error) {
	// From the line's array of loaded matches, keeping the options seen
	// list of the match that was there.
	if len(lp.loaded) == cap(lp.loaded) {
		lp.loaded = append(lp.loaded, loadedMatch{})
	} else {
		lp.loaded = lp.loaded[:len(lp.loaded)+1]
	}
	m := &lp.loaded[len(lp.loaded)-1]
	*m = loadedMatch{name: name, pos: pos, seen: optsSeen{names: m.seen.names[:0]}}
	e, typed := matchExts[name]
	switch {
	case typed && (e.family == nil || *e.family == lp.p.family):
		m.ext, m.parser = e, e.new()
	case typed:
		return nil, rules.Errorf(pos, "couldn't load match %q: it is for %s only", name, *e.family)
	case knownMatches[name]:
		m.parser = newGenericMatch(name)
	default:
		return nil, rules.Errorf(pos, "couldn't load match %q: no such extension", name)
	}
	lp.matches = append(lp.matches, m)
	return m, nil
}

// optsSeen are the options an extension was given on the line: a few, so
// a list (a map per extension was 5% of a large restore's allocations).
type optsSeen struct{ names []string }

func (s *optsSeen) has(name string) bool { return slices.Contains(s.names, name) }
func (s *optsSeen) add(name string)      { s.names = append(s.names, name) }

// extHandle is an extension that claims an option.
type extHandle struct {
	spec   optSpec
	seen   *optsSeen
	parser interface{ parse(o *opt) error }
}

// findExtOption finds the loaded interpreted extension that owns the
// option name (exactly, or as a unique abbreviation when exact is false):
// the target first, then the matches in load order, as iptables does. With
// implicit, it instead loads the rule's protocol match if that owns the
// option.
func (lp *lineParser) findExtOption(name string, exact, implicit bool) (extHandle, bool) {
	lookup := func(specs []optSpec) (optSpec, bool) {
		var found []optSpec
		for _, s := range specs {
			if s.name == name {
				return s, true
			}
			if !exact && strings.HasPrefix(s.name, name) {
				found = append(found, s)
			}
		}
		if len(found) == 1 {
			return found[0], true
		}
		return optSpec{}, false
	}
	if implicit {
		return lp.loadImplicit(lookup)
	}
	var found extHandle
	ok := false
	lp.newestFirst(func(specs []optSpec, seen *optsSeen, parser interface{ parse(*opt) error }) bool {
		if specs == nil {
			return false // generic
		}
		var s optSpec
		if s, ok = lookup(specs); ok {
			found = extHandle{spec: s, seen: seen, parser: parser}
		}
		return ok
	})
	return found, ok
}

// newestFirst calls f for the loaded extensions, the most recently loaded
// first, until f returns true. iptables merges a new extension's options in
// front of the older ones, so when two extensions (two -m multiport, say)
// have an option of the same name, the newer one gets it. specs is nil for
// generic extensions.
func (lp *lineParser) newestFirst(f func(specs []optSpec, seen *optsSeen, parser interface{ parse(*opt) error }) bool) {
	target := func() bool {
		t := lp.target
		var specs []optSpec
		if t.ext != nil {
			specs = t.ext.options
		}
		return f(specs, &t.seen, t.parser)
	}
	for i := len(lp.matches) - 1; i >= 0; i-- {
		if lp.target != nil && lp.targetAfter == i+1 && target() {
			return
		}
		m := lp.matches[i]
		var specs []optSpec
		if m.ext != nil {
			specs = m.ext.options
		}
		if f(specs, &m.seen, m.parser) {
			return
		}
	}
	if lp.target != nil && lp.targetAfter == 0 {
		target()
	}
}

// loadImplicit loads the match named after the rule's protocol (-p tcp
// loads tcp) if it owns an option, as iptables does for options no loaded
// extension knows.
func (lp *lineParser) loadImplicit(lookup func([]optSpec) (optSpec, bool)) (extHandle, bool) {
	if !lp.protoSet || lp.rule.ProtoNeg {
		return extHandle{}, false
	}
	implicit := protoExtension(lp.rule.Proto, lp.p.family)
	if e, ok := matchExts[implicit]; ok && (e.family == nil || *e.family == lp.p.family) {
		if s, ok := lookup(e.options); ok {
			m, err := lp.loadMatch(implicit, lp.pos(lp.toks[lp.i-1].col))
			if err != nil {
				return extHandle{}, false
			}
			return extHandle{spec: s, seen: &m.seen, parser: m.parser}, true
		}
	}
	return extHandle{}, false
}

// protoExtension names the match extension iptables loads implicitly for
// a protocol.
func protoExtension(proto uint8, fam rules.Family) string {
	if proto == 58 && fam == rules.IPv6 {
		return "icmp6"
	}
	return rules.ProtoName(proto)
}

// genericOwner returns the most recently loaded generic extension, which
// takes an option no interpreted extension owns.
func (lp *lineParser) genericOwner(name string) (extHandle, bool) {
	var found extHandle
	ok := false
	lp.newestFirst(func(specs []optSpec, seen *optsSeen, parser interface{ parse(*opt) error }) bool {
		if specs != nil {
			return false
		}
		found, ok = extHandle{spec: optSpec{name: name, arg: argGreedy, invert: true, multi: true}, seen: seen, parser: parser}, true
		return true
	})
	return found, ok
}

// extOption reads the arguments of an extension option and hands it over.
func (lp *lineParser) extOption(h extHandle, t token, value *token) error {
	o := &opt{Name: h.spec.name, Neg: lp.invert, Pos: lp.pos(t.col)}
	if lp.invert {
		o.Pos = lp.invertPos
	}
	lp.invert = false
	if o.Neg && !h.spec.invert {
		return rules.Errorf(o.Pos, "unexpected ! flag before --%s", h.spec.name)
	}
	if h.seen.has(h.spec.name) && !h.spec.multi {
		return lp.errorf(t.col, "--%s can be given only once", h.spec.name)
	}
	h.seen.add(h.spec.name)
	switch h.spec.arg {
	case argNone:
		if value != nil {
			return lp.errorf(t.col, "option \"--%s\" doesn't allow an argument", h.spec.name)
		}
	case argOne:
		if value == nil {
			a, err := lp.nextArg("--"+h.spec.name, t.col)
			if err != nil {
				return err
			}
			value = &a
		}
	case argOptional:
		if value == nil {
			if a, ok := lp.optionalArg(); ok {
				value = &a
			}
		}
	case argGreedy:
		if value != nil {
			o.Args = append(o.Args, value.text)
		}
		for lp.i < len(lp.toks) && !looksLikeOption(lp.toks[lp.i].text) {
			o.Args = append(o.Args, lp.toks[lp.i].text)
			lp.i++
		}
	}
	if value != nil {
		o.Arg, o.HasArg, o.ArgPos = value.text, true, lp.pos(value.col)
	}
	return h.parser.parse(o)
}

// looksLikeOption reports whether a token starts a new option (negative
// numbers are arguments).
func looksLikeOption(s string) bool {
	if s == "!" {
		return true
	}
	if len(s) < 2 || s[0] != '-' {
		return false
	}
	return !('0' <= s[1] && s[1] <= '9')
}

// finish checks the line as a whole and builds the rules it specifies.
func (lp *lineParser) finish() error {
	c := &lp.cmd
	if c.kind == cmdNone {
		return lp.errorf(1, "no command specified")
	}
	switch c.kind {
	case cmdAppend, cmdCheck, cmdInsert, cmdReplace:
	case cmdDelete:
		if c.num != 0 && c.hasSpec {
			return rules.Errorf(c.numPos, "-D with a rule number takes no rule specification")
		}
	default:
		if c.hasSpec {
			return rules.Errorf(c.pos, "illegal option with %s", c.kind)
		}
	}
	if (c.kind == cmdReplace || c.kind == cmdInsert || c.kind == cmdAppend || c.kind == cmdCheck) && c.chain == "" {
		return rules.Errorf(c.pos, "%s requires a chain", c.kind)
	}
	if !c.hasSpec && c.kind != cmdDelete && c.kind != cmdAppend && c.kind != cmdInsert && c.kind != cmdReplace && c.kind != cmdCheck {
		return nil
	}
	if c.kind == cmdDelete && c.num != 0 {
		return nil
	}
	// iptables refuses interfaces a builtin chain's packets cannot have.
	switch {
	case lp.rule.OutIface != "" && (c.chain == "PREROUTING" || c.chain == "INPUT"):
		return rules.Errorf(c.chainPos, "can't use -o with %s", c.chain)
	case lp.rule.InIface != "" && (c.chain == "POSTROUTING" || c.chain == "OUTPUT"):
		return rules.Errorf(c.chainPos, "can't use -i with %s", c.chain)
	}
	// The context lives in lp: the extensions' finish take it through an
	// interface, and a local would be one more allocation per rule.
	lp.ctx = ruleCtx{Family: lp.p.family, Proto: lp.rule.Proto, ProtoNeg: lp.rule.ProtoNeg, Table: lp.p.table.Name, Chain: c.chain, Sets: lp.p.opts.Sets}
	ctx := &lp.ctx
	r := lp.rule
	r.Pos = c.pos
	if len(lp.matches) > 0 {
		r.Matches = make([]rules.Match, 0, len(lp.matches))
	}
	for _, m := range lp.matches {
		ctx.Pos = m.pos
		match, err := m.parser.finish(ctx)
		if err != nil {
			return atPos(err, m.pos)
		}
		r.Matches = append(r.Matches, match)
	}
	if lp.jump != "" {
		loc := rules.Located{Pos: lp.jumpPos}
		switch {
		case lp.target != nil:
			ctx.Pos = lp.target.pos
			t, err := lp.target.parser.finish(ctx)
			if err != nil {
				return atPos(err, lp.target.pos)
			}
			r.Target = t
		case lp.isGoto:
			r.Target = &rules.Goto{Located: loc, Chain: lp.jump}
		case lp.jump == "ACCEPT":
			r.Target = &rules.Accept{Located: loc}
		case lp.jump == "DROP":
			r.Target = &rules.Drop{Located: loc}
		case lp.jump == "RETURN":
			r.Target = &rules.Return{Located: loc}
		case lp.jump == "QUEUE":
			r.Target = &rules.GenericTarget{Located: loc, Target: "QUEUE"}
		default:
			r.Target = &rules.Jump{Located: loc, Chain: lp.jump}
		}
	}
	// One rule per source and destination, as iptables adds them; the
	// zero Net, for no -s or -d, matches every address.
	srcs, dsts := lp.srcs, lp.dsts
	if srcs == nil {
		srcs = []rules.Net{{}}
	}
	if dsts == nil {
		dsts = []rules.Net{{}}
	}
	for _, s := range srcs {
		for _, d := range dsts {
			nr := r
			nr.Src, nr.Dst = s, d
			c.spec = append(c.spec, &nr)
		}
	}
	return nil
}

// atPos gives an error without a position the position pos.
func atPos(err error, pos rules.Pos) error {
	if _, ok := err.(*rules.Error); ok {
		return err
	}
	if _, ok := err.(rules.ErrorList); ok {
		return err
	}
	return &rules.Error{Pos: pos, Msg: err.Error()}
}
