// Package insn builds BPF instructions for the code generators: a Builder
// that places labels, comments and function metadata on the instructions
// it is given, and shorthands for the instructions they use most. Jumps and
// map references stay symbolic; cilium/ebpf resolves them when the program
// is marshalled.
package insn
