package main

import (
	"errors"
	"fmt"
	"io"

	"github.com/cilium/ebpf"
	"github.com/spf13/pflag"

	"bpfwall/codegen"
	"bpfwall/ir"
	"bpfwall/loader"
	"bpfwall/rules"
)

// compileFlags are the flags of every command that compiles a rule set.
type compileFlags struct {
	inputFlags
	levelFlags
	// trace compiles the program trace runs, which records each
	// packet's decision.
	trace bool
	hook  string
	chain string
	table string
}

func (f *compileFlags) register(fs *pflag.FlagSet) {
	f.inputFlags.register(fs)
	fs.StringVar(&f.hook, "hook", "xdp", "attach point `HOOK`: xdp, tc-ingress, tc-egress, sk-lookup or netfilter (the chain's own hook, as restore without -i)")
	fs.StringVar(&f.chain, "chain", "", "`CHAIN` to compile (default INPUT, OUTPUT for tc-egress, PREROUTING for sk-lookup)")
	fs.StringVar(&f.table, "table", "", "`TABLE` of the chain (default filter, mangle for sk-lookup)")
	f.levelFlags.register(fs)
}

// compile reads, lowers and compiles the rule set in file.
func (f *compileFlags) compile(file string, stderr io.Writer) (*codegen.Program, error) {
	if _, err := codegen.ParseHook(f.hook); err != nil {
		return nil, fmt.Errorf("%w: %v", errUsage, err)
	}
	rs, err := f.load(file, stderr)
	if err != nil {
		return nil, err
	}
	return f.compileRuleset(rs, stderr)
}

// compileRuleset lowers and compiles rs for the hook, chain and level the
// flags name.
func (f *compileFlags) compileRuleset(rs *rules.Ruleset, stderr io.Writer) (*codegen.Program, error) {
	hook, err := codegen.ParseHook(f.hook)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", errUsage, err)
	}
	level, err := f.level()
	if err != nil {
		return nil, err
	}
	chain, table := f.chain, f.table
	if chain == "" {
		chain = "INPUT"
		switch hook {
		case codegen.HookTCEgress:
			chain = "OUTPUT"
		case codegen.HookSkLookup:
			chain = "PREROUTING"
		}
	}
	if table == "" {
		table = "filter"
		if hook == codegen.HookSkLookup {
			table = "mangle"
		}
	}
	// At its netfilter hook a chain compiles as restore compiles it,
	// sharing with the other chains what netfilter shares between hooks.
	prog, err := ir.Lower(rs, ir.LowerOptions{Table: table, Chain: chain, SharedState: hook == codegen.HookNetfilter})
	if err != nil {
		return nil, err
	}
	out, err := codegen.Compile(prog, codegen.Options{Hook: hook, Level: level, Trace: f.trace})
	if err != nil {
		return nil, err
	}
	f.print(stderr, out.Warnings)
	return out, nil
}

func runCompile(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("compile", stdout, stderr)
	var cf compileFlags
	cf.register(fs)
	dump := fs.Bool("dump", false, "print the annotated eBPF assembly; load nothing")
	verbose := fs.BoolP("verbose", "v", false, "print the verifier's whole log when it rejects the program")
	files, err := parseFlags(fs, args)
	if err != nil {
		return err
	}
	if files, err = cf.inputs(files); err != nil {
		return err
	}
	if len(files) != 1 {
		fmt.Fprintln(stderr, "usage: bpfwall compile [--hook H] [--chain C] [-O0|-O1] [--dump] [-v] (FILE | --from-kernel)")
		return errUsage
	}
	prog, err := cf.compile(files[0], stderr)
	if err != nil {
		return printErr(err, stderr)
	}
	if *dump {
		return prog.Dump(stdout)
	}
	l, err := loader.Load(prog, loader.Options{VerifierLog: *verbose})
	if err != nil {
		var verr *ebpf.VerifierError
		if *verbose && errors.As(err, &verr) {
			fmt.Fprintf(stderr, "%+v\n", verr)
		}
		return err
	}
	defer l.Close()
	fmt.Fprintf(stdout, "%s: %s %s program verified: %d rules, %d instructions, %d processed by the verifier; %d rules decided by lookups\n",
		files[0], prog.Level, prog.Hook, len(prog.IR.Rules), prog.Size(), l.VerifiedInsns, prog.Classified)
	return nil
}

// printErr prints a list of positioned errors one per line and returns an
// exit status; other errors are returned as they are.
func printErr(err error, stderr io.Writer) error {
	var list rules.ErrorList
	if errors.As(err, &list) {
		fmt.Fprintln(stderr, list)
		return exitError{1}
	}
	var e *rules.Error
	if errors.As(err, &e) {
		fmt.Fprintln(stderr, e)
		return exitError{1}
	}
	return err
}
