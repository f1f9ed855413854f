package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"runtime/debug"
	"strings"
	"unicode"

	"bpfwall/loader"
)

// runMan writes the man pages, generated from the command table and each
// command's options: bpfwall(8) on stdout, or every page into a directory.
func runMan(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("man", stdout, stderr)
	dir := fs.String("dir", "", "write bpfwall.8 and a bpfwall-COMMAND.8 per command into `DIR` instead of printing bpfwall(8)")
	rest, err := parseFlags(fs, args)
	if err != nil {
		return err
	}
	if len(rest) != 0 {
		return fmt.Errorf("%w: man takes no arguments (try `bpfwall man --help')", errUsage)
	}
	docs, err := commandDocs()
	if err != nil {
		return err
	}
	pages := manPages(docs, manTitleSource())
	if *dir == "" {
		_, err := io.WriteString(stdout, pages[0].text)
		return err
	}
	if err := os.MkdirAll(*dir, 0o755); err != nil {
		return fmt.Errorf("write man pages: %w", err)
	}
	for _, p := range pages {
		if err := os.WriteFile(filepath.Join(*dir, p.file), []byte(p.text), 0o644); err != nil {
			return fmt.Errorf("write man pages: %w", err)
		}
	}
	return nil
}

// commandDoc is what the man pages and the completion scripts say of a
// command: its usage line, split in two, and its options.
type commandDoc struct {
	name     string
	synopsis string // the usage line's syntax: "save [-cV] ... [--hook H]"
	summary  string // the rest: "the active rule set as iptables-save text"
	options  []option
}

// option is one option of a command, as its --help lists it.
type option struct {
	short, long string // without dashes; short may be empty
	arg         string // the value's name; empty for a switch
	optionalArg bool   // the value may be left out (-w, -O)
	usage       string
}

// helpOption is the -h/--help that pflag gives every flag set without
// listing it.
var helpOption = option{short: "h", long: "help", usage: "print this help and exit"}

// commandDocs describes every command of the table, in its order.
//
// A command builds its flag set only when it runs, so the options come
// from running it with --help, which prints them and does nothing else.
func commandDocs() ([]commandDoc, error) {
	docs := make([]commandDoc, 0, len(commands))
	for _, c := range commands {
		var out, errOut bytes.Buffer
		if err := c.run([]string{"--help"}, &out, &errOut); !errors.Is(err, errHelp) {
			return nil, fmt.Errorf("read options of %s: --help returned %v: %s", c.name, err, errOut.String())
		}
		help := out.String()
		if strings.HasPrefix(help, "usage: ") {
			// The usage line is the table's; the options follow a blank line.
			_, help, _ = strings.Cut(help, "\n\n")
		}
		opts, err := parseFlagUsages(help)
		if err != nil {
			return nil, fmt.Errorf("read options of %s: %w", c.name, err)
		}
		if !hasOption(opts, helpOption) {
			opts = append(opts, helpOption)
		}
		synopsis, summary := splitUsage(c.usage)
		docs = append(docs, commandDoc{name: c.name, synopsis: synopsis, summary: summary, options: opts})
	}
	return docs, nil
}

// hasOption says whether opts name o's long or short option already.
func hasOption(opts []option, o option) bool {
	for _, p := range opts {
		if p.long == o.long || o.short != "" && p.short == o.short {
			return true
		}
	}
	return false
}

// splitUsage splits a usage line at the first run of two spaces, which
// ends its syntax.
func splitUsage(usage string) (synopsis, summary string) {
	synopsis, summary, _ = strings.Cut(usage, "  ")
	return strings.TrimSpace(synopsis), strings.TrimSpace(summary)
}

