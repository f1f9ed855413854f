package loader

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"bpfwall/codegen"
	"bpfwall/rules"
)

// DefaultRoot is the directory of bpffs under which bpfwall pins its
// filters: Root/<netns>/<hook>/.
const DefaultRoot = "/sys/fs/bpf/bpfwall"

// bpffsMount is where bpffs is mounted when it is missing.
const bpffsMount = "/sys/fs/bpf"

// Names of the pins in a filter's directory.
const (
	pinProgram  = "program"
	pinCounters = "counters"
	pinDecision = "decision" // a program compiled with codegen.Options.Trace
	pinIfaces   = "ifaces"
	pinBase     = "base"  // counters carried over from earlier programs
	pinMeta     = "meta"  // the Meta, as JSON
	pinLink     = "link_" // + ifindex; link_0 is a netns link (sk-lookup)
	// pinSockets is the sk-lookup hook's SOCKHASH, which every program
	// swapped in there shares.
	pinSockets = "sockets"
	// pinUnload, pending, marks a filter that a swap of several places
	// unloads (decision.go).
	pinUnload = "unload"
	// newSuffix marks a pin made by a swap that has not committed yet.
	// (bpffs refuses names with dots.)
	newSuffix = "_new"
)

// mapPins are the pins of the maps, in the order a swap replaces them:
// the meta map, which describes the others, last.
var mapPins = []string{pinCounters, pinIfaces, pinBase, pinMeta}

// Place is where a filter lives: a hook of a network namespace, and the
// directory of bpffs holding its pins.
type Place struct {
	Root  string // DefaultRoot when empty
	NetNS uint64 // network namespace id, from NetNS
	Hook  codegen.Hook
	// Family, Table and Chain say which chain a filter at
	// codegen.HookNetfilter runs (see ChainPlace); a namespace has one
	// such filter per family and chain. At codegen.HookXDP, Chain
	// AcceleratorChain makes it the family's accelerator
	// (AcceleratorPlace).
	Family       rules.Family
	Table, Chain string
}

// Dir is the directory of the filter's pins.
func (p Place) Dir() string {
	root := p.Root
	if root == "" {
		root = DefaultRoot
	}
	return filepath.Join(root, strconv.FormatUint(p.NetNS, 10), p.dirName())
}

// dirName is the name of the place's directory: the hook's, or for a
// chain at its netfilter hook netfilter-FAMILY-TABLE-CHAIN.
func (p Place) dirName() string {
	if p.Accelerator() {
		return "accelerator-" + p.Family.String()
	}
	if p.Hook != codegen.HookNetfilter {
		return p.Hook.String()
	}
	return fmt.Sprintf("netfilter-%s-%s-%s", p.Family, p.Table, p.Chain)
}

// ID names the place uniquely within its network namespace: its hook, or
// netfilter-FAMILY-TABLE-CHAIN (the name of its directory).
func (p Place) ID() string { return p.dirName() }

// Name names the place's filter in messages: its hook, or for a chain at
// its netfilter hook "netfilter ipv4 filter INPUT".
func (p Place) Name() string {
	if p.Accelerator() {
		return "accelerator " + p.Family.String()
	}
	if p.Hook != codegen.HookNetfilter {
		return p.Hook.String()
	}
	return fmt.Sprintf("netfilter %s %s %s", p.Family, p.Table, p.Chain)
}

func (p Place) String() string { return fmt.Sprintf("%s in netns %d", p.Name(), p.NetNS) }

// ErrRootNotOwned marks a pin root that another user could change.
var ErrRootNotOwned = errors.New("pin directory not owned")

// checkRoot refuses a pin root that is not a directory of this user's
// (root's) with mode 0700: on a bpffs mounted with mode 1777, a local user
// who made the directory first could rename a namespace's pins away, so
// that status says nothing is loaded while the hidden filter still runs.
// A root not made yet passes; makeDir makes it 0700.
func checkRoot(root string) error {
	if root == "" {
		root = DefaultRoot
	}
	var st unix.Stat_t
	if err := unix.Lstat(root, &st); err != nil {
		if errors.Is(err, unix.ENOENT) {
			return nil
		}
		return fmt.Errorf("pin directory %s: %w", root, err)
	}
	euid := uint32(os.Geteuid())
	switch {
	case st.Mode&unix.S_IFMT != unix.S_IFDIR:
		return fmt.Errorf("%w: %s is not a directory (a symbolic link?); remove it", ErrRootNotOwned, root)
	case st.Uid != euid || st.Mode&0o077 != 0:
		return fmt.Errorf("%w: %s has owner uid %d and mode %#o; bpfwall keeps its filters only in a directory of uid %d with mode 0700, "+
			"since another user could move pins away in it and hide a running filter: check what is in it, then remove it or fix its owner and mode",
			ErrRootNotOwned, root, st.Uid, st.Mode&0o7777, euid)
	}
	return nil
}

