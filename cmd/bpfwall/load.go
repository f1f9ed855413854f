package main

import (
	"fmt"
	"io"

	"bpfwall/codegen"
)

func runLoad(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("load", stdout, stderr)
	var in inputFlags
	in.register(fs)
	var f swapFlags
	f.register(fs)
	verbose := fs.BoolP("verbose", "v", false, "say what was loaded and replaced")
	files, err := parseFlags(fs, args)
	if err != nil {
		return err
	}
	level, err := f.level()
	if err != nil {
		return err
	}
	if files, err = in.inputs(files); err != nil {
		return err
	}
	// sk-lookup attaches to the network namespace: no interfaces.
	if lookup := f.hook == codegen.HookSkLookup.String(); len(files) != 1 || (len(f.ifaces) == 0) != lookup {
		fmt.Fprintln(stderr, "usage: bpfwall load (-i IFACE... [--hook H] | --hook sk-lookup) [--chain C] [-O0|-O1] [--xdp-mode M] [-w SECS] (FILE | --from-kernel)")
		return errUsage
	}
	rs, err := in.load(files[0], stderr)
	if err != nil {
		return reportRuleErrors(err, false, stderr)
	}
	lock, err := acquireLock(f.waitFlags, stderr)
	if err != nil {
		return err
	}
	defer lock.Release()
	targets, err := findTargets(f.hook, attachTo(f.hook, f.ifaces), stderr)
	if err != nil {
		return err
	}
	t := targets[0]
	prog, err := compileFor(rs, t, t.chain(f.chain), level, &in.warner, stderr)
	if err != nil {
		return reportRuleErrors(err, false, stderr)
	}
	in.warner.print(stderr, unenforced(rs, "load", []ranChain{ranAt(t, prog)}))
	res, err := swapIn(t, rs, prog, files[0], &f, countersCarry)
	if err != nil {
		return err
	}
	noteStage(stderr, t, res)
	if *verbose {
		describeSwap(stdout, t, res)
	}
	return reportSockets(res, stderr)
}
