// Package iptables reads iptables-save and iptables-restore input (and
// ip6tables's) into a rules.Ruleset, applying restore commands in order as
// iptables-restore does.
package iptables
