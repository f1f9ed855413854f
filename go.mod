module bpfwall

go 1.26.0

require (
	github.com/alecthomas/participle/v2 v2.1.4
	github.com/gopacket/gopacket v1.7.7
	golang.org/x/sys v0.48.0
	golang.org/x/tools v0.51.0
)

require (
	github.com/cilium/ebpf v0.22.0 // indirect
	golang.org/x/net v0.59.0 // indirect
)
