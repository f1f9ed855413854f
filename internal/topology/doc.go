// Package topology builds throwaway network namespaces joined by veth
// pairs (sender → firewall → receiver) for the tests and benchmarks that
// send real frames through a firewall, and runs code and commands inside
// them.
package topology
