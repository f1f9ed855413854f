package main

import (
	"bytes"
	"fmt"
	"io"
	"maps"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"bpfwall/loader"
	"bpfwall/rules"
)

// What no BPF program here can run, a restore without -i leaves to the
// kernel's own netfilter, through the distribution's iptables-restore
// (ip6tables-restore), in the same restore:
//
//   - the nat table, which rewrites addresses, and security, which labels
//     packets for SELinux: whole;
//   - a builtin chain of filter, raw or mangle that bpfwall cannot compile
//     (a REJECT, which a BPF netfilter program cannot answer; a MARK; a
//     match it does not support): the chain, with the user chains of its
//     table, in a table whose other builtin chains are empty and accept.
//
// Each runs at its own hook and priority (nat -100 before routing and at
// OUTPUT, 100 after; filter 0; ...), so that bpfwall's chains are ordered
// against it by construction. The restore says which chains it delegated
// and why. Every table bpfwall writes holds an empty user chain named
// delegatedMark, so that the next restore, unload and status find the
// tables it wrote in the kernel. The rule set bpfwall pins holds the
// delegated rules too: save prints them. With --no-delegate a restore
// refuses instead.
const delegatedMark = "bpfwall-delegated"

// delegatedTables run whole in the kernel.
var delegatedTables = []string{"nat", "security"}

// delegable reports whether bpfwall delegates table whole.
func delegable(table string) bool { return slices.Contains(delegatedTables, table) }

// delegation is what a restore hands to the kernel's netfilter.
type delegation struct {
	family rules.Family
	// tables are the delegated tables, by name: whole, or with the
	// delegated builtin chains only.
	tables map[string]*rules.Table
	// chains names the delegated builtin chains, "filter INPUT", in
	// order; whole tables appear as their name.
	chains []string
	// answers are, by table, the rules that answer the REJECT rules of
	// the chains bpfwall runs (codegen's nfchain.go): the kernel's
	// REJECT, for the packets their answer programs match.
	answers map[string][]string
	// noted is how many of chains note has told of.
	noted int
}

func newDelegation(family rules.Family) *delegation {
	return &delegation{family: family, tables: make(map[string]*rules.Table), answers: make(map[string][]string)}
}

// answer adds the kernel's rules that answer the REJECT rules of chain of
// table t, which bpfwall runs: one per --reject-with, whose answer
// program is pinned at paths[with]. (A table some chain of which is
// delegated has its copy already; chain is called first.)
func (d *delegation) answer(t *rules.Table, chain string, paths map[string]string) {
	if d.tables[t.Name] == nil {
		dt := &rules.Table{Name: t.Name, Pos: t.Pos}
		for _, c := range t.Chains {
			if c.Builtin {
				dt.Chains = append(dt.Chains, &rules.Chain{Name: c.Name, Pos: c.Pos, Builtin: true, Policy: rules.PolicyAccept})
			}
		}
		d.tables[t.Name] = dt
	}
	withs := slices.Sorted(maps.Keys(paths))
	for _, with := range withs {
		proto := ""
		if with == "tcp-reset" {
			proto = "-p tcp " // as the REJECT target requires; so did the rule
		}
		d.answers[t.Name] = append(d.answers[t.Name], fmt.Sprintf("-A %s %s-m bpf --object-pinned %s -j REJECT --reject-with %s", chain, proto, paths[with], with))
	}
}

// again returns a delegation of the same tables and chains, taken from
// rs, a parse of the same input, without the answers of REJECT rules
// (applyNetfilter adds them for the chains bpfwall runs). It has told of
// what d has.
func (d *delegation) again(rs *rules.Ruleset) *delegation {
	out := newDelegation(d.family)
	for _, name := range d.chains {
		table, chain, isChain := strings.Cut(name, " ")
		if isChain {
			out.chain(rs.Table(table), chain)
		} else {
			out.table(rs.Table(table))
		}
	}
	out.noted = d.noted
	return out
}

// table delegates table t whole.
func (d *delegation) table(t *rules.Table) {
	d.tables[t.Name] = t
	d.chains = append(d.chains, t.Name)
}

// chain delegates builtin chain of table t, with t's user chains.
func (d *delegation) chain(t *rules.Table, chain string) {
	dt := d.tables[t.Name]
	if dt == nil {
		dt = &rules.Table{Name: t.Name, Pos: t.Pos}
		for _, c := range t.Chains {
			if c.Builtin {
				dt.Chains = append(dt.Chains, &rules.Chain{Name: c.Name, Pos: c.Pos, Builtin: true, Policy: rules.PolicyAccept})
			} else {
				dt.Chains = append(dt.Chains, c)
			}
		}
		d.tables[t.Name] = dt
	}
	for i, c := range dt.Chains {
		if c.Name == chain {
			dt.Chains[i] = t.Chain(chain)
		}
	}
	d.chains = append(d.chains, t.Name+" "+chain)
}

