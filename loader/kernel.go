package loader

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"

	"github.com/cilium/ebpf"
)

// A restore also changes the kernel's own netfilter: the tables it
// delegates there (the command's delegate.go), written by the family's
// iptables-restore. SwapAll writes them with its places, under the same
// decision (decision.go): it pins what they held before, as
// iptables-save printed it, beside the decision (pinSwapKernel), writes
// the new tables once every new filter is complete, and makes the
// decision after that. A process that dies before the decision is made
// leaves the old filters running, and the recovery writes the old tables
// back from the pin; one that dies after it has written the new tables
// and leaves the new filters to complete. Either way the BPF chains and
// the kernel's tables belong to the same rule set.

// pinSwapKernel is the pin, in a namespace's directory, of what a swap's
// kernel tables held before it.
const pinSwapKernel = "swap_kernel"

// KernelTables are the kernel's netfilter tables that a SwapAll writes
// with its places.
type KernelTables struct {
	// Name says which they are, in messages: "ipv4 tables nat, filter".
	Name string
	// Restore is the path of the family's iptables-restore
	// (ip6tables-restore).
	Restore string
	// Text writes the new tables; Backup writes back what they held.
	// Both are iptables-restore input, with counters.
	Text, Backup []byte
}

// write has the kernel's iptables-restore write text; if it fails it
// writes Backup, since iptables-nft-restore may have committed some
// tables.
func (k *KernelTables) write(text []byte) error {
	err := runRestore(k.Restore, text)
	if err == nil {
		return nil
	}
	if uerr := runRestore(k.Restore, k.Backup); uerr != nil {
		return fmt.Errorf("%w; writing back the %s it changed: %v", err, k.Name, uerr)
	}
	return err
}

// runRestore runs iptables-restore (path) with text as its input. The
// child dies with the thread that starts it, so that a restore killed
// while it writes cannot race its recovery, which writes the old tables.
func runRestore(path string, text []byte) error {
	cmd := exec.Command(path, "-w", "-c")
	cmd.Stdin = bytes.NewReader(text)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	var errOut bytes.Buffer
	cmd.Stderr = &errOut
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s -w -c: %v: %s", path, err, strings.TrimSpace(errOut.String()))
	}
	return nil
}

// kernelMagic starts the pin's contents: then, each as a little-endian
// u32 length and its bytes, Name, Restore and Backup; zero padding.
var kernelMagic = []byte("BWK\x01")

// pinKernel pins, in the directory of the decision d, what k's tables
// hold before the swap writes them.
func (d *decision) pinKernel(k *KernelTables) error {
	var b []byte
	b = append(b, kernelMagic...)
	for _, s := range [][]byte{[]byte(k.Name), []byte(k.Restore), k.Backup} {
		b = binary.LittleEndian.AppendUint32(b, uint32(len(s)))
		b = append(b, s...)
	}
	mp, err := newChunkMap("bpfwall_kernel", b)
	if err != nil {
		return fmt.Errorf("swap decision: %w", err)
	}
	defer mp.Close()
	if err := mp.Pin(kernelPath(d.path)); err != nil {
		return fmt.Errorf("swap decision: %w", err)
	}
	reached("pin " + pinSwapKernel)
	return nil
}

// kernelPath is the pin of the kernel tables beside the decision pinned
// at decision.
func kernelPath(decision string) string { return filepath.Join(filepath.Dir(decision), pinSwapKernel) }

// recoverKernel settles the kernel tables of a swap of several places
// that died, if it wrote any: their old contents are written back unless
// the decision was made, and the pin goes. It returns what was done.
func recoverKernel(decision string, made bool) (string, Recovery, error) {
	path := kernelPath(decision)
	mp, err := ebpf.LoadPinnedMap(path, nil)
	if errors.Is(err, os.ErrNotExist) {
		return "", NothingToRecover, nil
	}
	if err != nil {
		return "", NothingToRecover, fmt.Errorf("swap decision: %w", err)
	}
	b, err := readChunks(mp)
	mp.Close()
	if err != nil {
		return "", NothingToRecover, err
	}
	k, err := decodeKernel(b)
	if err != nil {
		return "", NothingToRecover, fmt.Errorf("%s: %w", path, err)
	}
	r := Completed
	if !made {
		if err := runRestore(k.Restore, k.Backup); err != nil {
			return k.Name, NothingToRecover, fmt.Errorf("write back the %s of an interrupted swap: %w", k.Name, err)
		}
		r = RolledBack
	}
	if err := os.Remove(path); err != nil {
		return k.Name, r, fmt.Errorf("swap decision: %w", err)
	}
	return k.Name, r, nil
}

// decodeKernel reads what pinKernel wrote.
func decodeKernel(b []byte) (*KernelTables, error) {
	if !bytes.HasPrefix(b, kernelMagic) {
		return nil, errors.New("not a pin of kernel tables")
	}
	b = b[len(kernelMagic):]
	var parts [3][]byte
	for i := range parts {
		if len(b) < 4 || uint64(binary.LittleEndian.Uint32(b)) > uint64(len(b)-4) {
			return nil, errors.New("kernel tables' pin cut short")
		}
		n := binary.LittleEndian.Uint32(b)
		parts[i], b = b[4:4+n], b[4+n:]
	}
	return &KernelTables{Name: string(parts[0]), Restore: string(parts[1]), Backup: parts[2]}, nil
}
