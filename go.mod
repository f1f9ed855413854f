module bpfwall

go 1.26.0

require (
	github.com/gopacket/gopacket v1.7.7
	golang.org/x/tools v0.51.0
)
