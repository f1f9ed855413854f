// Package rules is bpfwall's source-level model of a firewall rule set:
// tables, chains, rules, matches and targets, each with the position it was
// read from, and their printing as canonical iptables-save text.
package rules
