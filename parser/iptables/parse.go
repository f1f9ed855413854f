package iptables

import (
	"bytes"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"bpfwall/rules"
)

// Options control how input is read.
type Options struct {
	// Family is used when ForceFamily is set (-6), or when the input does
	// not show which family it is for.
	Family      rules.Family
	ForceFamily bool
	// Counters applies and requires well-formed counters, as
	// iptables-restore -c; without it counters are read and dropped.
	Counters bool
	// Noflush applies the input on top of Base (iptables-restore -n):
	// tables named in the input are not flushed.
	Noflush bool
	Base    *rules.Ruleset
	// Fragment says the input is applied on top of a rule set that is not
	// known here (restore -n of a fragment such as ufw's before.rules):
	// jumps to chains it does not define are warnings, not errors.
	Fragment bool
	// Table restores only the table of that name (-T).
	Table string
	// Sets are the ipsets "-m set" may name.
	Sets map[string]*rules.IPSet
}

// maxChainNameLen is XT_EXTENSION_MAXNAMELEN - 1.
const maxChainNameLen = 28

// Parse reads iptables-save or iptables-restore input. name is used in
// positions. On error the returned ruleset holds the tables committed before
// the failing line, as iptables-restore leaves them; the error is a
// *rules.Error or a rules.ErrorList.
func Parse(name string, src []byte, opts Options) (*rules.Ruleset, error) {
	p := &parser{name: name, opts: opts, family: opts.Family}
	if !opts.ForceFamily {
		p.family = DetectFamily(src, opts.Family)
	}
	p.rs = &rules.Ruleset{Family: p.family, Sets: opts.Sets}
	if opts.Noflush && opts.Base != nil {
		for _, t := range opts.Base.Tables {
			p.rs.Tables = append(p.rs.Tables, t.Clone())
		}
	}
	err := p.run(src)
	p.rs.Warnings = p.warnings
	return p.rs, err
}

type parser struct {
	name     string
	opts     Options
	family   rules.Family
	rs       *rules.Ruleset
	table    *rules.Table // the open table, a working copy until COMMIT
	skipping bool         // inside a table that -T excludes
	line     int
	errs     rules.ErrorList // semantic errors, collected
	warnings []*rules.Error
	// lp parses the current command line; one for all lines, since a
	// lineParser is large and lives only until its command is applied.
	lp lineParser
	// toks holds the tokens of the current line, reused for the next.
	toks []token
}

func (p *parser) pos(col int) rules.Pos { return rules.Pos{File: p.name, Line: p.line, Col: col} }

func (p *parser) warnf(pos rules.Pos, format string, args ...any) {
	p.warnings = append(p.warnings, rules.Errorf(pos, format, args...))
}

func (p *parser) run(src []byte) error {
	lines := bytes.Split(src, []byte("\n"))
	if len(lines) > 0 && len(lines[len(lines)-1]) == 0 {
		lines = lines[:len(lines)-1]
	}
	for i, l := range lines {
		p.line = i + 1
		if err := p.parseLine(string(l)); err != nil {
			return err
		}
	}
	if p.table != nil || p.skipping {
		p.line = len(lines) + 1
		return p.fail(rules.Errorf(p.pos(0), "COMMIT expected"))
	}
	return p.errs.Err()
}

// fail returns the first syntax error together with the semantic errors
// found before it.
func (p *parser) fail(err error) error {
	if len(p.errs) == 0 {
		return err
	}
	list := append(rules.ErrorList{}, p.errs...)
	switch e := err.(type) {
	case *rules.Error:
		list = append(list, e)
	case rules.ErrorList:
		list = append(list, e...)
	}
	return list.Err()
}

func (p *parser) parseLine(l string) error {
	switch {
	case l == "":
		return nil
	case l[0] == '#':
		return nil
	case l == "COMMIT" && (p.table != nil || p.skipping):
		return p.commit()
	case l[0] == '*' && p.table == nil && !p.skipping:
		return p.openTable(l)
	case p.skipping:
		return nil
	case l[0] == ':' && p.table != nil:
		return p.chainLine(l)
	case p.table != nil:
		return p.commandLine(l)
	}
	return p.fail(rules.Errorf(p.pos(1), "unexpected line outside a table (expected \"*table\")"))
}

