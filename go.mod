module bpfwall

go 1.26

require github.com/gopacket/gopacket v1.7.7 // indirect
