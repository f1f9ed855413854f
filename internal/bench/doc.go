// Package bench measures compiled rule sets: families of generated rule
// sets of growing size run in the kernel with BPF_PROG_TEST_RUN against an
// empty XDP program, and dropped end to end on a veth pair against a bare
// XDP drop, iptables-legacy and nftables with the same rules.
package bench