func (p *parser) openTable(l string) error {
	fields := fields(l[1:])
	if len(fields) == 0 {
		return p.fail(rules.Errorf(p.pos(1), "table name invalid"))
	}
	name := fields[0]
	col := strings.Index(l, name) + 1
	if p.opts.Table != "" && p.opts.Table != name {
		p.skipping = true
		return nil
	}
	if _, ok := rules.BuiltinChains[name]; !ok {
		return p.fail(rules.Errorf(p.pos(col), "can't initialize table %q: table does not exist", name))
	}
	t := p.rs.Table(name)
	switch {
	case t == nil:
		t = rules.NewTable(name, p.pos(1))
	case p.opts.Noflush:
		t = t.Clone()
	default:
		// Flush: rules and user chains go, policies stay.
		nt := rules.NewTable(name, p.pos(1))
		for _, c := range nt.Chains {
			old := t.Chain(c.Name)
			c.Policy, c.Counters, c.Pos = old.Policy, old.Counters, old.Pos
		}
		t = nt
	}
	t.Pos = p.pos(1)
	p.table = t
	return nil
}

func (p *parser) commit() error {
	if p.skipping {
		p.skipping = false
		return nil
	}
	p.checkLoops(p.table)
	replaced := false
	for i, t := range p.rs.Tables {
		if t.Name == p.table.Name {
			p.rs.Tables[i], replaced = p.table, true
		}
	}
	if !replaced {
		p.rs.Tables = append(p.rs.Tables, p.table)
	}
	p.table = nil
	return nil
}

// chainLine handles ":CHAIN POLICY [packets:bytes]".
func (p *parser) chainLine(l string) error {
	fields := fields(l[1:])
	if len(fields) == 0 {
		return p.fail(rules.Errorf(p.pos(1), "chain name invalid"))
	}
	name := fields[0]
	pos := p.pos(2)
	if len(name) > maxChainNameLen {
		return p.fail(rules.Errorf(pos, "invalid chain name %q (%d chars max)", name, maxChainNameLen))
	}
	t := p.table
	c := t.Chain(name)
	switch {
	case c != nil && c.Builtin:
		c.Pos = pos
	case c != nil && p.opts.Noflush:
		c.Rules = nil
	case c != nil:
		return p.fail(&rules.Error{Pos: pos, Msg: fmt.Sprintf("chain %q already exists", name), Related: c.Pos})
	case standardTargets[name]:
		return p.fail(rules.Errorf(pos, "chain name %q is a standard target", name))
	default:
		c = &rules.Chain{Name: name, Pos: pos}
		t.Chains = append(t.Chains, c)
	}
	if len(fields) < 2 {
		return p.fail(rules.Errorf(p.pos(len(l)+1), "policy invalid"))
	}
	policy := fields[1]
	policyCol := strings.Index(l[1+len(name):], policy) + 2 + len(name)
	if policy == "-" {
		return nil
	}
	if !c.Builtin {
		p.errs = append(p.errs, rules.Errorf(p.pos(policyCol), "policy %s on user-defined chain %q (only builtin chains have policies)", policy, name))
		return nil
	}
	switch policy {
	case "ACCEPT":
		c.Policy = rules.PolicyAccept
	case "DROP":
		c.Policy = rules.PolicyDrop
	default:
		return p.fail(rules.Errorf(p.pos(policyCol), "bad policy name %q", policy))
	}
	if !p.opts.Counters {
		return nil
	}
	if len(fields) < 3 {
		return p.fail(rules.Errorf(p.pos(len(l)+1), "invalid policy counters for chain %q", name))
	}
	cnt, ok := parseCounters(fields[2])
	if !ok {
		return p.fail(rules.Errorf(p.pos(strings.LastIndex(l, fields[2])+1), "invalid policy counters for chain %q", name))
	}
	c.Counters = cnt
	return nil
}

