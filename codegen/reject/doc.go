// Package reject builds the replies of REJECT rules at XDP and tc: a
// function that turns the packet into what nf_send_unreach, icmp_send and
// nf_send_reset (or their IPv6 counterparts) would send, and transmits it.
// Packets the kernel answers with nothing are dropped as they are.
package reject
