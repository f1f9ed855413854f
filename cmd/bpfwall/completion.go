package main

import (
	"fmt"
	"io"
	"slices"
	"strings"
)

// completionShells are the shells that completion writes a script for.
var completionShells = []string{"bash", "zsh", "fish"}

// topOptions are the options of bpfwall itself, before a command.
var topOptions = []option{
	helpOption,
	{short: "V", long: "version", usage: "print the version and exit"},
}

// runCompletion prints a completion script for a shell: command names,
// each command's options (from the same source as the man pages), and
// file names for the rest.
func runCompletion(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("completion", stdout, stderr)
	rest, err := parseFlags(fs, args)
	if err != nil {
		return err
	}
	if len(rest) != 1 || !slices.Contains(completionShells, rest[0]) {
		return fmt.Errorf("%w: completion takes one shell: %s (try `bpfwall completion --help')", errUsage, strings.Join(completionShells, ", "))
	}
	docs, err := commandDocs()
	if err != nil {
		return err
	}
	var script string
	switch rest[0] {
	case "bash":
		script = bashCompletion(docs)
	case "zsh":
		script = zshCompletion(docs)
	case "fish":
		script = fishCompletion(docs)
	}
	_, err = io.WriteString(stdout, script)
	return err
}

// positionalWords are the words a command takes as arguments, where they
// are not file names.
func positionalWords(name string) []string {
	if name == "completion" {
		return completionShells
	}
	return nil
}

// optionWords are the spellings of opts: "-t", "--test", ...
func optionWords(opts []option) []string {
	var words []string
	for _, o := range opts {
		if o.short != "" {
			words = append(words, "-"+o.short)
		}
		words = append(words, "--"+o.long)
	}
	return words
}

// shQuote quotes s for a POSIX shell (bash and zsh).
func shQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// bashCompletion is the bash script. A word that starts with a dash
// completes to an option; any other to a command name, an argument
// word, or, as complete -o default does, a file name.
func bashCompletion(docs []commandDoc) string {
	var b strings.Builder
	b.WriteString("# bash completion for bpfwall, written by `bpfwall completion bash`.\n")
	b.WriteString("_bpfwall() {\n")
	b.WriteString("\tlocal cur=${COMP_WORDS[COMP_CWORD]} opts= args=\n")
	b.WriteString("\tif ((COMP_CWORD == 1)); then\n")
	fmt.Fprintf(&b, "\t\topts=%s\n", shQuote(strings.Join(optionWords(topOptions), " ")))
	names := make([]string, len(docs))
	for i, d := range docs {
		names[i] = d.name
	}
	fmt.Fprintf(&b, "\t\targs=%s\n", shQuote(strings.Join(names, " ")))
	b.WriteString("\telse\n")
	b.WriteString("\t\tcase ${COMP_WORDS[1]} in\n")
	for _, d := range docs {
		fmt.Fprintf(&b, "\t\t%s)\n", d.name)
		fmt.Fprintf(&b, "\t\t\topts=%s\n", shQuote(strings.Join(optionWords(d.options), " ")))
		if words := positionalWords(d.name); words != nil {
			fmt.Fprintf(&b, "\t\t\targs=%s\n", shQuote(strings.Join(words, " ")))
		}
		b.WriteString("\t\t\t;;\n")
	}
	b.WriteString("\t\tesac\n")
	b.WriteString("\tfi\n")
	b.WriteString("\tif [[ $cur == -* ]]; then\n")
	b.WriteString("\t\tCOMPREPLY=($(compgen -W \"$opts\" -- \"$cur\"))\n")
	b.WriteString("\telif [[ -n $args ]]; then\n")
	b.WriteString("\t\tCOMPREPLY=($(compgen -W \"$args\" -- \"$cur\"))\n")
	b.WriteString("\tfi\n")
	b.WriteString("}\n")
	b.WriteString("complete -o default -F _bpfwall bpfwall\n")
	return b.String()
}

// zshDescribed are opts as _describe takes them: "--test:parse, ...".
func zshDescribed(opts []option) []string {
	var specs []string
	for _, o := range opts {
		if o.short != "" {
			specs = append(specs, shQuote("-"+o.short+":"+o.usage))
		}
		specs = append(specs, shQuote("--"+o.long+":"+o.usage))
	}
	return specs
}

