package iptables

import (
	"strings"

	"bpfwall/rules"
)

// Target LOG (libxt_LOG.c, kernel xt_LOG.c).

const (
	logDefaultLevel = 4  // LOG_WARNING
	maxLogPrefixLen = 29 // sizeof(xt_log_info.prefix) - 1
)

func init() {
	registerTarget("LOG", &targetExt{
		options: []optSpec{
			{name: "log-level", arg: argOne},
			{name: "log-prefix", arg: argOne},
			{name: "log-tcp-sequence", arg: argNone},
			{name: "log-tcp-options", arg: argNone},
			{name: "log-ip-options", arg: argNone},
			{name: "log-uid", arg: argNone},
			{name: "log-macdecode", arg: argNone},
		},
		new: func() targetParser { return &logParser{t: rules.Log{Level: logDefaultLevel}} },
	})
}

// syslogLevels are the level names libxtables accepts (exactly, in lower
// case), "error" and "panic" being deprecated synonyms.
var syslogLevels = map[string]uint8{
	"emerg": 0, "panic": 0, "alert": 1, "crit": 2, "error": 3,
	"warning": 4, "notice": 5, "info": 6, "debug": 7,
}

var logFlags = map[string]uint8{
	"log-tcp-sequence": rules.LogTCPSeq,
	"log-tcp-options":  rules.LogTCPOpt,
	"log-ip-options":   rules.LogIPOpt,
	"log-uid":          rules.LogUID,
	"log-macdecode":    rules.LogMACDecode,
}

type logParser struct{ t rules.Log }

func (p *logParser) parse(o *opt) error {
	switch o.Name {
	case "log-level":
		if v, ok := parseUint(o.Arg, 7); ok {
			p.t.Level = uint8(v)
			return nil
		}
		level, ok := syslogLevels[o.Arg]
		if !ok {
			return o.errorf("--log-level: unknown log level %q (0-7 or emerg, alert, crit, error, warning, notice, info, debug)", o.Arg)
		}
		p.t.Level = level
	case "log-prefix":
		switch {
		case o.Arg == "":
			return o.errorf("--log-prefix: empty prefix")
		case strings.Contains(o.Arg, "\n"):
			return o.errorf("--log-prefix: newlines not allowed")
		}
		// libxtables cuts a longer prefix to the size of the kernel's
		// field, without a word; the kernel logs the cut prefix.
		p.t.Prefix = o.Arg[:min(len(o.Arg), maxLogPrefixLen)]
	default:
		p.t.Flags |= logFlags[o.Name]
	}
	return nil
}

func (p *logParser) finish(ctx *ruleCtx) (rules.Target, error) {
	t := p.t
	t.Pos = ctx.Pos
	return &t, nil
}
