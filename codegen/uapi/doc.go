// Package uapi holds the parts of the kernel's user API that the generated
// programs use by number: ether types and protocol numbers, offsets in the
// program contexts, the hooks' return codes and struct bpf_fib_lookup.
package uapi
