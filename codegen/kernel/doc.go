// Package kernel lets instructions name what depends on the running
// kernel: kfunc calls and the offsets of kernel structs' fields. The
// instructions carry the names, so that a compiled program stays a
// deterministic description; Resolve fills the numbers in from the
// kernel's BTF before the program is loaded.
package kernel