// FailedLine returns the line iptables-restore would name in "line N
// failed" for an error from Parse: the first error's line. It returns 0
// for errors without a position.
func FailedLine(err error) int {
	switch e := err.(type) {
	case *rules.Error:
		return e.Pos.Line
	case rules.ErrorList:
		if len(e) > 0 {
			return e[0].Pos.Line
		}
	}
	return 0
}

// fields splits s at blanks as strtok(s, " \t\n") does: a carriage return
// is part of a word.
func fields(s string) []string {
	return strings.FieldsFunc(s, func(r rune) bool { return r == ' ' || r == '\t' || r == '\n' })
}

// parseCounters parses "[packets:bytes]".
func parseCounters(s string) (rules.Counters, bool) {
	if len(s) < 2 || s[0] != '[' || s[len(s)-1] != ']' {
		return rules.Counters{}, false
	}
	ps, bs, ok := strings.Cut(s[1:len(s)-1], ":")
	if !ok {
		return rules.Counters{}, false
	}
	pk, err1 := strconv.ParseUint(ps, 10, 64)
	by, err2 := strconv.ParseUint(bs, 10, 64)
	if err1 != nil || err2 != nil {
		return rules.Counters{}, false
	}
	return rules.Counters{Packets: pk, Bytes: by}, true
}

func (p *parser) commandLine(l string) error {
	rest, col0 := l, 1
	var counters *rules.Counters
	if l[0] == '[' {
		end := strings.IndexByte(l, ']')
		if end < 0 {
			return p.fail(rules.Errorf(p.pos(1), "bad line: need ]"))
		}
		cnt, ok := parseCounters(l[:end+1])
		if !ok {
			return p.fail(rules.Errorf(p.pos(1), "bad counters %q", l[:end+1]))
		}
		counters = &cnt
		rest, col0 = l[end+1:], end+2
	}
	toks := tokenize(p.toks[:0], rest, col0)
	p.toks = toks
	cmd, err := p.parseCommand(toks, p.line)
	if err != nil {
		return p.fail(err)
	}
	if n := len(toks); n > 0 && toks[n-1].unclosed > 0 {
		// iptables-restore takes it too, but what follows the quote is
		// lost to the argument: often the rule's -j.
		msg := fmt.Sprintf("this double quote is not closed: the rest of the line, %q, is one argument, as iptables-restore reads it", toks[n-1].text)
		if len(cmd.spec) > 0 && cmd.spec[0].Target == nil {
			msg += "; the rule has no target and only counts packets"
		}
		p.warnf(p.pos(toks[n-1].unclosed), "%s", msg)
	}
	if cmd.skip {
		return nil
	}
	if counters != nil && p.opts.Counters {
		for _, r := range cmd.spec {
			r.Counters = *counters
		}
	}
	return p.apply(cmd)
}

// DetectFamily guesses whether input is ip6tables input: from the
// ip6tables-save header, or from the first address or ICMPv6 option in it.
// It returns def when nothing tells.
func DetectFamily(src []byte, def rules.Family) rules.Family {
	for line := range bytes.Lines(src) {
		s := string(line)
		if strings.HasPrefix(s, "#") {
			if strings.Contains(s, "ip6tables-save") {
				return rules.IPv6
			}
			if strings.Contains(s, "iptables-save") {
				return rules.IPv4
			}
			continue
		}
		fields := strings.Fields(s)
		if slices.Contains(fields, "-4") || slices.Contains(fields, "-6") {
			continue // lines for one family only
		}
		for i, f := range fields {
			switch f {
			case "--icmpv6-type", "icmp6", "ipv6-icmp", "icmpv6", "--hl-eq", "--hl-lt", "--hl-gt":
				return rules.IPv6
			case "--icmp-type", "--ttl-eq", "--ttl-lt", "--ttl-gt":
				return rules.IPv4
			case "-s", "-d", "--source", "--destination", "--src", "--dst":
				if i+1 < len(fields) {
					a, _, _ := strings.Cut(strings.Split(fields[i+1], ",")[0], "/")
					if ip, err := netip.ParseAddr(a); err == nil {
						if ip.Is6() {
							return rules.IPv6
						}
						return rules.IPv4
					}
				}
			}
		}
	}
	return def
}
