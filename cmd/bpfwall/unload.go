package main

import (
	"fmt"
	"io"
	"slices"
	"strconv"

	"bpfwall/loader"
)

// runUnload detaches filters and removes their pins.
func runUnload(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("unload", stderr)
	var ifaces ifaceList
	fs.Var(&ifaces, "i", "detach from `IFACE` only (repeatable)")
	hook := fs.String("hook", "", "unload the filter at this hook only")
	wait := fs.Float64("w", 0, "wait up to `SECS` for another bpfwall command to finish")
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
	lock, err := acquireLock(*wait, stderr)
	if err != nil {
		return err
	}
	defer lock.Release()
	if *netns != "" {
		_, err := loader.UnloadNetNS(pinRoot, id)
		return privileged(err)
	}
	targets, err := findTargets(*hook, nil, stderr)
	if err != nil {
		return err
	}
	found := make(map[string]bool)
	for _, t := range targets {
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
			return fmt.Errorf("no filter is attached to %s", name)
		}
	}
	return nil
}
