package loader

import (
	"bufio"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"

	"bpfwall/codegen"
	"bpfwall/codegen/abi"
)

// A filter lives as long as its pins. Two ways it can seem to vanish:
//
//   - pinned on a bpffs that only a private mount namespace has (unshare
//     -m, a unit's PrivateMounts, a shell under ip netns exec that
//     mounted one), it goes, unfiltered from then on, when that namespace
//     ends. makeDir refuses such a bpffs (bpffsLasts).
//   - run by a command that cannot see the bpffs it was pinned on (ip
//     netns exec hides /sys/fs/bpf), it still runs and filters, but the
//     command finds no pins. Stray finds the bpfwall programs attached in
//     the namespace that no pin describes, so that status says so instead
//     of "no filter loaded".

// ErrVanishing is returned, wrapped, when the pin root is on a bpffs that
// goes with the command's mount namespace.
var ErrVanishing = errors.New("bpffs would vanish")

// initMountInfo is where init's mounts are listed.
var initMountInfo = "/proc/1/mountinfo"

// bpffsLasts says whether the bpffs holding dir is mounted in init's
// mount namespace too, where it lasts; known is false when that cannot be
// read.
func bpffsLasts(dir string) (lasts, known bool) {
	var st unix.Stat_t
	if unix.Stat(dir, &st) != nil {
		return false, false
	}
	dev := fmt.Sprintf("%d:%d", unix.Major(st.Dev), unix.Minor(st.Dev))
	f, err := os.Open(initMountInfo)
	if err != nil {
		return false, false
	}
	defer f.Close()
	for sc := bufio.NewScanner(f); sc.Scan(); {
		// id parent major:minor root mountpoint options [tags] - type source ...
		fields := strings.Fields(sc.Text())
		sep := slices.Index(fields, "-")
		if sep < 0 || sep+1 >= len(fields) || len(fields) < 3 {
			continue
		}
		if fields[2] == dev && fields[sep+1] == "bpf" {
			return true, true
		}
	}
	return false, true
}

// checkLasts refuses a pin root whose bpffs would go with this command's
// mount namespace.
func checkLasts(root string) error {
	dir := root
	if _, err := os.Stat(dir); err != nil {
		dir = filepath.Dir(root)
	}
	if lasts, known := bpffsLasts(dir); known && !lasts {
		return fmt.Errorf("%w: the bpffs at %s is mounted only in this command's mount namespace, not in init's, "+
			"so the filter's pins, and with them the filter, would go when this namespace's last process exits (unshare -m, ip netns exec, a unit's PrivateMounts); "+
			"mount bpffs where init's mount namespace has it, or run bpfwall with nsenter --net=/run/netns/NAME, which keeps the host's mounts",
			ErrVanishing, dir)
	}
	return nil
}

// StrayProgram is a bpfwall program attached in a network namespace that
// no pin the command can see describes.
type StrayProgram struct {
	Hook    codegen.Hook
	Iface   string // "netns" for sk-lookup
	Program ebpf.ProgramID
}

// Stray lists the bpfwall programs attached in the calling thread's
// network namespace at xdp, tc and sk-lookup that are not the programs
// pinned under root for namespace ns.
func Stray(root string, ns uint64) ([]StrayProgram, error) {
	pinned := map[ebpf.ProgramID]bool{}
	for _, p := range allPlaces(root, ns) {
		// The program of a swap under way counts: its new links run it.
		dir := p.Dir()
		for _, name := range []string{pinProgram, pinProgram + newSuffix, pinDispatcher, pinDispatcher + newSuffix} {
			if p, err := ebpf.LoadPinnedProgram(filepath.Join(dir, name), nil); err == nil {
				pinned[programID(p)] = true
				p.Close()
			}
		}
	}
	if p, err := ebpf.LoadPinnedProgram(filepath.Join(acceleratorDir(root, ns), pinDispatcher), nil); err == nil {
		pinned[programID(p)] = true
		p.Close()
	}
	links, err := listLinks()
	if err != nil {
		return nil, err
	}
	var out []StrayProgram
	add := func(hook codegen.Hook, iface string, id ebpf.ProgramID) {
		if id == 0 || pinned[id] || !isBpfwall(id) {
			return
		}
		out = append(out, StrayProgram{Hook: hook, Iface: iface, Program: id})
	}
	tcx := []struct {
		hook codegen.Hook
		at   ebpf.AttachType
	}{{codegen.HookTCIngress, ebpf.AttachTCXIngress}, {codegen.HookTCEgress, ebpf.AttachTCXEgress}}
	for _, i := range slices.Sorted(maps.Keys(links)) {
		l := links[i]
		add(codegen.HookXDP, l.name, ebpf.ProgramID(l.xdp))
		for _, t := range tcx {
			res, err := link.QueryPrograms(link.QueryOptions{Target: i, Attach: t.at})
			if err != nil {
				continue // no tcx here
			}
			for _, p := range res.Programs {
				add(t.hook, l.name, p.ID)
			}
		}
	}
	if f, err := os.Open("/proc/thread-self/ns/net"); err == nil {
		res, err := link.QueryPrograms(link.QueryOptions{Target: int(f.Fd()), Attach: ebpf.AttachSkLookup})
		f.Close()
		if err == nil {
			for _, p := range res.Programs {
				add(codegen.HookSkLookup, netnsIface.Name, p.ID)
			}
		}
	}
	slices.SortStableFunc(out, func(a, b StrayProgram) int { return int(a.Hook) - int(b.Hook) })
	return out, nil
}

