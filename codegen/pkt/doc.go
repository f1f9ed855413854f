// Package pkt is the layout of the parsed packet: the struct the packet
// parser fills in once per packet and every rule's code reads, and the
// bits of its flags field.
package pkt