// parseFlagUsages reads the option lines of pflag's FlagUsages, which
// start with "  -t, --" or, without a short option, "      --":
//
//	-t, --test[=true|false]     parse, compile and verify the input
//	    --hook string           xdp, tc-ingress, tc-egress or sk-lookup
//	-w, --wait SECS[=forever]   wait for another bpfwall command ...
//
// The option and its value are separated from the text by at least two
// spaces; a line indented further continues the text above it.
func parseFlagUsages(text string) ([]option, error) {
	var opts []option
	for line := range strings.Lines(text) {
		line = strings.TrimRight(line, " \n")
		var o option
		var spec string
		switch {
		case line == "":
			continue
		case len(line) > 8 && strings.HasPrefix(line, "  -") && line[4:8] == ", --":
			o.short, spec = line[3:4], line[8:]
		case strings.HasPrefix(line, "      --"):
			spec = line[8:]
		case strings.HasPrefix(line, "       ") && len(opts) > 0:
			opts[len(opts)-1].usage += " " + strings.TrimSpace(line)
			continue
		default:
			return nil, fmt.Errorf("unexpected help line %q", line)
		}
		spec, o.usage, _ = strings.Cut(spec, "  ")
		o.usage = strings.TrimSpace(o.usage)
		spec, noOptValue, optional := strings.Cut(spec, "[=")
		if optional && !strings.HasSuffix(noOptValue, "]") {
			return nil, fmt.Errorf("unexpected help line %q", line)
		}
		o.long, o.arg, _ = strings.Cut(spec, " ")
		o.optionalArg = optional && o.arg != ""
		if o.arg == "count" && !optional {
			// pflag's counter (-v -v) names its type, but takes no value.
			o.arg = ""
		}
		opts = append(opts, o)
	}
	return opts, nil
}

// titleSource is what a page's title line says besides its name: the
// build's version and the date of its commit, so that a build always
// writes the same pages.
type titleSource struct{ version, date string }

// pseudoVersionTime is the commit time of a pseudo-version
// (v0.0.0-20250102150405-0123456789ab).
var pseudoVersionTime = regexp.MustCompile(`[-.](\d{4})(\d{2})(\d{2})\d{6}-[0-9a-f]{12}(\+.*)?$`)

// manTitleSource reads the title's version and date from the build's
// module information.
func manTitleSource() titleSource {
	info, _ := debug.ReadBuildInfo()
	return titleFrom(info)
}

// titleFrom is the title source of a build: its module version, and the
// date of the commit it was built from (vcs.time, or the time in a
// pseudo-version); without them, no date.
func titleFrom(info *debug.BuildInfo) titleSource {
	src := titleSource{version: "bpfwall"}
	if info == nil {
		return src
	}
	if v := info.Main.Version; v != "" && v != "(devel)" {
		src.version += " " + v
		if m := pseudoVersionTime.FindStringSubmatch(v); m != nil {
			src.date = m[1] + "-" + m[2] + "-" + m[3]
		}
	}
	for _, s := range info.Settings {
		if s.Key == "vcs.time" && len(s.Value) >= len("2006-01-02") {
			src.date = s.Value[:len("2006-01-02")]
		}
	}
	return src
}

// manPage is one generated page: its file name and roff text.
type manPage struct{ file, text string }

// manPages renders bpfwall(8), first, and a bpfwall-CMD(8) per command.
func manPages(docs []commandDoc, src titleSource) []manPage {
	pages := []manPage{{"bpfwall.8", mainPage(docs, src)}}
	for _, d := range docs {
		pages = append(pages, manPage{"bpfwall-" + d.name + ".8", commandPage(d, src)})
	}
	return pages
}

// roffWriter builds a page line by line, escaping text for roff.
type roffWriter struct{ strings.Builder }

// request writes a request line (".SH NAME"); its arguments are trusted.
func (w *roffWriter) request(format string, args ...any) {
	fmt.Fprintf(w, "."+format+"\n", args...)
}

// line writes a text line already escaped, guarding a leading dot or
// apostrophe, which would make it a request.
func (w *roffWriter) line(s string) {
	if strings.HasPrefix(s, ".") || strings.HasPrefix(s, "'") {
		s = `\&` + s
	}
	w.WriteString(s + "\n")
}

// text writes plain text.
func (w *roffWriter) text(s string) { w.line(roffEscape(s)) }

// th writes the title line of page name.
func (w *roffWriter) th(name string, src titleSource) {
	w.request(`TH %s 8 "%s" "%s" "System Manager's Manual"`,
		roffEscape(strings.ToUpper(name)), roffEscape(src.date), roffEscape(src.version))
}

