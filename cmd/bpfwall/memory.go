package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// A rule set of a million rules needs gigabytes to compile. Where there
// is less memory, the kernel's OOM killer, or a cgroup's limit, would end
// the command with SIGKILL and no word; the memory guard ends it first,
// saying why. Nothing is changed by a command stopped before its swap,
// and a swap it was in is finished or undone by the next command.

// memoryGuardShare is the share of the memory available at the start
// that the command may use.
const memoryGuardShare = 0.85

// startMemoryGuard watches the command's resident memory and exits with
// status 1 and a message when it passes its budget; it returns at once
// when there is no budget to tell.
func startMemoryGuard(stderr io.Writer) {
	budget, source := memoryBudget()
	if budget <= 0 {
		return
	}
	go func() {
		for range time.Tick(20 * time.Millisecond) {
			if rss := residentBytes(); rss > budget {
				fmt.Fprintf(stderr, "bpfwall: out of memory: the command uses %d MiB, more than the %d MiB it can have (%s); it stopped here, and the filters are as they were "+
					"(a swap it was in is finished or undone by the next command). A rule set this large needs more memory\n", rss>>20, budget>>20, source)
				os.Exit(1)
			}
		}
	}()
}

// memoryBudget is memoryGuardShare of what the command can have: its
// resident memory and what the kernel says is available, or what its
// memory cgroup's limit leaves, whichever is less.
func memoryBudget() (int64, string) {
	rss := residentBytes()
	avail, source := meminfo("MemAvailable"), "MemAvailable in /proc/meminfo"
	if limit, usage, ok := cgroupMemory(); ok && (avail <= 0 || limit-usage < avail) {
		avail, source = limit-usage, "the limit of its memory cgroup"
	}
	if avail <= 0 || rss <= 0 {
		return 0, ""
	}
	return int64(float64(avail+rss) * memoryGuardShare), source
}

// residentBytes is the command's resident memory, from /proc/self/statm.
func residentBytes() int64 {
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) < 2 {
		return 0
	}
	pages, _ := strconv.ParseInt(f[1], 10, 64)
	return pages * int64(os.Getpagesize())
}

// meminfo returns a /proc/meminfo field in bytes.
func meminfo(field string) int64 {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return 0
	}
	defer f.Close()
	for sc := bufio.NewScanner(f); sc.Scan(); {
		name, rest, ok := strings.Cut(sc.Text(), ":")
		if !ok || name != field {
			continue
		}
		kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
		return kb << 10
	}
	return 0
}

// cgroupMemory returns the memory limit of the command's cgroup and what
// the cgroup uses, in cgroup v2 or v1; ok is false without a limit.
func cgroupMemory() (limit, usage int64, ok bool) {
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return 0, 0, false
	}
	read := func(path string) int64 {
		b, err := os.ReadFile(path)
		if err != nil {
			return -1
		}
		n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
		if err != nil {
			return -1 // "max"
		}
		return n
	}
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		f := strings.SplitN(line, ":", 3)
		if len(f) != 3 {
			continue
		}
		var l, u int64
		switch {
		case f[0] == "0" && f[1] == "":
			dir := filepath.Join("/sys/fs/cgroup", f[2])
			l, u = read(filepath.Join(dir, "memory.max")), read(filepath.Join(dir, "memory.current"))
		case f[1] == "memory":
			dir := filepath.Join("/sys/fs/cgroup/memory", f[2])
			l, u = read(filepath.Join(dir, "memory.limit_in_bytes")), read(filepath.Join(dir, "memory.usage_in_bytes"))
		default:
			continue
		}
		// v1 says "no limit" with a number near 2^63.
		if l > 0 && l < 1<<60 && u >= 0 {
			return l, u, true
		}
	}
	return 0, 0, false
}
