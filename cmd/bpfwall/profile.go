package main

import (
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/pprof"
)

// startProfiles writes a CPU profile of the command to the file
// BPFWALL_CPUPROFILE names, and a heap profile at its end to the file
// BPFWALL_MEMPROFILE names, so that the cost of a restore can be read
// from the command an operator runs (go tool pprof). The returned
// function ends them; it is a no-op when neither is set.
func startProfiles(stderr io.Writer) func() {
	var stops []func()
	if path := os.Getenv("BPFWALL_CPUPROFILE"); path != "" {
		f, err := os.Create(path)
		if err == nil {
			err = pprof.StartCPUProfile(f)
		}
		if err != nil {
			fmt.Fprintf(stderr, "bpfwall: BPFWALL_CPUPROFILE: %v\n", err)
		} else {
			stops = append(stops, func() { pprof.StopCPUProfile(); f.Close() })
		}
	}
	if path := os.Getenv("BPFWALL_MEMPROFILE"); path != "" {
		runtime.MemProfileRate = 64 << 10
		stops = append(stops, func() {
			f, err := os.Create(path)
			if err == nil {
				err = pprof.Lookup("allocs").WriteTo(f, 0)
				f.Close()
			}
			if err != nil {
				fmt.Fprintf(stderr, "bpfwall: BPFWALL_MEMPROFILE: %v\n", err)
			}
		})
	}
	return func() {
		for _, stop := range stops {
			stop()
		}
	}
}