// roffEscape escapes s for a text line or a quoted argument: backslashes,
// hyphens (which roff may typeset as a hyphen, not the minus that options
// and file names need) and quotes, which it would curl. A double quote
// would end a quoted argument.
var roffEscape = strings.NewReplacer(
	`\`, `\e`,
	`-`, `\-`,
	`'`, `\(aq`,
	"`", `\(ga`,
	`"`, `\(dq`,
).Replace

// bold and italic set a name in a font; \% keeps roff from hyphenating
// it.
func bold(s string) string   { return `\fB\%` + roffEscape(s) + `\fR` }
func italic(s string) string { return `\fI\%` + roffEscape(s) + `\fR` }

// mainPage is bpfwall(8).
func mainPage(docs []commandDoc, src titleSource) string {
	var w roffWriter
	w.th("bpfwall", src)
	w.request("SH NAME")
	w.text("bpfwall - compile iptables and nftables rule sets into eBPF")
	w.request("SH SYNOPSIS")
	for _, d := range docs {
		synopsis(&w, d)
	}
	w.request("SY bpfwall")
	w.line(bold("--version") + " | " + bold("--help"))
	w.request("YS")

	w.request("SH DESCRIPTION")
	w.request("B bpfwall")
	// A sentence per line: roff ends a sentence at the end of a line.
	w.text("compiles the rule sets people already have, iptables-save files as iptables-restore reads them " +
		"and nftables rule sets, into eBPF programs for XDP, tc, netfilter hooks and sk_lookup.")
	w.text("It loads them, pins them on a bpffs and swaps a new program in for the running one atomically: " +
		"every packet meets either the old rule set or the new one.")
	w.text("Every rule is compiled exactly, as the kernel's netfilter would run it, or refused with its file:line:col and the reason.")

	w.request("SH COMMANDS")
	for _, d := range docs {
		w.request("TP")
		w.line(bold(d.name))
		w.line(roffEscape(d.summary) + "; see " + bold("bpfwall-"+d.name) + "(8).")
	}

	w.request("SH EXIT STATUS")
	for _, s := range []struct{ code, meaning string }{
		{"0", "The command did what was asked (also after --help)."},
		{"1", "The command failed; standard error says why."},
		{"2", "Usage error: an unknown command or option, or wrong arguments."},
		{"4", "Another bpfwall command holds the lock (and -w did not wait for it, or not long enough), as iptables exits 4."},
	} {
		w.request("TP")
		w.request("B %s", s.code)
		w.text(s.meaning)
	}

	w.request("SH ENVIRONMENT")
	w.request("TP")
	w.line(bold("BPFWALL_ROOT"))
	w.line(roffEscape("The pin directory, on a bpffs (default ") + italic(loader.DefaultRoot) + ").")
	w.request("TP")
	w.line(bold("BPFWALL_LOCKFILE"))
	w.line(roffEscape("The lock file that serializes bpfwall commands, as ") + bold("XTABLES_LOCKFILE") +
		roffEscape(" does iptables' (default ") + italic(loader.DefaultLockFile) + ").")
	w.request("TP")
	w.line(bold("BPFWALL_CPUPROFILE") + ", " + bold("BPFWALL_MEMPROFILE"))
	w.text("Files to write a CPU profile of the command to, and a profile of what it allocated, for go tool pprof.")
	w.request("TP")
	w.line(bold("GOGC"))
	w.text("The Go runtime's garbage collection target; bpfwall sets 50, which keeps a large restore's peak memory lower, unless GOGC is set.")

	w.request("SH FILES")
	w.request("TP")
	w.line(italic(loader.DefaultRoot))
	w.text("The pins: a directory per network namespace, named by its inode number, and in it one per hook, " +
		"holding the filter's program, maps, links and the rule set it runs.")
	w.request("TP")
	w.line(italic(loader.DefaultLockFile))
	w.text("The lock taken by every command that changes filters.")
	w.request("TP")
	w.line(italic("/etc/iptables/rules.v4") + ", " + italic("/etc/iptables/rules.v6"))
	w.text("The rule sets that the systemd units bpfwall.service and bpfwall6.service restore at boot.")

	w.request("SH SEE ALSO")
	w.request("ad l") // a list of names, which justifying would space out
	var refs []string
	for _, d := range docs {
		refs = append(refs, bold("bpfwall-"+d.name)+"(8)")
	}
	for _, p := range []string{"iptables-restore", "iptables-save", "nft", "bpftool"} {
		refs = append(refs, bold(p)+"(8)")
	}
	w.line(strings.Join(refs, ",\n"))
	return w.String()
}