// text is the iptables-restore input that writes the delegated tables,
// with the answers of REJECT rules unless check, and flushes those of
// flush that it does not write; counters says whether it carries the
// rules' counters.
func (d *delegation) text(flush []string, counters, check bool) []byte {
	var b []byte
	for _, name := range tableOrder(d.names(flush)) {
		t := d.tables[name]
		if t == nil {
			b = append(b, "*"+name+"\nCOMMIT\n"...)
			continue
		}
		one := rules.Ruleset{Tables: []*rules.Table{t}}
		saved := one.Save(rules.SaveOptions{Counters: counters})
		// The mark, a user chain nothing jumps to, after the table line.
		head, rest, _ := bytes.Cut(saved, []byte("\n"))
		b = append(b, head...)
		b = append(b, "\n:"+delegatedMark+" - [0:0]\n"...)
		rest = bytes.TrimSuffix(rest, []byte("COMMIT\n"))
		b = append(b, rest...)
		if !check {
			for _, line := range d.answers[name] {
				b = append(b, line+"\n"...)
			}
		}
		b = append(b, "COMMIT\n"...)
	}
	return b
}

// names are the delegated tables' names and flush's.
func (d *delegation) names(flush []string) []string {
	var out []string
	for name := range d.tables {
		out = append(out, name)
	}
	for _, name := range flush {
		if !slices.Contains(out, name) {
			out = append(out, name)
		}
	}
	return out
}

// tool is the kernel's iptables command of the family with suffix
// (-restore, -save).
func toolFor(family rules.Family, suffix string) (string, error) {
	name := "iptables" + suffix
	if family == rules.IPv6 {
		name = "ip6tables" + suffix
	}
	path, err := exec.LookPath(name)
	if err != nil {
		return "", fmt.Errorf("bpfwall leaves what it cannot compile to the kernel's netfilter through %s, which is not installed: install iptables, or restore with --no-delegate, which refuses instead", name)
	}
	return path, nil
}

// runTool runs the family's iptables command with stdin.
func runTool(family rules.Family, stdin []byte, suffix string, args ...string) ([]byte, error) {
	path, err := toolFor(family, suffix)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(path, args...)
	cmd.Stdin = bytes.NewReader(stdin)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("%s %s: %v: %s", path, strings.Join(args, " "), err, strings.TrimSpace(errOut.String()))
	}
	return out.Bytes(), nil
}

// kernelDelegated returns the tables of the family in the kernel that
// hold bpfwall's mark, with iptables-save's text of each; nil when the
// family's iptables is not installed (nothing can have been delegated).
func kernelDelegated(family rules.Family) (map[string][]byte, error) {
	if _, err := toolFor(family, "-save"); err != nil {
		return nil, nil
	}
	out, err := runTool(family, nil, "-save", "-c")
	if err != nil {
		return nil, err
	}
	tables := make(map[string][]byte)
	for _, part := range bytes.Split(out, []byte("\n*"))[1:] {
		name, _, _ := bytes.Cut(part, []byte("\n"))
		if bytes.Contains(part, []byte("\n:"+delegatedMark+" ")) {
			tables[string(name)] = append([]byte("*"), part...)
		}
	}
	return tables, nil
}

// check has the kernel's iptables-restore check the delegated tables
// without applying them. Its refusal names the line of the input that
// the line it refuses came from.
func (d *delegation) check() error {
	if len(d.tables) == 0 {
		return nil
	}
	// (The answers' programs are pinned by the restore itself.)
	_, err := runTool(d.family, d.text(nil, false, true), "-restore", "--test")
	if err == nil {
		return nil
	}
	m := errorLine.FindStringSubmatch(err.Error())
	if m == nil {
		return err
	}
	n, _ := strconv.Atoi(m[1])
	pos := d.checkedPos(n)
	if !pos.IsValid() {
		return err
	}
	why := err.Error()
	if _, after, ok := strings.Cut(why, "): "); ok {
		why, _, _ = strings.Cut(after, "\n")
	}
	return fmt.Errorf("%s: %s refuses it: %s", pos, d.toolName()+"-restore", why)
}

// errorLine finds the line iptables-restore names in its refusal.
var errorLine = regexp.MustCompile(`Error occurred at line: (\d+)`)

