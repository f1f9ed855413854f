// Package ir lowers one hook's chain of a rules.Ruleset into a flat, typed
// decision program (Program), checks its invariants (Verify), prints it for
// people and golden files (Program.Format), and evaluates packets against it
// with exactly the semantics of the kernel's ip_tables/ip6_tables (Eval), the
// reference that compiled programs are tested against. The packets, and
// what the kernel does to them before and around the tables (decoding,
// conntrack), are the model package's.
//
// Optimization passes rewrite a Program in place; Verify must hold before
// and after each of them.
package ir