// Here returns the place of hook in the calling thread's network
// namespace.
func Here(root string, hook codegen.Hook) (Place, error) {
	if err := checkRoot(root); err != nil {
		return Place{}, err
	}
	ns, err := NetNS()
	if err != nil {
		return Place{}, err
	}
	if err := reapStale(root, ns); err != nil {
		return Place{}, err
	}
	return Place{Root: root, NetNS: ns, Hook: hook}, nil
}

// The pins of a namespace are under its id, the inode number of its nsfs
// file, which the kernel gives to a new namespace once the old one is
// gone. A directory named cookiePrefix plus the namespace's cookie, which
// is never reused, tells them apart: pins found under this namespace's id
// with another cookie were left by a namespace deleted with its filters
// still pinned, whose links are severed.
const cookiePrefix = "netns-cookie-"

// netnsCookie returns the calling thread's network namespace cookie.
func netnsCookie() (uint64, error) {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return 0, fmt.Errorf("network namespace cookie: %w", err)
	}
	defer unix.Close(fd)
	c, err := unix.GetsockoptUint64(fd, unix.SOL_SOCKET, unix.SO_NETNS_COOKIE)
	if err != nil {
		return 0, fmt.Errorf("network namespace cookie: %w", err)
	}
	return c, nil
}

// reapStale removes the pins under the calling thread's namespace id ns
// that another namespace, gone since, left there (see cookiePrefix).
func reapStale(root string, ns uint64) error {
	if root == "" {
		root = DefaultRoot
	}
	dir := filepath.Join(root, strconv.FormatUint(ns, 10))
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil // nothing pinned
	}
	c, err := netnsCookie()
	if err != nil {
		return err
	}
	mine, stale := cookiePrefix+strconv.FormatUint(c, 10), false
	for _, e := range ents {
		switch {
		case e.Name() == mine:
			return nil
		case strings.HasPrefix(e.Name(), cookiePrefix):
			stale = true
		}
	}
	if stale {
		if err := os.RemoveAll(dir); err != nil {
			return fmt.Errorf("remove the pins of a deleted network namespace whose id this one reuses: %w", err)
		}
	}
	return nil
}

// removeIfOnlyMarked removes a namespace's pin directory that holds no
// filter any more, only its cookie mark, and says whether it did.
func removeIfOnlyMarked(nsDir string) bool {
	ents, err := os.ReadDir(nsDir)
	if err != nil {
		return false
	}
	for _, e := range ents {
		if !strings.HasPrefix(e.Name(), cookiePrefix) {
			return false
		}
	}
	return os.RemoveAll(nsDir) == nil
}

// markNetNS names the calling thread's namespace's cookie in its pin
// directory under root.
func markNetNS(root string, ns uint64) error {
	c, err := netnsCookie()
	if err != nil {
		return err
	}
	mark := filepath.Join(root, strconv.FormatUint(ns, 10), cookiePrefix+strconv.FormatUint(c, 10))
	if err := os.Mkdir(mark, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("mark the pin directory with the network namespace: %w", err)
	}
	return nil
}

// NetNS returns the id of the calling thread's network namespace: the
// inode number of its nsfs file, as lsns shows it. (The thread's, not the
// process's: tests move single threads into fresh namespaces.)
func NetNS() (uint64, error) {
	var st unix.Stat_t
	if err := unix.Stat("/proc/thread-self/ns/net", &st); err != nil {
		return 0, fmt.Errorf("identify network namespace: %w", err)
	}
	return st.Ino, nil
}

// Hooks are the hooks a filter can be loaded at, in the order commands
// list them.
var Hooks = []codegen.Hook{codegen.HookXDP, codegen.HookTCIngress, codegen.HookTCEgress, codegen.HookSkLookup}

// Places lists the filters pinned for the network namespace netns, in
// hook order.
func Places(root string, netns uint64) ([]Place, error) {
	if err := checkRoot(root); err != nil {
		return nil, err
	}
	if here, err := NetNS(); err == nil && here == netns {
		if err := reapStale(root, netns); err != nil {
			return nil, err
		}
	}
	var out []Place
	for _, p := range allPlaces(root, netns) {
		if _, err := os.Stat(filepath.Join(p.Dir(), pinProgram)); err == nil {
			out = append(out, p)
		} else if !errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("list filters: %w", err)
		}
	}
	return out, nil
}

