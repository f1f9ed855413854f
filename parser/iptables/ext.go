package iptables

import (
	"fmt"
	"slices"

	"bpfwall/rules"
)

// argKind is how many arguments an extension option takes, as in getopt.
type argKind uint8

const (
	argNone     argKind = iota // --syn
	argOne                     // --dport 22: the next token, whatever it is
	argOptional                // only as --opt=value, or the next token if it does not start with '-' or '!'
	argGreedy                  // every following token up to the next option (generic extensions, --tcp-flags, --match-set)
)

// optSpec declares one long option of an extension.
type optSpec struct {
	name   string // without "--"
	arg    argKind
	invert bool // "! --name" is allowed
	multi  bool // may be given more than once
}

// opt is one option occurrence handed to an extension.
type opt struct {
	Name   string
	Neg    bool
	Arg    string
	HasArg bool
	Args   []string  // argGreedy: all arguments
	Pos    rules.Pos // of the option name (or of its "!")
	ArgPos rules.Pos // of the argument
}

// errorf reports a problem with the option's argument.
func (o *opt) errorf(format string, args ...any) error {
	pos := o.ArgPos
	if !pos.IsValid() {
		pos = o.Pos
	}
	return rules.Errorf(pos, format, args...)
}

// ruleCtx is what an extension may look at when it checks the complete
// rule: the family, the protocol given with -p, and where the rule is.
type ruleCtx struct {
	Family   rules.Family
	Proto    uint8
	ProtoNeg bool
	Table    string
	Chain    string
	Pos      rules.Pos // where the extension was loaded
	// Sets are the ipsets that exist (Options.Sets); -m set must name one.
	Sets map[string]*rules.IPSet
}

// hook returns the rule's chain if it is a builtin chain, whose name is its
// hook, or "" for a user chain: the kernel checks the hook restrictions of
// a user chain against the hooks it is reachable from, not known here.
func (ctx *ruleCtx) hook() string {
	if slices.Contains(rules.BuiltinChains[ctx.Table], ctx.Chain) {
		return ctx.Chain
	}
	return ""
}

// needProto checks what the kernel checks for a match bound to one
// protocol (xt_check_match): the rule must say "-p proto", not inverted.
func (ctx *ruleCtx) needProto(ext string, proto uint8) error {
	if ctx.Proto != proto || ctx.ProtoNeg {
		return rules.Errorf(ctx.Pos, "-m %s needs -p %s", ext, rules.ProtoName(proto))
	}
	return nil
}

// matchParser collects the options of one match and builds it.
type matchParser interface {
	parse(o *opt) error
	// finish validates the options against the whole rule and returns the
	// match; errors without their own position are reported at ctx.Pos.
	finish(ctx *ruleCtx) (rules.Match, error)
}

// targetParser collects the options of one target and builds it.
type targetParser interface {
	parse(o *opt) error
	finish(ctx *ruleCtx) (rules.Target, error)
}

// matchExt describes a match extension bpfwall interprets.
type matchExt struct {
	options []optSpec
	// family limits the extension to one family; nil means both.
	family *rules.Family
	new    func() matchParser
}

// targetExt describes a target extension bpfwall interprets.
type targetExt struct {
	options []optSpec
	family  *rules.Family
	new     func() targetParser
}

// matchExts and targetExts are filled by the ext_*.go files' init functions.
var (
	matchExts  = map[string]*matchExt{}
	targetExts = map[string]*targetExt{}
)

func registerMatch(name string, e *matchExt) {
	if _, dup := matchExts[name]; dup {
		panic(fmt.Sprintf("match extension %q registered twice", name))
	}
	matchExts[name] = e
}

func registerTarget(name string, e *targetExt) {
	if _, dup := targetExts[name]; dup {
		panic(fmt.Sprintf("target extension %q registered twice", name))
	}
	targetExts[name] = e
}

var (
	onlyIPv4 = ptr(rules.IPv4)
	onlyIPv6 = ptr(rules.IPv6)
)

func ptr[T any](v T) *T { return &v }
