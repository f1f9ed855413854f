// Package codegen compiles an ir.Program into an eBPF collection spec for
// the XDP and tc hooks: a pure, deterministic description that the loader
// turns into kernel objects.
package codegen