// makeDir creates the filter's directory, mounting bpffs first if the
// root is not on it.
func (p Place) makeDir() error { return makeNetNSDir(p.Root, p.NetNS, p.Dir()) }

// makeNetNSDir creates dir, a directory of network namespace ns under
// root, mounting bpffs first if the root is not on it.
func makeNetNSDir(root string, ns uint64, dir string) error {
	if root == "" {
		root = DefaultRoot
	}
	if err := checkRoot(root); err != nil {
		return err
	}
	here, err := NetNS()
	if err != nil {
		return err
	}
	if here == ns {
		if err := reapStale(root, ns); err != nil {
			return err
		}
	}
	if !OnBPFFS(filepath.Dir(root)) && root == DefaultRoot {
		if !initMounts() {
			return fmt.Errorf("bpffs is not mounted at %s, and this command does not run in init's mount namespace, or cannot tell: "+
				"a bpffs mounted here, with the filter's pins, could go when the command's mount namespace does (ip netns exec makes one per command). "+
				"Run bpfwall with nsenter --net=/run/netns/NAME, which keeps the host's mounts, or mount bpffs at %s where it stays", bpffsMount, bpffsMount)
		}
		if err := os.MkdirAll(bpffsMount, 0o755); err != nil {
			return fmt.Errorf("mount bpffs: %w", err)
		}
		if err := unix.Mount("bpf", bpffsMount, "bpf", 0, "mode=0700"); err != nil {
			return fmt.Errorf("mount bpffs at %s: %w", bpffsMount, err)
		}
	}
	if err := checkLasts(root); err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("create pin directory: %w", err)
	}
	if here == ns {
		return markNetNS(root, ns)
	}
	return nil
}

// initMounts reports whether this process is known to run in init's
// mount namespace, the one that lasts: a bpffs it mounts anywhere else
// (ip netns exec gives every command a mount namespace of its own, and
// so does a script it runs) goes, with the pins on it, when that
// namespace's last process exits. Where /proc hides init's namespace
// file, the mount IDs of the root in both mount tables tell, as a copied
// namespace numbers its mounts anew; when neither can be read, it cannot
// tell, and says no.
func initMounts() bool {
	var self, init unix.Stat_t
	if unix.Stat("/proc/self/ns/mnt", &self) == nil && unix.Stat("/proc/1/ns/mnt", &init) == nil {
		return self.Ino == init.Ino && self.Dev == init.Dev
	}
	mine, theirs := rootMountID("/proc/self/mountinfo"), rootMountID(initMountInfo)
	return mine != "" && mine == theirs
}

// rootMountID returns the ID of the mount at / in a mount table.
func rootMountID(mountinfo string) string {
	b, err := os.ReadFile(mountinfo)
	if err != nil {
		return ""
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) > 4 && f[4] == "/" {
			return f[0]
		}
	}
	return ""
}

// OnBPFFS says whether dir is on a bpffs.
func OnBPFFS(dir string) bool {
	var st unix.Statfs_t
	return unix.Statfs(dir, &st) == nil && st.Type == unix.BPF_FS_MAGIC
}

// pinner is a program, map or link.
type pinner interface{ Pin(string) error }

// pinNew pins obj beside path, as path+newSuffix, for commitPin to move
// into place. A pin left over by an interrupted swap is replaced.
func pinNew(obj pinner, path string) error {
	tmp := path + newSuffix
	if err := os.Remove(tmp); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("pin %s: %w", filepath.Base(path), err)
	}
	if err := obj.Pin(tmp); err != nil {
		return fmt.Errorf("pin %s: %w", filepath.Base(path), err)
	}
	return nil
}

// commitPin moves a pin made by pinNew over path, atomically: a reader
// finds either the old object or the new one.
func commitPin(path string) error {
	if err := os.Rename(path+newSuffix, path); err != nil {
		return fmt.Errorf("replace pin %s: %w", filepath.Base(path), err)
	}
	return nil
}

// removeNewPins removes the pins of a swap that did not commit.
func removeNewPins(dir string) {
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if strings.HasSuffix(e.Name(), newSuffix) {
			os.Remove(filepath.Join(dir, e.Name()))
		}
	}
}

// linkPin is the pin of the link on interface ifindex.
func linkPin(dir string, ifindex int) string {
	return filepath.Join(dir, pinLink+strconv.Itoa(ifindex))
}

// linkPins returns the ifindexes of the pinned links in dir.
func linkPins(dir string) ([]int, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var out []int
	for _, e := range ents {
		name, ok := strings.CutPrefix(e.Name(), pinLink)
		if !ok {
			continue
		}
		if i, err := strconv.Atoi(name); err == nil {
			out = append(out, i)
		}
	}
	return out, nil
}
