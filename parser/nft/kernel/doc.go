// Package kernel reads the nftables rule set of a network namespace from
// the kernel over netlink (google/nftables), writes it as nft text, and
// parses that with package nft: what --from-kernel compiles. The xtables
// matches and targets of iptables-nft are printed as iptables options,
// which package iptables reads.
package kernel
