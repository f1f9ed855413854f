module bpfwall

go 1.26.0

require (
	github.com/alecthomas/participle/v2 v2.1.4
	github.com/cilium/ebpf v0.22.0
	github.com/google/nftables v0.3.0
	github.com/gopacket/gopacket v1.7.7
	github.com/mdlayher/netlink v1.7.3-0.20250113171957-fbb4dce95f42
	github.com/spf13/pflag v1.1.0
	golang.org/x/sys v0.48.0
	golang.org/x/tools v0.51.0
)

require (
	github.com/google/go-cmp v0.7.0 // indirect
	github.com/mdlayher/socket v0.5.1 // indirect
	golang.org/x/net v0.59.0 // indirect
	golang.org/x/sync v0.23.0 // indirect
)
