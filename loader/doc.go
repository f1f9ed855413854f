// Package loader is the only part of bpfwall that talks to the kernel: it
// loads compiled programs, runs packets through them (BPF_PROG_TEST_RUN),
// and reads their counters.
package loader
