package main

import (
	"fmt"
	"io"
	"slices"
	"strconv"

	"bpfwall/codegen"
	"bpfwall/loader"
	"bpfwall/rules"
)

// runUnload detaches filters and removes their pins.
func runUnload(args []string, stdout, stderr io.Writer) (err error) {
	fs := newFlagSet("unload", stdout, stderr)
	var ifaces ifaceList
	fs.VarP(&ifaces, "interface", "i", "detach from `IFACE` only (repeatable)")
	hook := fs.String("hook", "", "unload the filter at `HOOK` only")
	var fam familyFlags
	fam.register(fs, "unload only the filters of")
	var wait waitFlags
	wait.register(fs)
	netns := fs.String("netns", "", "unload every filter pinned for the network namespace `ID` (as its pin directory names it), from outside it: a deleted namespace stays while a filter's netfilter link holds it")
	files, err := parseFlags(fs, args)
	if err != nil {
		return err
	}
	if len(files) != 0 {
		fmt.Fprintln(stderr, "usage: bpfwall unload [-i IFACE]... [--hook H] [-w SECS] | --netns ID [-w SECS]")
		return errUsage
	}
	var id uint64
	if *netns != "" {
		if id, err = strconv.ParseUint(*netns, 10, 64); err != nil || len(ifaces) > 0 || *hook != "" {
			fmt.Fprintln(stderr, "usage: bpfwall unload --netns ID [-w SECS] (ID: a directory of "+pinRoot+")")
			return errUsage
		}
	}
	if err := fam.check(); err != nil {
		return err
	}
	families := []rules.Family{rules.IPv4, rules.IPv6}
	switch {
	case fam.ipv4:
		families = families[:1]
	case fam.ipv6:
		families = families[1:]
	}
	lock, err := acquireLock(wait, stderr)
	if err != nil {
		return err
	}
	defer lock.Release()
	if *netns != "" {
		// The tables a restore left to the kernel there go too.
		_, err := loader.UnloadNetNS(pinRoot, id, func() error {
			for _, fam := range []rules.Family{rules.IPv4, rules.IPv6} {
				if err := flushDelegated(fam); err != nil {
					return err
				}
			}
			return nil
		})
		return privileged(err)
	}
	// As iptables -F, unloading what is not loaded succeeds: an ExecStop
	// or a second unload finds the state it asks for.
	targets, err := findTargets(*hook, nil, stderr)
	if isNothingLoaded(err) {
		targets, err = nil, nil
	}
	if err != nil {
		return err
	}
	// What a netfilter restore left to the kernel goes with its chains.
	if len(ifaces) == 0 && (*hook == "" || *hook == codegen.HookNetfilter.String()) {
		defer func() {
			for _, fam := range families {
				if ferr := flushDelegated(fam); ferr != nil && err == nil {
					err = ferr
				}
			}
		}()
	}
	if len(families) == 1 {
		targets = slices.DeleteFunc(targets, func(t target) bool { return metaFamily(&t.snap.Meta) != families[0] })
	}
	found := make(map[string]bool)
	for _, t := range targets {
		if t.place.Accelerator() && len(ifaces) > 0 {
			// It runs wherever its namespace's dispatcher does.
			continue
		}
		var names []string
		for _, ifc := range t.snap.Meta.Ifaces {
			if len(ifaces) == 0 || slices.Contains(ifaces, ifc.Name) {
				names = append(names, ifc.Name)
				found[ifc.Name] = true
			}
		}
		if len(names) == 0 {
			continue
		}
		if len(ifaces) == 0 {
			names = nil // everything, including links of vanished interfaces
		}
		if _, err := loader.Unload(t.place, names); err != nil {
			return privileged(err)
		}
	}
	for _, name := range ifaces {
		if !found[name] {
			fmt.Fprintf(stderr, "bpfwall: no filter is attached to %s\n", name)
		}
	}
	if len(ifaces) == 0 && (*hook == "" || *hook == codegen.HookNetfilter.String()) {
		// An accelerator's dispatcher that no family's accelerator uses.
		ns, err := loader.NetNS()
		if err != nil {
			return err
		}
		if err := loader.ReleaseIdleAccelerator(pinRoot, ns); err != nil {
			return privileged(err)
		}
	}
	return nil
}
