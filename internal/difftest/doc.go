// Package difftest asks the kernel's netfilter what a rule set means and
// compares its answers with bpfwall's: probe frames cross a throwaway
// topology of network namespaces (sender → firewall → receiver) with the
// rule set loaded by iptables-legacy-restore, and every verdict source
// (netfilter, ir.Eval, later BPF test runs and the attached program) must
// agree on which probes the firewall delivers.
package difftest