// isBpfwall says whether program id is one bpfwall compiled.
func isBpfwall(id ebpf.ProgramID) bool {
	p, err := ebpf.NewProgramFromID(id)
	if err != nil {
		return false
	}
	defer p.Close()
	info, err := p.Info()
	// "bpfwall", or "bpfwall_HOOK_CHAIN" cut to the kernel's 15 bytes.
	return err == nil && (info.Name == abi.ProgramName || strings.HasPrefix(info.Name, abi.ProgramName+"_"))
}

// HostRoot returns the pin root a command uses for root. It is root,
// except when this command's mount namespace hides the bpffs that holds
// root (its parent directory), as ip netns exec does for /sys/fs/bpf (it
// remounts /sys for the network namespace): then it is the same
// directory reached through the root of the nearest ancestor process
// that has that bpffs, if init's mount namespace has it too, so that it
// lasts. The path goes through a descriptor held open for the life of
// the process, /proc/self/fd/N/..., so that it stays valid when the
// ancestor exits.
func HostRoot(root string) string {
	mount := filepath.Dir(root)
	if !filepath.IsAbs(root) || OnBPFFS(mount) || initMounts() {
		return root
	}
	for pid := os.Getppid(); pid > 0; {
		dir := fmt.Sprintf("/proc/%d/root%s", pid, mount)
		if OnBPFFS(dir) {
			if lasts, _ := bpffsLasts(dir); lasts {
				fd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
				if err == nil {
					own := fmt.Sprintf("/proc/self/fd/%d/%s", fd, filepath.Base(root))
					othersRoots[own] = filepath.Join(dir, filepath.Base(root))
					return own
				}
			}
		}
		if pid == 1 {
			break
		}
		next, err := parentPID(pid)
		if err != nil {
			next = 1
		}
		pid = next
	}
	return root
}

// othersRoots maps the roots HostRoot returned through this process's
// descriptors to the same directories through their ancestor's root.
var othersRoots = map[string]string{}

// ForOthers returns a path to the pin at path that other processes can
// open. A path under a root HostRoot returned goes through this
// process's own descriptor, which a child (iptables-restore, given
// -m bpf --object-pinned) does not have; the same pin is reached through
// the root of the ancestor process HostRoot found it by. (iptables opens
// the path only while it adds the rule, and that ancestor, the shell
// that ran ip netns exec, outlives the command.) Other paths are
// returned as they are.
func ForOthers(path string) string {
	for own, others := range othersRoots {
		if rest, ok := strings.CutPrefix(path, own); ok && (rest == "" || rest[0] == '/') {
			return others + rest
		}
	}
	return path
}

// parentPID returns the parent of process pid, from /proc/PID/stat.
func parentPID(pid int) (int, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// pid (comm) state ppid ...: comm may hold spaces and parentheses.
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return 0, fmt.Errorf("parse /proc/%d/stat", pid)
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 2 {
		return 0, fmt.Errorf("parse /proc/%d/stat", pid)
	}
	return strconv.Atoi(f[1])
}
