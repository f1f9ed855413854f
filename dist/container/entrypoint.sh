#!/bin/sh
# bpfwall's container entrypoint: restore the rule files at start and
# whenever they change (a ConfigMap update), and serve the metrics.
#
#   BPFWALL_RULES     IPv4 rule file (default /etc/bpfwall/rules.v4)
#   BPFWALL_RULES6    IPv6 rule file (default /etc/bpfwall/rules.v6)
#   BPFWALL_HOOK      where the rules run (default netfilter: every chain
#                     at its own netfilter hook, on every interface, as
#                     iptables-restore; what BPF cannot do goes to the
#                     kernel's netfilter); xdp, tc-ingress or tc-egress put
#                     one chain on BPFWALL_IFACES instead. BPFWALL_HOOK6 is
#                     the IPv6 rules' (default netfilter too; an interface
#                     hook holds one family)
#   BPFWALL_IFACES    for an interface hook, the interfaces, space-separated
#                     (default: the interface of the default route)
#   BPFWALL_METRICS   address of the metrics endpoint (default :9631;
#                     empty: none)
#   BPFWALL_INTERVAL  seconds between looks at the rule files (default 10)
#   BPFWALL           the bpfwall binary (default bpfwall on the PATH)
#
# A restore that fails (bad input) changes nothing: the filter that runs
# stays, and the entrypoint goes on watching. On SIGTERM the filters stay
# loaded, so that a restarted pod never leaves the host unfiltered;
# `bpfwall unload` removes them.
set -u

bpfwall=${BPFWALL:-bpfwall}
rules=${BPFWALL_RULES:-/etc/bpfwall/rules.v4}
rules6=${BPFWALL_RULES6:-/etc/bpfwall/rules.v6}
hook=${BPFWALL_HOOK:-netfilter}
hook6=${BPFWALL_HOOK6:-netfilter}
metrics=${BPFWALL_METRICS-:9631}
interval=${BPFWALL_INTERVAL:-10}
ifaces=${BPFWALL_IFACES:-}
if [ -z "$ifaces" ] && { [ "$hook" != netfilter ] || [ "$hook6" != netfilter ]; }; then
	ifaces=$(ip -o route show default 2>/dev/null | sed -n 's/.* dev \([^ ]*\).*/\1/p' | head -n 1)
	if [ -z "$ifaces" ]; then
		echo "bpfwall entrypoint: no BPFWALL_IFACES and no default route" >&2
		exit 2
	fi
fi

log() { echo "bpfwall entrypoint: $*" >&2; }

# restore FILE HOOK [-6]: restore FILE on HOOK if it exists.
restore() {
	[ -f "$1" ] || return 0
	flags= where=$2
	if [ "$2" != netfilter ]; then
		for i in $ifaces; do
			flags="$flags -i $i"
		done
		where="$2 ($ifaces)"
	fi
	# shellcheck disable=SC2086 # flags holds words
	if "$bpfwall" restore -w 30 -q --hook "$2" $flags $3 "$1"; then
		log "restored $1 on $where"
	else
		log "restore of $1 on $2 failed; the filter that ran before stays"
	fi
}

sums() { cat "$rules" "$rules6" 2>/dev/null | cksum; }

restore "$rules" "$hook" ""
restore "$rules6" "$hook6" -6
last=$(sums)

pid=
if [ -n "$metrics" ]; then
	"$bpfwall" metrics --listen "$metrics" &
	pid=$!
fi
trap 'log "stopping; the filters stay loaded"; [ -n "$pid" ] && kill "$pid"; exit 0' TERM INT

while :; do
	sleep "$interval" &
	wait $! || true
	now=$(sums)
	if [ "$now" != "$last" ]; then
		last=$now
		restore "$rules" "$hook" ""
		restore "$rules6" "$hook6" -6
	fi
done
