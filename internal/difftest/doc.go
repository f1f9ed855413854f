// Package difftest asks the kernel's netfilter what a rule set means and
// compares its answers with bpfwall's: probe frames cross a throwaway
// topology of network namespaces (sender → firewall → receiver) with the
// rule set loaded by iptables-legacy-restore, and every verdict source
// (ir.Eval, the compiled program run by BPF_PROG_TEST_RUN, and the
// compiled program attached to the firewall's ingress interface) must
// agree with netfilter on which probes the firewall delivers.
package difftest
