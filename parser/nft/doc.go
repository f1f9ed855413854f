// Package nft reads nftables rule sets, as "nft list ruleset" prints them
// and "nft -f" reads them, into the rules model.
package nft
