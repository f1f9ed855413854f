// Package reject compiles REJECT. At XDP and tc it builds the reply a
// rule's packet gets, what nf_send_unreach, icmp_send and nf_send_reset
// (or their IPv6 counterparts) would send, and transmits it; packets the
// kernel answers with nothing are dropped as they are. At a chain's own
// netfilter hook, where no program can transmit, it notes the packet for
// the kernel's REJECT rule after the program to answer.
package reject