// zshCompletion is the zsh script, for a directory of $fpath (as
// _bpfwall) or to source.
func zshCompletion(docs []commandDoc) string {
	var b strings.Builder
	b.WriteString("#compdef bpfwall\n")
	b.WriteString("# zsh completion for bpfwall, written by `bpfwall completion zsh`.\n")
	b.WriteString("_bpfwall() {\n")
	b.WriteString("\tlocal -a opts args\n")
	b.WriteString("\tif (( CURRENT == 2 )); then\n")
	fmt.Fprintf(&b, "\t\topts=(%s)\n", strings.Join(zshDescribed(topOptions), " "))
	var cmds []string
	for _, d := range docs {
		cmds = append(cmds, shQuote(d.name+":"+d.summary))
	}
	fmt.Fprintf(&b, "\t\targs=(\n\t\t\t%s\n\t\t)\n", strings.Join(cmds, "\n\t\t\t"))
	b.WriteString("\telse\n")
	b.WriteString("\t\tcase $words[2] in\n")
	for _, d := range docs {
		fmt.Fprintf(&b, "\t\t%s)\n", d.name)
		fmt.Fprintf(&b, "\t\t\topts=(\n\t\t\t\t%s\n\t\t\t)\n", strings.Join(zshDescribed(d.options), "\n\t\t\t\t"))
		if words := positionalWords(d.name); words != nil {
			fmt.Fprintf(&b, "\t\t\targs=(%s)\n", strings.Join(words, " "))
		}
		b.WriteString("\t\t\t;;\n")
	}
	b.WriteString("\t\tesac\n")
	b.WriteString("\tfi\n")
	b.WriteString("\tif [[ $PREFIX == -* ]]; then\n")
	b.WriteString("\t\t_describe -t options option opts\n")
	b.WriteString("\telif (( $#args )); then\n")
	b.WriteString("\t\t_describe -t arguments argument args\n")
	b.WriteString("\telse\n")
	b.WriteString("\t\t_files\n")
	b.WriteString("\tfi\n")
	b.WriteString("}\n")
	b.WriteString("# Autoloaded from $fpath, the file is the function's body: complete now.\n")
	b.WriteString("if [[ $funcstack[1] == _bpfwall ]]; then\n")
	b.WriteString("\t_bpfwall \"$@\"\n")
	b.WriteString("else\n")
	b.WriteString("\tcompdef _bpfwall bpfwall\n")
	b.WriteString("fi\n")
	return b.String()
}

// fishQuote quotes s for fish, in whose single quotes a backslash
// escapes a quote or a backslash.
func fishQuote(s string) string {
	return "'" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(s) + "'"
}

// fishOption is the complete command of option o under condition cond.
func fishOption(cond string, o option) string {
	line := "complete -c bpfwall -n " + fishQuote(cond)
	if o.short != "" {
		line += " -s " + o.short
	}
	line += " -l " + o.long
	if o.arg != "" && !o.optionalArg {
		line += " -r"
	}
	return line + " -d " + fishQuote(o.usage) + "\n"
}

// fishCompletion is the fish script. Fish completes file names where no
// rule says otherwise: for arguments, and the value of an option that
// requires one (-r).
func fishCompletion(docs []commandDoc) string {
	var b strings.Builder
	b.WriteString("# fish completion for bpfwall, written by `bpfwall completion fish`.\n")
	const top = "__fish_use_subcommand"
	for _, o := range topOptions {
		b.WriteString(fishOption(top, o))
	}
	for _, d := range docs {
		fmt.Fprintf(&b, "complete -c bpfwall -n %s -f -a %s -d %s\n", fishQuote(top), fishQuote(d.name), fishQuote(d.summary))
	}
	for _, d := range docs {
		cond := "__fish_seen_subcommand_from " + d.name
		for _, o := range d.options {
			b.WriteString(fishOption(cond, o))
		}
		if words := positionalWords(d.name); words != nil {
			fmt.Fprintf(&b, "complete -c bpfwall -n %s -f -a %s\n", fishQuote(cond), fishQuote(strings.Join(words, " ")))
		}
	}
	return b.String()
}