// commandPage is bpfwall-CMD(8).
func commandPage(d commandDoc, src titleSource) string {
	var w roffWriter
	w.th("bpfwall-"+d.name, src)
	w.request("SH NAME")
	w.text("bpfwall-" + d.name + " - " + d.summary)
	w.request("SH SYNOPSIS")
	synopsis(&w, d)
	w.request("SH DESCRIPTION")
	w.line(bold("bpfwall "+d.name) + ` \(em ` + roffEscape(d.summary) + ".")
	w.line("The exit status, the environment and the files are those of " + bold("bpfwall") + "(8).")
	w.request("SH OPTIONS")
	for _, o := range d.options {
		w.request("TP")
		w.line(optionTag(o))
		w.line(usageText(o))
	}
	w.request("SH SEE ALSO")
	w.line(bold("bpfwall") + "(8)")
	return w.String()
}

// optionTag is the tag of an option's entry: "\fB\-w\fR, \fB\-\-wait\fR
// [\fISECS\fR]".
func optionTag(o option) string {
	var tag string
	if o.short != "" {
		tag = bold("-"+o.short) + ", "
	}
	tag += bold("--" + o.long)
	switch {
	case o.optionalArg:
		tag += " [" + italic(o.arg) + "]"
	case o.arg != "":
		tag += " " + italic(o.arg)
	}
	return tag
}

// usageText is an option's text, its value's name in italics where it
// names one (pflag's "`FILE`").
func usageText(o option) string {
	if o.arg == "" || strings.ToUpper(o.arg) != o.arg {
		return roffEscape(o.usage)
	}
	re := regexp.MustCompile(`\b` + regexp.QuoteMeta(o.arg) + `\b`)
	var b strings.Builder
	last := 0
	for _, m := range re.FindAllStringIndex(o.usage, -1) {
		b.WriteString(roffEscape(o.usage[last:m[0]]))
		b.WriteString(italic(o.arg))
		last = m[1]
	}
	b.WriteString(roffEscape(o.usage[last:]))
	return b.String()
}

// synopsis writes d's usage line as a synopsis entry: options and
// literal words in bold, what stands for a value in italics.
func synopsis(w *roffWriter, d commandDoc) {
	words := strings.Fields(d.synopsis)
	w.request(`SY "bpfwall %s"`, roffEscape(words[0]))
	w.line(synopsisArgs(strings.Join(words[1:], " ")))
	w.request("YS")
}

// synopsisArgs typesets the arguments of a usage line. A space inside
// brackets or parentheses, or between an option and its value, does
// not break a line.
func synopsisArgs(s string) string {
	var b strings.Builder
	depth := 0
	prevOption := false
	for len(s) > 0 {
		switch c := s[0]; {
		case strings.HasPrefix(s, "..."):
			b.WriteString("...")
			s = s[3:]
			continue
		case c == '[' || c == '(':
			depth++
		case c == ']' || c == ')':
			depth--
		case c == ' ':
			if depth > 0 || prevOption && len(s) > 1 && unicode.IsUpper(rune(s[1])) {
				b.WriteString(`\ `)
			} else {
				b.WriteString(" ")
			}
			s = s[1:]
			continue
		}
		if strings.IndexByte("[]()|,", s[0]) >= 0 {
			b.WriteByte(s[0])
			s = s[1:]
			prevOption = false
			continue
		}
		n := strings.IndexAny(s, " []()|,")
		if n < 0 {
			n = len(s)
		}
		word, dots := strings.CutSuffix(s[:n], "...")
		switch {
		case word == "":
		case unicode.IsUpper(rune(word[0])):
			b.WriteString(italic(word))
		default:
			b.WriteString(bold(word))
		}
		if dots {
			b.WriteString("...")
		}
		prevOption = strings.HasPrefix(word, "-")
		s = s[n:]
	}
	return b.String()
}