// checkedPos is where line n of the text check gives iptables-restore
// was written: a rule's position, its chain's declaration or its table's;
// zero for a line bpfwall adds.
func (d *delegation) checkedPos(n int) rules.Pos {
	var lines []rules.Pos // as text writes them, from line 1
	for _, name := range tableOrder(d.names(nil)) {
		t := d.tables[name]
		if t == nil {
			lines = append(lines, rules.Pos{}, rules.Pos{})
			continue
		}
		chains := t.SaveOrder()
		lines = append(lines, t.Pos, rules.Pos{}) // the table, the mark
		for _, c := range chains {
			lines = append(lines, c.Pos)
		}
		for _, c := range chains {
			for _, r := range c.Rules {
				lines = append(lines, r.Pos)
			}
		}
		lines = append(lines, rules.Pos{}) // COMMIT
	}
	if n < 1 || n > len(lines) {
		return rules.Pos{}
	}
	return lines[n-1]
}

// kernelTables is what the restore writes into the kernel, for
// loader.SwapAll, which writes it with the BPF chains: the delegated
// tables, and a flush of the tables of restored (the tables of the rule
// set restored) that an earlier restore delegated and this one does not;
// with what they held before, to write back. A table the rule set does
// not have stays, as iptables-restore leaves the tables its input does
// not name. It is nil when there is nothing to write.
func (d *delegation) kernelTables(counters bool, restored []string) (*loader.KernelTables, error) {
	old, err := kernelDelegated(d.family)
	if err != nil {
		return nil, err
	}
	var flush []string
	for name := range old {
		if slices.Contains(restored, name) {
			flush = append(flush, name)
		}
	}
	if len(d.tables) == 0 && len(flush) == 0 {
		return nil, nil
	}
	names := tableOrder(d.names(flush))
	var backup []byte
	for _, name := range names {
		if text, ok := old[name]; ok {
			backup = append(backup, text...)
			continue
		}
		out, err := runTool(d.family, nil, "-save", "-c", "-t", name)
		if err != nil {
			return nil, err
		}
		if len(bytes.TrimSpace(out)) == 0 {
			out = []byte("*" + name + "\nCOMMIT\n")
		}
		backup = append(backup, out...)
	}
	restore, err := toolFor(d.family, "-restore")
	if err != nil {
		return nil, err
	}
	return &loader.KernelTables{
		Name:    fmt.Sprintf("kernel's %s tables %s", d.family, strings.Join(names, ", ")),
		Restore: restore,
		Text:    d.text(flush, counters, false),
		Backup:  backup,
	}, nil
}

// note says which chains the restore leaves to the kernel, and why: those
// it has not told of yet.
func (d *delegation) note(w io.Writer, why map[string]rules.ErrorList) {
	defer func() { d.noted = len(d.chains) }()
	for _, c := range d.chains[d.noted:] {
		reasons := why[c]
		if len(reasons) == 0 {
			fmt.Fprintf(w, "bpfwall: %s runs in the kernel's netfilter (delegated through %s-restore)\n", c, d.toolName())
			continue
		}
		fmt.Fprintf(w, "bpfwall: %s runs in the kernel's netfilter (delegated through %s-restore), since bpfwall cannot compile it:\n", c, d.toolName())
		for _, e := range reasons {
			fmt.Fprintf(w, "  %s\n", e)
		}
	}
}

func (d *delegation) toolName() string { return toolOf(d.family) }

// toolOf is the iptables command of family.
func toolOf(family rules.Family) string {
	if family == rules.IPv6 {
		return "ip6tables"
	}
	return "iptables"
}

// flushDelegated flushes the tables of family that bpfwall delegated
// (those holding its mark): what unload does for them.
func flushDelegated(family rules.Family) error {
	old, err := kernelDelegated(family)
	if err != nil || len(old) == 0 {
		return err
	}
	d := newDelegation(family)
	var names []string
	for name := range old {
		names = append(names, name)
	}
	_, err = runTool(family, d.text(names, false, false), "-restore", "-w")
	return err
}

// tableOrder sorts table names as iptables-save prints the tables.
func tableOrder(names []string) []string {
	rank := func(n string) int {
		if i := slices.Index([]string{"raw", "mangle", "nat", "filter", "security"}, n); i >= 0 {
			return i
		}
		return 5
	}
	slices.SortFunc(names, func(a, b string) int {
		if ra, rb := rank(a), rank(b); ra != rb {
			return ra - rb
		}
		return strings.Compare(a, b)
	})
	return names
}
